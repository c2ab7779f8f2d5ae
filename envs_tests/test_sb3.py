"""Stable-Baselines3 on the candidate-choice wrapper: check_env, caching, and PPO beating random choice."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest
import torch

import leap_gym.integrations.sb3
from leap_gym.evaluation.memo import EvalCache
from leap_gym.integrations.sb3 import FeatureSpec, make_candidate_env, make_candidates, success_rate
from leap_gym.result import COMPILE_ERROR, STATUSES
from leap_gym.tasks import load_tasks

TASKS = ["level1/relu", "level1/add", "level1/sigmoid"]
K = 5


@pytest.fixture(scope="module")
def env():
    env = make_candidate_env(TASKS, backend="cpu", num_candidates=K, max_turns=1, workers=2, trials=1, timeout_s=120)
    env.precompute()
    return env


def test_doctest():
    assert doctest.testmod(leap_gym.integrations.sb3, raise_on_error=False).failed == 0


def test_candidates_mix_references_variants_and_mutants():
    task = load_tasks(["level1/relu"])[0]
    candidates = make_candidates(task, K, seed=0)
    kinds = [c.kind for c in candidates]
    assert len(candidates) == K and len({c.text for c in candidates}) == K
    assert "reference" in kinds and "variant:block128" in kinds and "mutant:syntax_slip" in kinds
    assert make_candidates(task, K, seed=0)[0].text == candidates[0].text                # deterministic
    assert make_candidates(task, K, shuffle=False)[0].kind == "reference"
    given = make_candidates(task, 3, extra=["my answer"], shuffle=False)
    assert given[0].text == "my answer" and given[0].kind == "given"
    assert len(make_candidates(task, 20)) == 20                                          # padded
    assert len(make_candidates(task, 6)) == 6 and "variant:block128" in [c.kind for c in make_candidates(task, 6)]


def test_check_env_and_features(env):
    from stable_baselines3.common.env_checker import check_env

    check_env(env, warn=True)
    spec: FeatureSpec = env.features
    obs, info = env.reset(seed=0, options={"task_id": "level1/relu"})
    assert obs.dtype == np.float32 and env.observation_space.contains(obs) and len(info["candidates"]) == K
    assert obs[spec.slices["level"]][0] == 1.0 and obs[spec.slices["status"]][-1] == 1.0   # level 1, no status yet
    kinds = info["candidates"]
    obs, reward, terminated, truncated, info = env.step(kinds.index("mutant:syntax_slip"))
    assert info["result"].status == COMPILE_ERROR and reward == 0.0 and truncated
    assert obs[spec.slices["status"]][STATUSES.index(COMPILE_ERROR)] == 1.0
    assert obs[spec.slices["tried"]][kinds.index("mutant:syntax_slip")] == 1.0 and obs[spec.slices["turn"]][0] == 1.0
    env.reset(seed=0, options={"task_id": "level1/relu"})
    obs, reward, terminated, *_ = env.step(kinds.index("reference"))
    assert reward == 1.0 and terminated and obs[spec.slices["flags"]].tolist() == [1.0, 1.0]
    assert obs[spec.slices["resources"]][0] > 0                                          # registers reported


def test_cache_hits_and_saves(env, tmp_path):
    hits = env.cache.hits
    env.reset(seed=1)
    env.step(0)
    assert env.cache.hits == hits + 1                       # precomputed: no evaluation ran
    path = env.cache.save(tmp_path / "cache.json")
    loaded = EvalCache(path)
    assert len(loaded) == len(env.cache) >= len(TASKS) * K
    for key, result in env.cache.results.items():          # (JSON text: NaN statistics compare equal)
        assert json.dumps(loaded.get(key).to_dict()) == json.dumps(result.to_dict())


def test_ppo_beats_random_choice(env):
    from stable_baselines3 import PPO

    random_rate = env.random_success_rate()
    assert 0.0 < random_rate < 0.7
    rng = np.random.default_rng(0)
    episodes = 10 * len(TASKS)
    empirical_random = success_rate(env, lambda obs: int(rng.integers(K)), episodes, task_ids=TASKS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                               # tiny networks: threads only contend
    try:
        model = PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=8, learning_rate=3e-3, gamma=0.0,
                    policy_kwargs={"net_arch": [64]}, seed=0, device="cpu")

        def rate(deterministic: bool) -> float:
            return success_rate(env, lambda obs: int(model.predict(obs, deterministic=deterministic)[0]), episodes,
                                seed=100, task_ids=TASKS)

        before = rate(deterministic=False)               # the untrained policy samples near-uniformly
        model.learn(total_timesteps=1536)
        after, after_greedy = rate(deterministic=False), rate(deterministic=True)
    finally:
        torch.set_num_threads(threads)
    print(f"success: random choice {random_rate:.2f} (empirical {empirical_random:.2f}); PPO sampling before "
          f"training {before:.2f}, after {after:.2f}; greedy after {after_greedy:.2f}")
    assert after_greedy == 1.0 and after >= 0.9 and after > before + 0.25 and after > random_rate + 0.25
