"""What a rollout records: `Turn`, `Trajectory`, and the shaping of rewards and advantages over groups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from leap_agents.algorithms.rewards import group_advantages, kevin_returns, rank_rewards

SCHEMES = ("leap", "kevin", "single_turn")
CREDITS = ("trajectory", "solving_turn")


@dataclass
class Turn:
    """One response of a trajectory and what the environment made of it.

    Attributes:
        turn: 1-based turn number.
        prompt: the chat history the response answers (messages up to this turn).
        response: the response text.
        token_ids, logprobs, prompt_token_ids: from the policy (empty for remote/scripted ones).
        result: the `EvalResult` as a dict (``EvalResult.to_dict``).
        status: the result's status.
        score: the environment's per-turn reward.
        reward: the shaped return this turn trains on (set by `assign_rewards`).
        advantage: its group-relative advantage (set by `assign_rewards`).
    """

    turn: int
    prompt: list[dict[str, str]]
    response: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    score: float = 0.0
    reward: float = 0.0
    advantage: float = 0.0
    off_policy: bool = False
    finish_reason: str = "stop"


@dataclass
class Trajectory:
    """One attempt at one task, turn by turn.

    Attributes:
        task_id: the task.
        group: index of its group in the batch; `index`: its index within the group.
        turns: the turns taken.
        first_solved_turn: the 1-based turn of the first solve, `None` if never solved.
        end_reason: why it stopped (a DCP reason: ``solved``, ``easy_group``, ``hopeless_no_progress``,
            ``hopeless_history``, ``max_turns``), `None` while live.
        decisions: the DCP decisions taken after each of its turns.
        best_progress: the best status rank reached (0 format error ... 4 correct).
        reward: the trajectory's shaped reward (set by `assign_rewards`).
    """

    task_id: str
    group: int
    index: int
    turns: list[Turn] = field(default_factory=list)
    first_solved_turn: int | None = None
    end_reason: str | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    best_progress: int = 0
    reward: float = 0.0

    @property
    def solved(self) -> bool:
        return self.first_solved_turn is not None

    @property
    def speedup(self) -> float | None:
        """Speedup of the solving turn's kernel (`None` if unsolved or not timed)."""
        if self.first_solved_turn is None:
            return None
        return self.turns[self.first_solved_turn - 1].result.get("speedup")

    @property
    def tokens(self) -> int:
        return sum(len(t.token_ids) for t in self.turns)

    def to_dict(self, tokens: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not tokens:
            for t in data["turns"]:
                t.pop("token_ids"), t.pop("logprobs"), t.pop("prompt_token_ids")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        data["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**data)


def group_by_task(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories split into their groups, in group order."""
    groups: dict[int, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group, []).append(t)
    return [sorted(groups[g], key=lambda t: t.index) for g in sorted(groups)]


def assign_rewards(groups: Sequence[Sequence[Trajectory]], scheme: str = "leap", gamma: float = 0.4,
                   tie_break: bool = False, normalize_std: bool = True, credit: str = "trajectory") -> None:
    """Set every trajectory's `reward` and every turn's `reward` and `advantage`, in place.

    Schemes:

    * ``"leap"``: the rank reward (`rank_rewards`) of each trajectory. With ``credit="trajectory"`` each of its
      turns gets it, advantages group-relative over the group's trajectories; with ``credit="solving_turn"`` the
      turn that solved gets it and the turns before it 0, advantages group-relative over all turns of the group
      (as Kevin's): a draft that needed a repair earns like any failed draft, the repair earns ``1 - F(k-1)``.
    * ``"kevin"``: each turn's return is Kevin's discounted sum of the trajectory's per-turn scores
      from that turn on (`kevin_returns`); advantages are group-relative over all turns of the group.
    * ``"single_turn"``: the first turn's score; only first turns get an advantage.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown reward scheme {scheme!r}; choose one of {SCHEMES}")
    if credit not in CREDITS:
        raise ValueError(f"unknown credit {credit!r}; choose one of {CREDITS}")
    for group in groups:
        if scheme == "leap":
            rewards = rank_rewards([t.first_solved_turn for t in group], [t.speedup for t in group], tie_break=tie_break) \
                if tie_break else rank_rewards([t.first_solved_turn for t in group])
            if credit == "trajectory":
                advs = group_advantages(rewards, normalize_std=normalize_std)
                for traj, r, a in zip(group, rewards, advs):
                    traj.reward = r
                    for turn in traj.turns:
                        turn.reward, turn.advantage = r, a
            else:
                for traj, r in zip(group, rewards):
                    traj.reward = r
                    for k, turn in enumerate(traj.turns, start=1):
                        turn.reward = r if k == traj.first_solved_turn else 0.0
                _advantages_over_turns(group, normalize_std)
        elif scheme == "kevin":
            for traj in group:
                returns = kevin_returns([t.score for t in traj.turns], gamma)
                traj.reward = returns[0] if returns else 0.0
                for turn, r in zip(traj.turns, returns):
                    turn.reward = r
            _advantages_over_turns(group, normalize_std)
        else:
            rewards = [traj.turns[0].score if traj.turns else 0.0 for traj in group]
            advs = group_advantages(rewards, normalize_std=normalize_std)
            for traj, r, a in zip(group, rewards, advs):
                traj.reward = r
                for i, turn in enumerate(traj.turns):
                    turn.reward, turn.advantage = (r, a) if i == 0 else (0.0, 0.0)


def _advantages_over_turns(group: Sequence[Trajectory], normalize_std: bool) -> None:
    """Every turn's advantage from its `reward`, group-relative over all turns of the group."""
    turns = [turn for traj in group for turn in traj.turns]
    for turn, a in zip(turns, group_advantages([t.reward for t in turns], normalize_std=normalize_std)):
        turn.advantage = a
