"""From a training loop's own structures to the run log a report reads (`leap_gym.report.run_log`).

`mini_step_hook` is LEAP-mini's ``on_step`` callback (``leap_agents.training.mini.rl.train_arm``);
`trainer_step_records` serves ``leap_agents.training.trainer.LeapTrainer``. Both write through one
`leap_gym.report.RunRecorder`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from leap_gym.report.run_log import GroupRecord, RunRecorder, StepRecord, TrajectoryLogRecord, TurnLog, clip_text

from leap_agents.algorithms.rewards import kevin_returns, rank_rewards


def _mini_rewards(group: Sequence[Any], arm: str, gamma: float) -> list[float]:
    """Each trajectory's shaped reward under the arm, by the same pure functions the arm trains on."""
    if arm == "leap":
        return rank_rewards([t.first_solved for t in group])
    if arm == "single_turn":
        return [1.0 if t.turns and t.turns[0].status == "CORRECT" else 0.0 for t in group]
    return [kevin_returns([1.0 if r.status == "CORRECT" else 0.0 for r in t.turns], gamma)[0] if t.turns else 0.0
            for t in group]


def mini_step_hook(recorder: RunRecorder, arm: str, gamma: float = 0.4) -> Callable[[Any, list[list[Any]]], None]:
    """The ``on_step(stats, groups)`` callback of LEAP-mini's `train_arm` that logs each step to `recorder`."""

    def on_step(stats: Any, groups: list[list[Any]]) -> None:
        records, rewards = [], []
        for g, group in enumerate(groups):
            shaped = _mini_rewards(group, arm, gamma)
            rewards += shaped
            records.append(GroupRecord(step=stats.step + 1, group=g, task_id=group[0].task_id, trajectories=[
                TrajectoryLogRecord(index=t.index, first_solved=t.first_solved, reward=r,
                                    advantage=t.turns[0].advantage if t.turns else 0.0, stop_reason=t.stop_reason,
                                    turns=[TurnLog(turn=k, status=rec.status, response=clip_text(rec.response),
                                                   feedback=clip_text(rec.feedback))
                                           for k, rec in enumerate(t.turns, 1)])
                for t, r in zip(group, shaped)]))
        generated = sum(len(rec.response_ids) for group in groups for t in group for rec in t.turns)
        step = StepRecord(step=stats.step + 1, pass_at_1=stats.pass_at_1, pass_by_turn=list(stats.pass_by_turn),
                          trajectories=sum(len(g) for g in groups), turns=stats.responses,
                          turn_counts=list(stats.turn_counts), tokens=generated, trained_tokens=stats.tokens,
                          generation_s=stats.generation_s, evaluation_s=stats.evaluation_s, update_s=stats.update_s,
                          decisions=dict(stats.decisions), reward_mean=sum(rewards) / max(1, len(rewards)))
        recorder.write_step(step, records)

    return on_step


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
