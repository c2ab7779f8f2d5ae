"""Grouped-query attention through SDPA without copying the keys and values per query head.

SmolLM2 shares each of its 3 key/value heads among 3 of its 9 query heads. With a padding mask (a batch of
left-padded sequences) on a CPU, transformers' ``sdpa`` attention copies the keys and values once per query head
that shares them (``repeat_kv``) in every layer at every decoding step: for a refinement turn's batch of long
histories, gigabytes allocated, page-faulted in and written per token. ``leap_grouped_sdpa`` instead folds each
key/value head's query heads into the query length (``[batch, kv_heads, groups * queries, dim]``) and repeats the
mask along it (a broadcast view while decoding one token), so SDPA reads the cache as it is. The same attention,
up to float rounding (`envs_tests/test_attention.py`); `benchmarks/bench_attention.py` measures it.
"""

from __future__ import annotations

from typing import Any

import torch

#: The attention implementation's name in transformers' registries.
GROUPED_SDPA = "leap_grouped_sdpa"


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` ``[batch, heads, q, dim]``, ``key``/``value``
    ``[batch, kv_heads, k, dim]``, a boolean or additive ``attention_mask`` ``[batch, 1, q, k]``; returns
    ``[batch, q, heads, dim]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, q, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    if groups == 1 or attention_mask is None or attention_mask.shape[1] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    # query head h reads key/value head h // groups (repeat_kv's layout): fold the groups into the query length
    folded = query.reshape(batch, kv_heads, groups * q, dim)
    if q == 1:
        mask = attention_mask.expand(batch, 1, groups, attention_mask.shape[-1])
    else:
        mask = attention_mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, dropout_p=dropout,
                                                           scale=scaling)
    return out.reshape(batch, heads, q, dim).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make ``attn_implementation="leap_grouped_sdpa"`` known to transformers, with SDPA's masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)


def use_grouped_sdpa(model: Any) -> bool:
    """Switch a model whose attention is transformers' ``sdpa`` and groups its query heads to
    ``leap_grouped_sdpa``. Returns whether it did."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not heads or not kv_heads or heads == kv_heads:
        return False
    register()
    base.set_attn_implementation(GROUPED_SDPA)
    return base.config._attn_implementation == GROUPED_SDPA
