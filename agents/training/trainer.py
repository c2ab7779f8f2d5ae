"""The LEAP trainer: group rollouts with DCP, rank-based (or Kevin / single-turn) rewards, and a
GRPO-style token-level clipped policy-gradient update, with checkpoints that survive a kill."""

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

from leap_agents.training.config import TrainConfig, to_dict
from leap_agents.algorithms.dcp import DifficultyTracker
from leap_agents.training.logprobs import response_logprobs
from leap_agents.training.metrics import MetricsWriter, summarize
from leap_agents.policies.hf import HFPolicy, apply_lora
from leap_agents.training.rollout import RolloutBatch, RolloutEngine
from leap_agents.training.run_record import trainer_step_records
from leap_agents.training.sampler import build_sampler, sync_sampler, use_trainer_logprobs
from leap_agents.training.trajectory import Turn, assign_rewards
from leap_gym.report import RunRecorder, write_report
from leap_agents.policies.pretrained import is_pretrained_name

log = logging.getLogger(__name__)


def build_policy(config: TrainConfig, cache_dir: Path | None = None) -> HFPolicy:
    """The policy a config names: the locally built tiny model or a local/hub causal LM."""
    m = config.model
    device = m.device if m.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if m.path == "tiny":
        from leap_agents.training.tiny import build_tiny

        model, tokenizer = build_tiny(cache_dir, seed=config.run.seed, vocab_size=m.tiny_vocab,
                                      hidden_size=m.tiny_hidden, layers=m.tiny_layers)
    elif is_pretrained_name(m.path) or m.adapter:
        lora = {"r": m.lora_r, "lora_alpha": m.lora_alpha} if m.lora_r > 0 else None
        return HFPolicy.from_pretrained(m.path, device=device, dtype=m.dtype, lora=lora, adapter=m.adapter or None,
                                        trainable=True, max_prompt_tokens=m.max_prompt_tokens,
                                        batch_size=m.gen_batch_size, temperature=config.rollout.temperature,
                                        top_p=config.rollout.top_p, max_new_tokens=config.rollout.max_new_tokens)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(m.path, dtype=getattr(torch, m.dtype))
        tokenizer = AutoTokenizer.from_pretrained(m.path)
    model.to(device=device, dtype=getattr(torch, m.dtype))
    if m.lora_r > 0:
        model = apply_lora(model, r=m.lora_r, lora_alpha=m.lora_alpha)
    return HFPolicy(model, tokenizer, max_prompt_tokens=m.max_prompt_tokens, batch_size=m.gen_batch_size,
                    temperature=config.rollout.temperature, top_p=config.rollout.top_p,
                    max_new_tokens=config.rollout.max_new_tokens)


def select_tasks(config: TrainConfig) -> list[Any]:
    import leap_gym

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
        raise ValueError("no tasks left after task_ids/levels filtering; loosen them")
    return tasks


class LeapTrainer:
    """Runs `config.run.steps` steps of: sample tasks, roll out groups, shape rewards, update.

    Args:
        config: the run.
        policy: an `HFPolicy` to train; built from `config.model` when omitted.
        tasks: the suite; from `config.tasks`/`task_ids`/`levels` when omitted.
    """

    def __init__(self, config: TrainConfig, policy: HFPolicy | None = None, tasks: list[Any] | None = None):
        self.config = config
        self.out = Path(config.run.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        random.seed(config.run.seed)
        torch.manual_seed(config.run.seed)
        self.policy = policy or build_policy(config, self.out / "init_model" if config.model.path == "tiny" else None)
        self.model = self.policy.model
        self.ref_model = None
        if config.optim.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        self.tracker = DifficultyTracker(config.dcp.ema_alpha)
        self.tasks = tasks if tasks is not None else select_tasks(config)
        self.sampler = build_sampler(config, self.policy, self.out)  # the policy itself, or vLLM (model.engine)
        self.engine = RolloutEngine(self.sampler, self.tasks, backend=config.backend, config=config.rollout,
                                    dcp=config.dcp, tracker=self.tracker, env_kwargs={"reward": config.reward.env_reward})
        self.task_rng = random.Random(config.run.seed)
        self.step = 0
        self.metrics = MetricsWriter(self.out, tensorboard=config.run.tensorboard)
        self.log_path = self.out / "trajectories.jsonl"
        (self.out / "config.json").write_text(json.dumps(to_dict(config), indent=2))
        if config.run.resume:
            self.resume()
        label = "LEAP" if config.reward.scheme == "leap" and config.dcp.enabled else config.reward.scheme
        self.recorder = RunRecorder(self.out, label, config.reward.scheme, "leap-train", config.rollout.max_turns,
                                    config.rollout.group_size, to_dict(config), keep_until_step=self.step)

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

    def save_checkpoint(self) -> Path:
        """Model, optimizer, step, RNG states and difficulty tracker, written atomically."""
        final = self.checkpoint_dir / f"step-{self.step:06d}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save(self.model.state_dict(), tmp / "model.pt")
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "tasks": self.task_rng.getstate(),
               "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        torch.save(rng, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": self.step, "tracker": self.tracker.state_dict()}))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in sorted(p for p in self.checkpoint_dir.glob("step-*") if not p.name.endswith(".tmp"))[:-self.config.run.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def resume(self) -> bool:
        """Load the latest checkpoint (if any) and cut the logs back to it."""
        path = self.latest_checkpoint()
        if path is None:
            return False
        self.model.load_state_dict(torch.load(path / "model.pt", map_location=self.policy.device))
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.policy.device))
        rng = torch.load(path / "rng.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        self.task_rng.setstate(rng["tasks"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        state = json.loads((path / "state.json").read_text())
        self.step = int(state["step"])
        self.tracker.load_state_dict(state["tracker"])
        sync_sampler(self.sampler, self.policy)
        self.metrics.truncate(self.step)
        if self.log_path.exists():
            lines = [ln for ln in self.log_path.read_text().splitlines() if ln and json.loads(ln)["step"] <= self.step]
            self.log_path.write_text("".join(ln + "\n" for ln in lines))
        log.info("resumed from %s at step %d", path, self.step)
        return True

    # -- one step ------------------------------------------------------------------------------------
    def sample_task_ids(self) -> list[str]:
        ids = [t.id for t in self.tasks]
        k = self.config.run.tasks_per_step
        return self.task_rng.sample(ids, k) if k <= len(ids) else [self.task_rng.choice(ids) for _ in range(k)]

    def train_step(self) -> dict[str, float]:
        """One rollout batch and its update; returns the step's metrics."""
        cfg = self.config
        start = time.perf_counter()
        task_ids = self.sample_task_ids()
        batch = self.engine.run(task_ids, seed=cfg.run.seed * 100_003 + self.step, desc=f"step {self.step + 1}")
        assign_rewards(batch.groups, cfg.reward.scheme, cfg.reward.gamma, cfg.reward.tie_break, cfg.reward.normalize_std)
        metrics = summarize(batch, cfg.rollout.max_turns)
        update_start = time.perf_counter()
        metrics.update(self.update(batch))
        sync_sampler(self.sampler, self.policy)
        metrics["time_update"] = time.perf_counter() - update_start
        metrics["time_step"] = time.perf_counter() - start
        metrics["reward_mean"] = sum(t.reward for t in batch.trajectories) / max(len(batch.trajectories), 1)
        self.step += 1
        self._log_trajectories(batch)
        self.recorder.write_step(*trainer_step_records(self.step, metrics, batch, cfg.rollout.max_turns))
        self.metrics.write(self.step, metrics)
        if self.step % cfg.run.save_every == 0 or self.step == cfg.run.steps:
            self.save_checkpoint()
        return metrics

    def _log_trajectories(self, batch: RolloutBatch) -> None:
        with self.log_path.open("a") as f:
            for traj in batch.trajectories:
                data = traj.to_dict(tokens=self.config.run.log_tokens)
                for turn in data["turns"]:
                    turn["prompt"] = turn["prompt"][-1:]  # the observation this turn answered
                f.write(json.dumps({"step": self.step, **data}, default=str) + "\n")

    def _autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.optim.precision
        device = self.policy.device.type
        if precision == "bf16" or (precision == "auto" and device == "cuda" and torch.cuda.is_bf16_supported()):
            return torch.autocast(device_type=device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """The clipped policy-gradient update on every turn of every trajectory (token-level mean)."""
        o = self.config.optim
        samples: list[Turn] = [turn for traj in batch.trajectories for turn in traj.turns
                               if turn.token_ids and len(turn.logprobs) == len(turn.token_ids)
                               and not (o.skip_zero_advantage and turn.advantage == 0.0)]
        stats = {"samples": float(len(samples)), "trained_tokens": float(sum(len(s.token_ids) for s in samples)),
                 "loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "ratio_mean": 1.0, "grad_norm": 0.0, "optimizer_steps": 0.0}
        temperature = self.config.rollout.temperature
        if self.sampler is not self.policy:  # the ratio's old log-probs: the trainer's, not another engine's
            stats.update(use_trainer_logprobs(self.policy, samples, temperature, o.micro_batch_size,
                                              self.config.model.max_logprob_gap, self._autocast,
                                              self.out / "logprob_gap.jsonl", self.step + 1))
        if not samples:
            return stats
        pad = self.policy.tokenizer.pad_token_id
        rng = random.Random(self.step)
        self.model.train()
        totals = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "ratio": 0.0, "tokens": 0.0, "grad_norm": 0.0}
        for _ in range(o.epochs):
            order = samples[:]
            rng.shuffle(order)
            n_mb = max(1, min(o.mini_batches, len(order)))
            for m in range(n_mb):
                mini = order[m::n_mb]
                n_tokens = sum(len(s.token_ids) for s in mini)
                self.optimizer.zero_grad(set_to_none=True)
                for i in range(0, len(mini), o.micro_batch_size):
                    micro = mini[i:i + o.micro_batch_size]
                    prompts, responses = [s.prompt_token_ids for s in micro], [s.token_ids for s in micro]
                    with self._autocast():
                        new = response_logprobs(self.model, prompts, responses, pad, temperature)
                        ref = None
                        if self.ref_model is not None:
                            with torch.no_grad():
                                ref = response_logprobs(self.ref_model, prompts, responses, pad, temperature)
                    loss = torch.zeros((), device=self.policy.device)
                    for j, (s, lp) in enumerate(zip(micro, new)):
                        old = torch.tensor(s.logprobs, device=lp.device)
                        ratio = torch.exp(lp - old)
                        adv = float(s.advantage)
                        clipped = torch.clamp(ratio, 1 - o.clip_eps, 1 + o.clip_eps_high)
                        per_tok = -torch.minimum(ratio * adv, clipped * adv)
                        if ref is not None:
                            d = ref[j] - lp
                            kl = torch.exp(d) - d - 1
                            per_tok = per_tok + o.kl_coef * kl
                            totals["kl"] += float(kl.detach().sum())
                        loss = loss + per_tok.sum() / n_tokens
                        totals["clipped"] += float(((ratio - clipped).abs() > 1e-8).float().sum())
                        totals["ratio"] += float(ratio.detach().sum())
                        totals["tokens"] += len(s.token_ids)
                    loss.backward()
                    totals["loss"] += float(loss.detach())
                params = [p for p in self.model.parameters() if p.requires_grad]
                norm = torch.nn.utils.clip_grad_norm_(params, o.max_grad_norm if o.max_grad_norm > 0 else math.inf)
                totals["grad_norm"] += float(norm)
                self.optimizer.step()
                stats["optimizer_steps"] += 1
        self.model.eval()
        tok = max(totals["tokens"], 1.0)
        stats.update(loss=totals["loss"] / max(stats["optimizer_steps"], 1), clip_frac=totals["clipped"] / tok,
                     kl=totals["kl"] / tok, ratio_mean=totals["ratio"] / tok,
                     grad_norm=totals["grad_norm"] / max(stats["optimizer_steps"], 1))
        return stats

    def train(self, steps: int | None = None) -> list[dict[str, float]]:
        """Train until `steps` (default `config.run.steps`) steps are done in total; returns each new step's metrics."""
        target = steps if steps is not None else self.config.run.steps
        history = []
        while self.step < target:
            metrics = self.train_step()
            history.append(metrics)
            log.info("step %d: pass@1 %.3f solve %.3f responses %d tokens %d loss %.4f (gen %.1fs eval %.1fs upd %.1fs)",
                     self.step, metrics["pass_at_1"], metrics["solve_rate"], metrics["responses"], metrics["tokens"],
                     metrics["loss"], metrics["time_generation"], metrics["time_evaluation"], metrics["time_update"])
        self.metrics.close()
        if self.step:
            write_report([self.out], self.out / "report.html")
        return history
