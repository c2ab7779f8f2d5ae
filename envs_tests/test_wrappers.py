"""Gymnasium wrappers: doctests, and each wrapper on real evaluations."""

from __future__ import annotations

import doctest
import json

import gymnasium as gym
import pytest

import leap_gym
import leap_gym.integrations.wrappers
from leap_gym.integrations.wrappers import (
    FeedbackFormatWrapper,
    KernelLanguageWrapper,
    RewardShapingWrapper,
    TaskCurriculumWrapper,
    result_summary,
)
from leap_gym.result import CORRECT

BROKEN = '''```cuda
extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f)
}
```'''


def _env(backend: str = "compile-only", **kwargs):
    kwargs.setdefault("task_ids", ["level1/relu"])
    return gym.make("KernelDebugEnv-v0", backend=backend, **kwargs)


def _cpu_backend_works() -> bool:
    task = leap_gym.load_tasks(["level1/relu"])[0].with_size("cpu")
    return leap_gym.evaluate(task, task.reference_solutions[0], backend="cpu").status == CORRECT


def test_doctests():
    results = doctest.testmod(leap_gym.integrations.wrappers, raise_on_error=False)
    assert results.attempted >= 15 and results.failed == 0


def test_json_feedback_carries_compiler_errors():
    env = FeedbackFormatWrapper(_env(), style="json")
    env.reset(seed=0)
    obs, *_ , info = env.step(BROKEN)
    feedback = json.loads(obs)
    assert feedback["status"] == "COMPILE_ERROR" == info["result"].status
    assert feedback["turn"] == 1 and feedback["max_turns"] == 4
    assert any('expected a ";"' in e for e in feedback["errors"]) and feedback["detail"] == "nvrtc"


def test_json_feedback_wrong_output_and_short_style():
    if not _cpu_backend_works():
        pytest.skip("the cpu backend does not run kernels on this machine")
    task = leap_gym.load_tasks(["level1/relu"])[0]
    wrong = task.reference_solutions[0].replace("fmaxf(x[i], 0.0f)", "fmaxf(x[i], 0.5f)")
    env = FeedbackFormatWrapper(_env("cpu"), style="json")
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(wrong)
    feedback = json.loads(obs)
    assert feedback["status"] == "WRONG_OUTPUT" and not terminated
    assert feedback["mismatch"]["max_abs_error"] > 0 and len(feedback["mismatch"]["samples"]) <= 3
    assert result_summary(info["result"])["mismatch"] == feedback["mismatch"]
    short = FeedbackFormatWrapper(_env("cpu"), style="short")
    short.reset(seed=0)
    obs, reward, terminated, *_ = short.step(task.reference_solutions[0])
    assert obs.startswith("CORRECT (turn 1/4)") and "\n" not in obs and reward == 1.0 and terminated


def test_reward_shaping_progress_telescopes_and_custom_fn():
    env = RewardShapingWrapper(_env(max_turns=3), progress_coef=1.0, turn_penalty=0.0)
    env.reset(seed=0)
    task = env.unwrapped.task
    rewards = [env.step(a)[1] for a in ("no code", BROKEN, task.reference_solutions[0])]
    assert rewards == [0.0, 0.25, 0.25]                   # FORMAT 0 -> COMPILE_ERROR .25 -> COMPILED .5
    assert sum(rewards) == RewardShapingWrapper.potential(env.unwrapped.results[-1])
    custom = RewardShapingWrapper(_env(), fn=lambda reward, result, info: 10.0 + reward + info["turn"])
    custom.reset(seed=0)
    _, reward, *_, info = custom.step("no code")
    assert reward == 11.0 and info["base_reward"] == 0.0


def test_curriculum_unlocks_levels_from_real_episodes():
    if not _cpu_backend_works():
        pytest.skip("the cpu backend does not run kernels on this machine")
    base = _env("cpu", task_ids=["level1/relu", "level1/add", "level2/bias_tanh_scale"], max_turns=1)
    env = TaskCurriculumWrapper(base, threshold=1.0, window=2)
    seen = set()
    for episode in range(2):
        _, info = env.reset(seed=episode)
        assert info["task_id"].startswith("level1/")
        seen.add(info["task_id"])
        *_, info = env.step(env.unwrapped.task.reference_solutions[0])
    assert env.unlocked_levels == [1, 2]
    assert sum(s["solved"] for s in env.stats.values()) == 2
    levels = {env.reset(seed=s)[1]["task_id"].split("/")[0] for s in range(10, 30)}
    assert levels == {"level1", "level2"}
    _, info = env.reset(seed=0, options={"task_id": "level2/bias_tanh_scale"})   # an explicit task wins
    assert info["task_id"] == "level2/bias_tanh_scale"


def test_curriculum_rejects_bad_arguments():
    with pytest.raises(ValueError, match="start_levels"):
        TaskCurriculumWrapper(_env(), start_levels=[3])
    with pytest.raises(ValueError, match="style"):
        FeedbackFormatWrapper(_env(), style="xml")
    with pytest.raises(ValueError, match="language"):
        KernelLanguageWrapper(_env(), language="fortran")


def test_language_wrapper_rewrites_prompt_and_messages():
    env = KernelLanguageWrapper(_env(), language="numba")
    prompt, info = env.reset(seed=0)
    assert "@cuda.jit" in prompt and "```cuda" not in prompt.split("Answer with")[1]
    assert env.unwrapped.messages[1]["content"] == prompt == info["messages"][1]["content"]
    assert "Task level1/relu" in prompt and "You have 4 turns" in prompt
    same = KernelLanguageWrapper(_env(), language="cuda")
    assert same.reset(seed=0)[0] == _env().reset(seed=0)[0]


def test_wrappers_compose():
    env = FeedbackFormatWrapper(RewardShapingWrapper(TaskCurriculumWrapper(_env(max_turns=2)), turn_penalty=0.1),
                                style="short")
    _, info = env.reset(seed=1)
    assert info["curriculum_levels"] == [1]
    obs, reward, terminated, truncated, info = env.step("no code")
    assert obs.startswith("FORMAT_ERROR (turn 1/2)") and reward == pytest.approx(-0.1)
    obs, reward, terminated, truncated, info = env.step("no code")
    assert truncated and env.get_wrapper_attr("stats")["level1/relu"]["episodes"] == 1
