"""Batched sampling with a KV cache that drops finished sequences.

`transformers`' ``generate`` keeps every sequence of a batch in the forward pass until the longest is done; in a
rollout most responses stop early (a closed code block, EOS), so at 32 sequences most of the batch's decoding
work is on finished rows. `sample` decodes only the live rows: the cache is compacted once a quarter of its rows
have finished. The distribution is the same (temperature, top-k, top-p as transformers applies them); the
log-probability reported per token is that of ``softmax(logits / temperature)``, before top-k/top-p truncation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Sampled:
    """One sampled continuation: its tokens (EOS included when it ended there), their log-probabilities, and
    ``"stop"`` (EOS or the stop rule) or ``"length"``."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"


def block_closed(text: str) -> bool:
    """The response text holds a closed fenced block (two fences)."""
    return text.count("```") >= 2


def block_stop(tokenizer: Any) -> Callable[[list[int]], bool]:
    """The stop rule of a policy that ends its response once the response holds a closed fenced block."""
    def closed(tokens: list[int]) -> bool:
        if "`" not in tokenizer.decode(tokens[-1:]):  # only a backtick can complete a fence
            return False
        return block_closed(tokenizer.decode(tokens, skip_special_tokens=True))

    return closed


def _filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """transformers' top-k then top-p warpers: tokens outside are set to -inf (at least one token is kept)."""
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1 - top_p)
        drop[..., -1:] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def _draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` by inverting its cumulative distribution with one uniform draw (exact; on a
    CPU twenty times faster than `torch.multinomial` over a 49k vocabulary). ``right=True`` never picks a token
    of probability 0."""
    cdf = probs.double().cumsum(-1)
    u = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[-1] - 1).squeeze(-1)


@torch.no_grad()
def sample(model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int, eos_ids: set[int],
           max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
           stop: Callable[[list[int]], bool] | None = None) -> list[Sampled]:
    """Sample one continuation per prompt (left-padded into one batch).

    Args:
        model: a causal LM taking ``attention_mask``, ``position_ids``, ``past_key_values`` and ``logits_to_keep``.
        prompts: token ids per sequence.
        pad_id: the padding token id.
        eos_ids: tokens that end a sequence (kept as its last token).
        max_new_tokens: the length limit.
        temperature: 0 is greedy.
        top_p, top_k: nucleus mass and top-k (0: off), applied as transformers applies them.
        stop: called with a sequence's tokens so far after a token that may end it (the stop rule); True ends it.
    """
    from transformers import DynamicCache

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cache_arg = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"  # 5.20 renamed it
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long, device=device)
        mask[i, width - len(p):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    greedy = temperature <= 0
    t = 1.0 if greedy else temperature
    out = [Sampled() for _ in prompts]
    rows = list(range(len(prompts)))  # the sequence each cache row holds
    live = [True] * len(prompts)
    cache = DynamicCache()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                   **{cache_arg: cache}).logits[:, -1].float()
    last = positions[:, -1]
    for _ in range(max_new_tokens):
        scaled = logits / t
        if greedy:
            token = scaled.argmax(-1)
        else:
            token = _draw(_filter(scaled, top_k, top_p).softmax(-1))
        logprob = scaled.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)
        for r, (tok, lp) in enumerate(zip(token.tolist(), logprob.tolist())):  # one device sync per step
            if not live[r]:
                continue
            seq = out[rows[r]]
            seq.tokens.append(tok)
            seq.logprobs.append(lp)
            if tok in eos_ids or (stop is not None and stop(seq.tokens)):
                seq.finish_reason = "stop"
                live[r] = False
        if not any(live):
            break
        if sum(live) <= 3 * len(live) // 4:  # compact: the cache keeps only live rows
            keep = [r for r, alive in enumerate(live) if alive]
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, last, token = mask[index], last[index], token[index]
            rows, live = [rows[r] for r in keep], [True] * len(keep)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        last = last + 1
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=last[:, None], use_cache=True,
                       **{cache_arg: cache}).logits[:, -1].float()
    return out
