"""The rollout sampler of a training run (``model.engine``): the trainer's own `HFPolicy`, or a vLLM engine serving
the adapter being trained; and the trainer's log-probabilities of what another engine sampled.

With ``model.engine: vllm`` the update's importance ratio is taken against the trainer's log-probabilities of the
sampled tokens, recomputed under the pre-update weights (`use_trainer_logprobs`), never against the sampler's: two
engines' kernels differ in rounding, and a ratio against the sampler's would bias the update silently. The sampler's
log-probabilities are kept beside them: their gap is reported every step (``logprob_gap_mean``, ``logprob_gap_max``)
and a mean gap above ``model.max_logprob_gap`` stops the run (the sampler is not serving the trainer's weights).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from leap_agents.policies.base import Policy
from leap_agents.policies.hf import HFPolicy
from leap_agents.training.config import TrainConfig
from leap_agents.training.logprobs import response_logprobs
from leap_agents.training.trajectory import Turn

ENGINES = ("transformers", "vllm")


class LogprobGapError(RuntimeError):
    """The sampler's log-probabilities of its own samples are further from the trainer's than the stated bound."""


def build_sampler(config: TrainConfig, policy: HFPolicy, output_dir: str | Path) -> Policy:
    """The policy that samples the rollouts of a run: `policy` itself, or a `VLLMPolicy` serving its adapter.

    Args:
        config: the run (``model.engine``, ``model.vllm_max_model_len``, the rollout's sampling settings).
        policy: the trainer's policy (a peft model for ``engine: vllm``).
        output_dir: the run's folder; the adapters served to vLLM are saved under ``sampler_adapters/``.
    """
    m, r = config.model, config.rollout
    if m.engine not in ENGINES:
        raise ValueError(f"model.engine must be one of {ENGINES}, got {m.engine!r}")
    if m.engine == "transformers":
        return policy
    from leap_agents.policies.vllm import VLLMPolicy

    peft = getattr(policy.model, "peft_config", None)
    if not peft:
        raise ValueError("model.engine: vllm serves the LoRA adapter being trained: set model.lora_r > 0 or "
                         "model.adapter (full fine-tuning weight sync is not implemented)")
    rank = max(int(c.r) for c in peft.values())
    sampler = VLLMPolicy.from_pretrained(
        m.path, adapter=None, dtype=m.dtype, max_model_len=m.vllm_max_model_len,
        max_lora_rank=max(16, 1 << (rank - 1).bit_length()), seed=config.run.seed,
        max_prompt_tokens=min(m.max_prompt_tokens, m.vllm_max_model_len - r.max_new_tokens),
        temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
        history_renderer=policy.history_renderer, stop_after_block=policy.stop_after_block,
        adapter_dir=Path(output_dir) / "sampler_adapters", scorer=policy)
    sampler.load_adapter_from(policy)
    return sampler


def sync_sampler(sampler: Policy, policy: HFPolicy) -> None:
    """After an update (or a resume): serve the trainer's current adapter to a separate sampler."""
    if sampler is not policy:
        sampler.load_adapter_from(policy)  # type: ignore[attr-defined]


def close_sampler(sampler: Policy, policy: HFPolicy) -> None:
    """Stop a separate sampler's engine process."""
    if sampler is not policy and hasattr(sampler, "close"):
        sampler.close()


@torch.no_grad()
def use_trainer_logprobs(policy: HFPolicy, samples: Sequence[Turn], temperature: float, micro_batch_size: int,
                         max_gap: float, autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                         log_path: Path | None = None, step: int = 0) -> dict[str, float]:
    """Replace each sample's log-probabilities (the sampler's) by the trainer's under its current weights.

    Args:
        policy: the trainer's policy, before the update.
        samples: the turns the update trains on; their ``logprobs`` are overwritten.
        temperature: the sampling temperature (the trainer's distribution is ``softmax(logits / temperature)``).
        micro_batch_size: samples per forward pass.
        max_gap: the largest mean absolute per-token gap allowed over the sampled (not off-policy) tokens.
        autocast: the precision context the update computes its log-probabilities in.
        log_path: a JSONL file that gets, per sample, both engines' log-probabilities.
        step: the step number written with them.

    Returns:
        ``logprob_sampler_mean``, ``logprob_trainer_mean``, ``logprob_gap_mean``, ``logprob_gap_max`` (NaN without
        sampled tokens).

    Raises:
        LogprobGapError: the mean gap exceeds `max_gap`.
    """
    pad = policy.tokenizer.pad_token_id
    was_training = policy.model.training
    policy.model.eval()
    sampler_lps, trainer_lps = [], []
    try:
        for i in range(0, len(samples), micro_batch_size):
            micro = samples[i:i + micro_batch_size]
            with autocast():
                new = response_logprobs(policy.model, [s.prompt_token_ids for s in micro], [s.token_ids for s in micro],
                                        pad, temperature)
            for s, lp in zip(micro, new):
                sampler_lps.append(list(s.logprobs))
                trainer_lps.append(lp.float().tolist())
                s.logprobs = trainer_lps[-1]
    finally:
        policy.model.train(was_training)
    sampled = [(a, b) for s, a, b in zip(samples, sampler_lps, trainer_lps) if not s.off_policy]
    gaps = [abs(x - y) for a, b in sampled for x, y in zip(a, b)]
    nan = float("nan")
    stats = {"logprob_sampler_mean": _mean([x for a, _ in sampled for x in a]) if gaps else nan,
             "logprob_trainer_mean": _mean([y for _, b in sampled for y in b]) if gaps else nan,
             "logprob_gap_mean": _mean(gaps) if gaps else nan, "logprob_gap_max": max(gaps) if gaps else nan}
    if log_path is not None:
        with log_path.open("a") as f:
            for s, a, b in zip(samples, sampler_lps, trainer_lps):
                f.write(json.dumps({"step": step, "turn": s.turn, "off_policy": s.off_policy, "sampler": a, "trainer": b})
                        + "\n")
    if gaps and stats["logprob_gap_mean"] > max_gap:
        raise LogprobGapError(
            f"the sampler's log-probabilities of its samples differ from the trainer's by {stats['logprob_gap_mean']:.4f} "
            f"nats per token on average (max {stats['logprob_gap_max']:.4f}), above model.max_logprob_gap={max_gap}: "
            "the sampler does not serve the trainer's weights (check the adapter it loads and model.dtype), "
            "or raise the bound knowingly")
    return stats


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)
