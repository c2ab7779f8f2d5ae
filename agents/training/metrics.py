"""Per-step metrics of rollouts (pass@1, pass@k, pass by turn, speedup, cost) and their writers
(CSV always, TensorBoard when installed)."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

from leap_agents.algorithms.dcp import REASONS
from leap_agents.training.rollout import RolloutBatch

log = logging.getLogger(__name__)


def summarize(batch: RolloutBatch, max_turns: int) -> dict[str, float]:
    """Metrics of one rollout batch.

    * ``pass_at_1``: fraction of trajectories solved at their first turn (one sample, one turn);
    * ``pass_at_k``: fraction of groups with a turn-1 solve among their G samples (k = G);
    * ``pass_turn_<j>``: fraction of trajectories solved within j turns (pass by turn);
    * ``solve_rate``: fraction solved at any turn; ``group_solve_rate``: groups with any solve;
    * ``mean_speedup``: over solved trajectories with a timed kernel (NaN when none);
    * ``responses``, ``evaluations``, ``tokens``, ``turns_per_traj``; ``stop_<reason>`` counts;
    * ``time_generation``, ``time_evaluation`` (seconds).
    """
    trajs = batch.trajectories
    groups = batch.groups
    n = max(len(trajs), 1)
    out: dict[str, float] = {
        "trajectories": float(len(trajs)),
        "groups": float(len(groups)),
        "pass_at_1": sum(t.first_solved_turn == 1 for t in trajs) / n,
        "pass_at_k": sum(any(t.first_solved_turn == 1 for t in g) for g in groups) / max(len(groups), 1),
        "solve_rate": sum(t.solved for t in trajs) / n,
        "group_solve_rate": sum(any(t.solved for t in g) for g in groups) / max(len(groups), 1),
    }
    for j in range(1, max_turns + 1):
        out[f"pass_turn_{j}"] = sum(t.first_solved_turn is not None and t.first_solved_turn <= j for t in trajs) / n
    speedups = [t.speedup for t in trajs if t.speedup is not None]
    out["mean_speedup"] = sum(speedups) / len(speedups) if speedups else math.nan
    out["responses"] = float(batch.responses)
    out["evaluations"] = float(batch.evaluations)
    out["tokens"] = float(batch.tokens)
    out["turns_per_traj"] = batch.responses / n
    for reason in REASONS:
        out[f"stop_{reason}"] = float(sum(t.end_reason == reason for t in trajs))
    out["time_generation"] = batch.generation_s
    out["time_evaluation"] = batch.evaluation_s
    return out


class MetricsWriter:
    """Appends one row per step to ``metrics.csv`` and, if available, TensorBoard scalars under ``tb/``."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = True):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.dir / "metrics.csv"
        self._fields: list[str] | None = None
        if self.csv_path.exists():
            with self.csv_path.open() as f:
                self._fields = next(csv.reader(f), None)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.dir / "tb"))
            except Exception as exc:  # pragma: no cover - optional
                log.info("TensorBoard disabled (%s); pip install tensorboard to enable it", exc)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **metrics}
        if self._fields is None:
            self._fields = list(row)
            with self.csv_path.open("w", newline="") as f:
                csv.DictWriter(f, self._fields).writeheader()
        with self.csv_path.open("a", newline="") as f:
            csv.DictWriter(f, self._fields, extrasaction="ignore").writerow(row)
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def truncate(self, last_step: int) -> None:
        """Drop rows after `last_step` (a resumed run rewrites them)."""
        if not self.csv_path.exists():
            return
        with self.csv_path.open() as f:
            rows = list(csv.reader(f))
        if not rows:
            return
        kept = [r for r in rows[1:] if r and int(float(r[0])) <= last_step]
        if not kept:  # nothing to continue: the next row writes a header of its own keys
            self.csv_path.unlink()
            self._fields = None
            return
        with self.csv_path.open("w", newline="") as f:
            csv.writer(f).writerows([rows[0]] + kept)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
