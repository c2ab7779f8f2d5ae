"""The one training engine: each arm's reward (hand-computed), the clipped objective and its KL term, the
update's log-probabilities, and two real steps of each arm through `LeapTrainer` with a small local model,
real compilation and real execution on the cpu backend."""

from __future__ import annotations

import copy

import pytest
import torch

from leap_agents.algorithms.policy_loss import clipped_policy_loss
from leap_agents.policies.hf import HFPolicy
from leap_agents.policies.prompts import MiniPrompt, mini_prompt
from leap_agents.training.callbacks import ReferenceProbe
from leap_agents.training.config import ARMS, TrainConfig, arm_config
from leap_agents.training.logprobs import response_logprobs
from leap_agents.training.mini.data import EOS, PAD, as_response, mini_tasks, reference_cuda
from leap_agents.training.rollout import RolloutBatch
from leap_agents.training.sft import sft
from leap_agents.training.tiny import build_qwen2, train_tokenizer
from leap_agents.training.trajectory import Trajectory, Turn, assign_rewards

pytest.importorskip("transformers")

C, W = "CORRECT", "WRONG_OUTPUT"


def _traj(statuses: list[str], index: int = 0) -> Trajectory:
    t = Trajectory("level1/relu", 0, index)
    for k, s in enumerate(statuses, start=1):
        t.turns.append(Turn(turn=k, prompt=[], response="r", status=s, score=float(s == C)))
        if s == C and t.first_solved_turn is None:
            t.first_solved_turn = k
    return t


def _group(*runs: list[str]) -> list[Trajectory]:
    return [_traj(r, i) for i, r in enumerate(runs)]


def test_leap_reward_is_the_rank_reward_on_every_turn():
    group = _group([C], [W, C], [W, W], [W, W])
    assign_rewards([group], "leap")
    assert [t.reward for t in group] == [1.0, 0.75, 0.0, 0.0]  # 1 - F(k-1), F(1) = 1/4
    a = [t.turns[0].advantage for t in group]
    assert a[0] > a[1] > 0 > a[2] == a[3]
    assert group[1].turns[1].advantage == group[1].turns[0].advantage  # every turn carries the trajectory's
    assert sum(a) == pytest.approx(0.0, abs=1e-6)


def test_leap_solving_turn_credit_pays_the_repair_not_the_draft():
    group = _group([C], [W, C], [W, W], [W, W])
    assign_rewards([group], "leap", credit="solving_turn")
    assert [t.reward for t in group] == [1.0, 0.75, 0.0, 0.0]  # the trajectories' rank rewards are unchanged
    assert [t.reward for t in group[1].turns] == [0.0, 0.75]
    assert group[0].turns[0].advantage > group[1].turns[1].advantage > 0
    assert group[1].turns[0].advantage == group[2].turns[0].advantage < 0  # the repaired draft earns as a failed one
    assert sum(t.advantage for traj in group for t in traj.turns) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="credit"):
        assign_rewards([group], "leap", credit="everything")


def test_kevin_return_discounts_later_success_per_turn():
    group = _group([C], [W, C], [W, W], [W, W])
    assign_rewards([group], "kevin", gamma=0.4)
    assert [t.reward for t in group[1].turns] == pytest.approx([0.4, 1.0])  # the failed turn before a solve
    assert group[0].turns[0].advantage == group[1].turns[1].advantage > group[1].turns[0].advantage > 0
    assert group[2].turns[0].advantage < 0
    advs = [t.advantage for traj in group for t in traj.turns]
    assert sum(advs) == pytest.approx(0.0, abs=1e-6)  # normalised over every turn of the group


def test_single_turn_reward_is_the_first_turn_only():
    group = _group([C], [W, C], [W], [W])
    assign_rewards([group], "single_turn")
    assert [t.reward for t in group] == [1.0, 0.0, 0.0, 0.0]  # a turn-2 solve earns nothing
    assert group[0].turns[0].advantage > 0 > group[1].turns[0].advantage
    assert group[1].turns[1].advantage == 0.0


def test_arms_differ_only_in_what_defines_them():
    base = TrainConfig()
    arms = {arm: arm_config(base, arm) for arm in ARMS}
    assert (arms["leap"].reward.scheme, arms["leap"].dcp.enabled) == ("leap", True)
    assert (arms["multi_turn"].reward.scheme, arms["multi_turn"].dcp.enabled) == ("kevin", False)
    assert (arms["single_turn"].reward.scheme, arms["single_turn"].rollout.max_turns) == ("single_turn", 1)
    for arm in arms.values():
        assert arm.optim == base.optim and arm.run == base.run and arm.model == base.model
    with pytest.raises(ValueError, match="unknown arm"):
        arm_config(base, "ppo")


def _grad(logp0: list[float], old: list[float], adv: float, ref: list[float] | None = None, kl_coef: float = 0.0,
          clip: float = 0.2) -> torch.Tensor:
    logp = torch.tensor(logp0, requires_grad=True)
    per_token, _ = clipped_policy_loss(logp, torch.tensor(old), adv, clip, clip,
                                       None if ref is None else torch.tensor(ref), kl_coef)
    per_token.sum().backward()
    return logp.grad


def test_clip_stops_the_gradient_beyond_the_trust_region():
    old = [-1.0, -1.0, -1.0]
    logp = [-1.0 + 0.5, -1.0 + 0.05, -1.0 - 0.5]  # ratios e^.5 (beyond 1.2), e^.05 (inside), e^-.5 (below .8)
    g = _grad(logp, old, adv=1.0)
    assert g[0] == 0.0  # already pushed up past 1 + clip: no further push
    assert g[1] < 0.0 and g[2] < 0.0  # inside, and a positive advantage below 1 - clip still pulls up
    g = _grad(logp, old, adv=-1.0)
    assert g[2] == 0.0 and g[1] > 0.0 and g[0] > 0.0  # mirrored for a negative advantage
    _, stats = clipped_policy_loss(torch.tensor(logp), torch.tensor(old), 1.0)
    assert stats["clipped"] == 1.0
    # at ratio 1 (the first epoch) the objective is REINFORCE: gradient -A per token
    assert torch.allclose(_grad([-2.0, -3.0], [-2.0, -3.0], adv=2.0), torch.tensor([-2.0, -2.0]))


def test_kl_penalty_pulls_towards_the_reference_and_vanishes_on_it():
    logp = torch.tensor([-0.5, -2.0])
    per_token, stats = clipped_policy_loss(logp, logp, 0.0, ref_logp=logp.clone(), kl_coef=1.0)
    assert per_token.sum().item() == pytest.approx(0.0) and stats["kl"] == pytest.approx(0.0)
    g = _grad([-0.5, -3.0], [-0.5, -3.0], adv=0.0, ref=[-1.0, -2.0], kl_coef=1.0)
    assert g[0] > 0.0 and g[1] < 0.0  # more (or less) probability than the reference: pulled back
    _, stats = clipped_policy_loss(torch.tensor([-0.5, -3.0]), torch.tensor([-0.5, -3.0]), 0.0,
                                   ref_logp=torch.tensor([-1.0, -2.0]), kl_coef=1.0)
    assert stats["kl"] == pytest.approx((torch.exp(torch.tensor(-0.5)) + 0.5 - 1 + torch.exp(torch.tensor(1.0)) - 2).item())


# -- a small local model, trained through LeapTrainer -------------------------------------------------


@pytest.fixture(scope="module")
def relu():
    return {t.id: t for t in mini_tasks()}["level1/relu"]


@pytest.fixture(scope="module")
def small_policy(relu):
    """A small model fitted to the relu reference in 60 SFT steps (its samples vary at temperature 0.8)."""
    torch.set_num_threads(1)
    sig = {t.id: t for t in mini_tasks()}["level1/sigmoid"]
    texts = [as_response(reference_cuda(t)) + EOS for t in (relu, sig)] * 4 + [mini_prompt(relu)]
    tokenizer = train_tokenizer(texts, 400, [PAD, EOS], eos_token=EOS, pad_token=PAD, min_frequency=2)
    model = build_qwen2(tokenizer, hidden_size=64, intermediate_size=128, layers=2)
    policy = HFPolicy(model, tokenizer, max_new_tokens=120, prompt_format=MiniPrompt())
    prompt = tokenizer(mini_prompt(relu), add_special_tokens=False)["input_ids"]
    sft(model, [(prompt, policy.encode_response(as_response(reference_cuda(relu))))], steps=60, batch_size=4,
        lr=1e-2, pad_id=tokenizer.pad_token_id)
    return policy


def _config(tmp_path, arm: str = "leap", **optim) -> TrainConfig:
    config = TrainConfig(backend="cpu")
    config.rollout.group_size, config.rollout.max_turns, config.rollout.max_new_tokens = 4, 2, 120
    config.rollout.temperature, config.rollout.eval_workers, config.rollout.progress_bar = 0.8, 1, False
    config.dcp.easy_threshold = 0.25
    config.optim.lr, config.optim.micro_batch_size, config.optim.precision = 1e-3, 4, "fp32"
    for key, value in optim.items():
        setattr(config.optim, key, value)
    config.run.steps, config.run.tasks_per_step, config.run.output_dir = 2, 1, str(tmp_path / arm)
    config.run.tensorboard, config.run.probe, config.run.save_every = False, "reference", 1000
    return arm_config(config, arm)


@pytest.fixture
def logprob_calls(monkeypatch) -> list[int]:
    """The number of samples in each of the trainer's log-probability passes, in order."""
    import leap_agents.training.trainer as trainer_module

    calls: list[int] = []

    def counted(*args, **kwargs):
        calls.append(len(args[1]))
        return response_logprobs(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "response_logprobs", counted)
    return calls


def _trainer(tmp_path, policy, relu, arm: str = "leap", **optim):
    from leap_agents.training.trainer import LeapTrainer

    return LeapTrainer(_config(tmp_path, arm, **optim), policy=policy, tasks=[relu])


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_two_real_steps_of_each_arm(tmp_path, small_policy, relu, arm):
    before = copy.deepcopy(small_policy.model.state_dict())
    trainer = _trainer(tmp_path, small_policy, relu, arm)
    history = trainer.train()
    assert len(history) == 2 and trainer.step == 2
    for m in history:
        assert m["trajectories"] == 4 and m["time_generation"] > 0 and 0.0 <= m["pass_at_1"] <= 1.0
        unsolved_after_1 = round(4 * (1 - m["pass_at_1"]))
        refinements = m["responses"] - 4
        if arm == "single_turn":
            assert refinements == 0
        elif arm == "multi_turn":
            assert refinements == unsolved_after_1  # every unsolved trajectory refines
        else:
            assert refinements <= unsolved_after_1  # DCP may prune
            if m["pass_at_1"] > 0:  # threshold 1/G: a group with a first-turn solve stops
                assert refinements == 0 and m["stop_easy_group"] == unsolved_after_1
        assert 0.0 <= m["reference_p"] <= 1.0
    updated = any(m["samples"] > 0 for m in history)
    changed = any(not torch.equal(before[k], v) for k, v in small_policy.model.state_dict().items())
    assert changed == updated
    assert (trainer.out / "metrics.csv").exists() and (trainer.out / "report.html").exists()
    assert (trainer.out / "checkpoints" / "step-000002" / "trainable.pt").exists()
    small_policy.model.load_state_dict(before)


def _batch(policy: HFPolicy, relu, temperature: float = 0.8) -> RolloutBatch:
    """Two sampled responses (real `generate`, with the sampler's log-probabilities), advantages +1 and -1."""
    meta = {"task_id": relu.id, "task": relu, "turn": 1, "last_result": None}
    gens = policy.generate([[], []], meta=[meta, meta], temperature=temperature, max_new_tokens=24, seed=1)
    trajs = []
    for i, (gen, adv) in enumerate(zip(gens, (1.0, -1.0))):
        t = Trajectory(relu.id, 0, i)
        t.turns.append(Turn(turn=1, prompt=[], response=gen.text, token_ids=gen.token_ids, logprobs=gen.logprobs,
                            prompt_token_ids=gen.prompt_token_ids, advantage=adv))
        trajs.append(t)
    return RolloutBatch(trajectories=trajs)


def _handmade_batch(policy: HFPolicy, relu) -> RolloutBatch:
    """A reference prefix with advantage +1 and a broken answer with -1 (responses written here, no sampler)."""
    meta = {"task_id": relu.id, "task": relu, "turn": 1, "last_result": None}
    trajs = []
    for i, (text, adv) in enumerate(((as_response(reference_cuda(relu))[:60], 1.0), ("```cuda\nvoid\n```", -1.0))):
        t = Trajectory(relu.id, 0, i)
        t.turns.append(Turn(turn=1, prompt=[], response=text, token_ids=policy.encode_response(text),
                            prompt_token_ids=policy.encode_prompt([], meta), advantage=adv))
        trajs.append(t)
    return RolloutBatch(trajectories=trajs)


def test_update_divides_by_the_distribution_the_samples_came_from(tmp_path, small_policy, relu):
    """The ratio's denominator (the trainer's log-probabilities at the sampling temperature) equals what the
    sampler reported for the same tokens; at another temperature it would not, and the bound refuses it."""
    state = copy.deepcopy(small_policy.model.state_dict())
    trainer = _trainer(tmp_path, small_policy, relu, epochs=1)
    stats = trainer.update(_batch(small_policy, relu))
    assert stats["samples"] == 2 and stats["logprob_gap_max"] < 1e-3
    small_policy.model.load_state_dict(state)
    trainer.config.rollout.temperature = 3.0  # the trainer scores another distribution than the sampled one
    trainer.config.optim.max_logprob_gap = 0.05
    with pytest.raises(RuntimeError, match="another distribution"):
        trainer.update(_batch(small_policy, relu, temperature=0.8))
    small_policy.model.load_state_dict(state)


@pytest.mark.parametrize("epochs", [1, 2])
def test_one_mini_batch_divides_by_its_first_epochs_own_forward_pass(tmp_path, small_policy, relu, logprob_calls,
                                                                     monkeypatch, epochs):
    """With one mini-batch the first epoch's forward pass is at the sampling weights (its optimizer step follows
    it): the update skips the separate scoring pass and takes the same steps, with the same sampler gap, as with it;
    a gap above the bound still refuses the batch before any weight moves."""
    import leap_agents.training.trainer as trainer_module

    state = copy.deepcopy(small_policy.model.state_dict())
    batch = _batch(small_policy, relu)
    after, stats = {}, {}
    for one_pass in (True, False):
        small_policy.model.load_state_dict(state)
        logprob_calls.clear()
        with monkeypatch.context() as m:
            if not one_pass:
                m.setattr(trainer_module.LeapTrainer, "_one_pass", lambda self, n: False)
            trainer = _trainer(tmp_path, small_policy, relu, epochs=epochs, lr=3e-2, kl_coef=0.0, micro_batch_size=1)
            stats[one_pass] = trainer.update(batch)
        after[one_pass] = {k: v.clone() for k, v in small_policy.model.state_dict().items()}
        training = [1, 1] * epochs  # one pass per sample and epoch, one sample per micro-batch
        assert logprob_calls == (training if one_pass else [1, 1] + training)  # the scoring pass first, or none
    assert stats[True]["optimizer_steps"] == epochs
    assert all(torch.equal(after[True][k], after[False][k]) for k in state)
    assert any(not torch.equal(after[True][k], state[k]) for k in state)
    for key in ("loss", "grad_norm", "ratio_mean", "clip_frac", "logprob_gap_mean", "logprob_gap_max"):
        assert stats[True][key] == stats[False][key], key
    small_policy.model.load_state_dict(state)
    trainer = _trainer(tmp_path, small_policy, relu, epochs=epochs, lr=3e-2, kl_coef=0.0)
    trainer.config.rollout.temperature = 3.0
    with pytest.raises(RuntimeError, match="another distribution"):
        trainer.update(batch)
    assert all(torch.equal(v, state[k]) for k, v in small_policy.model.state_dict().items())
    small_policy.model.load_state_dict(state)


def test_inner_epochs_keep_the_sampling_log_probs_so_the_clip_binds(tmp_path, small_policy, relu):
    state = copy.deepcopy(small_policy.model.state_dict())
    trainer = _trainer(tmp_path, small_policy, relu, epochs=4, lr=3e-2, kl_coef=0.0, micro_batch_size=1)
    stats = trainer.update(_handmade_batch(small_policy, relu))
    assert stats["optimizer_steps"] == 4  # one optimizer step per inner epoch
    assert stats["clip_frac"] > 0.0  # by the later epochs the ratio left 1 +- clip (the old log-probs stayed fixed)
    small_policy.model.load_state_dict(state)
    trainer = _trainer(tmp_path, small_policy, relu, epochs=1, lr=3e-2, kl_coef=0.0)
    assert trainer.update(_handmade_batch(small_policy, relu))["clip_frac"] == 0.0  # one epoch at ratio 1 never clips
    small_policy.model.load_state_dict(state)


def test_mini_batches_split_one_epoch_into_optimizer_steps_on_the_sampling_log_probs(tmp_path, small_policy, relu,
                                                                                     logprob_calls):
    """Two mini-batches of one epoch: one scoring pass at the sampling weights, then each sample trained once, in
    two optimizer steps; the second mini-batch's ratio has left 1 because the first step moved the weights."""
    state = copy.deepcopy(small_policy.model.state_dict())
    trainer = _trainer(tmp_path, small_policy, relu, epochs=1, mini_batches=2, lr=3e-2, kl_coef=0.0)
    stats = trainer.update(_handmade_batch(small_policy, relu))
    assert stats["optimizer_steps"] == 2 and stats["samples"] == 2
    assert logprob_calls == [2, 1, 1]  # the scoring pass over both samples, then one sample per mini-batch
    assert stats["ratio_mean"] != 1.0
    small_policy.model.load_state_dict(state)


def test_adams_epsilon_far_above_the_gradient_makes_the_step_follow_the_gradient(tmp_path, small_policy, relu):
    """By default AdamW's first step moves every weight with a gradient by lr; with `optim.eps` far above the
    gradient's coordinates the step is the gradient times lr / eps (momentum SGD)."""
    state = copy.deepcopy(small_policy.model.state_dict())
    batch = _handmade_batch(small_policy, relu)
    for lr, eps in ((1e-3, 1e-8), (1.0, 10.0)):
        small_policy.model.load_state_dict(state)
        trainer = _trainer(tmp_path, small_policy, relu, epochs=1, lr=lr, kl_coef=0.0, eps=eps)
        assert trainer.optimizer.param_groups[0]["eps"] == eps
        before = [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]
        trainer.update(batch)
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        step = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
        grad = torch.cat([p.grad.flatten() for p in params])
        moved = step[grad.abs() > 1e-6].abs()
        if eps < 1.0:
            assert torch.allclose(moved, torch.full_like(moved, lr), rtol=0.05)
        else:
            assert torch.nn.functional.cosine_similarity(step, -grad, dim=0) > 0.999
            assert float(step.norm()) == pytest.approx(lr / eps * float(grad.norm()), rel=1e-2)
    small_policy.model.load_state_dict(state)


def test_kl_penalty_keeps_the_policy_nearer_its_start(tmp_path, small_policy, relu):
    state = copy.deepcopy(small_policy.model.state_dict())
    batch = _handmade_batch(small_policy, relu)
    drift = {}
    for kl_coef in (0.0, 2.0):
        small_policy.model.load_state_dict(state)
        trainer = _trainer(tmp_path, small_policy, relu, epochs=6, lr=3e-2, clip_eps=10.0, clip_eps_high=10.0,
                           kl_coef=kl_coef)
        start = trainer.ref_model if trainer.ref_model is not None else copy.deepcopy(small_policy.model)
        stats = trainer.update(batch)
        assert (stats["kl"] > 0.0) == (kl_coef > 0)
        samples = [t for traj in batch.trajectories for t in traj.turns]
        new, ref = trainer._score(small_policy.model, samples), trainer._score(start, samples)
        drift[kl_coef] = sum(clipped_policy_loss(n, n, 0.0, ref_logp=r, kl_coef=1.0)[1]["kl"] for n, r in zip(new, ref))
    small_policy.model.load_state_dict(state)
    assert drift[0.0] > 0.0 and drift[2.0] < 0.8 * drift[0.0]


def test_reference_probe_is_the_rate_at_which_samples_are_the_reference(small_policy, relu):
    """The race's noise-free curve: the probe's probability matches how often real samples at that
    temperature reproduce the reference token for token (128 samples, 4 standard errors)."""
    probe = ReferenceProbe(small_policy, [relu], [[]], temperature=0.8)()
    reference = small_policy.encode_response(as_response(reference_cuda(relu)))
    meta = {"task_id": relu.id, "task": relu, "turn": 1, "last_result": None}
    samples = small_policy.generate([[]] * 128, meta=[meta] * 128, seed=0, temperature=0.8)
    rate = sum(s.token_ids == reference for s in samples) / len(samples)
    assert 0.05 < rate < 0.95  # the check means something only where samples differ
    assert abs(probe - rate) < 4 * (rate * (1 - rate) / len(samples)) ** 0.5


def test_a_lora_checkpoint_holds_the_adapter_and_the_optimizer_not_the_model(tmp_path, small_policy, relu):
    pytest.importorskip("peft")
    from leap_agents.policies.hf import apply_lora
    from leap_agents.training.trainer import LeapTrainer

    model = apply_lora(copy.deepcopy(small_policy.model), r=4, lora_alpha=8)
    policy = HFPolicy(model, small_policy.tokenizer, max_new_tokens=40, prompt_format=MiniPrompt())
    config = _config(tmp_path, "leap", lr=1e-2)
    trainer = LeapTrainer(config, policy=policy, tasks=[relu])
    trainer.update(_handmade_batch(policy, relu))
    trainer.step = 1
    path = trainer.save_checkpoint()
    saved = torch.load(path / "trainable.pt")
    assert saved and all("lora_" in name for name in saved)
    assert sum(v.numel() for v in saved.values()) < 0.2 * sum(p.numel() for p in model.parameters())
    assert (path / "adapter" / "adapter_config.json").exists() and (path / "optimizer.pt").exists()
    with torch.no_grad():  # a fresh process would start from the warm-up: scramble the adapter, then resume
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.zero_()
    resumed = LeapTrainer(config, policy=policy, tasks=[relu])
    assert resumed.step == 1
    assert all(torch.equal(resumed.trainable_state()[n], v) for n, v in saved.items())
