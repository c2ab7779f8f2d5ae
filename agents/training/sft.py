"""Supervised fine-tuning, the one path both warm-ups take (LEAP-mini's whole model, SmolLM2's LoRA adapter),
and the judged kernel mutants their repair examples are made of.

`sft` minimises the mean negative log-likelihood of the response tokens of (prompt, response) pairs,
token-averaged over each batch, with AdamW, a linear warm-up and a cosine decay. With
``frozen_prefix=True`` (a LoRA model whose lower layers are frozen) each example runs once through the
frozen layers and every step only through the adapted ones (`prefix_examples`, `adapted_logits`): same
logits and gradients, about half the step time.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from leap_agents.training.logprobs import response_logprobs
from leap_gym.result import EvalResult
from leap_gym.tasks import Task

log = logging.getLogger(__name__)

#: Judges (task, response) pairs, e.g. ``functools.partial(leap_gym.evaluation.memo.evaluate_all, evaluator)``.
EvalFn = Callable[[list[tuple[Task, str]]], list[EvalResult]]


# -- judged mutants ----------------------------------------------------------------------------------


@dataclass
class JudgedMutants:
    """One task's reference judged, and its mutants judged: those that really fail, with their real result."""

    task: Task
    failing: list[tuple[str, str, EvalResult]] = field(default_factory=list)  # (operator, mutated cuda, result)
    statuses: dict[str, int] = field(default_factory=dict)
    passed: int = 0

    def count_into(self, stats: dict[str, Any]) -> None:
        """Add this task's counts to a warm-up's statistics (``mutants``, ``passed``, ``kept``, ``statuses``)."""
        stats["mutants"] += self.passed + len(self.failing)
        stats["passed"] += self.passed
        stats["kept"] += len(self.failing)
        for status, count in self.statuses.items():
            stats["statuses"][status] = stats["statuses"].get(status, 0) + count


def judge_mutants(task: Task, reference: str, candidates: Sequence[tuple[str, str]], eval_fn: EvalFn,
                  as_response: Callable[[str], str]) -> JudgedMutants:
    """Judge `reference` (a ``cuda`` source) and each ``(operator, mutated source)`` of `candidates` on `task`.

    A backend that fails the reference cannot tell a bug from a fix: that raises, naming the task. A cold
    compile on a loaded machine can time out, so a failed reference is judged twice more first (text after
    the block is ignored by the parser and escapes any memo).

    Raises:
        RuntimeError: the reference is not judged CORRECT (or COMPILED on the compile-only backend).
    """
    ref_result, *results = eval_fn([(task, as_response(reference))] + [(task, as_response(m)) for _, m in candidates])
    for retry in range(2):
        if ref_result.status in ("CORRECT", "COMPILED"):
            break
        ref_result = eval_fn([(task, as_response(reference) + f"\nretry {retry + 1}")])[0]
    if ref_result.status not in ("CORRECT", "COMPILED"):
        raise RuntimeError(f"the reference of {task.id} is judged {ref_result.status} ({ref_result.message[:300]}): the "
                           "backend cannot tell a bug from a fix, so no warm-up data is built; fix the backend (e.g. "
                           "NVRTC not found: install nvidia-cuda-nvrtc) or pass backend='compile-only'")
    judged = JudgedMutants(task)
    for (op, mutated), result in zip(candidates, results):
        judged.statuses[result.status] = judged.statuses.get(result.status, 0) + 1
        if result.status in ("CORRECT", "COMPILED"):
            judged.passed += 1  # harmless here: not a bug to repair
        else:
            judged.failing.append((op, mutated, result))
    return judged


# -- the frozen prefix of a LoRA model ----------------------------------------------------------------


@dataclass
class PrefixedExample:
    """An encoded SFT pair and the hidden states its frozen layers produce (they never change, so are computed once).

    Attributes:
        prompt: prompt token ids.
        response: response token ids (the loss covers these).
        states: ``(len(prompt) + len(response), hidden)``, the input of the first adapted decoder layer.
    """

    prompt: list[int]
    response: list[int]
    states: torch.Tensor


def _decoder(model: Any) -> tuple[Any, Any]:
    """The decoder stack (``.layers``, ``.norm``) and the LM head of a (peft-wrapped) causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, base.lm_head


def first_adapted_layer(model: Any) -> int:
    """Index of the lowest decoder layer with trainable parameters; everything below it is frozen."""
    layers = _decoder(model)[0].layers
    return next((i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters())),
                len(layers))


@contextlib.contextmanager
def _partial_stack(model: Any, layers: slice, final_norm: bool) -> Iterator[Any]:
    """The model's decoder running only ``layers`` of its stack (and its final norm only if `final_norm`)."""
    decoder, _ = _decoder(model)
    full, norm = decoder.layers, decoder.norm
    decoder.layers = full[layers]
    if not final_norm:
        decoder.norm = torch.nn.Identity()
    try:
        yield decoder
    finally:
        decoder.layers, decoder.norm = full, norm


@torch.no_grad()
def prefix_examples(model: Any, encoded: Sequence[tuple[list[int], list[int]]]) -> list[PrefixedExample]:
    """Run each (prompt, response) once through the frozen layers below `first_adapted_layer`, and no further."""
    device = next(model.parameters()).device
    out = []
    with _partial_stack(model, slice(0, first_adapted_layer(model)), final_norm=False) as frozen:
        for prompt, response in encoded:
            ids = torch.tensor([list(prompt) + list(response)], device=device)
            states = frozen(input_ids=ids, use_cache=False).last_hidden_state[0]
            out.append(PrefixedExample(list(prompt), list(response), states))
    return out


def adapted_logits(model: Any, states: torch.Tensor, positions: slice) -> torch.Tensor:
    """The model's logits at `positions` from `states` (a `PrefixedExample`'s), running only the adapted layers."""
    with _partial_stack(model, slice(first_adapted_layer(model), None), final_norm=True) as adapted:
        hidden = adapted(inputs_embeds=states[None], use_cache=False).last_hidden_state[0]
    return _decoder(model)[1](hidden[positions])


# -- SFT ----------------------------------------------------------------------------------------------


def batch_nll(model: Any, batch: Sequence[Any], pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed response-token negative log-likelihood of a batch (with grad) and its response-token count.

    `batch` holds ``(prompt ids, response ids)`` pairs (one padded forward) or `PrefixedExample` s (each
    alone through the adapted layers, no padding).
    """
    tokens = sum(len(e.response if isinstance(e, PrefixedExample) else e[1]) for e in batch)
    if batch and isinstance(batch[0], PrefixedExample):
        total = torch.zeros(())
        for e in batch:
            start = len(e.prompt) - 1
            logits = adapted_logits(model, e.states, slice(start, start + len(e.response))).float()
            target = torch.tensor(e.response, dtype=torch.long, device=logits.device)
            total = total.to(logits.device) - torch.log_softmax(logits, dim=-1).gather(-1, target[:, None]).sum()
        return total, tokens
    logps = response_logprobs(model, [p for p, _ in batch], [r for _, r in batch], pad_id)
    return -torch.cat(logps).sum(), tokens


def sft_step(model: Any, batch: Sequence[Any], optimizer: torch.optim.Optimizer, pad_id: int = 0) -> float:
    """One optimizer step of the token-mean response NLL over `batch`; returns that mean."""
    model.train()
    optimizer.zero_grad()
    nll, tokens = batch_nll(model, batch, pad_id)
    (nll / tokens).backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    return float(nll.item()) / tokens


def sft(model: Any, encoded: Sequence[tuple[list[int], list[int]]], steps: int, batch_size: int, lr: float, *,
        pad_id: int, seed: int = 0, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
        warmup_fraction: float = 0.1, frozen_prefix: bool = False, progress: bool = False) -> list[float]:
    """Fine-tune `model`'s trainable parameters on ``(prompt ids, response ids)`` pairs; returns each step's loss.

    Batches cycle through seeded shuffles of the examples. The learning rate rises linearly over the first
    ``warmup_fraction`` of the steps, then decays on a cosine.

    Args:
        frozen_prefix: run each example once through the frozen lower layers (a LoRA model adapting only its
            top layers) and every step only through the adapted ones.
    """
    from tqdm.auto import tqdm

    rng = random.Random(seed)
    examples: list[Any] = prefix_examples(model, encoded) if frozen_prefix else list(encoded)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)
    warm = max(1, int(steps * warmup_fraction))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    order: list[int] = []
    losses: list[float] = []
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="sft", unit="step", disable=not progress)
    for _ in bar:
        while len(order) < batch_size:
            more = list(range(len(examples)))
            rng.shuffle(more)
            order += more
        losses.append(sft_step(model, [examples[order.pop()] for _ in range(batch_size)], optimizer, pad_id))
        schedule.step()
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    if losses:
        log.info("sft: %d steps in %.0f s, loss %.3f -> %.3f", steps, time.perf_counter() - start, losses[0], losses[-1])
    return losses
