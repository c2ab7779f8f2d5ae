"""The mini policy: batched sampling from the small model, and per-token log-probabilities for training."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from leap_agents.training.mini.data import EOS


@dataclass
class Sample:
    """One generated response: its text and the token ids of prompt and response (EOS included)."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    finished: bool = True


class MiniPolicy:
    """Wraps a causal LM and its tokenizer for the LEAP-mini loops.

    Args:
        model: a transformers causal LM.
        tokenizer: its `PreTrainedTokenizerFast` (pad and EOS set).
        max_new_tokens: response budget.
        temperature: sampling temperature.
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 400, temperature: float = 1.0):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.eos_id = tokenizer.convert_tokens_to_ids(EOS)
        self.pad_id = tokenizer.pad_token_id

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], seed: int | None = None, temperature: float | None = None,
                 batch_size: int = 32) -> list[Sample]:
        """Sample one response per prompt (batched, left padded)."""
        temperature = self.temperature if temperature is None else temperature
        self.model.eval()
        out: list[Sample] = []
        if seed is not None:
            torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            chunk = list(prompts[start:start + batch_size])
            ids = [self.encode(p) for p in chunk]
            width = max(len(x) for x in ids)
            input_ids = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(ids), width), dtype=torch.long)
            for row, x in enumerate(ids):
                input_ids[row, width - len(x):] = torch.tensor(x)
                mask[row, width - len(x):] = 1
            kwargs: dict[str, Any] = dict(max_new_tokens=self.max_new_tokens, eos_token_id=self.eos_id,
                                          pad_token_id=self.pad_id)
            if temperature > 0:
                kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            else:
                kwargs.update(do_sample=False)
            gen = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            for row, x in enumerate(ids):
                resp = gen[row, width:].tolist()
                finished = self.eos_id in resp
                if finished:
                    resp = resp[: resp.index(self.eos_id) + 1]
                text = self.tokenizer.decode([t for t in resp if t != self.eos_id], skip_special_tokens=True)
                out.append(Sample(text=text, prompt_ids=x, response_ids=resp, finished=finished))
        return out

    def token_logprobs(self, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                       temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of each response token given its prompt (right padded), with grad, under the
        distribution sampled at `temperature` (the policy-gradient update must score the distribution the
        samples came from).

        Returns:
            ``(logprobs, mask)``, both ``(batch, max response length)``; mask is 1 on real tokens.
        """
        seqs = [list(p) + list(r) for p, r in zip(prompt_ids, response_ids)]
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            input_ids[row, : len(s)] = torch.tensor(s)
            attn[row, : len(s)] = 1
        logits = self.model(input_ids=input_ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        targets = input_ids[:, 1:]
        tok_logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        rmax = max(len(r) for r in response_ids)
        out = torch.zeros((len(seqs), rmax))
        mask = torch.zeros((len(seqs), rmax))
        rows = []
        for row, (p, r) in enumerate(zip(prompt_ids, response_ids)):
            lo = len(p) - 1
            rows.append(torch.cat([tok_logp[row, lo: lo + len(r)], tok_logp.new_zeros(rmax - len(r))]))
            mask[row, : len(r)] = 1
        out = torch.stack(rows)
        return out, mask
