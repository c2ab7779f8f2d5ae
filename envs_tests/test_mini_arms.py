"""LEAP-mini arms: return shaping per arm (hand-computed), and a two-step run of each arm with a
small local model, real compilation and real execution on the cpu backend."""

from __future__ import annotations

import pytest
import torch

from leap_agents.training.mini.data import EOS, as_response, mini_tasks, reference_cuda, render_prompt
from leap_agents.training.mini.judge import Judge
from leap_agents.training.mini.model import MiniModelConfig, build_model, train_tokenizer, wrap_tokenizer
from leap_agents.training.mini.policy import MiniPolicy
from leap_agents.training.mini.rl import ARMS, ArmConfig, ReferenceProbe, Traj, TurnRecord, assign_advantages, train_arm
from leap_agents.training.mini.warmup import WarmupExample, sft

pytest.importorskip("transformers")


def _traj(statuses: list[str]) -> Traj:
    t = Traj("level1/relu", 0)
    for k, s in enumerate(statuses, start=1):
        t.turns.append(TurnRecord("p", "r", [1], [2], s, s))
        if s == "CORRECT" and t.first_solved is None:
            t.first_solved = k
    return t


def test_assign_advantages_per_arm():
    c, w = "CORRECT", "WRONG_OUTPUT"
    # LEAP: group of 4: a turn-1 solve, a turn-2 solve, two unsolved -> rank rewards 1, .75, 0, 0
    group = [_traj([c]), _traj([w, c]), _traj([w, w]), _traj([w, w])]
    stats = assign_advantages([group], ArmConfig(arm="leap"))
    assert stats["mean"] == pytest.approx((1 + 0.75) / 4)
    a = [t.turns[0].advantage for t in group]
    assert a[0] > a[1] > 0 > a[2] == a[3]
    assert group[1].turns[1].advantage == group[1].turns[0].advantage  # every turn carries the trajectory's
    # Kevin: per-turn discounted returns (gamma .4): the failed turn before a solve earns .4
    group = [_traj([c]), _traj([w, c]), _traj([w, w]), _traj([w, w])]
    assign_advantages([group], ArmConfig(arm="multi_turn", gamma=0.4))
    assert group[0].turns[0].advantage == group[1].turns[1].advantage > group[1].turns[0].advantage > 0
    assert group[2].turns[0].advantage < 0
    # single turn: only the first turn counts
    group = [_traj([c]), _traj([w]), _traj([w]), _traj([w])]
    assign_advantages([group], ArmConfig(arm="single_turn"))
    assert group[0].turns[0].advantage > 0 > group[1].turns[0].advantage


@pytest.fixture(scope="module")
def small_policy():
    """A tiny model fitted to the relu reference in a few dozen SFT steps (samples vary at temperature 1)."""
    torch.set_num_threads(1)
    tasks = {t.id: t for t in mini_tasks()}
    relu, sig = tasks["level1/relu"], tasks["level1/sigmoid"]
    texts = [as_response(reference_cuda(t)) + EOS for t in (relu, sig)] * 4 + [render_prompt(relu)]
    tokenizer = wrap_tokenizer(train_tokenizer(texts, 400))
    model = build_model(len(tokenizer), MiniModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2),
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.convert_tokens_to_ids(EOS))
    policy = MiniPolicy(model, tokenizer, max_new_tokens=120)
    examples = [WarmupExample("level1/relu", "first_turn", render_prompt(relu), as_response(reference_cuda(relu)))]
    sft(policy, examples, steps=60, batch_size=4, lr=1e-2, log_every=0)
    return policy, relu


@pytest.fixture(scope="module")
def judge():
    """One judge for the three runs: warm workers, and identical responses judged once."""
    with Judge("cpu", workers=1) as j:
        yield j


@pytest.mark.parametrize("arm", ARMS)
def test_two_step_run_of_each_arm(small_policy, judge, arm):
    policy, relu = small_policy
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    cfg = ArmConfig(arm=arm, steps=2, tasks_per_step=1, group_size=4, max_turns=2, lr=1e-3, seed=0)
    history = train_arm(policy, [relu], cfg, judge)
    assert len(history) == 2
    for s in history:
        assert s.responses >= 4 and s.generation_s > 0 and s.evaluation_s >= 0
        assert s.turn_counts[0] == 4
        assert 0.0 <= s.pass_at_1 <= 1.0
        if arm == "single_turn":
            assert len(s.turn_counts) == 1 and s.responses == 4
        else:
            unsolved_after_1 = round(4 * (1 - s.pass_at_1))
            if arm == "multi_turn":
                assert s.turn_counts[1] == unsolved_after_1  # every unsolved trajectory refines
            else:
                assert s.turn_counts[1] <= unsolved_after_1  # DCP may prune
                if s.pass_at_1 > 0:  # the default threshold (1/G): a group with a first-turn solve stops
                    assert s.turn_counts[1] == 0 and s.decisions.get("easy_group", 0) == unsolved_after_1
                assert set(s.decisions) <= {"solved", "easy_group", "hopeless_no_progress", "hopeless_history",
                                            "max_turns"}
    assert all(0.0 <= s.reference_p <= 1.0 for s in history)
    updated = any(s.samples > 0 for s in history)
    changed = any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert changed == updated
    policy.model.load_state_dict(before)


def test_reference_probe_is_the_rate_at_which_samples_are_the_reference(small_policy):
    """The race's noise-free curve: the probe's probability matches how often real samples at that
    temperature reproduce the reference token for token (128 samples, 4 standard errors)."""
    policy, relu = small_policy
    probe = ReferenceProbe(policy, [relu], temperature=0.8)()
    reference = policy.encode(as_response(reference_cuda(relu))) + [policy.eos_id]
    samples = policy.generate([render_prompt(relu)] * 128, seed=0, temperature=0.8)
    rate = sum(s.response_ids == reference for s in samples) / len(samples)
    assert 0.05 < rate < 0.95  # the check means something only where samples differ
    assert abs(probe - rate) < 4 * (rate * (1 - rate) / len(samples)) ** 0.5
