"""Per-token log-probabilities of responses given prompts, by one forward pass (shared by the
trainer, with gradients, and by `HFPolicy.score`, without)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_right(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into ``(ids, attention_mask)`` tensors."""
    length = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


def response_logprobs(model: torch.nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                      pad_id: int, temperature: float = 1.0) -> list[torch.Tensor]:
    """Log-probabilities of each response token under ``softmax(logits / temperature)``.

    Args:
        model: a causal LM returning ``.logits``.
        prompts: per sample, the prompt token ids.
        responses: per sample, the response token ids (non-empty).
        pad_id: the padding token id.
        temperature: the sampling temperature the responses were drawn at (0 counts as 1).

    Returns:
        Per sample, a float32 tensor of ``len(response)`` log-probabilities (differentiable when
        gradients are enabled).
    """
    device = next(model.parameters()).device
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    ids, mask = pad_right(seqs, pad_id, device)
    logits = model(input_ids=ids, attention_mask=mask).logits
    t = temperature if temperature and temperature > 0 else 1.0
    out = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        start = len(p) - 1
        rows = logits[i, start:start + len(r)].float() / t
        target = torch.tensor(list(r), dtype=torch.long, device=device)
        out.append(torch.log_softmax(rows, dim=-1).gather(-1, target[:, None]).squeeze(-1))
    return out
