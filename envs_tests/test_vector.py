"""The vector API: `gym.make_vec` (sync and async) with text observations and actions."""

from __future__ import annotations

import doctest
import multiprocessing as mp

import gymnasium as gym
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import leap_gym
import leap_gym.integrations.vector
from leap_gym.env import SourceText

TASKS = ["level1/relu", "level1/add"]
BROKEN = "```cuda\nextern \"C\" __global__ void relu_kernel(const float* x, float* y, int n) { y[0] = x[0] }\n```"


def _env():
    return gym.make("KernelDebugEnv-v0", backend="compile-only", task_ids=TASKS, max_turns=2)


def test_vector_doctest():
    assert doctest.testmod(leap_gym.integrations.vector, raise_on_error=False).failed == 0


def test_source_text_shared_memory_round_trip_keeps_unicode():
    space = SourceText(64)
    memory = create_shared_memory(space, n=2, ctx=mp)
    view = read_from_shared_memory(space, memory, n=2)
    write_to_shared_memory(space, 0, "héllo ∑ 🚀 \t\n", memory)
    write_to_shared_memory(space, 1, "x" * 100, memory)
    assert view[0] == "héllo ∑ 🚀 \t\n"
    assert view[1] == "x" * 64                      # cut to max_length
    write_to_shared_memory(space, 0, "", memory)
    assert tuple(view) == ("", "x" * 64)            # the view shows later writes


def test_make_vec_sync_steps_text_actions():
    envs = gym.make_vec("KernelDebugEnv-v0", num_envs=2, vectorization_mode="sync", backend="compile-only",
                        task_ids=["level1/relu"], max_turns=2)
    assert isinstance(envs, SyncVectorEnv)
    observations, infos = envs.reset(seed=0)
    assert len(observations) == 2 and all(o.startswith("Task level1/relu") for o in observations)
    task = envs.envs[0].unwrapped.task
    observations, rewards, terminated, truncated, infos = envs.step((task.reference_solutions[0], BROKEN))
    assert [r.status for r in infos["result"]] == ["COMPILED", "COMPILE_ERROR"]
    assert observations[0].startswith("COMPILED") and observations[1].startswith("COMPILE_ERROR")
    assert list(terminated) == [False, False] and list(truncated) == [False, False]
    _, _, _, truncated, _ = envs.step(("no code", "no code"))
    assert list(truncated) == [True, True]           # max_turns=2; the next step autoresets
    envs.close()


def test_async_vector_env_default_shared_memory_matches_single_envs():
    envs = AsyncVectorEnv([_env, _env])              # shared_memory=True, the default
    single = [_env(), _env()]
    observations, _ = envs.reset(seed=3)
    expected = [env.reset(seed=3 + i)[0] for i, env in enumerate(single)]
    assert list(observations) == expected
    tasks = [env.unwrapped.task for env in single]
    actions = (tasks[0].reference_solutions[0], "héllo, no code ∑")
    observations, _, _, _, infos = envs.step(actions)
    expected = [env.step(a)[0] for env, a in zip(single, actions)]
    assert list(observations) == expected
    assert [r.status for r in infos["result"]] == ["COMPILED", "FORMAT_ERROR"]
    envs.close()


def test_make_vec_async_mode():
    envs = gym.make_vec("KernelDebugEnv-v0", num_envs=2, vectorization_mode="async", backend="compile-only",
                        task_ids=TASKS)
    observations, infos = envs.reset(seed=0)
    assert all(o.startswith("Task level1/") for o in observations)
    assert set(infos["task_id"]) <= set(TASKS)
    envs.close()


@pytest.mark.parametrize("wrapper", ["feedback", "reward"])
def test_wrappers_vectorise(wrapper):
    from leap_gym.integrations.wrappers import FeedbackFormatWrapper, RewardShapingWrapper

    def make():
        env = _env()
        return FeedbackFormatWrapper(env, style="short") if wrapper == "feedback" else RewardShapingWrapper(env)

    envs = SyncVectorEnv([make, make])
    envs.reset(seed=0)
    observations, rewards, *_ = envs.step(("no code", "no code"))
    assert all(o.startswith("FORMAT_ERROR") for o in observations)
    assert rewards.shape == (2,)
    envs.close()
