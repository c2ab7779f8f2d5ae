"""Small Qwen2 models and byte-level BPE tokenizers built locally (nothing downloads): the random 'tiny'
model of smoke runs, tests and tutorials, and LEAP-mini's policy (`leap_agents.training.mini`)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - the train extra is installed in the dev venv
        raise ImportError(f"small models need `{module}`; install it with `pip install leap-gym[train]`") from exc


def train_tokenizer(texts: Iterable[str], vocab_size: int, special_tokens: list[str], eos_token: str, pad_token: str,
                    min_frequency: int = 0) -> Any:
    """A byte-level BPE tokenizer trained on `texts`, as a left-padding transformers fast tokenizer."""
    tk = _require("tokenizers")
    transformers = _require("transformers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special_tokens,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos_token, pad_token=pad_token,
                                                bos_token=None, unk_token=None, padding_side="left")


def build_qwen2(tokenizer: Any, hidden_size: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                intermediate_size: int = 128, max_positions: int = 8192, seed: int = 0) -> Any:
    """A randomly initialised Qwen2 causal LM over `tokenizer`'s vocabulary (tied embeddings, eager attention)."""
    import torch

    transformers = _require("transformers")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, intermediate_size=intermediate_size, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=pad, attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    log.info("built a Qwen2 model: %.2fM parameters, vocab %d", sum(p.numel() for p in model.parameters()) / 1e6,
             len(tokenizer))
    return model


def save_model(model: Any, tokenizer: Any, path: str | Path) -> None:
    """Model and tokenizer side by side (loadable with `load_model` or `from_pretrained`)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def load_model(path: str | Path) -> tuple[Any, Any]:
    """A model and tokenizer saved by `save_model`."""
    transformers = _require("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(path)
    tokenizer.padding_side = "left"
    return model, tokenizer


def task_corpus(limit: int | None = None) -> list[str]:
    """Texts to train a tokenizer on: built-in task sources, prompts and reference solutions."""
    import leap_gym
    from leap_gym.evaluation.feedback import render_prompt

    texts = []
    for task in leap_gym.load_tasks("builtin")[:limit]:
        texts.append(task.source)
        texts.extend(task.reference_solutions)
        texts.append(render_prompt(task.with_size("cpu"), 4, "debug"))
    return texts


def build_tiny(path: str | Path | None = None, seed: int = 0, vocab_size: int = 1024, **model_kwargs: Any) -> tuple[Any, Any]:
    """Build (or load from `path`, if it already holds one) a random tiny model and its ChatML tokenizer.

    With `path`, the pair is saved there so later runs (and `HFPolicy.from_pretrained`) reuse it.
    """
    if path is not None and (Path(path) / "config.json").exists():
        return load_model(path)
    tokenizer = train_tokenizer(task_corpus(), vocab_size, [PAD, IM_START, IM_END], eos_token=IM_END, pad_token=PAD)
    model = build_qwen2(tokenizer, seed=seed, **model_kwargs)
    if path is not None:
        save_model(model, tokenizer, path)
    return model, tokenizer
