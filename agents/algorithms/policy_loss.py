"""The policy-gradient objective of every arm's update: a clipped importance ratio and a KL penalty to the
start policy, per token of one sample. A pure function of tensors."""

from __future__ import annotations

import torch


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantage: float, clip_low: float = 0.2,
                        clip_high: float = 0.2, ref_logp: torch.Tensor | None = None,
                        kl_coef: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token loss ``-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) + kl_coef k3`` of one sample.

    ``r = exp(logp - old_logp)`` is the ratio to the distribution the sample was drawn from, and
    ``k3 = exp(ref - logp) - (ref - logp) - 1`` (non-negative, zero where the policy equals the reference, an
    unbiased estimate of KL(policy || reference) under the policy's samples). Where the clipped term binds,
    the token's gradient through the ratio is zero: the policy stops moving beyond the trust region.

    Args:
        logp: ``(tokens,)`` log-probabilities of the sampled tokens under the policy being trained (with grad).
        old_logp: the same under the sampling distribution (no grad).
        advantage: the sample's advantage.
        ref_logp: the same under the frozen reference policy; `None` (or ``kl_coef == 0``): no penalty.

    Returns:
        The per-token loss and sums over the sample's tokens: ``clipped`` (tokens whose clipped term binds),
        ``kl`` (k3) and ``ratio``.
    """
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = -torch.minimum(ratio * advantage, clipped * advantage)
    kl = torch.zeros_like(logp)
    if ref_logp is not None and kl_coef > 0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + kl_coef * kl
    with torch.no_grad():
        stats = {"clipped": float((ratio * advantage > clipped * advantage).sum()), "kl": float(kl.sum()),
                 "ratio": float(ratio.sum())}
    return per_token, stats
