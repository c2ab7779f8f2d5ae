"""An estimate of a LEAP training step's time, measured on this machine before training starts.

Two short measurements with the real policy and a real prompt of the run's tasks: the time per decoding
step of a generation batch, and the time of one forward and backward pass over a micro-batch of full-length
samples. They are extrapolated to a step where no turn is pruned and every response runs to
``max_new_tokens`` (an upper bound: DCP and early stops only shorten it); evaluation is not included.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class StepEstimate:
    """Upper bounds, in seconds, of one training step's generation and update."""

    generation_s: float
    update_s: float
    trajectories: int
    turns: int
    decode_step_s: float
    micro_batch_s: float
    prefill_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.generation_s + self.update_s

    def describe(self) -> str:
        return (f"estimated time per step: at most {self.total_s:.0f} s (generation {self.generation_s:.0f} s, update "
                f"{self.update_s:.0f} s; {self.trajectories} trajectories x {self.turns} turns, every response at "
                f"max_new_tokens, no pruning, evaluation not counted; measured {self.prefill_s:.1f} s per prompt prefill, "
                f"{self.decode_step_s * 1000:.0f} ms per decoding step, {self.micro_batch_s:.1f} s per forward+backward "
                "micro-batch)")


def estimate_step(policy: Any, config: Any, task: Any, probe_tokens: int = 8) -> StepEstimate:
    """Measure `policy` on `task`'s first prompt and extrapolate to one step of `config` (a `TrainConfig`)."""
    from leap_agents.training.logprobs import response_logprobs
    from leap_gym.evaluation.feedback import render_prompt

    r = config.rollout
    trajectories = config.run.tasks_per_step * r.group_size
    history = [{"role": "system", "content": "You are an expert CUDA kernel engineer."},
               {"role": "user", "content": render_prompt(task.with_size("cpu"), r.max_turns, "debug")}]
    meta = {"task_id": task.id, "task": task, "turn": 1, "last_result": None}
    batch = min(trajectories, policy.batch_size)
    timings = []
    for tokens in (1, 1 + probe_tokens):  # the difference removes the prompt's prefill from the decoding step
        start = time.perf_counter()
        policy.generate([history] * batch, meta=[meta] * batch, temperature=0, max_new_tokens=tokens)
        timings.append(time.perf_counter() - start)
    prefill = timings[0]
    decode_step = max(timings[1] - timings[0], 0.0) / probe_tokens
    generation = r.max_turns * math.ceil(trajectories / policy.batch_size) * (prefill + r.max_new_tokens * decode_step)

    prompt = policy.encode_prompt(history, meta)
    response = [policy.tokenizer.eos_token_id] * r.max_new_tokens
    micro = max(1, min(config.optim.micro_batch_size, trajectories))
    was_training = policy.model.training
    policy.model.train()
    start = time.perf_counter()
    lps = response_logprobs(policy.model, [prompt] * micro, [response] * micro, policy.tokenizer.pad_token_id)
    torch.cat(lps).mean().backward()
    micro_s = time.perf_counter() - start
    policy.model.zero_grad(set_to_none=True)
    policy.model.train(was_training)
    update = math.ceil(trajectories * r.max_turns / micro) * micro_s * config.optim.epochs
    return StepEstimate(generation, update, trajectories, r.max_turns, decode_step, micro_s, prefill)
