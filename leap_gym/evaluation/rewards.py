"""Per-turn reward functions: plain callables of an `EvalResult`, selectable by name.

Return shaping across turns and across a group belongs to the agent (`leap_agents`).
"""

from __future__ import annotations

import math
from typing import Callable

from leap_gym.result import CORRECT, EvalResult

RewardFn = Callable[[EvalResult], float]


def binary_reward(result: EvalResult) -> float:
    """1 for a correct kernel, else 0."""
    return 1.0 if result.status == CORRECT else 0.0


def speedup_reward(result: EvalResult, cap: float = 10.0) -> float:
    """0 unless correct; then 1 + log2 of the speedup, clipped to [0.1, 1 + log2(cap)].

    A correct kernel always earns something; one as fast as the reference earns 1, twice as fast 2.
    Backends that report no speedup (the CPU runtime) give 1 for a correct kernel.
    """
    if result.status != CORRECT:
        return 0.0
    speedup = result.speedup
    if speedup is None:
        return 1.0
    return min(max(1.0 + math.log2(max(speedup, 1e-9)), 0.1), 1.0 + math.log2(cap))


TIER_REWARDS = {"FORMAT_ERROR": 0.0, "COMPILE_ERROR": 0.05, "COMPILED": 0.1, "RUNTIME_ERROR": 0.1, "TIMEOUT": 0.1,
                "WRONG_OUTPUT": 0.2, "CORRECT": 1.0}


def tiered_reward(result: EvalResult) -> float:
    """Partial credit for each stage passed (format, compile, run), 1 for correct, plus a speedup bonus."""
    base = TIER_REWARDS.get(result.status, 0.0)
    if result.status == CORRECT and result.speedup is not None and result.speedup > 1.0:
        base += min(math.log2(result.speedup), 2.0) * 0.25
    return base


REWARDS: dict[str, RewardFn] = {"binary": binary_reward, "speedup": speedup_reward, "tiered": tiered_reward}


def get_reward_fn(reward: str | RewardFn) -> RewardFn:
    """A reward function by name (``"binary"``, ``"speedup"``, ``"tiered"``) or the callable itself."""
    if callable(reward):
        return reward
    if reward not in REWARDS:
        raise ValueError(f"unknown reward {reward!r}; choose one of {sorted(REWARDS)} or pass a callable "
                         "taking an EvalResult")
    return REWARDS[reward]
