"""Difficulty-conditioned pruning (DCP) of refinement turns, as pure functions plus a running
per-task difficulty estimate.

After each turn, each group (the G trajectories of one task) is judged as a whole:

* an **easy** group (pass rate so far at or above ``easy_threshold``) stops: a late solve there earns
  little under the rank reward;
* a **hopeless** group stops: nothing passed and nothing made progress (no trajectory reached
  ``progress_rank``, e.g. none compiled, and none improved its best status this turn), or nothing
  passed and the running estimate from earlier epochs says the task is out of reach;
* otherwise the unsolved trajectories **refine**, up to ``max_turns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Reasons (stable strings, logged with every decision).
SOLVED = "solved"
EASY_GROUP = "easy_group"
HOPELESS_NO_PROGRESS = "hopeless_no_progress"
HOPELESS_HISTORY = "hopeless_history"
MAX_TURNS = "max_turns"
REFINE = "refine"
REASONS = (SOLVED, EASY_GROUP, HOPELESS_NO_PROGRESS, HOPELESS_HISTORY, MAX_TURNS, REFINE)

#: Status ranks (as `leap_gym.result.STATUS_RANK`): 0 format error, 1 compile error, 2 compiled/ran, 3 wrong output,
#: 4 correct.
COMPILED_RANK = 2


@dataclass(frozen=True)
class Decision:
    """What happens to one trajectory after a turn: ``action`` is ``"continue"`` or ``"stop"``."""

    action: str
    reason: str

    @property
    def continues(self) -> bool:
        return self.action == "continue"


@dataclass
class DCPConfig:
    """Difficulty-conditioned pruning settings."""

    enabled: bool = field(default=True, metadata={"help": "prune refinement turns (off: full multi-turn refinement)"})
    easy_threshold: float = field(default=0.5, metadata={
        "help": "a group whose pass rate so far is at least this stops refining"})
    progress_rank: int = field(default=COMPILED_RANK, metadata={
        "help": "status rank counting as progress (0 format, 1 compile error, 2 compiled, 3 wrong output); "
                "the rollout engine caps it below the backend's top status (1 on compile-only)"})
    hopeless_estimate: float = field(default=0.0, metadata={
        "help": "a task whose running solve estimate is at most this is hopeless (with min_history epochs)"})
    min_history: int = field(default=2, metadata={"help": "epochs of history before the estimate can prune"})
    ema_alpha: float = field(default=0.5, metadata={"help": "weight of the newest epoch in the difficulty EMA"})


def dcp_decide(solved: Sequence[bool], best_progress: Sequence[int], turn: int, max_turns: int,
               easy_threshold: float = 0.5, *, prev_best_progress: Sequence[int] | None = None,
               progress_rank: int = COMPILED_RANK, history_estimate: float | None = None,
               history_count: int = 0, hopeless_estimate: float = 0.0, min_history: int = 2,
               enabled: bool = True) -> list[Decision]:
    """Decide, for each trajectory of one group, whether it refines after `turn`.

    The rules, in order, per trajectory:

    1. solved -> stop ``"solved"``;
    2. ``turn >= max_turns`` -> stop ``"max_turns"``;
    3. DCP disabled -> continue ``"refine"``;
    4. group pass rate (solved / G) ``>= easy_threshold`` -> stop ``"easy_group"``;
    5. nothing solved and no progress -> stop ``"hopeless_no_progress"``. Progress: some trajectory's
       best status rank so far is at least `progress_rank`, or (after turn 1, given
       `prev_best_progress`) some trajectory improved its best rank this turn;
    6. nothing solved, ``history_count >= min_history`` and ``history_estimate <= hopeless_estimate``
       -> stop ``"hopeless_history"``;
    7. otherwise continue ``"refine"``.

    Args:
        solved: per trajectory, solved at some turn so far.
        best_progress: per trajectory, the best status rank so far (`leap_gym.result.STATUS_RANK`).
        turn: the turn just finished (1-based).
        max_turns: the turn budget.
        easy_threshold: group pass rate at or above which the group stops.
        prev_best_progress: per trajectory, the best rank before this turn (detects improvement).
        progress_rank: the rank that counts as progress by itself (2: compiled).
        history_estimate: the running solve estimate of this task from earlier epochs, if any.
        history_count: how many epochs made that estimate.
        hopeless_estimate: estimate at or below which a task is out of reach.
        min_history: epochs needed before the estimate can prune.
        enabled: `False` gives full refinement (only ``solved`` and ``max_turns`` stop).

    Returns:
        One `Decision` per trajectory.
    """
    g = len(solved)
    if len(best_progress) != g:
        raise ValueError(f"best_progress needs one entry per trajectory ({g}), got {len(best_progress)}")
    if prev_best_progress is not None and len(prev_best_progress) != g:
        raise ValueError(f"prev_best_progress needs one entry per trajectory ({g}), got {len(prev_best_progress)}")
    if turn < 1 or max_turns < 1:
        raise ValueError(f"turn and max_turns are 1-based and positive, got turn={turn}, max_turns={max_turns}")
    n_solved = sum(bool(s) for s in solved)
    pass_rate = n_solved / g if g else 0.0
    progressed = any(p >= progress_rank for p in best_progress)
    if prev_best_progress is not None and turn > 1:
        progressed = progressed or any(p > q for p, q in zip(best_progress, prev_best_progress))
    group_reason = REFINE
    if enabled:
        if pass_rate >= easy_threshold and n_solved > 0:
            group_reason = EASY_GROUP
        elif n_solved == 0 and not progressed:
            group_reason = HOPELESS_NO_PROGRESS
        elif (n_solved == 0 and history_estimate is not None and history_count >= min_history
              and history_estimate <= hopeless_estimate):
            group_reason = HOPELESS_HISTORY
    decisions = []
    for s in solved:
        if s:
            decisions.append(Decision("stop", SOLVED))
        elif turn >= max_turns:
            decisions.append(Decision("stop", MAX_TURNS))
        elif group_reason != REFINE:
            decisions.append(Decision("stop", group_reason))
        else:
            decisions.append(Decision("continue", REFINE))
    return decisions


class DifficultyTracker:
    """A running per-task solve estimate: an exponential moving average of each epoch's group pass rate.

    Args:
        alpha: weight of the newest observation (1: only the last epoch counts).
    """

    def __init__(self, alpha: float = 0.5):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._ema: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def update(self, task_id: str, pass_rate: float) -> float:
        """Fold one epoch's pass rate of `task_id` in; returns the new estimate."""
        if task_id in self._ema:
            self._ema[task_id] = (1 - self.alpha) * self._ema[task_id] + self.alpha * float(pass_rate)
        else:
            self._ema[task_id] = float(pass_rate)
        self._count[task_id] = self._count.get(task_id, 0) + 1
        return self._ema[task_id]

    def estimate(self, task_id: str) -> float | None:
        """The current estimate, or `None` for a task never seen."""
        return self._ema.get(task_id)

    def count(self, task_id: str) -> int:
        return self._count.get(task_id, 0)

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "ema": dict(self._ema), "count": dict(self._count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha = float(state.get("alpha", self.alpha))
        self._ema = {k: float(v) for k, v in state.get("ema", {}).items()}
        self._count = {k: int(v) for k, v in state.get("count", {}).items()}

    def __len__(self) -> int:
        return len(self._ema)
