"""LEAP-mini warm-up data: mutants are judged in the environment and their real feedback is paired
with the fix; the split keeps held-out tasks out of every training text."""

from __future__ import annotations

import functools

import pytest

from leap_agents.policies.prompts import brief_feedback, task_header
from leap_agents.policies.prompts import mini_prompt as render_prompt
from leap_agents.training.mini.data import Split, as_response, check_split, make_split, mini_tasks, reference_cuda
from leap_agents.training.mini.warmup import build_examples, tokenizer_corpus
from leap_gym.evaluation.evaluator import Evaluator
from leap_gym.evaluation.memo import evaluate_all
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.tasks.mutants import DRAFT_OPERATORS, OPERATORS, mutants

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tasks():
    return mini_tasks()


@pytest.fixture(scope="module")
def judge():
    """Judges (task, response) pairs concurrently on the cpu backend."""
    with Evaluator(EvalConfig(backend="cpu", workers=1)) as evaluator:
        yield functools.partial(evaluate_all, evaluator)


@pytest.fixture(scope="module")
def by_id(tasks):
    return {t.id: t for t in tasks}


def test_mini_tasks_are_short_form_level1(tasks):
    assert len(tasks) >= 15
    for t in tasks:
        assert t.level == 1 and t.has_wrapper and t.size == "cpu"
        assert task_header(t).startswith(f"task {t.id.split('/')[1]}: ")


def test_split_is_deterministic_and_disjoint(tasks):
    a, b = make_split(tasks, held_out=6, seed=0), make_split(tasks, held_out=6, seed=0)
    assert a == b and len(a.held_out) == 6
    assert not set(a.train) & set(a.held_out)
    assert sorted(a.train + a.held_out) == sorted(t.id for t in tasks)
    assert make_split(tasks, held_out=6, seed=1) != a


def test_training_tiers_are_drawn_from_train_and_leave_the_split_alone(tasks):
    plain, tiered = make_split(tasks, held_out=6, seed=0), make_split(tasks, held_out=6, seed=0, refine=5, unseen=4)
    assert (plain.train, plain.held_out) == (tiered.train, tiered.held_out)
    assert len(tiered.refine) == 5 and len(tiered.unseen) == 4 and not set(tiered.refine) & set(tiered.unseen)
    assert set(tiered.refine + tiered.unseen) <= set(tiered.train)
    assert sorted(tiered.easy + tiered.refine + tiered.unseen) == sorted(tiered.train)
    assert {tiered.tier(i) for i in tiered.held_out} == {"held_out"}
    assert [tiered.tier(i) for i in tiered.refine] == ["refine"] * 5
    with pytest.raises(ValueError, match="leaves no easy task"):
        make_split(tasks, held_out=6, seed=0, refine=10, unseen=len(tiered.train) - 10)


def test_no_held_out_task_in_training_data(tasks, by_id):
    split = make_split(tasks, held_out=6, seed=0)
    with Evaluator(EvalConfig(backend="compile-only", workers=2)) as evaluator:
        examples, stats = build_examples(tasks, split, functools.partial(evaluate_all, evaluator), mutants_per_task=3,
                                         first_turn_weight=1)
    texts = [e.prompt + e.response for e in examples]
    assert {e.task_id for e in examples} <= set(split.train)
    check_split(split, texts, by_id)  # raises on a leak
    corpus = tokenizer_corpus(tasks, split)
    for task_id in split.held_out:
        ref = reference_cuda(by_id[task_id])
        assert not any(ref.strip() in t for t in texts + corpus)
    # the check really detects a leak
    leaked = texts + [render_prompt(by_id[split.held_out[0]]) + as_response(reference_cuda(by_id[split.held_out[0]]))]
    with pytest.raises(AssertionError, match="leaks"):
        check_split(split, leaked, by_id)


def test_mutation_operators_change_the_source(by_id):
    src = reference_cuda(by_id["level1/relu"])
    out = mutants(src, 8, seed=0)
    assert len(out) >= 5 and all(m != src for _, m in out)
    assert {name for name, _ in out} <= {op.name for op in OPERATORS}


def test_mutants_judged_on_the_cpu_backend_pair_real_feedback_with_the_fix(tasks, by_id, judge):
    """Real compilation and real execution: a syntax slip is a COMPILE_ERROR, a wrong index a
    WRONG_OUTPUT; each kept mutant's prompt holds its own feedback and its target is the reference."""
    relu = by_id["level1/relu"]
    split = Split(train=["level1/relu"], held_out=[])
    src = reference_cuda(relu)
    chosen = [("missing_semicolon", src.replace("fmaxf(x[i], 0.0f);", "fmaxf(x[i], 0.0f)")),
              ("wrong_operator", src.replace("fmaxf(x[i], 0.0f)", "fminf(x[i], 0.0f)"))]
    assert all(m != src for _, m in chosen)
    results = judge([(relu, as_response(m)) for _, m in chosen])
    assert results[0].status == "COMPILE_ERROR"
    # compiles, runs, and is wrong (WRONG_OUTPUT; a RUNTIME_ERROR is tolerated: a sandbox worker can be
    # killed under load, and the warm-up keeps whatever real feedback came back)
    assert results[1].status in ("WRONG_OUTPUT", "RUNTIME_ERROR"), results[1].message
    examples, stats = build_examples([relu], split, judge, mutants_per_task=4, first_turn_weight=1, seed=3)
    repairs = [e for e in examples if e.kind == "repair"]
    assert stats["mutants"] == 4 and stats["kept"] == len(repairs) >= 1
    for e in repairs:
        assert e.response == as_response(src)
        assert f"fb {e.status}" in e.prompt and e.prompt.endswith("fix:\n")
    firsts = [e for e in examples if e.kind == "first_turn"]
    assert firsts and firsts[0].prompt.endswith("answer:\n")
    # the feedback line holds the facts: the compiler's message, the mismatch numbers
    assert "expected a \";\"" in brief_feedback(results[0])
    if results[1].status == "WRONG_OUTPUT":
        assert "mismatched" in brief_feedback(results[1])


def test_first_drafts_are_buggy_at_the_configured_rate(judge):
    """Real evaluation on the cpu backend: 3 of 10 first-turn targets are the reference, 7 are
    structured mutants that really fail, and every draft also has a repair example -> the reference."""
    tasks = {t.id: t for t in mini_tasks()}
    split = Split(train=["level1/relu", "level1/sigmoid"], held_out=[])
    examples, stats = build_examples(list(tasks.values()), split, judge, mutants_per_task=3,
                                     first_turn_weight=10, seed=0, draft_correct_rate=0.3, draft_mutants=2)
    for task_id in split.train:
        ref = as_response(reference_cuda(tasks[task_id]))
        first = [e for e in examples if e.task_id == task_id and e.kind in ("first_turn", "first_draft")]
        assert len(first) == 10 and len({e.prompt for e in first}) == 1
        assert sum(e.response == ref for e in first) == 3
        drafts = [e for e in first if e.kind == "first_draft"]
        assert len(drafts) == 7 and all(e.response != ref for e in drafts)
        assert all(e.status in ("WRONG_OUTPUT", "RUNTIME_ERROR", "TIMEOUT", "COMPILE_ERROR") for e in drafts)
        assert 1 <= len({e.response for e in drafts}) <= 2
        assert any(e.mutation in DRAFT_OPERATORS for e in drafts)
        repairs = [e for e in examples if e.task_id == task_id and e.kind == "repair"]
        assert all(e.response == ref for e in repairs)
        assert {e.mutation for e in drafts} <= {e.mutation for e in repairs}
    assert sum(stats["draft_ops"].values()) == 14
    with pytest.raises(ValueError, match="draft_correct_rate"):
        build_examples(list(tasks.values()), split, judge, draft_correct_rate=1.5)


def test_refine_tasks_get_drafts_only_and_unseen_tasks_nothing(judge):
    """A refine task's first-turn targets are all one buggy draft (its reference is taught by repairs alone); an
    unseen task contributes no example (the tokenizer corpus holds its header, not its kernel)."""
    tasks = {t.id: t for t in mini_tasks()}
    split = Split(train=["level1/relu", "level1/sigmoid", "level1/tanh"], held_out=[], refine=["level1/sigmoid"],
                  unseen=["level1/tanh"])
    examples, _ = build_examples(list(tasks.values()), split, judge, mutants_per_task=3, first_turn_weight=10,
                                 seed=0, draft_correct_rate=0.3, draft_mutants=2)
    assert {e.task_id for e in examples} == {"level1/relu", "level1/sigmoid"}
    refine = [e for e in examples if e.task_id == "level1/sigmoid"]
    assert sum(e.kind == "first_draft" for e in refine) == 10 and not any(e.kind == "first_turn" for e in refine)
    assert len({e.response for e in refine if e.kind == "first_draft"}) == 1
    ref = as_response(reference_cuda(tasks["level1/sigmoid"]))
    assert all(e.response == ref for e in refine if e.kind == "repair") and any(e.kind == "repair" for e in refine)
    assert sum(e.kind == "first_turn" for e in examples if e.task_id == "level1/relu") == 3
    corpus = "".join(tokenizer_corpus(list(tasks.values()), split))
    assert reference_cuda(tasks["level1/tanh"]).strip() not in corpus and "task tanh:" in corpus


def test_warm_up_data_refuses_a_backend_that_fails_the_reference():
    """A backend that cannot run kernels (e.g. NVRTC missing) fails every mutant *and* the reference:
    building drafts and repairs from it would teach noise, so it is an error that says so."""
    from leap_gym.result import EvalResult

    tasks = {t.id: t for t in mini_tasks()}
    split = Split(train=["level1/relu"], held_out=[])

    def broken(pairs):
        return [EvalResult(status="RUNTIME_ERROR", message="NvrtcUnavailable: NVRTC library not found")
                for _ in pairs]

    with pytest.raises(RuntimeError, match="reference of level1/relu is judged RUNTIME_ERROR"):
        build_examples(list(tasks.values()), split, broken, mutants_per_task=2, first_turn_weight=10,
                       draft_correct_rate=0.3, draft_mutants=2)
