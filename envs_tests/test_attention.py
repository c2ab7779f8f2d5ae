"""`leap_agents.policies.attention`: grouped-query SDPA without per-head copies of the keys and values is the same
attention as transformers' ``sdpa``, over left-padded batches, at prefill and while decoding from the KV cache."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from leap_agents.policies.attention import GROUPED_SDPA, use_grouped_sdpa  # noqa: E402
from leap_agents.policies.decoding import sample  # noqa: E402


def grouped_model(attn: str = "sdpa", heads: int = 6, kv_heads: int = 2) -> torch.nn.Module:
    config = transformers.Qwen2Config(vocab_size=300, hidden_size=48, num_hidden_layers=2, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, intermediate_size=96, max_position_embeddings=512,
                                      pad_token_id=0, eos_token_id=1, attn_implementation=attn)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).eval()


def padded_batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(lengths)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 300, (len(lengths), width), generator=generator)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n:] = 1
    ids[mask == 0] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def test_grouped_sdpa_gives_sdpas_logits_on_a_left_padded_batch():
    plain = grouped_model()
    grouped = copy.deepcopy(plain)
    assert use_grouped_sdpa(grouped) and grouped.config._attn_implementation == GROUPED_SDPA
    ids, mask, positions = padded_batch([5, 17, 11, 17])
    with torch.no_grad():
        expected = plain(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        got = grouped(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    keep = mask.bool()
    assert torch.allclose(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_decoding_from_the_cache_samples_the_same_tokens_with_the_same_log_probabilities():
    plain = grouped_model()
    grouped = copy.deepcopy(plain)
    use_grouped_sdpa(grouped)
    prompts = [[5, 6, 7], list(range(10, 40)), list(range(50, 62)), [9] * 20]
    runs = []
    for model in (plain, grouped):
        torch.manual_seed(3)
        runs.append(sample(model, prompts, pad_id=0, eos_ids={1}, max_new_tokens=24, temperature=0.9))
    for a, b in zip(*runs):
        assert a.tokens == b.tokens and len(a.tokens) > 0
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_only_a_grouped_sdpa_model_is_switched():
    assert not use_grouped_sdpa(grouped_model(attn="eager"))  # the tiny and LEAP-mini models keep eager attention
    assert not use_grouped_sdpa(grouped_model(heads=4, kv_heads=4))  # no groups, nothing to copy
    assert use_grouped_sdpa(grouped_model())
