"""Per-token log-probabilities of responses given prompts (shared by the trainer, with gradients, and by
`HFPolicy.score`, without).

A group's G samples share one prompt: it is run once and its keys and values are copied to each sample's row,
and the vocabulary projection (a fifth of SmolLM2's compute per token) is taken only where a response token is
predicted.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch


def pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str,
        left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token lists into ``(ids, attention_mask)`` tensors, on the right, or on the left (every sequence then
    ends in the last column)."""
    length = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        cols = slice(length - len(s), length) if left else slice(0, len(s))
        ids[i, cols] = torch.tensor(list(s), dtype=torch.long)
        mask[i, cols] = 1
    return ids.to(device), mask.to(device)


def distinct_prompts(prompts: Sequence[Sequence[int]], pad_id: int,
                     device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each distinct prompt once (a group's G copies of a prompt share one row), left-padded.

    Returns:
        ``(copy_of, ids, mask, positions)``: the row of each prompt, and the rows' token ids, attention mask and
        position ids.
    """
    row_of: dict[tuple[int, ...], int] = {}
    copy_of = torch.tensor([row_of.setdefault(tuple(p), len(row_of)) for p in prompts], device=device)
    ids, mask = pad(list(row_of), pad_id, device, left=True)
    return copy_of, ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def cache_argument(model: torch.nn.Module) -> str:
    """The name under which `model`'s forward takes a KV cache (transformers 5.20 renamed it)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def response_logprobs(model: torch.nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                      pad_id: int, temperature: float = 1.0) -> list[torch.Tensor]:
    """Log-probabilities of each response token under ``softmax(logits / temperature)``.

    Two forward passes: the distinct prompts (left-padded; the last position's logits predict each response's
    first token), then the responses on their prompt's keys and values.

    Args:
        model: a causal LM taking ``attention_mask``, ``position_ids``, a KV cache and ``logits_to_keep``.
        prompts: per sample, the prompt token ids (non-empty).
        responses: per sample, the response token ids (non-empty).
        pad_id: the padding token id.
        temperature: the sampling temperature the responses were drawn at (0 counts as 1).

    Returns:
        Per sample, a float32 tensor of ``len(response)`` log-probabilities (differentiable when
        gradients are enabled).
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    copy_of, prompt_ids, prompt_mask, positions = distinct_prompts(prompts, pad_id, device)
    cache = DynamicCache()
    cache_kw = {cache_argument(model): cache}
    first = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True,
                  logits_to_keep=1, **cache_kw).logits[:, -1]
    width = max(len(r) for r in responses) - 1  # the last response token predicts nothing
    rest = None
    if width > 0:
        if len(prompt_ids) < len(prompts):
            cache.batch_select_indices(copy_of)
        ids, mask = pad([list(r)[:-1] for r in responses], pad_id, device)
        rest = model(input_ids=ids, attention_mask=torch.cat([prompt_mask[copy_of], mask], dim=-1),
                     position_ids=positions[copy_of, -1:] + 1 + torch.arange(width, device=device), use_cache=True,
                     **cache_kw).logits
    t = temperature if temperature and temperature > 0 else 1.0
    out = []
    for i, r in enumerate(responses):
        rows = first[copy_of[i]][None]
        if len(r) > 1:
            rows = torch.cat([rows, rest[i, :len(r) - 1]])
        target = torch.tensor(list(r), dtype=torch.long, device=device)
        out.append(torch.log_softmax(rows.float() / t, dim=-1).gather(-1, target[:, None]).squeeze(-1))
    return out
