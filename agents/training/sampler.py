"""The rollout sampler of a training run (``model.engine``): the trainer's own `HFPolicy`, or a vLLM engine serving
the adapter being trained; and the trainer's log-probabilities of what another engine sampled.

Whatever samples, the update's importance ratio is taken against the trainer's log-probabilities of the sampled
tokens, recomputed under the pre-update weights (`LeapTrainer.update`), never against the sampler's: two engines'
kernels differ in rounding, and a ratio against the sampler's would bias the update silently. The sampler's
log-probabilities are kept beside them: their gap is reported every step (``logprob_gap_mean``, ``logprob_gap_max``)
and a mean gap above ``optim.max_logprob_gap`` stops the run (`LogprobGapError`: the sampler is not serving the
trainer's weights).
"""

from __future__ import annotations

from pathlib import Path

from leap_agents.policies.base import Policy
from leap_agents.policies.hf import HFPolicy
from leap_agents.training.config import TrainConfig

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
        prompt_format=policy.prompt_format, stop_after_block=policy.stop_after_block,
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
