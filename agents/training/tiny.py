"""A tiny Qwen2 model and a byte-level BPE tokenizer, built locally (nothing downloads): for smoke
runs, tests and tutorials on a CPU."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


def task_corpus(limit: int | None = None) -> list[str]:
    """Texts to train a tokenizer on: built-in task sources, prompts and reference solutions."""
    try:
        import leap_gym
        from leap_gym.evaluation.feedback import render_prompt
    except Exception as exc:  # pragma: no cover - leap_gym is a hard dependency of the repo
        log.warning("no task corpus (%s); training the tokenizer on a stub text", exc)
        return ["```cuda\nextern \"C\" __global__ void k(float* x) {}\n```"]
    texts = []
    for task in leap_gym.load_tasks("builtin")[:limit]:
        texts.append(task.source)
        texts.extend(task.reference_solutions)
        try:
            texts.append(render_prompt(task.with_size("cpu"), 4, "debug"))
        except Exception:  # pragma: no cover - prompt rendering is optional for the corpus
            pass
    return texts


def build_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 1024) -> Any:
    """A byte-level BPE tokenizer trained on `corpus` (the task corpus by default), ChatML specials.

    Returns a transformers fast tokenizer with ``eos = <|im_end|>`` and ``pad = <|endoftext|>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(corpus) if corpus is not None else task_corpus()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD, bos_token=None,
                                   unk_token=None, padding_side="left")


def build_tiny_model(tokenizer: Any, hidden_size: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                     intermediate_size: int = 128, max_positions: int = 8192, seed: int = 0) -> Any:
    """A randomly initialised Qwen2 causal LM sized for a CPU (hidden 64, 2 layers by default)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate_size,
                         max_position_embeddings=max_positions, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tiny(path: str | Path | None = None, seed: int = 0, vocab_size: int = 1024, **model_kwargs: Any) -> tuple[Any, Any]:
    """Build (or load from `path`, if it already holds one) a tiny model and its tokenizer.

    With `path`, the pair is saved there so later runs (and `HFPolicy.from_pretrained`) reuse it.
    """
    if path is not None and (Path(path) / "config.json").exists():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    tokenizer = build_tokenizer(vocab_size=vocab_size)
    model = build_tiny_model(tokenizer, seed=seed, **model_kwargs)
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return model, tokenizer
