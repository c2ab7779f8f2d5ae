"""The LEAP trainer, the one every arm, model and benchmark runs through: group rollouts with DCP,
rank-based (or Kevin / single-turn) rewards, and a clipped policy-gradient update with a KL penalty to the
start policy, scored on the distribution the samples were drawn from; checkpoints survive a kill.

An arm (`leap_agents.training.config.arm_config`) differs from another only in its reward scheme, DCP and
turn budget; a model (LEAP-mini's 1.5M policy, SmolLM2 with LoRA, a user's model on GPUs) only in
`config.model` and the presets' settings.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from leap_agents.algorithms.dcp import DifficultyTracker
from leap_agents.algorithms.policy_loss import clipped_policy_loss
from leap_agents.policies.hf import HFPolicy, apply_lora
from leap_agents.policies.pretrained import is_pretrained_name
from leap_agents.training.callbacks import TrainerCallback, default_callbacks
from leap_agents.training.config import TrainConfig, to_dict
from leap_agents.training.logprobs import response_logprobs
from leap_agents.training.metrics import summarize
from leap_agents.training.rollout import RolloutBatch, RolloutEngine
from leap_agents.training.sampler import LogprobGapError, build_sampler, sync_sampler
from leap_agents.training.trajectory import Turn, assign_rewards

log = logging.getLogger(__name__)

#: ``model.path`` of LEAP-mini's warmed-up policy (`leap_agents.training.mini.warmup`).
LEAP_MINI = "leap-mini"


def build_policy(config: TrainConfig, cache_dir: Path | None = None) -> HFPolicy:
    """The policy a config names: the locally built tiny model, LEAP-mini's warm-up, or a local/hub/named LM."""
    m, r = config.model, config.rollout
    device = m.device if m.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    sampling = {"temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens}
    if m.path == LEAP_MINI:
        from leap_agents.training.mini.warmup import warmup_policy

        policy, _, _ = warmup_policy(backend=config.backend)
        policy.model.to(device)
        policy.batch_size = m.gen_batch_size
        policy.defaults.update(sampling)
        return policy
    if m.path == "tiny":
        from leap_agents.training.tiny import build_tiny

        model, tokenizer = build_tiny(cache_dir, seed=config.run.seed, vocab_size=m.tiny_vocab,
                                      hidden_size=m.tiny_hidden, layers=m.tiny_layers)
    elif is_pretrained_name(m.path) or m.adapter:
        lora = {"r": m.lora_r, "lora_alpha": m.lora_alpha} if m.lora_r > 0 else None
        return HFPolicy.from_pretrained(m.path, device=device, dtype=m.dtype, lora=lora, adapter=m.adapter or None,
                                        trainable=True, max_prompt_tokens=m.max_prompt_tokens,
                                        batch_size=m.gen_batch_size, merged_sampling=m.merged_sampling, **sampling)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(m.path, dtype=getattr(torch, m.dtype))
        tokenizer = AutoTokenizer.from_pretrained(m.path)
    model.to(device=device, dtype=getattr(torch, m.dtype))
    if m.lora_r > 0:
        model = apply_lora(model, r=m.lora_r, lora_alpha=m.lora_alpha)
    return HFPolicy(model, tokenizer, max_prompt_tokens=m.max_prompt_tokens, batch_size=m.gen_batch_size,
                    merged_sampling=m.merged_sampling, **sampling)


def select_tasks(config: TrainConfig, split: str | None = None) -> list[Any]:
    """The config's tasks (`split` overrides ``config.split``: ``"train"`` or ``"held_out"``)."""
    import leap_gym

    split = config.split if split is None else split
    if split:
        from leap_agents.training.mini.data import make_split, mini_tasks

        if split not in ("train", "held_out"):
            raise ValueError(f"split is 'train' or 'held_out' (LEAP-mini's split), got {split!r}")
        tasks = mini_tasks()
        chosen = set(getattr(make_split(tasks), split))
        tasks = [t for t in tasks if t.id in chosen]
    else:
        tasks = leap_gym.load_tasks(config.tasks)
    if config.task_ids:
        by_id = {t.id: t for t in tasks}
        missing = [i for i in config.task_ids if i not in by_id]
        if missing:
            raise KeyError(f"unknown task ids {missing}; `leap-gym tasks` lists them")
        tasks = [by_id[i] for i in config.task_ids]
    if config.levels:
        tasks = [t for t in tasks if t.level in config.levels]
    if not tasks:
        raise ValueError("no tasks left after split/task_ids/levels filtering; loosen them")
    return tasks


class TaskStream:
    """The task ids of each step: seeded shuffles of the suite, one after another, so every task comes up
    equally often."""

    def __init__(self, task_ids: list[str], per_step: int, seed: int):
        self.task_ids, self.per_step = list(task_ids), per_step
        self.rng = random.Random(seed)
        self.pool: list[str] = []

    def next(self) -> list[str]:
        while len(self.pool) < self.per_step:
            more = list(self.task_ids)
            self.rng.shuffle(more)
            self.pool += more
        step, self.pool = self.pool[:self.per_step], self.pool[self.per_step:]
        return step

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "pool": list(self.pool)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.pool = list(state["pool"])


class LeapTrainer:
    """Runs `config.run.steps` steps of: take tasks, roll out groups, shape rewards, update; then the callbacks.

    Args:
        config: the run.
        policy: an `HFPolicy` to train; built from `config.model` when omitted.
        tasks: the suite; from `config.tasks`/`split`/`task_ids`/`levels` when omitted.
        callbacks: more `TrainerCallback` s, run after the default ones (probe, logs, checkpoints).
    """

    def __init__(self, config: TrainConfig, policy: HFPolicy | None = None, tasks: list[Any] | None = None,
                 callbacks: list[TrainerCallback] | None = None):
        self.config = config
        self.out = Path(config.run.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        random.seed(config.run.seed)
        torch.manual_seed(config.run.seed)
        if config.run.threads > 0:
            torch.set_num_threads(config.run.threads)
        self.policy = policy or build_policy(config, self.out / "init_model" if config.model.path == "tiny" else None)
        self.model = self.policy.model
        self.ref_model = None
        if config.optim.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        o = config.optim
        self.optimizer = torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay, betas=(0.9, o.beta2), eps=o.eps)
        self.tracker = DifficultyTracker(config.dcp.ema_alpha)
        self.tasks = tasks if tasks is not None else select_tasks(config)
        self.sampler = build_sampler(config, self.policy, self.out)  # the policy itself, or vLLM (model.engine)
        self.engine = RolloutEngine(self.sampler, self.tasks, backend=config.backend, config=config.rollout,
                                    dcp=config.dcp, tracker=self.tracker, env_kwargs={"reward": config.reward.env_reward})
        self.stream = TaskStream([t.id for t in self.tasks], config.run.tasks_per_step, config.run.seed)
        self.step = 0
        self.log_path = self.out / "trajectories.jsonl"
        (self.out / "config.json").write_text(json.dumps(to_dict(config), indent=2))
        if config.run.resume:
            self.resume()
        self.callbacks = default_callbacks(self) + list(callbacks or [])

    # -- checkpoints -------------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path:
        return self.out / "checkpoints"

    def latest_checkpoint(self) -> Path | None:
        if not self.checkpoint_dir.exists():
            return None
        done = sorted(p for p in self.checkpoint_dir.glob("step-*") if p.is_dir() and (p / "state.json").exists()
                      and not p.name.endswith(".tmp"))
        return done[-1] if done else None

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The parameters that train: the adapter of a LoRA model, every weight of a fully trained one."""
        return {n: p.detach().cpu() for n, p in self.model.named_parameters() if p.requires_grad}

    def save_checkpoint(self) -> Path:
        """Trainable weights (a LoRA run: its adapter, also as a peft folder ``adapter/``), optimizer, step,
        RNG states, task stream and difficulty tracker, written atomically."""
        final = self.checkpoint_dir / f"step-{self.step:06d}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save(self.trainable_state(), tmp / "trainable.pt")
        if hasattr(self.model, "peft_config"):
            self.model.save_pretrained(str(tmp / "adapter"))
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "tasks": self.stream.state_dict(),
               "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        torch.save(rng, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": self.step, "tracker": self.tracker.state_dict()}))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        kept = sorted(p for p in self.checkpoint_dir.glob("step-*") if not p.name.endswith(".tmp"))
        for old in kept[:-self.config.run.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def resume(self) -> bool:
        """Load the latest checkpoint, if any (the logs are cut back to its step by `MetricsLog`)."""
        path = self.latest_checkpoint()
        if path is None:
            return False
        state = torch.load(path / "trainable.pt", map_location=self.policy.device)
        expected = set(self.trainable_state())
        if set(state) != expected:
            raise RuntimeError(f"{path} holds other trainable weights than this model ({len(set(state) ^ expected)} "
                               "names differ): was it written by another config? Use another run.output_dir")
        self.model.load_state_dict(state, strict=False)
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.policy.device))
        rng = torch.load(path / "rng.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        self.stream.load_state_dict(rng["tasks"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        saved = json.loads((path / "state.json").read_text())
        self.step = int(saved["step"])
        self.tracker.load_state_dict(saved["tracker"])
        sync_sampler(self.sampler, self.policy)
        log.info("resumed from %s at step %d", path, self.step)
        return True

    # -- one step ------------------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        """One rollout batch and its update, then the callbacks; returns the step's metrics."""
        cfg = self.config
        task_ids = self.stream.next()
        batch = self.engine.run(task_ids, seed=cfg.run.seed * 100_003 + self.step, desc=f"step {self.step + 1}")
        assign_rewards(batch.groups, cfg.reward.scheme, cfg.reward.gamma, cfg.reward.tie_break, cfg.reward.normalize_std,
                       cfg.reward.credit)
        metrics = summarize(batch, cfg.rollout.max_turns)
        start = time.perf_counter()
        metrics.update(self.update(batch))
        sync_sampler(self.sampler, self.policy)
        metrics["time_update"] = time.perf_counter() - start
        metrics["wall_s"] = metrics["time_generation"] + metrics["time_evaluation"] + metrics["time_update"]
        metrics["memo_hits"] = float(batch.memo_hits)
        metrics["reward_mean"] = sum(t.reward for t in batch.trajectories) / max(len(batch.trajectories), 1)
        self.step += 1
        for callback in self.callbacks:
            callback.on_step_end(self, metrics, batch)
        return metrics

    def _autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.optim.precision
        device = self.policy.device.type
        if precision == "bf16" or (precision == "auto" and device == "cuda" and torch.cuda.is_bf16_supported()):
            return torch.autocast(device_type=device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def _score(self, model: torch.nn.Module, samples: list[Turn]) -> list[torch.Tensor]:
        """Log-probabilities of each sample's tokens under `model` at the sampling temperature."""
        out: list[torch.Tensor] = []
        step = self.config.optim.micro_batch_size
        for i in range(0, len(samples), step):
            micro = samples[i:i + step]
            with self._autocast():
                out += [lp.detach() for lp in response_logprobs(
                    model, [s.prompt_token_ids for s in micro], [s.token_ids for s in micro],
                    self.policy.tokenizer.pad_token_id, self.config.rollout.temperature)]
        return out

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """`optim.epochs` passes of the clipped policy-gradient update over every turn of every trajectory.

        The ratio's denominator is the trainer's own log-probability of each sampled token before the first
        optimizer step, at the sampling temperature: the distribution the samples came from, whatever
        generated them (this trainer's `HFPolicy` or a vLLM engine, ``model.engine``). The sampler's log-probabilities
        of its own samples are set beside it (``logprob_gap_mean``, ``logprob_gap_max``); a mean gap above
        `optim.max_logprob_gap` per token raises `LogprobGapError` (the samples came from another distribution),
        before any optimizer step. With one mini-batch the denominator is the first epoch's own forward pass,
        detached: the optimizer steps only after it, so it runs at the sampling weights, and no separate scoring pass
        runs.
        """
        o = self.config.optim
        samples: list[Turn] = [turn for traj in batch.trajectories for turn in traj.turns
                               if turn.token_ids and not (o.skip_zero_advantage and abs(turn.advantage) <= 1e-8)]
        first_seen: dict[tuple[int, ...], int] = {}  # samples of one prompt side by side: one micro-batch runs it once
        samples.sort(key=lambda s: first_seen.setdefault(tuple(s.prompt_token_ids), len(first_seen)))
        stats = {"samples": float(len(samples)), "trained_tokens": float(sum(len(s.token_ids) for s in samples)),
                 "loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "ratio_mean": 1.0, "grad_norm": 0.0,
                 "optimizer_steps": 0.0, "logprob_gap_mean": 0.0, "logprob_gap_max": 0.0}
        if not samples:
            return stats
        self.model.eval()  # old and new log-probabilities of one distribution: no dropout on either side
        one_pass = self._one_pass(len(samples))
        old: list[torch.Tensor | None] = [None] * len(samples) if one_pass else self._score(self.model, samples)
        ref = self._score(self.ref_model, samples) if self.ref_model is not None else None
        if not one_pass:
            self._check_sampler_gap(samples, old, stats)
        rng = random.Random(self.step)
        totals = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "ratio": 0.0, "tokens": 0.0, "grad_norm": 0.0}
        order = list(range(len(samples)))
        for epoch in range(o.epochs):
            rng.shuffle(order)
            n_mb = max(1, min(o.mini_batches, len(order)))
            for m in range(n_mb):
                mini = sorted(order[m::n_mb])
                norm = sum(len(samples[i].token_ids) for i in mini) if o.loss_agg == "token" else len(mini)
                self.optimizer.zero_grad(set_to_none=True)
                for start in range(0, len(mini), o.micro_batch_size):
                    micro = mini[start:start + o.micro_batch_size]
                    with self._autocast():
                        new = response_logprobs(self.model, [samples[i].prompt_token_ids for i in micro],
                                                [samples[i].token_ids for i in micro], self.policy.tokenizer.pad_token_id,
                                                self.config.rollout.temperature)
                    loss = torch.zeros((), device=self.policy.device)
                    for i, lp in zip(micro, new):
                        if old[i] is None:
                            old[i] = lp.detach()
                        per_token, st = clipped_policy_loss(lp, old[i].to(lp.device), float(samples[i].advantage),
                                                            o.clip_eps, o.clip_eps_high,
                                                            ref[i].to(lp.device) if ref is not None else None, o.kl_coef)
                        loss = loss + (per_token.sum() if o.loss_agg == "token" else per_token.mean()) / norm
                        for key in ("clipped", "kl", "ratio"):
                            totals[key] += st[key]
                        totals["tokens"] += len(lp)
                    loss.backward()
                    totals["loss"] += float(loss.detach())
                if one_pass and epoch == 0:
                    self._check_sampler_gap(samples, old, stats)
                params = [p for p in self.model.parameters() if p.requires_grad]
                norm_value = torch.nn.utils.clip_grad_norm_(params, o.max_grad_norm if o.max_grad_norm > 0 else math.inf)
                totals["grad_norm"] += float(norm_value)
                self.optimizer.step()
                stats["optimizer_steps"] += 1
        tok = max(totals["tokens"], 1.0)
        steps = max(stats["optimizer_steps"], 1)
        stats.update(loss=totals["loss"] / steps, clip_frac=totals["clipped"] / tok, kl=totals["kl"] / tok,
                     ratio_mean=totals["ratio"] / tok, grad_norm=totals["grad_norm"] / steps)
        return stats

    def _one_pass(self, n_samples: int) -> bool:
        """One mini-batch: the first epoch's forward pass runs at the sampling weights (its optimizer step follows it)."""
        return min(self.config.optim.mini_batches, n_samples) == 1

    def _check_sampler_gap(self, samples: list[Turn], old: list[torch.Tensor], stats: dict[str, float]) -> None:
        """The sampler's log-probabilities of its samples beside the trainer's (`old`) into `stats`; a mean gap above
        `optim.max_logprob_gap` raises `LogprobGapError`."""
        bound = self.config.optim.max_logprob_gap
        sampled = [(torch.tensor(s.logprobs), lp.float().cpu()) for s, lp in zip(samples, old)
                   if not s.off_policy and len(s.logprobs) == len(s.token_ids)]
        if not sampled:
            return
        gaps = torch.cat([(a - b).abs() for a, b in sampled])
        stats.update(logprob_gap_mean=float(gaps.mean()), logprob_gap_max=float(gaps.max()),
                     logprob_sampler_mean=float(torch.cat([a for a, _ in sampled]).mean()),
                     logprob_trainer_mean=float(torch.cat([b for _, b in sampled]).mean()))
        if stats["logprob_gap_mean"] > bound:
            raise LogprobGapError(
                f"the sampler's log-probabilities of its samples differ from the trainer's by "
                f"{stats['logprob_gap_mean']:.4f} nats per token on average (max {stats['logprob_gap_max']:.4f}), above "
                f"optim.max_logprob_gap = {bound}: the samples came from another distribution than the "
                "one being trained (a sampler not serving the trainer's weights, another temperature, top-p/top-k "
                "truncation); check the adapter it loads and model.dtype, or raise the bound knowingly")

    def judge(self, tasks: list[Any], samples: int, seed: int = 12345) -> dict[str, Any]:
        """`evaluate_policy` of the current policy on `tasks` with this run's backend, turns and temperature."""
        from leap_agents.training.evaluate import evaluate_policy

        r = self.config.rollout
        return evaluate_policy(self.policy, tasks, self.config.backend, samples, r.max_turns, r.temperature, seed,
                               r.max_new_tokens, r.eval_workers, {"reward": self.config.reward.env_reward})

    def train(self, steps: int | None = None) -> list[dict[str, float]]:
        """Train until `steps` (default `config.run.steps`) steps are done in total; returns each new step's metrics."""
        target = steps if steps is not None else self.config.run.steps
        history = []
        while self.step < target:
            metrics = self.train_step()
            history.append(metrics)
            log.info("step %d: pass@1 %.3f by turn %s, responses %d (DCP %s), reward %.3f, loss %.4f, kl %.4f%s "
                     "(gen %.1fs eval %.1fs upd %.1fs, %d memo hits)", self.step, metrics["pass_at_1"],
                     [round(metrics[f"pass_turn_{j}"], 2) for j in range(1, self.config.rollout.max_turns + 1)],
                     metrics["responses"], {k[5:]: int(v) for k, v in metrics.items() if k.startswith("stop_") and v},
                     metrics["reward_mean"], metrics["loss"], metrics["kl"],
                     f", reference p {metrics['reference_p']:.3f}" if "reference_p" in metrics else "",
                     metrics["time_generation"], metrics["time_evaluation"], metrics["time_update"], metrics["memo_hits"])
        for callback in self.callbacks:
            callback.on_train_end(self)
        return history
