"""Reward-hacking defences: the adversarial corpus is caught, honest solutions stay CORRECT.

The corpus (``envs_tests/adversarial/*.md``, expectations in ``cases.tsv``) holds responses over the
nine classes of attack of issue 5; each must come back with the listed status and detail. Every
response goes through a real `Evaluator` (sandboxed workers, the cpu backend): real compilation,
real execution. Unit tests below pin the pieces (sealed references, poisoned allocations, state and
environment snapshots, shape variants, magnitude-scaled tolerance, the timing check).
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

import leap_gym
from leap_gym.evaluation import correctness, hostile
from leap_gym.evaluation.evaluator import Evaluator
from leap_gym.evaluation.pipeline import EvalJob
from leap_gym.result import CORRECT

CORPUS = Path(__file__).parent / "adversarial"
CLASSES = {"memory", "inputs", "streams", "cache", "torch", "constant", "shapes", "precision", "timing"}
HONEST_SAMPLE = [
    "level1/relu", "level1/add", "level1/argmax", "level1/softmax", "level1/sum_dim", "level1/transpose",
    "level1/matmul", "level1/cumsum", "level1/silu_fp16", "level1/softmax_bf16", "level1/embedding",
    "level2/conv2d_relu", "level2/linear_gelu", "level3/lstm_cell", "level3/attention_head",
]


def _cases() -> list[dict[str, str]]:
    rows = []
    for line in (CORPUS / "cases.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, task, status, detail, options, klass = line.split("\t")
            rows.append(dict(name=name, task=task, status=status, detail=detail, options=options, klass=klass))
    return rows


CASES = _cases()


@pytest.fixture(scope="module")
def tasks() -> dict[str, leap_gym.Task]:
    suite = leap_gym.load_tasks("builtin") + leap_gym.load_tasks(CORPUS / "tasks")
    return {t.id: t.with_size("cpu") for t in suite}


@pytest.fixture(scope="module")
def evaluators():
    normal = Evaluator(backend="cpu", workers=2, timeout_s=60)
    strict = Evaluator(backend="cpu", workers=1, timeout_s=60, strict=True)
    yield normal, strict
    normal.close()
    strict.close()


@pytest.fixture(scope="module")
def corpus_results(evaluators, tasks) -> dict[str, Future]:
    normal, strict = evaluators
    return {c["name"]: (strict if "strict" in c["options"] else normal).submit(
        tasks[c["task"]], (CORPUS / f"{c['name']}.md").read_text()) for c in CASES}


def test_corpus_covers_the_nine_classes():
    assert len(CASES) >= 30
    assert {c["klass"] for c in CASES} == CLASSES
    for klass in CLASSES:
        assert sum(c["klass"] == klass for c in CASES) >= 2, klass
    for case in CASES:
        assert (CORPUS / f"{case['name']}.md").is_file()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_adversarial_response_is_caught(corpus_results, case):
    result = corpus_results[case["name"]].result(timeout=600)
    assert not result.correct
    assert (result.status, result.detail) == (case["status"], case["detail"]), result.message
    assert result.message


def test_honest_reference_solutions_stay_correct(evaluators, tasks):
    normal, _ = evaluators
    ids = HONEST_SAMPLE + ["level1/tiny_scale", "level1/loose_mean"]
    futures = {(tid, i): normal.submit(tasks[tid], sol) for tid in ids
               for i, sol in enumerate(tasks[tid].reference_solutions)}
    wrong = {k: (r.status, r.detail, r.message) for k, f in futures.items() if (r := f.result(timeout=600)).status
             != CORRECT}
    assert not wrong
    assert len(futures) >= len(ids)


def test_strict_check_passes_an_honest_solution(evaluators, tasks):
    _, strict = evaluators
    task = tasks["level1/matmul"]
    assert strict.evaluate(task, task.reference_solutions[0]).status == CORRECT


# ------------------------------------------------------------------------------------------------ pieces


def test_sealed_output_round_trips_and_holds_no_plain_copy():
    out = torch.randn(64)
    sealed = hostile.Sealed(out)
    assert torch.equal(sealed.open(), out)
    assert not torch.equal(sealed._masked.view(torch.float32), out)
    assert torch.equal(hostile.open_all(hostile.seal_all([out, 3]))[0], out)


def test_guard_poisons_uninitialised_allocations_and_records_downcasts():
    x = torch.randn(8)
    with correctness.ForwardGuard(poison=correctness.POISON_A) as guard:
        a = torch.empty(8)
        i = torch.empty(4, dtype=torch.int32)
        z = torch.zeros(3)
        h = x.to(torch.float16)
    assert torch.isnan(a).all() and (i == torch.iinfo(torch.int32).min).all() and (z == 0).all()
    assert guard.downcasts == ["float32 -> float16"] and h.dtype == torch.float16
    with correctness.ForwardGuard(poison=correctness.POISON_B):
        b = torch.empty(8)
    assert (b == -12345.678).all() or torch.allclose(b, torch.full((8,), -12345.678))


@pytest.mark.parametrize("read", [lambda x: x.tolist(), lambda x: str(x), lambda x: f"{x}", lambda x: x[0].item(),
                                  lambda x: x.untyped_storage(), lambda x: float(x[1])])
def test_forward_may_not_read_tensor_values(read):
    x = torch.randn(4)
    with pytest.raises(correctness.TorchOpError):
        with correctness.ForwardGuard():
            read(x)
    with correctness.ForwardGuard():  # shapes, views and allocation stay allowed
        assert x.view(2, 2).shape == (2, 2) and x.numel() == 4 and torch.empty_like(x).shape == x.shape


def test_state_snapshot_finds_instance_module_and_hidden_state():
    model = torch.nn.Linear(3, 2)
    cache: dict = {}
    helper = lambda v, memo=[]: memo  # noqa: E731
    roots = {"self": model, "CACHE": cache, "helper": helper}
    before = hostile.StateSnapshot(roots)
    assert hostile.StateSnapshot(roots).changed_since(before) is None
    cache["k"] = 1
    assert hostile.StateSnapshot(roots).changed_since(before) == "CACHE"
    cache.clear()
    helper.__defaults__[0].append(0)
    assert "helper.defaults" in hostile.StateSnapshot(roots).changed_since(before)
    helper.__defaults__[0].clear()
    with torch.no_grad():
        model.weight[0, 0] += 1.0  # what a kernel writing through the pointer does
    assert "weight" in hostile.StateSnapshot(roots).changed_since(before)


def test_environment_snapshot_finds_a_swapped_attribute():
    snapshot = hostile.EnvironmentSnapshot()
    assert snapshot.tampered() is None
    original = torch.Tensor.add
    try:
        torch.Tensor.add = lambda *a, **k: None
        assert snapshot.tampered() == "torch.Tensor.add"
    finally:
        torch.Tensor.add = original
    assert snapshot.tampered() is None


def test_shape_variant_grows_named_sizes_and_keeps_powers_of_two(tasks):
    relu = hostile.shape_variant(tasks["level1/relu"])
    assert relu.overrides["N"] > 4096 and relu.overrides["N"] % 16 == 0
    odd = hostile.shape_variant(tasks["level1/add"])
    assert odd.overrides["DIM"] > 999 and odd.overrides["BATCH"] > 8
    assert hostile.shape_variant(leap_gym.Task(id="level1/x", source="N = 3\n")) is None


def test_tolerance_is_scaled_to_the_output_magnitude():
    ref = torch.randn(1000) * 1e-5
    assert correctness.judge_values([ref], ref.clone(), 1e-4, 1e-4) is None
    assert correctness.judge_values([ref], torch.zeros(1000), 1e-4, 1e-4).detail == "output_near_zero"
    assert correctness.judge_values([ref], ref * 0.5, 1e-4, 1e-4).detail == "mismatch"
    big = torch.randn(1000)
    assert correctness.judge_values([big], big.half().float(), 1e-5, 1e-5).detail == "precision_downgrade"
    assert correctness.judge_values([big], big + 1.0, 1e-5, 1e-5).detail == "mismatch"
    assert correctness.judge_values([big], big, 1e-5, 1e-5, downcasts=["float32 -> float16"], strict=True).detail \
        == "precision_downgrade"


def test_counting_launcher_counts_and_can_skip():
    calls = []

    class Inner:
        device, max_shared_mem = "cpu", 1024

        def launch(self, name, grid, block, shared_mem, args, tensors):
            calls.append(name)

    counter = hostile.CountingLauncher(Inner())
    counter.launch("k", (1, 1, 1), (1, 1, 1), 0, [], [])
    counter.noop = True
    counter.launch("k", (1, 1, 1), (1, 1, 1), 0, [], [])
    assert counter.counts == {"k": 2} and calls == ["k"] and counter.device == "cpu"


def test_timing_that_sees_fewer_launches_than_calls_is_refused(tasks):
    """A backend that reports a speedup: forward must launch on every timed call (stubbed timer, real run)."""
    from leap_gym.backends.cpu import CpuBackend
    from leap_gym.evaluation.languages import prepare, run_job

    class TimedCpu(CpuBackend):
        reports_speedup = True

        def time_ms(self, fn, budget_s):
            fn()
            return 1.0, 0.0, 5  # claims five timed calls after making one

    task = tasks["level1/relu"]
    parsed = prepare(task, task.reference_solutions[0])
    job = EvalJob(task=task, cuda=parsed.cuda, python=parsed.python, backend=TimedCpu(), arch="sm_90")
    result = run_job(job)
    assert (result.status, result.detail) == ("WRONG_OUTPUT", "timing_tampered")
