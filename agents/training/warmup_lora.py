"""LoRA warm-up of a pretrained model on the LEAP-mini training tasks: SFT on reference kernels and repairs.

The data are chat histories the environment really produces, on LEAP-mini's training split (the
held-out tasks are never seen; `check_split` asserts it):

- first turn: the environment's task prompt -> a reference solution in the short form (``cuda`` block);
- repair: the task prompt, a mutant of the reference (`leap_gym.tasks.mutants`) as the assistant's
  answer, the environment's real feedback on it (judged on the ``cpu`` backend) -> the reference.
  Mutants that pass are dropped.

Besides the training split's tasks, the same examples are built for the synthetic elementwise tasks of
`leap_agents.training.synthetic_tasks` (35 operators, none of them held out), which give a small model
more instances of the skill that carries to a new operator: the reference `forward` written per element.

Both are rendered by the policy itself (`HFPolicy.render`, i.e. `compact_history` for a named model), the
same path its rollouts take, and the loss covers the response tokens only. The adapter is saved in float16
under ``$LEAP_GYM_CACHE/pretrained/<name>-lora-<hash>``; ``--ship`` also copies it into the package
(``leap_agents/adapters/<name>``), where tests and notebooks find it without retraining:

    python -m leap_agents.training.warmup_lora            # build (or load) the cached warm-up
    python -m leap_agents.training.warmup_lora --ship     # and ship it in the package
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from leap_agents.policies.pretrained import ADAPTERS_DIR, SMOLLM2, spec_of
from leap_agents.training.mini.data import as_response, check_split, make_split, mini_tasks, reference_cuda
from leap_agents.training.sft import EvalFn, judge_mutants, sft
from leap_agents.training.synthetic_tasks import synthetic_tasks, wrong_operator_kernels
from leap_gym.cache import cache_dir
from leap_gym.tasks.mutants import mutants

log = logging.getLogger(__name__)

#: Turn budget written into the prompts and feedback of the warm-up histories (as in evaluation).
MAX_TURNS = 4


@dataclass
class LoraWarmupConfig:
    """How the LoRA warm-up is built."""

    model: str = field(default=SMOLLM2.name, metadata={"help": "named pretrained model"})
    held_out: int = field(default=6, metadata={"help": "LEAP-mini held-out tasks (never trained on)"})
    split_seed: int = field(default=0, metadata={"help": "seed of LEAP-mini's train/held-out draw"})
    synthetic: bool = field(default=True, metadata={
        "help": "also train on the synthetic elementwise tasks (leap_agents.training.synthetic_tasks)"})
    mutants_per_task: int = field(default=4, metadata={"help": "mutants judged per training task"})
    wrong_operators: int = field(default=2, metadata={
        "help": "repairs per synthetic task whose wrong answer is another operator's kernel"})
    first_turn_weight: int = field(default=2, metadata={"help": "copies of each first-turn example"})
    train_first_turn_weight: int = field(default=4, metadata={
        "help": "copies of each LEAP-mini training task's first-turn example (0: first_turn_weight); its reference "
                "kernels are longer than the synthetic operators', and fewer copies leave them unlearned"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha"})
    lora_layers: int = field(default=8, metadata={
        "help": "adapt only the top N decoder layers (0: all); backward then stops there, about half the step time"})
    steps: int = field(default=240, metadata={"help": "SFT optimizer steps"})
    batch_size: int = field(default=4, metadata={"help": "examples per step"})
    lr: float = field(default=1.5e-3, metadata={"help": "peak learning rate (linear warm-up, cosine decay)"})
    seed: int = field(default=0, metadata={"help": "mutant draw, data order and LoRA init seed"})

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class SftExample:
    """One SFT pair: an environment history and the response to learn. `kind`: first_turn or repair."""

    task_id: str
    kind: str
    history: list[dict[str, str]]
    response: str
    mutation: str = ""
    status: str = ""


def warmup_split(config: LoraWarmupConfig) -> tuple[list[Any], Any]:
    """LEAP-mini's tasks (level 1, short form, CPU sizes) and its train/held-out split."""
    tasks = mini_tasks()
    return tasks, make_split(tasks, config.held_out, config.split_seed)


def first_turn_history(task: Any) -> list[dict[str, str]]:
    """The history a first-turn example answers: the environment's system message and task prompt."""
    from leap_gym.evaluation.feedback import render_prompt

    return [{"role": "system", "content": "You are an expert CUDA kernel engineer."},
            {"role": "user", "content": render_prompt(task, MAX_TURNS, "debug")}]


def build_examples(tasks: list[Any], train_ids: list[str], judge: EvalFn, mutants_per_task: int = 4,
                   first_turn_weight: int = 2, seed: int = 0, wrong_operators: int = 0,
                   first_turn_weights: dict[str, int] | None = None) -> tuple[list[SftExample], dict[str, Any]]:
    """First-turn and repair examples of the training tasks, each mutant judged by `judge`; `first_turn_weights`
    sets the copies of some tasks' first-turn examples (the others have `first_turn_weight`).

    Returns:
        The examples and statistics (mutants judged, kept, statuses, seconds).
    """
    from leap_gym.evaluation.feedback import render_feedback

    by_id = {t.id: t for t in tasks}
    examples: list[SftExample] = []
    stats: dict[str, Any] = {"mutants": 0, "kept": 0, "passed": 0, "statuses": {}}
    start = time.perf_counter()
    for n, task_id in enumerate(train_ids):
        task = by_id[task_id]
        prompt = first_turn_history(task)
        refs = [as_response(reference_cuda(task, k)) for k in range(len(task.reference_solutions))]
        copies = (first_turn_weights or {}).get(task_id, first_turn_weight)
        for ref in refs:
            examples += [SftExample(task_id, "first_turn", prompt, ref)] * copies
        muts = mutants(reference_cuda(task), mutants_per_task, seed=seed * 1000 + n)
        muts += wrong_operator_kernels(task_id, wrong_operators, seed)
        judged = judge_mutants(task, reference_cuda(task), muts, judge, as_response)
        judged.count_into(stats)
        for op, mutated, result in judged.failing:
            history = prompt + [{"role": "assistant", "content": as_response(mutated)},
                                {"role": "user", "content": render_feedback(result, 1, MAX_TURNS)}]
            examples.append(SftExample(task_id, "repair", history, refs[0], op, result.status))
    stats["seconds"] = time.perf_counter() - start
    return examples, stats


def synthetic_references(judge: EvalFn) -> list[Any]:
    """The synthetic elementwise tasks whose reference solution `judge` finds CORRECT (all of them, normally)."""
    tasks = synthetic_tasks()
    results = judge([(t, as_response(reference_cuda(t))) for t in tasks])
    failed = [t.id for t, r in zip(tasks, results) if r.status != "CORRECT"]
    if failed:
        log.warning("synthetic tasks left out, their reference is not CORRECT: %s", failed)
    return [t for t, r in zip(tasks, results) if r.status == "CORRECT"]


#: The linear layers of a Llama-style decoder layer that LoRA adapts.
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_kwargs(model: Any, r: int, alpha: int, top_layers: int = 0) -> dict[str, Any]:
    """`apply_lora` arguments adapting the attention and MLP projections of the top `top_layers` layers (0: all)."""
    kwargs: dict[str, Any] = {"r": r, "lora_alpha": alpha, "target_modules": list(LORA_TARGETS)}
    layers = int(model.config.num_hidden_layers)
    if 0 < top_layers < layers:
        kwargs["layers_to_transform"] = list(range(layers - top_layers, layers))
    return kwargs


def cache_path(config: LoraWarmupConfig) -> Path:
    return cache_dir("pretrained", f"{spec_of(config.model).name}-lora-{config.key()}")


def save_adapter(model: Any, path: Path) -> None:
    """The adapter weights in float16 safetensors with peft's config (a few MB)."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    from safetensors.torch import load_file, save_file

    weights = path / "adapter_model.safetensors"
    save_file({k: v.half().contiguous() for k, v in load_file(str(weights)).items()}, str(weights))


def warmup(config: LoraWarmupConfig | None = None, rebuild: bool = False, backend: str = "cpu",
           progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Build (or find cached) the LoRA warm-up adapter. Returns its folder and its metadata."""
    from leap_agents.policies.hf import HFPolicy, apply_lora
    from leap_gym.evaluation.evaluator import Evaluator
    from leap_gym.evaluation.memo import CachingEvaluator, evaluate_all
    from leap_gym.evaluation.pipeline import EvalConfig

    config = config or LoraWarmupConfig()
    path = cache_path(config)
    if (path / "warmup.json").exists() and not rebuild:
        log.info("the warm-up adapter is cached at %s", path)
        return path, json.loads((path / "warmup.json").read_text())
    tasks, split = warmup_split(config)
    t0 = time.perf_counter()
    with Evaluator(EvalConfig(backend=backend, workers=2)) as evaluator:
        judge = functools.partial(evaluate_all, CachingEvaluator(evaluator))
        extra = synthetic_references(judge) if config.synthetic else []
        examples, stats = build_examples(tasks + extra, split.train + [t.id for t in extra], judge,
                                         config.mutants_per_task, config.first_turn_weight, config.seed,
                                         config.wrong_operators,
                                         dict.fromkeys(split.train, config.train_first_turn_weight)
                                         if config.train_first_turn_weight else None)
    stats["synthetic_tasks"] = len(extra)
    policy = HFPolicy.from_pretrained(config.model, device="cpu")
    rendered = [policy.render(e.history) + e.response for e in examples]
    check_split(split, rendered, {t.id: t for t in tasks})
    torch.manual_seed(config.seed)
    policy.model = apply_lora(policy.model, **lora_kwargs(policy.model, config.lora_r, config.lora_alpha,
                                                          config.lora_layers))
    t1 = time.perf_counter()
    encoded = [(policy.encode_prompt(e.history), policy.encode_response(e.response)) for e in examples]
    losses = sft(policy.model, encoded, config.steps, config.batch_size, config.lr, pad_id=policy.tokenizer.pad_token_id,
                 seed=config.seed, frozen_prefix=True, progress=progress)
    t2 = time.perf_counter()
    lengths = [len(p) + len(r) for p, r in encoded]
    meta = {"config": asdict(config), "split": split.to_dict(), "backend": backend, "data": stats,
            "examples": {"first_turn": sum(e.kind == "first_turn" for e in examples),
                         "repair": sum(e.kind == "repair" for e in examples)},
            "tokens_per_example": {"mean": sum(lengths) / len(lengths), "max": max(lengths)},
            "losses": losses, "seconds": {"data": t1 - t0, "sft": t2 - t1}}
    save_adapter(policy.model, path)
    (path / "examples.jsonl").write_text("".join(json.dumps(asdict(e)) + "\n" for e in examples))
    (path / "warmup.json").write_text(json.dumps(meta, indent=1))
    log.info("warm-up built in %.0f s (data %.0f s, SFT %.0f s), cached at %s", t2 - t0, t1 - t0, t2 - t1, path)
    return path, meta


def ship(path: Path, name: str) -> Path:
    """Copy a built adapter (weights, config, metadata) into the package's ``adapters/<name>``."""
    target = ADAPTERS_DIR / spec_of(name).name
    target.mkdir(parents=True, exist_ok=True)
    for file in ("adapter_model.safetensors", "adapter_config.json", "warmup.json"):
        shutil.copy2(path / file, target / file)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leap_agents.training.warmup_lora", description=__doc__.split("\n\n")[0])
    defaults = LoraWarmupConfig()
    for f in defaults.__dataclass_fields__.values():
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(getattr(defaults, f.name)),
                            default=getattr(defaults, f.name), help=f.metadata.get("help"))
    parser.add_argument("--rebuild", action="store_true", help="rebuild even when cached")
    parser.add_argument("--ship", action="store_true", help="copy the adapter into leap_agents/adapters/<model>")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default, every core)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    config = LoraWarmupConfig(**{k: getattr(args, k) for k in defaults.__dataclass_fields__})
    path, meta = warmup(config, rebuild=args.rebuild)
    print(f"adapter: {path}")
    print(f"examples: {meta['examples']}, mutants judged {meta['data']['mutants']} (kept {meta['data']['kept']}), "
          f"SFT {meta['seconds']['sft']:.0f} s, final loss {meta['losses'][-1]:.3f}")
    if args.ship:
        print(f"shipped to {ship(path, config.model)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
