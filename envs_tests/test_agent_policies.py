"""Policies: scripted replay, a tiny local HF model (ids and log-probs agree with a forward pass),
and an OpenAI-compatible client against a loopback server (concurrency, retries)."""

import functools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from leap_agents.policies import HFPolicy, OpenAIPolicy, ScriptedPolicy, render_chat, turn_of
from leap_agents.training.logprobs import response_logprobs


def test_scripted_policy_replays_per_task_and_turn():
    p = ScriptedPolicy({"t/a": ["a1", "a2"], "t/b": {0: ["b0"], 1: ["b1-1", "b1-2"]}}, default="?")
    hist = [{"role": "user", "content": "q"}]
    later = hist + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "fb"}]
    out = p.generate([hist, later, later, hist, later], meta=[
        {"task_id": "t/a"}, {"task_id": "t/a"}, {"task_id": "t/a", "turn": 3}, {"task_id": "t/c"},
        {"task_id": "t/b", "index": 1}])
    assert [g.text for g in out] == ["a1", "a2", "a2", "?", "b1-2"]
    assert turn_of(later) == 2 and all(g.off_policy for g in out)


@pytest.fixture(scope="module")
def tiny():
    from leap_agents.training.tiny import IM_END, IM_START, PAD, build_qwen2, train_tokenizer

    tok = train_tokenizer(["```cuda\nextern \"C\" __global__ void relu_kernel(const float* x) {}\n```"] * 20, 300,
                          [PAD, IM_START, IM_END], eos_token=IM_END, pad_token=PAD)
    return build_qwen2(tok, seed=0), tok


def test_default_chat_template_is_chatml(tiny):
    _, tok = tiny
    text = render_chat([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3  # specials are single tokens


def test_hf_policy_generation_matches_forward_pass(tiny):
    model, tok = tiny
    policy = HFPolicy(model, tok, max_new_tokens=12, batch_size=2)
    histories = [[{"role": "user", "content": "write relu"}],
                 [{"role": "system", "content": "You are an expert."},
                  {"role": "user", "content": "a much longer prompt " * 3}],
                 [{"role": "user", "content": "x"}]]
    gens = policy.generate(histories, temperature=0.8, seed=1)
    assert len(gens) == 3
    for g in gens:
        assert 1 <= len(g.token_ids) <= 12 and len(g.logprobs) == len(g.token_ids)
        assert g.finish_reason in ("stop", "length") and all(lp <= 0 for lp in g.logprobs)
        assert g.prompt_token_ids == policy.encode_prompt(histories[gens.index(g)])
    # left-padded batched sampling agrees with an unpadded forward pass at the same temperature
    lps = response_logprobs(model, [g.prompt_token_ids for g in gens], [g.token_ids for g in gens], tok.pad_token_id,
                            0.8)
    for g, lp in zip(gens, lps):
        assert torch.allclose(lp, torch.tensor(g.logprobs), atol=1e-4)
    # seeded sampling is reproducible; greedy is deterministic
    again = policy.generate(histories, temperature=0.8, seed=1)
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]
    greedy = policy.generate(histories[:1], temperature=0)
    assert greedy[0].token_ids == policy.generate(histories[:1], temperature=0)[0].token_ids
    scored = policy.score(histories[:1], ["```cuda\nint x;\n```"])
    assert scored[0].off_policy and scored[0].token_ids[-1] == tok.eos_token_id
    assert len(scored[0].logprobs) == len(scored[0].token_ids)


class _Handler(BaseHTTPRequestHandler):
    calls: list = []
    fail_first = 1

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"busy")
            return
        last = body["messages"][-1]["content"]
        reply = {"choices": [{"message": {"role": "assistant", "content": f"echo:{last}"}, "finish_reason": "stop",
                              "logprobs": {"content": [{"token": "e", "logprob": -0.5},
                                                       {"token": "o", "logprob": -0.25}]}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_policy_against_loopback_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        policy = OpenAIPolicy(url, "m", api_key="k", concurrency=4, backoff_s=0.01, logprobs=True, max_new_tokens=64)
        histories = [[{"role": "user", "content": f"q{i}"}] for i in range(6)]
        gens = policy.generate(histories, temperature=0.3, seed=7)
        assert [g.text for g in gens] == [f"echo:q{i}" for i in range(6)]  # order kept under concurrency
        assert gens[0].logprobs == [-0.5, -0.25]
        assert len(_Handler.calls) == 7  # one 503 retried
        assert _Handler.calls[-1]["max_tokens"] == 64 and _Handler.calls[-1]["temperature"] == 0.3
        _Handler.fail_first = 100
        with pytest.raises(RuntimeError, match="HTTP 503"):
            OpenAIPolicy(url, "m", max_retries=2, backoff_s=0.01).generate(histories[:1])
        with pytest.raises(RuntimeError, match="base_url"):
            unreachable = OpenAIPolicy("http://127.0.0.1:9/v1", "m", max_retries=1, backoff_s=0.01, timeout_s=2)
            unreachable.generate(histories[:1])
    finally:
        server.shutdown()


def test_lora_needs_peft_or_wraps_the_model(tiny):
    import importlib.util

    from leap_agents.policies.hf import apply_lora

    model, _ = tiny
    if importlib.util.find_spec("peft") is None:
        with pytest.raises(ImportError, match="pip install"):
            apply_lora(model, r=4)
    else:  # pragma: no cover - with the lora extra installed
        wrapped = apply_lora(model, r=4, target_modules=["q_proj", "v_proj"])
        assert any("lora" in n for n, p in wrapped.named_parameters() if p.requires_grad)


def test_merged_lora_sampling_is_the_same_policy_and_follows_updates(tiny):
    """A LoRA policy sampling from its merged copy draws the same tokens with the same log-probabilities as the
    peft model itself, and an optimizer step on the adapter rebuilds the copy before the next sample."""
    pytest.importorskip("peft")
    from leap_agents.policies.hf import apply_lora
    from leap_agents.training.tiny import build_qwen2

    _, tok = tiny
    model = apply_lora(build_qwen2(tok, seed=1), r=4)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    with torch.no_grad():  # B starts at zero: make the adapter matter
        for p in lora_b:
            p.normal_(0, 0.2)
    merged = HFPolicy(model, tok, max_new_tokens=10, batch_size=4, merged_sampling=True)
    plain = HFPolicy(model, tok, max_new_tokens=10, batch_size=4)
    histories = [[{"role": "user", "content": "write relu"}], [{"role": "user", "content": "x " * 5}]] * 2

    def same_policy():
        a, b = merged.generate(histories, temperature=0.8, seed=3), plain.generate(histories, temperature=0.8, seed=3)
        assert [g.token_ids for g in a] == [g.token_ids for g in b]
        scored = response_logprobs(model, [g.prompt_token_ids for g in a], [g.token_ids for g in a], tok.pad_token_id,
                                   0.8)
        for g, lp in zip(a, scored):
            assert torch.allclose(lp, torch.tensor(g.logprobs), atol=1e-4)
        return a

    before = same_policy()
    copy_before = merged.sampling_model()
    assert copy_before is merged.sampling_model() and copy_before is not model
    assert not any("lora" in n for n, _ in copy_before.named_parameters())
    optimizer = torch.optim.SGD(lora_b, lr=5.0)
    loss = -sum(lp.sum() for lp in response_logprobs(model, [g.prompt_token_ids for g in before],
                                                      [g.token_ids for g in before], tok.pad_token_id, 0.8))
    loss.backward()
    optimizer.step()
    assert merged.sampling_model() is not copy_before
    after = same_policy()
    assert sum(sum(g.logprobs) for g in after) != pytest.approx(sum(sum(g.logprobs) for g in before))


def test_sampling_draws_from_the_filtered_distribution():
    """The decoding loop's draw is exact (a token of probability 0 never comes up) and its top-k/top-p filter keeps
    the tokens transformers' warpers keep."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from leap_agents.policies.decoding import _draw, _filter

    torch.manual_seed(0)
    p = torch.tensor([[0.0, 0.1, 0.2, 0.7, 0.0]]).repeat(40000, 1)
    share = torch.bincount(_draw(p), minlength=5) / len(p)
    assert share[0] == 0 and share[4] == 0
    assert torch.allclose(share, p[0], atol=0.01)
    logits = torch.randn(6, 50) * 3
    for k, top_p in ((0, 0.9), (5, 1.0), (8, 0.7)):
        theirs = logits.clone()
        if k:
            theirs = TopKLogitsWarper(k)(None, theirs)
        if top_p < 1:
            theirs = TopPLogitsWarper(top_p)(None, theirs)
        assert torch.equal(torch.isinf(_filter(logits, k, top_p)), torch.isinf(theirs))


def test_sampling_a_batch_of_groups_prefills_each_prompt_once_and_appends_in_place(tiny, monkeypatch):
    """A batch of groups (G copies of each prompt, as a rollout's first turn) is prefilled once per distinct prompt;
    the log-probabilities still agree with a forward pass and
    greedy decoding gives each copy what the prompt alone gives."""
    from leap_agents.policies import decoding

    model, tok = tiny
    policy = HFPolicy(model, tok, max_new_tokens=40, batch_size=8)
    histories = [[{"role": "user", "content": "write relu"}], [{"role": "user", "content": "a longer prompt " * 4}]]
    groups = [h for h in histories for _ in range(4)]
    prefill_rows, caches = [], []
    forward, make_cache = model.forward, decoding._growing_cache

    @functools.wraps(forward)
    def counting_forward(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:
            prefill_rows.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    def keep_cache():
        caches.append(make_cache())
        return caches[-1]

    monkeypatch.setattr(model, "forward", counting_forward)
    monkeypatch.setattr(decoding, "_growing_cache", keep_cache)
    gens = policy.generate(groups, temperature=0.8, seed=2)
    assert prefill_rows == [2]
    layer = caches[0].layers[0]
    assert type(layer).__name__ == "GrowingLayer"
    assert len({tuple(g.token_ids) for g in gens}) > 2  # the copies are drawn independently
    lps = response_logprobs(model, [g.prompt_token_ids for g in gens], [g.token_ids for g in gens], tok.pad_token_id,
                            0.8)
    for g, lp in zip(gens, lps):
        assert torch.allclose(lp, torch.tensor(g.logprobs), atol=1e-4)
    greedy = policy.generate(groups, temperature=0)
    for i, h in enumerate(histories):
        alone = policy.generate([h], temperature=0)[0].token_ids
        assert all(g.token_ids == alone for g in greedy[4 * i:4 * i + 4])


def test_growing_cache_holds_what_concatenation_holds():
    """The in-place cache returns, after every append (past its capacity too) and a batch selection, exactly the
    keys and values that concatenating them gives."""
    from leap_agents.policies.decoding import _growing_cache

    cache = _growing_cache()
    torch.manual_seed(0)
    chunks = [torch.randn(3, 2, n, 4) for n in (5, 1, 1, 7, 1, 12)]
    for i, chunk in enumerate(chunks):
        keys, values = cache.update(chunk, -chunk, 0)
        expected = torch.cat(chunks[:i + 1], dim=-2)
        assert torch.equal(keys, expected) and torch.equal(values, -expected)
    assert cache.get_seq_length() == 27
    cache.batch_select_indices(torch.tensor([2, 0, 0]))
    keys, _ = cache.update(chunks[1][:3], chunks[1][:3], 0)
    assert torch.equal(keys, torch.cat([torch.cat(chunks, dim=-2)[[2, 0, 0]], chunks[1]], dim=-2))


def test_response_logprobs_share_a_prompt_and_equal_one_forward_pass_per_sample(tiny):
    """Samples sharing a prompt (a group), prompts of other lengths, a one-token response: the log-probabilities
    and their gradients equal those of the whole sequence run alone through the model, and each distinct
    prompt goes through the model once."""
    model, tok = tiny
    a, b = tok("write relu").input_ids, tok("a much longer prompt " * 3).input_ids
    prompts = [a, b, a, a, b]
    responses = [[5, 6, 7, 8], [9], [5, 6], [10, 11, 12, 13, 14, 15], [16, 17, 18]]
    params = [p for p in model.parameters() if p.requires_grad]

    def grads(loss: torch.Tensor) -> list[torch.Tensor]:
        return [g.clone() for g in torch.autograd.grad(loss, params)]

    expected = []
    for p, r in zip(prompts, responses):
        logits = model(input_ids=torch.tensor([p + r])).logits[0, len(p) - 1:-1].float() / 0.7
        expected.append(logits.log_softmax(-1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1))
    weights = [torch.randn(len(r), generator=torch.Generator().manual_seed(i)) for i, r in enumerate(responses)]
    prompt_rows = []
    forward = model.forward

    @functools.wraps(forward)
    def counting_forward(*args, **kwargs):
        if "logits_to_keep" in kwargs:
            prompt_rows.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    model.forward = counting_forward
    try:
        got = response_logprobs(model, prompts, responses, tok.pad_token_id, 0.7)
    finally:
        del model.forward
    assert prompt_rows == [2]
    for e, g in zip(expected, got):
        assert g.shape == e.shape and torch.allclose(g, e, atol=1e-5)
    want = grads(sum((w * e).sum() for w, e in zip(weights, expected)))
    have = grads(sum((w * g).sum() for w, g in zip(weights, got)))
    for w, h in zip(want, have):
        assert torch.allclose(h, w, atol=1e-5, rtol=1e-4)
