"""From the trainer's structures to the run log a report reads (`leap_gym.report.run_log`):
`trainer_step_records`, written through a `leap_gym.report.RunRecorder` by the trainer's `RunLog` callback."""

from __future__ import annotations

from collections import Counter
from typing import Any

from leap_gym.report.run_log import GroupRecord, StepRecord, TrajectoryLogRecord, TurnLog, clip_text


def _trainer_feedback(traj: Any, k: int) -> str:
    """The observation the policy read after turn `k` (0-based): the next turn's last message, else the result."""
    if k + 1 < len(traj.turns) and traj.turns[k + 1].prompt:
        return str(traj.turns[k + 1].prompt[-1].get("content", ""))
    result = traj.turns[k].result
    return "\n".join([f"{traj.turns[k].status}: {result.get('message', '')}".strip(), *result.get("errors", [])[:5]])


def trainer_step_records(step: int, metrics: dict[str, float], batch: Any, max_turns: int
                         ) -> tuple[StepRecord, list[GroupRecord]]:
    """A `LeapTrainer` step (its `summarize` metrics and rewarded `RolloutBatch`) as run-log records."""
    trajs = batch.trajectories
    records = [GroupRecord(step=step, group=group[0].group, task_id=group[0].task_id, trajectories=[
        TrajectoryLogRecord(index=t.index, first_solved=t.first_solved_turn, reward=t.reward,
                            advantage=t.turns[0].advantage if t.turns else 0.0, stop_reason=t.end_reason or "",
                            turns=[TurnLog(turn=turn.turn, status=turn.status, response=clip_text(turn.response),
                                           feedback=clip_text(_trainer_feedback(t, k)))
                                   for k, turn in enumerate(t.turns)])
        for t in group]) for group in batch.groups]
    record = StepRecord(
        step=step, pass_at_1=metrics["pass_at_1"],
        pass_by_turn=[metrics[f"pass_turn_{j}"] for j in range(1, max_turns + 1)], trajectories=len(trajs),
        turns=batch.responses, turn_counts=[sum(len(t.turns) >= j for t in trajs) for j in range(1, max_turns + 1)],
        tokens=batch.tokens, trained_tokens=int(metrics.get("trained_tokens", 0)),
        generation_s=metrics["time_generation"], evaluation_s=metrics["time_evaluation"],
        update_s=metrics["time_update"], decisions=dict(Counter(t.end_reason for t in trajs if t.end_reason)),
        reward_mean=metrics.get("reward_mean", 0.0))
    return record, records
