"""The environment: spaces, check_env, episode logic (termination, truncation, seeding), info."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import leap_gym
from leap_gym.cli import DEMO_RESPONSES

BROKEN = DEMO_RESPONSES[0]      # COMPILE_ERROR
COMPILES = DEMO_RESPONSES[1]    # compiles, wrong output


@pytest.fixture(scope="module")
def env():
    env = gym.make("KernelDebugEnv-v0", backend="compile-only", max_turns=3)
    yield env
    env.close()


def test_check_env_passes():
    env = gym.make("KernelDebugEnv-v0", backend="compile-only", max_turns=2)
    check_env(env.unwrapped, skip_render_check=True)


def test_spaces_hold_any_source_code(env):
    text = 'extern "C" __global__ void k() {\n\t// ünïcödé comment: naïve — ∑\n}'
    assert env.action_space.contains(text) and env.observation_space.contains(text)
    assert not env.action_space.contains("\0") and not env.action_space.contains(b"bytes")
    assert env.action_space.max_length == 262_144


def test_reset_prompt_and_info(env):
    obs, info = env.reset(seed=0, options={"task_id": "level1/relu"})
    assert "level1/relu" in obs and "```cuda" in obs and "ModelNew" in obs and "3 turns" in obs
    assert info["task_id"] == "level1/relu" and info["turn"] == 0 and info["result"] is None
    assert [m["role"] for m in info["messages"]] == ["system", "user"]


def test_seeded_task_draws_are_deterministic(env):
    first = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert first == again and len(set(first)) > 1


def test_episode_truncates_at_max_turns(env):
    env.reset(seed=0, options={"task_id": "level1/relu"})
    statuses = []
    for turn in range(3):
        obs, reward, terminated, truncated, info = env.step(BROKEN if turn == 0 else COMPILES)
        statuses.append(info["result"].status)
        assert obs.startswith(info["result"].status) and reward == 0.0
        assert not terminated and truncated == (turn == 2)
    assert statuses == ["COMPILE_ERROR", "COMPILED", "COMPILED"]
    assert len(info["messages"]) == 2 + 2 * 3
    assert "Turn 3 of 3" in obs
    with pytest.raises(RuntimeError, match="reset"):
        env.step(COMPILES)
    assert "[assistant]" in env.render()


def test_format_error_says_what_is_expected(env):
    env.reset(seed=0, options={"task_id": "level1/relu"})
    obs, *_ = env.step("I think the answer is to use a for loop.")
    assert obs.startswith("FORMAT_ERROR") and "```cuda" in obs


def test_correct_kernel_terminates_in_debug_mode():
    env = gym.make("KernelDebugEnv-v0", backend="cpu", max_turns=4, task_ids=["level1/relu"])
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(DEMO_RESPONSES[2])
    assert info["result"].status == "CORRECT", obs
    assert terminated and not truncated and reward == 1.0


def test_unknown_arguments_fail_clearly():
    with pytest.raises(ValueError, match="mode"):
        gym.make("KernelDebugEnv-v0", backend="compile-only", mode="fast")
    with pytest.raises(ValueError, match="unknown backend"):
        gym.make("KernelDebugEnv-v0", backend="tpu")
    with pytest.raises(KeyError, match="unknown task"):
        gym.make("KernelDebugEnv-v0", backend="compile-only").reset(options={"task_id": "level1/nope"})
    with pytest.raises(ValueError, match="unknown reward"):
        gym.make("KernelDebugEnv-v0", backend="compile-only", reward="gold")


def test_list_of_tasks_and_reward_callable():
    tasks = leap_gym.load_tasks(["level1/relu"])
    env = gym.make("KernelDebugEnv-v0", tasks=tasks, backend="compile-only", reward=lambda r: 0.5)
    env.reset(seed=1)
    assert env.step(COMPILES)[1] == 0.5
