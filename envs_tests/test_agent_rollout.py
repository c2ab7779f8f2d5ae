"""The group rollout engine through the real environment (compile-only backend; the cpu backend for a kernel that
never ends) with scripted policies: DCP on and off, decisions and their reasons, rewards, metrics, the trajectory
record, the evaluation time limit."""

import re

import pytest

import leap_gym
from leap_agents import DCPConfig, ScriptedPolicy
from leap_agents.training.metrics import summarize
from leap_agents.training.rollout import RolloutConfig, RolloutEngine
from leap_agents.training.trajectory import Trajectory, assign_rewards

BAD_CUDA = '```cuda\nextern "C" __global__ void relu_kernel(const float* x, float* y, int n) { y[0] = x; }\n```'
NO_BLOCK = "I would write a kernel here."


@pytest.fixture(scope="module")
def tasks():
    by_id = {t.id: t for t in leap_gym.load_tasks("builtin")}
    return [by_id["level1/relu"], by_id["level1/add"]]


def script(tasks):
    relu = tasks[0].reference_solutions[0]
    return ScriptedPolicy({
        "level1/relu": {0: [relu], 1: [relu], 2: [BAD_CUDA, relu], 3: [BAD_CUDA]},  # 2/4 solve at turn 1, one at 2
        "level1/add": [NO_BLOCK],  # never even well-formed
    })


def run(tasks, dcp_on, max_turns=3):
    engine = RolloutEngine(script(tasks), tasks, backend="compile-only",
                           config=RolloutConfig(group_size=4, max_turns=max_turns, eval_workers=2, progress_bar=False),
                           dcp=DCPConfig(enabled=dcp_on, easy_threshold=0.5))
    return engine, engine.run(["level1/relu", "level1/add"], seed=0)


def test_rollout_with_dcp_prunes_easy_and_hopeless_groups(tasks):
    engine, batch = run(tasks, dcp_on=True)
    relu, add = batch.groups
    assert [t.first_solved_turn for t in relu] == [1, 1, None, None]
    assert [t.end_reason for t in relu] == ["solved", "solved", "easy_group", "easy_group"]
    assert [t.end_reason for t in add] == ["hopeless_no_progress"] * 4
    assert batch.responses == batch.evaluations + batch.memo_hits == 8  # every trajectory took exactly one turn
    assert batch.memo_hits == 5  # 8 responses, 3 different texts: each judged once
    assert relu[2].turns[0].status == "COMPILE_ERROR" and add[0].turns[0].status == "FORMAT_ERROR"
    assert relu[2].decisions == [{"turn": 1, "action": "stop", "reason": "easy_group"}]
    assert engine.tracker.estimate("level1/relu") == 0.5 and engine.tracker.estimate("level1/add") == 0.0


def test_rollout_without_dcp_refines_everything(tasks):
    _, batch = run(tasks, dcp_on=False)
    relu, add = batch.groups
    assert [t.first_solved_turn for t in relu] == [1, 1, 2, None]
    assert [len(t.turns) for t in relu] == [1, 1, 2, 3] and [len(t.turns) for t in add] == [3] * 4
    assert [t.end_reason for t in relu] == ["solved", "solved", "solved", "max_turns"]
    assert batch.responses == 19
    # turn 2's prompt is the whole history: system, task, the first response and its feedback
    prompt = relu[2].turns[1].prompt
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
    assert prompt[2]["content"] == BAD_CUDA and prompt[3]["content"].startswith("COMPILE_ERROR")
    assign_rewards(batch.groups, "leap")
    assert [t.reward for t in relu] == pytest.approx([1, 1, .5, 0]) and [t.reward for t in add] == [0] * 4
    assert all(turn.advantage == 0 for t in add for turn in t.turns)  # hopeless group: no signal
    a = [t.turns[0].advantage for t in relu]
    assert a[0] == a[1] > a[2] > a[3] and relu[2].turns[1].advantage == a[2]  # every turn gets its trajectory's
    m = summarize(batch, 3)
    assert m["pass_at_1"] == pytest.approx(2 / 8) and m["pass_turn_2"] == pytest.approx(3 / 8)
    assert m["pass_at_k"] == pytest.approx(0.5) and m["stop_max_turns"] == 5 and m["responses"] == 19
    # Kevin: per-turn binary scores on compile-only are 0, so use the structure of returns on scores
    for traj in relu:
        for turn in traj.turns:
            turn.score = 1.0 if turn.status == "COMPILED" else 0.0
    assign_rewards(batch.groups, "kevin", gamma=0.4)
    assert [t.reward for t in relu[2].turns] == pytest.approx([0.4, 1.0])
    assign_rewards(batch.groups, "single_turn")
    assert relu[2].turns[1].advantage == 0.0
    # the record round-trips
    again = Trajectory.from_dict(relu[2].to_dict())
    assert again == relu[2]


def test_rollout_uses_a_given_env_factory(tasks):
    import gymnasium as gym

    made = []

    def factory():
        made.append(gym.make("KernelDebugEnv-v0", tasks=tasks, backend="compile-only", max_turns=2))
        return made[-1]

    engine = RolloutEngine(script(tasks), tasks, backend="compile-only", env_factory=factory,
                           config=RolloutConfig(group_size=4, max_turns=2, progress_bar=False))
    batch = engine.run(["level1/relu"], seed=1)
    assert len(made) == 4 and [t.first_solved_turn for t in batch.trajectories] == [1, 1, None, None]


def test_a_kernel_that_never_ends_costs_the_rollout_its_eval_timeout(tasks):
    """`rollout.eval_timeout_s` is the limit the environment kills an evaluation at (30 s by default)."""
    relu = tasks[0].reference_solutions[0]
    hang = re.sub(r"(__global__[^{]*\{)", r"\1\n    while (true) { }", relu, count=1)
    assert hang != relu
    engine = RolloutEngine(ScriptedPolicy({"level1/relu": [hang]}), tasks, backend="cpu",
                           config=RolloutConfig(group_size=1, max_turns=1, eval_timeout_s=2.0, progress_bar=False))
    batch = engine.run(["level1/relu"], seed=0)
    turn = batch.trajectories[0].turns[0]
    assert turn.status == "TIMEOUT" and "ran past its 2 s limit" in turn.result["message"]
    assert batch.evaluation_s < 20.0  # the default limit alone would take 30 s
