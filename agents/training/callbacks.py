"""What a training run does after each step besides training: probes, logs, checkpoints.

A callback has ``on_step_end(trainer, metrics, batch)`` (it may add to `metrics`; probes run before
the logs write them) and ``on_train_end(trainer)``. `LeapTrainer` runs `default_callbacks` plus any given.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from leap_agents.training.config import to_dict
from leap_agents.training.metrics import MetricsWriter
from leap_agents.training.run_record import trainer_step_records
from leap_gym.report import RunRecorder, write_report


class TrainerCallback:
    """Does nothing; subclass and override what you need."""

    def on_step_end(self, trainer: Any, metrics: dict[str, float], batch: Any) -> None:
        pass

    def on_train_end(self, trainer: Any) -> None:
        pass


class ReferenceProbe(TrainerCallback):
    """``metrics["reference_p"]``: the mean over `tasks` of the probability that one first-turn sample at
    `temperature` is exactly the task's reference solution (its ``cuda`` block, comments stripped: the short
    form the warm-ups teach). Measured after the update, off the training clock, in one scoring pass: a lower
    bound on first-turn pass@1 without the sampling noise of a rollout of a few dozen trajectories.
    """

    def __init__(self, policy: Any, tasks: list[Any], histories: list[list[dict[str, str]]], temperature: float):
        from leap_agents.training.mini.data import as_response, reference_cuda

        self.policy = policy
        self.histories = histories
        self.meta = [{"task_id": t.id, "task": t, "turn": 1, "last_result": None} for t in tasks]
        self.references = [as_response(reference_cuda(t)) for t in tasks]
        self.temperature = temperature

    @torch.no_grad()
    def __call__(self) -> float:
        scored = self.policy.score(self.histories, self.references, temperature=self.temperature, meta=self.meta)
        return sum(math.exp(sum(g.logprobs)) for g in scored) / len(scored)

    def on_step_end(self, trainer: Any, metrics: dict[str, float], batch: Any) -> None:
        metrics["reference_p"] = self()


class MetricsLog(TrainerCallback):
    """``metrics.csv`` (and TensorBoard under ``tb/``), and every trajectory in ``trajectories.jsonl``; rows
    after the trainer's step (a resumed run's, or an earlier run's in the same folder) are dropped first."""

    def __init__(self, trainer: Any):
        self.writer = MetricsWriter(trainer.out, tensorboard=trainer.config.run.tensorboard)
        self.writer.truncate(trainer.step)
        if trainer.log_path.exists():
            lines = [ln for ln in trainer.log_path.read_text().splitlines() if ln and json.loads(ln)["step"] <= trainer.step]
            trainer.log_path.write_text("".join(ln + "\n" for ln in lines))

    def on_step_end(self, trainer: Any, metrics: dict[str, float], batch: Any) -> None:
        with trainer.log_path.open("a") as f:
            for traj in batch.trajectories:
                data = traj.to_dict(tokens=trainer.config.run.log_tokens)
                for turn in data["turns"]:
                    turn["prompt"] = turn["prompt"][-1:]  # the observation this turn answered
                f.write(json.dumps({"step": trainer.step, **data}, default=str) + "\n")
        self.writer.write(trainer.step, metrics)

    def on_train_end(self, trainer: Any) -> None:
        self.writer.close()


class RunLog(TrainerCallback):
    """The run log the HTML report reads (``leap-gym report``), and ``report.html`` at the end."""

    def __init__(self, trainer: Any, label: str):
        config = trainer.config
        self.recorder = RunRecorder(trainer.out, label, config.reward.scheme, "leap-train", config.rollout.max_turns,
                                    config.rollout.group_size, to_dict(config), keep_until_step=trainer.step)

    def on_step_end(self, trainer: Any, metrics: dict[str, float], batch: Any) -> None:
        self.recorder.write_step(*trainer_step_records(trainer.step, metrics, batch, trainer.config.rollout.max_turns))

    def on_train_end(self, trainer: Any) -> None:
        if trainer.step:
            write_report([trainer.out], trainer.out / "report.html")


class Checkpoints(TrainerCallback):
    """A checkpoint every ``run.save_every`` steps and at the last step."""

    def on_step_end(self, trainer: Any, metrics: dict[str, float], batch: Any) -> None:
        run = trainer.config.run
        if trainer.step % run.save_every == 0 or trainer.step == run.steps:
            trainer.save_checkpoint()


def arm_label(config: Any) -> str:
    """How a run is named in reports: LEAP, or the reward scheme of a baseline."""
    return "LEAP" if config.reward.scheme == "leap" and config.dcp.enabled else config.reward.scheme


def default_callbacks(trainer: Any) -> list[TrainerCallback]:
    """The probe a config asks for, the logs and the checkpoints, in that order."""
    callbacks: list[TrainerCallback] = []
    if trainer.config.run.probe == "reference":
        callbacks.append(ReferenceProbe(trainer.policy, trainer.tasks, trainer.engine.first_histories(
            [t.id for t in trainer.tasks]), trainer.config.rollout.temperature))
    elif trainer.config.run.probe:
        raise ValueError(f"unknown probe {trainer.config.run.probe!r}; the one there is: 'reference'")
    return callbacks + [MetricsLog(trainer), RunLog(trainer, arm_label(trainer.config)), Checkpoints()]
