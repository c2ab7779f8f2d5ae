"""`HFPolicy`: a transformers causal LM as a policy (batched sampling with token ids and log-probs)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch

from leap_agents.policies.attention import use_grouped_sdpa
from leap_agents.policies.base import Generation, History
from leap_agents.policies.decoding import block_stop, sample
from leap_agents.policies.prompts import ChatPrompt, PromptFormat
from leap_agents.training.logprobs import response_logprobs

log = logging.getLogger(__name__)

class HFPolicy:
    """A Hugging Face causal LM behind the `Policy` protocol.

    Args:
        model: a causal LM (already built), or use `from_pretrained`.
        tokenizer: its tokenizer; one without a chat template gets ChatML (`render_chat`).
        max_prompt_tokens: prompts longer than this keep their last tokens (with a warning).
        batch_size: histories per `generate` call of the model.
        temperature, top_p, max_new_tokens: default sampling parameters (overridable per call).
        prompt_format: renders a history and its meta into the prompt text (`leap_agents.policies.prompts`): the
            chat history through the chat template by default (`ChatPrompt()`).
        stop_after_block: end a response once it holds a closed fenced code block.
        merged_sampling: a LoRA (peft) model samples from a merged copy of itself, rebuilt whenever its
            trainable weights changed: the same distribution for one matmul per layer instead of three (on a
            CPU about a quarter of SmolLM2's decoding), at the memory of a second copy of the weights.
    """

    def __init__(self, model: Any, tokenizer: Any, max_prompt_tokens: int = 4096, batch_size: int = 16,
                 temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 512,
                 prompt_format: PromptFormat | None = None, stop_after_block: bool = False,
                 merged_sampling: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_size = batch_size
        self.defaults = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
        self.prompt_format = prompt_format or ChatPrompt()
        self.stop_after_block = stop_after_block
        self.merged_sampling = merged_sampling
        self._merged: tuple[tuple, Any] | None = None
        self._warned = False
        if str(getattr(model, "device", "cpu")).startswith("cpu"):
            use_grouped_sdpa(model)  # reads the KV cache as it is instead of copying it per query head

    @classmethod
    def from_pretrained(cls, path: str, device: str | None = None, dtype: str | None = None, lora: dict[str, Any] | None = None,
                        adapter: str | None = None, trainable: bool = False, **kwargs: Any) -> HFPolicy:
        """Load a model and tokenizer from a local path, a hub id or a name; optionally wrap it with LoRA.

        Args:
            path: a folder with ``config.json`` and tokenizer files, a hub id already cached, or the name of
                a model installed from a package (``"smollm2-135m-instruct"``, `leap_agents.policies.pretrained`;
                such a policy reads compact histories and stops after its code block).
            device: ``"cpu"``, ``"cuda"``...; CUDA when available by default.
            dtype: ``"bfloat16"``, ``"float16"``, ``"float32"``; the checkpoint's by default (float32 for a name).
            lora: peft ``LoraConfig`` keyword arguments (``r``, ``lora_alpha``, ``target_modules``...).
            adapter: a saved peft adapter to load: a folder, or for a name ``"warmup"`` (its LoRA warm-up).
            trainable: the loaded `adapter` trains (for LEAP on top of a warm-up).
        """
        from leap_agents.policies import pretrained

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if pretrained.is_pretrained_name(path):
            model, tokenizer = pretrained.load_pretrained(path, dtype or "float32")
            adapter_path = pretrained.resolve_adapter(path, adapter)
            if pretrained.spec_of(path).compact:
                kwargs.setdefault("prompt_format", ChatPrompt(compact=True))
                kwargs.setdefault("stop_after_block", True)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype) if dtype else "auto")
            tokenizer = AutoTokenizer.from_pretrained(path)
            adapter_path = pretrained.resolve_adapter(path, adapter) if adapter and adapter != "warmup" else None
        model.to(device)
        if adapter_path is not None:
            model = pretrained.load_adapter(model, adapter_path, trainable=trainable)
            log.info("loaded the LoRA adapter %s", adapter_path)
        elif lora:
            model = apply_lora(model, **lora)
        return cls(model, tokenizer, **kwargs)

    def sampling_model(self) -> Any:
        """The model `generate` samples from: `model`, or with `merged_sampling` its merged copy (rebuilt when an
        optimizer step, a state-dict load or a swapped tensor changed a trainable weight)."""
        if not self.merged_sampling or not hasattr(self.model, "merge_and_unload"):
            return self.model
        stamp = tuple((p.data_ptr(), p._version) for p in self.model.parameters() if p.requires_grad)
        if self._merged is None or self._merged[0] != stamp:
            self._merged = None  # free the stale copy before building the next
            with torch.no_grad():
                merged = copy.deepcopy(self.model).merge_and_unload()
            merged.requires_grad_(False)
            self._merged = (stamp, merged.eval())
        return self._merged[1]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        return {i for i in ids if i is not None}

    def render(self, history: History, meta: dict[str, Any] | None = None) -> str:
        """The prompt text of a history (and its meta), with the assistant turn opened."""
        return self.prompt_format(self.tokenizer, history, meta)

    def encode_prompt(self, history: History, meta: dict[str, Any] | None = None) -> list[int]:
        ids = self.tokenizer(self.render(history, meta), add_special_tokens=False)["input_ids"]
        if len(ids) > self.max_prompt_tokens:
            if not self._warned:
                self._warned = True
                log.warning("prompt of %d tokens cut to its last %d (raise max_prompt_tokens; warned once)", len(ids),
                            self.max_prompt_tokens)
            ids = ids[-self.max_prompt_tokens:]
        return list(ids)

    def encode_response(self, text: str) -> list[int]:
        """Token ids of a response written elsewhere, ended with EOS (as the policy would end it)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]

    @torch.no_grad()
    def generate(self, histories: Sequence[History], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]:
        """Sample one response per history (batched, left-padded).

        Sampling keywords: ``temperature`` (0: greedy), ``top_p``, ``top_k`` (0: off), ``max_new_tokens``, ``seed``.
        Log-probs are of ``softmax(logits / temperature)`` at the sampled tokens (top-p truncation
        not renormalised), the quantity the trainer recomputes.
        """
        opts = {**self.defaults, **{k: v for k, v in sampling.items() if v is not None}}
        if opts.get("seed") is not None:
            torch.manual_seed(int(opts["seed"]))
        out: list[Generation] = []
        metas = list(meta) if meta is not None else [None] * len(histories)
        prompts = [self.encode_prompt(h, m) for h, m in zip(histories, metas)]
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self._generate_batch(prompts[start:start + self.batch_size], opts))
        return out

    def _generate_batch(self, prompts: list[list[int]], opts: dict[str, Any]) -> list[Generation]:
        model = self.sampling_model()
        was_training = model.training
        model.eval()
        stop = block_stop(self.tokenizer) if self.stop_after_block else None
        try:
            sampled = sample(model, prompts, self.tokenizer.pad_token_id, self.eos_ids, int(opts["max_new_tokens"]),
                             temperature=float(opts["temperature"]), top_p=float(opts["top_p"]),
                             top_k=int(opts.get("top_k") or 0), stop=stop)
        finally:
            model.train(was_training)
        return [Generation(text=self.tokenizer.decode(s.tokens, skip_special_tokens=True), token_ids=s.tokens,
                           logprobs=s.logprobs, prompt_token_ids=prompt, finish_reason=s.finish_reason)
                for prompt, s in zip(prompts, sampled)]

    @torch.no_grad()
    def score(self, histories: Sequence[History], responses: Sequence[str], temperature: float = 1.0,
              meta: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        """Generations for responses written elsewhere (guidance, demonstrations), with this policy's log-probs."""
        metas = list(meta) if meta is not None else [None] * len(histories)
        prompts = [self.encode_prompt(h, m) for h, m in zip(histories, metas)]
        ids = [self.encode_response(r) for r in responses]
        gens = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            lps = response_logprobs(self.model, prompts[chunk], ids[chunk], self.tokenizer.pad_token_id, temperature)
            for p, r, text, lp in zip(prompts[chunk], ids[chunk], responses[chunk], lps):
                gens.append(Generation(text=text, token_ids=r, logprobs=lp.tolist(), prompt_token_ids=p, off_policy=True))
        return gens


def apply_lora(model: Any, r: int = 16, lora_alpha: int = 32, lora_dropout: float = 0.0,
               target_modules: list[str] | str | None = None, **kwargs: Any) -> Any:
    """Wrap `model` with LoRA adapters (peft); only the adapters train."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:  # pragma: no cover - optional extra
        raise ImportError("LoRA needs peft: pip install 'leap-gym[lora]' (or pip install peft)") from exc
    config = LoraConfig(r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                        target_modules=target_modules or "all-linear", task_type="CAUSAL_LM", **kwargs)
    return get_peft_model(model, config)
