"""LEAP-mini training machinery: the clipped-PPO objective with a KL penalty to the start policy,
several inner epochs per batch, and the warm-up's first drafts (buggy at a known rate)."""

from __future__ import annotations

import copy

import pytest
import torch

from leap_agents.training.mini.data import EOS, Split, as_response, mini_tasks, reference_cuda, render_prompt
from leap_agents.training.mini.judge import Judge
from leap_agents.training.mini.model import MiniModelConfig, build_model, train_tokenizer, wrap_tokenizer
from leap_gym.tasks.mutants import DRAFT_OPERATORS
from leap_agents.training.mini.policy import MiniPolicy
from leap_agents.training.mini.rl import ArmConfig, Traj, TurnRecord, ppo_kl_loss, update
from leap_agents.training.mini.warmup import build_examples

pytest.importorskip("transformers")


def _grad(logp0: list[float], old: list[float], ref: list[float] | None, adv: float, clip: float = 0.2,
          kl_coef: float = 0.0) -> torch.Tensor:
    logp = torch.tensor([logp0], requires_grad=True)
    mask = torch.ones_like(logp)
    loss, _ = ppo_kl_loss(logp, torch.tensor([old]), None if ref is None else torch.tensor([ref]),
                          torch.tensor([adv]), mask, clip, kl_coef)
    loss.backward()
    return logp.grad[0]


def test_clip_stops_the_gradient_beyond_the_trust_region():
    old = [-1.0, -1.0, -1.0]
    logp = [-1.0 + 0.5, -1.0 + 0.05, -1.0 - 0.5]  # ratios e^.5 (beyond 1.2), e^.05 (inside), e^-.5 (below .8)
    g = _grad(logp, old, None, adv=1.0)
    assert g[0] == 0.0  # already pushed up past 1 + clip: no further push
    assert g[1] < 0.0  # inside: the loss falls as the token's log-prob rises
    assert g[2] < 0.0  # a positive advantage below 1 - clip still pulls up
    g = _grad(logp, old, None, adv=-1.0)
    assert g[2] == 0.0 and g[1] > 0.0 and g[0] > 0.0  # mirrored for a negative advantage
    # at ratio 1 (first epoch) the objective is REINFORCE: gradient -A / tokens per token
    g = _grad([-2.0, -3.0], [-2.0, -3.0], None, adv=2.0)
    assert torch.allclose(g, torch.tensor([-1.0, -1.0]))


def test_kl_penalty_pulls_towards_the_reference_and_vanishes_on_it():
    logp, ref = torch.tensor([[-0.5, -2.0]]), torch.tensor([[-0.5, -2.0]])
    loss, stats = ppo_kl_loss(logp, logp, ref, torch.tensor([0.0]), torch.ones_like(logp), 0.2, 1.0)
    assert loss.item() == pytest.approx(0.0) and stats["kl"] == pytest.approx(0.0)
    # the policy gave a token more (or less) probability than the reference: the penalty pulls it back
    g = _grad([-0.5, -3.0], [-0.5, -3.0], [-1.0, -2.0], adv=0.0, kl_coef=1.0)
    assert g[0] > 0.0 and g[1] < 0.0
    logp = torch.tensor([[-0.5, -3.0]])
    _, stats = ppo_kl_loss(logp, logp, torch.tensor([[-1.0, -2.0]]), torch.tensor([0.0]), torch.ones_like(logp),
                           0.2, 1.0)
    assert stats["kl"] > 0.0
    # padding does not count
    mask = torch.tensor([[1.0, 0.0]])
    loss, _ = ppo_kl_loss(torch.tensor([[-1.0, -9.0]]), torch.tensor([[-1.0, -9.0]]), torch.tensor([[-1.0, 0.0]]),
                          torch.tensor([0.0]), mask, 0.2, 1.0)
    assert loss.item() == pytest.approx(0.0)


@pytest.fixture(scope="module")
def tiny_policy():
    torch.set_num_threads(1)
    relu = {t.id: t for t in mini_tasks()}["level1/relu"]
    texts = [as_response(reference_cuda(relu)) + EOS, render_prompt(relu)] * 3
    tokenizer = wrap_tokenizer(train_tokenizer(texts, 300))
    model = build_model(len(tokenizer), MiniModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                        num_attention_heads=2, num_key_value_heads=1),
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.convert_tokens_to_ids(EOS))
    return MiniPolicy(model, tokenizer, max_new_tokens=20), relu


def _group(policy: MiniPolicy, relu) -> list[list[Traj]]:
    prompt = render_prompt(relu)
    good, bad = policy.encode(as_response(reference_cuda(relu))[:60]), policy.encode("```cuda\nvoid\n```")
    trajs = []
    for i, (resp, adv) in enumerate(((good, 1.0), (bad, -1.0))):
        t = Traj(relu.id, i)
        rec = TurnRecord(prompt, "", policy.encode(prompt), resp + [policy.eos_id], "CORRECT", "")
        rec.advantage = adv
        t.turns.append(rec)
        trajs.append(t)
    return [trajs]


def test_inner_epochs_reuse_the_sampling_log_probs_so_the_clip_binds(tiny_policy):
    policy, relu = tiny_policy
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    groups = _group(policy, relu)
    cfg = ArmConfig(arm="leap", epochs=4, lr=3e-2, clip=0.2, kl_coef=0.0, micro_batch=1)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
    n, tokens, stats = update(policy, opt, groups, cfg)
    assert n == 2 and tokens > 0
    assert all(s["step"] == 4 for s in opt.state.values())  # one optimizer step per inner epoch
    assert stats["clipped"] > 0.0  # by the last epoch the ratio left 1 +- clip (old log-probs stayed fixed)
    # one epoch at ratio 1 never clips
    policy.model.load_state_dict(state)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
    _, _, stats = update(policy, opt, groups, ArmConfig(arm="leap", epochs=1, lr=3e-2, kl_coef=0.0))
    assert stats["clipped"] == 0.0
    policy.model.load_state_dict(state)


def _kl_to(policy: MiniPolicy, reference: MiniPolicy, groups: list[list[Traj]]) -> float:
    recs = [r for g in groups for t in g for r in t.turns]
    with torch.no_grad():
        logp, mask = policy.token_logprobs([r.prompt_ids for r in recs], [r.response_ids for r in recs])
        ref, _ = reference.token_logprobs([r.prompt_ids for r in recs], [r.response_ids for r in recs])
        _, stats = ppo_kl_loss(logp, logp, ref, torch.zeros(len(recs)), mask, 0.2, 1.0)
    return stats["kl"]


def test_kl_penalty_keeps_the_policy_nearer_its_start(tiny_policy):
    policy, relu = tiny_policy
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    reference = MiniPolicy(copy.deepcopy(policy.model).eval(), policy.tokenizer, 20)
    groups = _group(policy, relu)
    drift = {}
    for kl_coef in (0.0, 2.0):
        policy.model.load_state_dict(state)
        cfg = ArmConfig(arm="leap", epochs=6, lr=3e-2, clip=10.0, kl_coef=kl_coef, micro_batch=2)
        opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
        _, _, stats = update(policy, opt, groups, cfg, reference)
        assert (stats["kl"] > 0.0) == (kl_coef > 0)
        drift[kl_coef] = _kl_to(policy, reference, groups)
    policy.model.load_state_dict(state)
    assert drift[0.0] > 0.0
    assert drift[2.0] < 0.8 * drift[0.0]


def test_update_scores_the_distribution_the_samples_came_from(tiny_policy):
    """At a sampling temperature T, the update's log-probabilities are those of the sampling
    distribution, checked against the per-token log-probabilities that transformers' own sampler reports."""
    policy, relu = tiny_policy
    prompt = policy.encode(render_prompt(relu))
    torch.manual_seed(0)
    out = policy.model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                                dtype=torch.long), max_new_tokens=12, do_sample=True,
                                temperature=0.5, top_k=0, top_p=1.0, output_scores=True,
                                return_dict_in_generate=True, pad_token_id=policy.pad_id)
    response = out.sequences[0, len(prompt):].tolist()
    if policy.eos_id in response:
        response = response[: response.index(policy.eos_id) + 1]
    sampler = policy.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0]
    sampler = sampler[: len(response)]
    at_t, mask = policy.token_logprobs([prompt], [response], temperature=0.5)
    assert mask.sum() == len(response)
    assert torch.allclose(at_t[0], sampler, atol=1e-4)
    at_one, _ = policy.token_logprobs([prompt], [response])
    assert not torch.allclose(at_one[0], sampler, atol=1e-2)


def test_first_drafts_are_buggy_at_the_configured_rate():
    """Real evaluation on the cpu backend: 3 of 10 first-turn targets are the reference, 7 are
    structured mutants that really fail, and every draft also has a repair example -> the reference."""
    tasks = {t.id: t for t in mini_tasks()}
    split = Split(train=["level1/relu", "level1/sigmoid"], held_out=[])
    with Judge("cpu", workers=1) as judge:
        examples, stats = build_examples(list(tasks.values()), split, judge, mutants_per_task=3,
                                         first_turn_weight=10, seed=0, draft_correct_rate=0.3, draft_mutants=2)
    for task_id in split.train:
        ref = as_response(reference_cuda(tasks[task_id]))
        first = [e for e in examples if e.task_id == task_id and e.kind in ("first_turn", "first_draft")]
        assert len(first) == 10 and len({e.prompt for e in first}) == 1
        assert sum(e.response == ref for e in first) == 3
        drafts = [e for e in first if e.kind == "first_draft"]
        assert len(drafts) == 7 and all(e.response != ref for e in drafts)
        assert all(e.status in ("WRONG_OUTPUT", "RUNTIME_ERROR", "TIMEOUT", "COMPILE_ERROR") for e in drafts)
        assert 1 <= len({e.response for e in drafts}) <= 2
        assert any(e.mutation in DRAFT_OPERATORS for e in drafts)
        repairs = [e for e in examples if e.task_id == task_id and e.kind == "repair"]
        assert all(e.response == ref for e in repairs)
        assert {e.mutation for e in drafts} <= {e.mutation for e in repairs}
    assert sum(stats["draft_ops"].values()) == 14
    with pytest.raises(ValueError, match="draft_correct_rate"):
        build_examples(list(tasks.values()), split, judge, draft_correct_rate=1.5)


def test_warm_up_data_refuses_a_backend_that_fails_the_reference():
    """A backend that cannot run kernels (e.g. NVRTC missing) fails every mutant *and* the reference:
    building drafts and repairs from it would teach noise, so it is an error that says so."""
    from leap_gym.result import EvalResult

    tasks = {t.id: t for t in mini_tasks()}
    split = Split(train=["level1/relu"], held_out=[])

    def broken(pairs):
        return [EvalResult(status="RUNTIME_ERROR", message="NvrtcUnavailable: NVRTC library not found")
                for _ in pairs]

    with pytest.raises(RuntimeError, match="reference of level1/relu is judged RUNTIME_ERROR"):
        build_examples(list(tasks.values()), split, broken, mutants_per_task=2, first_turn_weight=10,
                       draft_correct_rate=0.3, draft_mutants=2)
