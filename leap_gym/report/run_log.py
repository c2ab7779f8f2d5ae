"""The run folder a report reads: ``run.json``, ``steps.jsonl`` (one line per RL step) and
``rollouts.jsonl`` (one line per group of G trajectories), written by `RunRecorder`.

The trainer (``leap_agents.training.trainer``) turns its structures into a `StepRecord` and `GroupRecord` s
(``leap_agents.training.run_record``) and hands them to a `RunRecorder`. Nothing here needs torch: ``leap-gym report`` reads a run
folder on a machine with only the environment package installed.

A step record::

    {"step": 1, "pass_at_1": 0.25, "pass_by_turn": [0.25, 0.38, 0.41, 0.44], "trajectories": 32,
     "turns": 71, "turn_counts": [32, 20, 11, 8], "tokens": 9120, "trained_tokens": 6300,
     "generation_s": 12.1, "evaluation_s": 30.2, "update_s": 4.0, "decisions": {"solved": 14, ...},
     "reward_mean": 0.31}

A group record::

    {"step": 1, "group": 0, "task_id": "level1/relu", "trajectories": [
        {"index": 0, "first_solved": 2, "reward": 0.75, "advantage": 0.9, "stop_reason": "solved",
         "turns": [{"turn": 1, "status": "COMPILE_ERROR", "response": "...", "feedback": "..."}, ...]}, ...]}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leap_gym.integrations.trajectory_log import TrajectoryLog, read_trajectory_log, to_jsonable

RUN_FILE = "run.json"
STEPS_FILE = "steps.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
FORMAT = "leap-run/1"
#: A response or feedback longer than this is cut (with a note) in the log; kernels are far shorter.
MAX_TEXT_CHARS = 6000


@dataclass
class StepRecord:
    """What one RL step measured, over all its trajectories (before any sampling for display).

    Attributes:
        step: 1-based step number.
        pass_at_1: fraction of trajectories solved at turn 1.
        pass_by_turn: fraction solved within 1, 2, ... turns.
        trajectories: trajectories in the step (tasks x G).
        turns: responses generated (and judged).
        turn_counts: trajectories that took turn 1, 2, ...
        tokens: response tokens generated; `trained_tokens`: tokens the update trained on.
        generation_s, evaluation_s, update_s: the step's wall-clock split.
        decisions: trajectories stopped, by DCP reason (``solved``, ``easy_group``, ...).
        reward_mean: mean shaped reward of the step's trajectories.
    """

    step: int
    pass_at_1: float
    pass_by_turn: list[float]
    trajectories: int
    turns: int
    turn_counts: list[int]
    tokens: int
    generation_s: float
    evaluation_s: float
    update_s: float
    decisions: dict[str, int]
    reward_mean: float
    trained_tokens: int = 0


@dataclass
class TurnLog:
    """One response of a trajectory: its status, the text, and the feedback it got (read at the next turn)."""

    turn: int
    status: str
    response: str
    feedback: str


@dataclass
class TrajectoryLogRecord:
    """One trajectory of a group: turns, first solved turn, shaped reward, advantage and why it stopped."""

    index: int
    turns: list[TurnLog]
    first_solved: int | None
    reward: float
    advantage: float
    stop_reason: str


@dataclass
class GroupRecord:
    """The G trajectories one task got in one step."""

    step: int
    group: int
    task_id: str
    trajectories: list[TrajectoryLogRecord] = field(default_factory=list)


def clip_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [{len(text) - limit} more characters not logged]"


class RunRecorder:
    """Writes a run folder step by step (each line flushed, so a killed run keeps its finished steps).

    Args:
        run_dir: the folder (created).
        label: the run's name in a report (``"LEAP"``, ``"multi-turn (Kevin)"``...).
        arm: ``leap``, ``multi_turn``, ``single_turn`` (or a trainer's reward scheme).
        source: what wrote it (``leap-mini``, ``leap-train``, a benchmark).
        max_turns: the turn budget; `group_size`: G.
        config: the run's settings, shown in the report.
        keep_until_step: steps already logged up to this one are kept (a resumed run); the rest of
            an existing log is dropped. 0 starts the logs afresh.
    """

    def __init__(self, run_dir: str | os.PathLike[str], label: str, arm: str, source: str, max_turns: int,
                 group_size: int, config: dict[str, Any] | None = None, keep_until_step: int = 0):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "label": label, "arm": arm, "source": source, "max_turns": max_turns,
                "group_size": group_size, "config": to_jsonable(config or {})}
        (self.dir / RUN_FILE).write_text(json.dumps(meta, indent=1))
        for name in (STEPS_FILE, ROLLOUTS_FILE):
            kept = [r for r in read_trajectory_log(self.dir / name) if r.get("step", 0) <= keep_until_step]
            (self.dir / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
        self._steps = TrajectoryLog(self.dir / STEPS_FILE)
        self._rollouts = TrajectoryLog(self.dir / ROLLOUTS_FILE)

    def write_step(self, step: StepRecord, groups: list[GroupRecord]) -> None:
        """Append one step's metrics and its groups."""
        for group in groups:
            self._rollouts.write(group)
        self._steps.write(step)

    def close(self) -> None:
        self._steps.close()
        self._rollouts.close()

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class RunData:
    """A run folder as read back: its metadata, step records and group records (plain dicts)."""

    path: Path
    meta: dict[str, Any]
    steps: list[dict[str, Any]]
    groups: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return str(self.meta.get("label") or self.path.name)


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
    """Read a run folder written by `RunRecorder`.

    Raises:
        FileNotFoundError: the folder, or its ``run.json`` / ``steps.jsonl``, is missing.
        ValueError: the folder has no step logged yet.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder; pass a run folder written by leap-train "
                                "(it holds run.json, steps.jsonl and rollouts.jsonl)")
    for name in (RUN_FILE, STEPS_FILE):
        if not (path / name).exists():
            raise FileNotFoundError(f"{path / name} is missing: {path} is not a run folder written by leap-train "
                                    "(a run started before run logs existed has only its own summary files)")
    meta = json.loads((path / RUN_FILE).read_text())
    steps = sorted(read_trajectory_log(path / STEPS_FILE), key=lambda r: r["step"])
    if not steps:
        raise ValueError(f"{path / STEPS_FILE} holds no step yet; a report needs at least one finished step")
    groups = read_trajectory_log(path / ROLLOUTS_FILE)
    return RunData(path=path, meta=meta, steps=steps, groups=groups)

