"""Return shaping across turns and across a group: LEAP's rank reward, Kevin's discounted return,
single-turn rewards, and group-relative (GRPO) advantages. Pure functions of plain lists."""

from __future__ import annotations

import math
from collections.abc import Sequence


def rank_rewards(first_solved: Sequence[int | None], speedups: Sequence[float | None] | None = None,
                 tie_break: bool = False) -> list[float]:
    """LEAP's rank-based reward of each trajectory of one group.

    A trajectory first solved at turn k earns ``1 - F(k-1)``, where ``F(j)`` is the fraction of the
    group solved within j turns (``F(0) = 0``); an unsolved one earns 0. Equivalently, a solved
    trajectory earns ``1 - (number of trajectories that did strictly better) / G``.

    With ``tie_break=True``, "strictly better" also counts same-turn solves with a strictly higher
    speedup (a missing speedup ranks below any number). Equal speedups share the better rank. The
    same-turn solvers at turn k then spread over the band ``(1 - F(k), 1 - F(k-1)]``, the slice of
    the group's CDF they occupy, so a tie-break never lifts a late solve above an earlier one and
    never drops a solve to the level of the next turn's. Without speedups (e.g. the CPU backend) the
    tie-break changes nothing.

    Args:
        first_solved: per trajectory, the 1-based turn of its first solve, or `None` if never solved.
        speedups: per trajectory, the speedup of its solving kernel (`None` where unknown).
        tie_break: spread same-turn solves by speedup rank.

    Returns:
        One reward in [0, 1] per trajectory.

    Examples:
        >>> rank_rewards([1, 1, 2, 2, 2, None, None, None])
        [1.0, 1.0, 0.75, 0.75, 0.75, 0.0, 0.0, 0.0]
    """
    n = len(first_solved)
    if n == 0:
        return []
    for k in first_solved:
        if k is not None and (not isinstance(k, int) or k < 1):
            raise ValueError(f"first_solved holds 1-based turn numbers or None, got {k!r}")
    if speedups is not None and len(speedups) != n:
        raise ValueError(f"speedups must have one entry per trajectory ({n}), got {len(speedups)}")
    if tie_break and speedups is None:
        raise ValueError("tie_break=True needs speedups (one per trajectory, None where unknown)")

    def key(i: int) -> tuple[int, float]:
        s = speedups[i] if (tie_break and speedups is not None) else None
        return first_solved[i], -(s if s is not None and math.isfinite(s) else -math.inf)

    rewards = []
    for i, k in enumerate(first_solved):
        if k is None:
            rewards.append(0.0)
            continue
        mine = key(i)
        better = sum(1 for j, kj in enumerate(first_solved) if kj is not None and key(j) < mine)
        rewards.append(1.0 - better / n)
    return rewards


def solved_fraction(first_solved: Sequence[int | None], within: int) -> float:
    """F(j): the fraction of a group solved within `within` turns."""
    if not first_solved:
        return 0.0
    return sum(1 for k in first_solved if k is not None and k <= within) / len(first_solved)


def kevin_returns(scores: Sequence[float], gamma: float = 0.4) -> list[float]:
    """Kevin's per-turn return: ``R_t = sum_{j >= t} gamma^(j-t) * s_j`` over one trajectory's turns.

    Args:
        scores: the per-turn scores of one trajectory, in turn order.
        gamma: the discount (Kevin uses 0.4).

    Returns:
        One return per turn.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    returns = [0.0] * len(scores)
    running = 0.0
    for t in range(len(scores) - 1, -1, -1):
        running = float(scores[t]) + gamma * running
        returns[t] = running
    return returns


def single_turn_rewards(scores: Sequence[Sequence[float]]) -> list[float]:
    """Single-turn GRPO: each trajectory's reward is the score of its first turn only."""
    return [float(s[0]) if len(s) else 0.0 for s in scores]


def group_advantages(rewards: Sequence[float], normalize_std: bool = True, eps: float = 1e-6) -> list[float]:
    """Group-relative advantages: ``(r - mean) / (std + eps)``, or ``r - mean`` with ``normalize_std=False``.

    The standard deviation is the population one (GRPO). A group whose rewards are all equal gets
    all-zero advantages: it carries no learning signal.
    """
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    centred = [float(r) - mean for r in rewards]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / n)
    return [c / (std + eps) for c in centred]
