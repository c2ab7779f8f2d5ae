"""Batched sampling with a KV cache that drops finished sequences.

`transformers`' ``generate`` keeps every sequence of a batch in the forward pass until the longest is done; in a
rollout most responses stop early (a closed code block, EOS), so at 32 sequences most of the batch's decoding
work is on finished rows. `sample` decodes only the live rows: the cache is compacted once a quarter of its rows
have finished. Two more costs of a rollout batch are cut: a group's G copies of one prompt are prefilled once
(its cache rows are copied), and the cache appends each token into spare room instead of concatenating the whole
cache anew (`transformers`' `DynamicLayer` does, about half of a decoding step at 32 sequences on a CPU). The
distribution is the same (temperature, top-k, top-p as transformers applies them); the log-probability reported
per token is that of ``softmax(logits / temperature)``, before top-k/top-p truncation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from leap_agents.training.logprobs import cache_argument, distinct_prompts


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


def _growing_cache() -> Any:
    """A `DynamicCache` whose layers append in place (transformers 4.56 and later have cache layers; earlier
    versions get the plain `DynamicCache`)."""
    from transformers import cache_utils

    if not hasattr(cache_utils, "DynamicLayer"):
        return cache_utils.DynamicCache()

    class GrowingLayer(cache_utils.DynamicLayer):
        """Keys and values are views of buffers with spare room along the sequence."""

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.length, self.key_buffer, self.value_buffer = 0, key_states[..., :0, :], value_states[..., :0, :]
            end = self.length + key_states.shape[-2]
            if end > self.key_buffer.shape[-2]:
                self.key_buffer, self.value_buffer = (self._grown(b, 2 * end) for b in (self.key_buffer, self.value_buffer))
            self.key_buffer[..., self.length:end, :] = key_states
            self.value_buffer[..., self.length:end, :] = value_states
            self.length = end
            self.keys, self.values = self.key_buffer[..., :end, :], self.value_buffer[..., :end, :]
            return self.keys, self.values

        def _grown(self, buffer: torch.Tensor, capacity: int) -> torch.Tensor:
            grown = buffer.new_empty(*buffer.shape[:-2], capacity, buffer.shape[-1])
            grown[..., :self.length, :] = buffer[..., :self.length, :]
            return grown

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.get_seq_length() > 0:
                self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
                self.keys, self.values = self.key_buffer[..., :self.length, :], self.value_buffer[..., :self.length, :]

    class GrowingCache(cache_utils.DynamicCache):
        def __init__(self) -> None:
            cache_utils.Cache.__init__(self, layer_class_to_replicate=GrowingLayer)

    return GrowingCache()


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
    cache_arg = cache_argument(model)
    device = next(model.parameters()).device
    copy_of, ids, mask, positions = distinct_prompts(prompts, pad_id, device)  # a group's prompt is prefilled once
    greedy = temperature <= 0
    t = 1.0 if greedy else temperature
    out = [Sampled() for _ in prompts]
    rows = list(range(len(prompts)))  # the sequence each cache row holds
    live = [True] * len(prompts)
    cache = _growing_cache()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                   **{cache_arg: cache}).logits[:, -1].float()
    if len(ids) < len(prompts):
        cache.batch_select_indices(copy_of)
    logits, mask, last = logits[copy_of], mask[copy_of], positions[copy_of, -1]
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
