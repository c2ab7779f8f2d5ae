"""TRL's GRPOTrainer driven by multi-turn LEAP rollouts (`LeapRollout` as its `rollout_func`): a real
optimizer step on the CPU with the tiny local Qwen2 (compile-only backend, reference-solution
guidance so that some trajectories solve), then the rollout's samples checked token by token."""

import inspect
import math
import os

import pytest

trl = pytest.importorskip("trl", reason="the trl extra is not installed (pip install 'leap-gym[trl]')")
pytest.importorskip("datasets")

import torch  # noqa: E402

import leap_gym  # noqa: E402
from leap_agents import DCPConfig, rank_rewards  # noqa: E402
from leap_agents.integrations.trl import LeapRollout, leap_reward, make_grpo_trainer, solved_reward  # noqa: E402
from leap_agents.training.tiny import build_tiny  # noqa: E402

if "rollout_func" not in inspect.signature(trl.GRPOTrainer.__init__).parameters:
    pytest.skip(f"TRL {trl.__version__} has no GRPOTrainer rollout_func hook", allow_module_level=True)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
G = 4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.manual_seed(0)
    model, tokenizer = build_tiny()
    tasks = [t for t in leap_gym.load_tasks("builtin") if t.id in ("level1/relu", "level1/add")]
    # easy_threshold 0.9: a half-solved group refines, so trajectories take a second turn
    rollout = LeapRollout(tasks=tasks, backend="compile-only", max_turns=2, feedback_tokens=64, guide_prob=0.5,
                          dcp=DCPConfig(easy_threshold=0.9))
    args = trl.GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")), use_cpu=True, num_generations=G,
                          per_device_train_batch_size=2 * G, max_completion_length=16, max_steps=1, learning_rate=1e-3,
                          logging_steps=1, save_strategy="no", report_to=[], beta=0.0, seed=0,
                          reward_weights=[1.0, 0.0])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = make_grpo_trainer(model, tokenizer, rollout, args, reward_funcs=[leap_reward, solved_reward])
    trainer.train()
    return trainer, rollout, before


def test_grpo_step_on_leap_rollouts(trained):
    trainer, rollout, before = trained
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and math.isfinite(logs[0]["loss"]) and logs[0]["grad_norm"] > 0
    assert logs[0]["rewards/leap_reward/std"] > 0  # the groups' rank rewards differ: a learning signal
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)]
    assert changed, "no parameter changed after a GRPO step"
    batch = rollout.last_batch
    assert len(batch.trajectories) == 2 * G and {t.task_id for t in batch.trajectories} == {"level1/relu", "level1/add"}


def test_rollout_samples_are_multi_turn_token_streams(trained):
    trainer, rollout, _ = trained
    prompts = [row["prompt"] for row in rollout.dataset(["level1/relu", "level1/add"]) for _ in range(G)]
    out = rollout(prompts, trainer)
    batch = rollout.last_batch
    n = len(prompts)
    assert all(len(out[k]) == n for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "leap_reward"))
    tok = trainer.processing_class
    for i, traj in enumerate(batch.trajectories):
        completion, mask, lps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(completion) == len(mask) == len(lps)
        # the model's tokens are exactly the responses' tokens, turn after turn
        model_tokens = [t for t, m in zip(completion, mask) if m]
        assert model_tokens == [t for turn in traj.turns for t in turn.token_ids]
        assert out["prompt_ids"][i] == traj.turns[0].prompt_token_ids
        if len(traj.turns) > 1:  # turn 2 continued the exact token stream of turn 1 and its feedback
            assert 0 in mask
            continued = len(traj.turns[1].prompt_token_ids) - len(out["prompt_ids"][i])
            assert traj.turns[1].prompt_token_ids == out["prompt_ids"][i] + completion[:continued]
            feedback = tok.decode([t for t, m in zip(completion, mask) if not m])
            assert traj.turns[0].status in feedback and "<|im_start|>assistant" in feedback
        else:
            assert all(mask)
    assert any(len(t.turns) == 2 for t in batch.trajectories)
    for g in range(2):  # the sample reward is the LEAP rank reward of its group
        group = batch.trajectories[g * G:(g + 1) * G]
        expected = rank_rewards([t.first_solved_turn for t in group])
        assert out["leap_reward"][g * G:(g + 1) * G] == pytest.approx(expected)
        assert out["leap_first_solved"][g * G:(g + 1) * G] == [t.first_solved_turn or 0 for t in group]


def test_misaligned_groups_are_refused(trained):
    trainer, rollout, _ = trained
    prompt = rollout.dataset(["level1/relu"])[0]["prompt"]
    with pytest.raises(ValueError, match="multiple of num_generations"):
        rollout([prompt] * (G + 1), trainer)
    with pytest.raises(KeyError, match="LeapRollout.dataset"):
        rollout([[{"role": "user", "content": "write me a poem"}]] * G, trainer)
