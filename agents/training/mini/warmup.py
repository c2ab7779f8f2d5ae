"""The LEAP-mini warm-up: tokenizer, model, SFT data with real environment feedback, SFT, cached checkpoint.

Data, from the training split only:

- first-turn examples, ten per task: the task's compact prompt -> its reference kernel (short form)
  in a known share (`draft_correct_rate`, 0.3), else one of the task's first drafts: a structured
  mutant (missing bound check, wrong index, missing ``__syncthreads``, wrong operator) that really
  fails in the environment. A first draft is then correct at a known rate, and whether it is hinges
  on a few branch tokens: first-attempt success has room to grow, and policy gradient moves it by
  shifting those branches instead of breaking memorised tokens;
- repair examples: each reference is mutated (wrong index, missing bound check, missing
  ``__syncthreads``, syntax slips, wrong operator; `leap_gym.tasks.mutants`), every mutant is
  evaluated in the environment, and a mutant that really fails becomes
  ``prompt(task, mutant, its real feedback) -> reference``. Mutants that pass are dropped.

Each task's reference is judged first: a backend that fails it (e.g. NVRTC not found) cannot tell a
bug from a fix, and the build stops with an error. The warm-up is short (200 SFT steps): it leaves a
policy that solves some tasks at the first turn, fixes some with feedback and fails some, the regime
where DCP and the rank reward matter. The checkpoint is cached under ``$LEAP_GYM_CACHE/mini/warmup-<hash>``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from leap_agents.policies.hf import HFPolicy
from leap_agents.policies.prompts import MiniPrompt, mini_prompt, task_header
from leap_agents.training.mini.data import (
    EOS,
    PAD,
    Split,
    as_response,
    check_split,
    make_split,
    mini_tasks,
    reference_cuda,
)
from leap_agents.training.sft import EvalFn, judge_mutants, sft
from leap_agents.training.tiny import build_qwen2, load_model, save_model, train_tokenizer
from leap_gym.cache import cache_dir
from leap_gym.tasks import Task
from leap_gym.tasks.mutants import DRAFT_OPERATORS, mutants

log = logging.getLogger(__name__)

@dataclass
class MiniModelConfig:
    """Size of the mini Qwen2 model (defaults: about 1.5M parameters with a 1k vocabulary).

    Small on purpose: on two shared CPU cores the warm-up and the three arms of the benchmark must fit
    in 90 minutes. At 0.7M parameters (hidden 128) RL levelled off near a reference probability of
    0.58 within a dozen steps; at 1.5M it rises for most of 24 (0.51 -> 0.89) for 1.3x the warm-up time.
    """

    hidden_size: int = 192
    intermediate_size: int = 576
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024


@dataclass
class WarmupConfig:
    """How the warm-up policy is built."""

    held_out: int = field(default=6, metadata={"help": "tasks never trained on"})
    split_seed: int = field(default=0, metadata={"help": "seed of the train/held-out draw"})
    vocab_size: int = field(default=1536, metadata={"help": "BPE vocabulary size (the corpus may give fewer)"})
    model: MiniModelConfig = field(default_factory=MiniModelConfig)
    mutants_per_task: int = field(default=6, metadata={"help": "mutants evaluated per reference kernel"})
    first_turn_weight: int = field(default=10, metadata={"help": "first-turn examples per task (drafts included)"})
    draft_correct_rate: float = field(default=0.3, metadata={
        "help": "share of a task's first-turn examples whose target is the reference; the rest are its draft mutants "
                "(1.0: references only)"})
    draft_mutants: int = field(default=3, metadata={"help": "structured mutants per task used as buggy first drafts"})
    refine_tasks: int = field(default=6, metadata={
        "help": "training tasks whose first-turn examples are all one buggy draft: only repair examples teach their "
                "reference, so the policy fixes them with feedback and rarely solves them at once"})
    unseen_tasks: int = field(default=6, metadata={
        "help": "training tasks with no warm-up example: out of the warm-up policy's reach (hopeless groups)"})
    sft_steps: int = field(default=200, metadata={"help": "SFT optimizer steps"})
    batch_size: int = field(default=16, metadata={"help": "SFT examples per step"})
    lr: float = field(default=3e-3, metadata={"help": "SFT peak learning rate (cosine decay)"})
    seed: int = field(default=0, metadata={"help": "model init and data order seed"})
    max_new_tokens: int = field(default=300, metadata={"help": "response budget of the policy"})

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class WarmupExample:
    """One SFT pair. `kind`: ``"first_turn"`` (the reference), ``"first_draft"`` (a buggy first draft) or
    ``"repair"``; drafts and repairs keep the mutant's operator and real status."""

    task_id: str
    kind: str
    prompt: str
    response: str
    mutation: str = ""
    status: str = ""


def pick_backend() -> str:
    """``"cpu"`` (real kernel execution) where it is importable and available, else ``"compile-only"``."""
    from leap_gym.backends.base import get_backend

    try:
        if get_backend("cpu").availability().ok:
            return "cpu"
    except Exception as exc:  # the cpu backend is missing or broken: fall back, and say so
        log.warning("the cpu backend is unavailable (%s); mutants are judged compile-only", exc)
    return "compile-only"


def tokenizer_corpus(tasks: list[Task], split: Split) -> list[str]:
    """Texts the tokenizer learns from: train references (and their prompts), every task header."""
    by_id = {t.id: t for t in tasks}
    texts = [as_response(reference_cuda(by_id[i], k)) + EOS for i in split.train if i not in split.unseen
             for k in range(len(by_id[i].reference_solutions))]
    texts += [task_header(t) for t in tasks if t.id in split.train]
    texts += [task_header(t) for t in tasks if t.id in split.held_out]  # prompts are seen at test time anyway
    texts += ["prev:\n```cuda\n```\nfb COMPILE_ERROR line 3: identifier is undefined\nfix:\nanswer:\n",
              "fb WRONG_OUTPUT max abs err 1.5, 50.0% mismatched, first at [0]\n",
              "fb RUNTIME_ERROR out-of-bounds access in kernel at line 4\n"]
    return texts


def build_examples(tasks: list[Task], split: Split, eval_fn: EvalFn, mutants_per_task: int = 8,
                   first_turn_weight: int = 3, seed: int = 0, draft_correct_rate: float = 1.0,
                   draft_mutants: int = 0) -> tuple[list[WarmupExample], dict[str, Any]]:
    """First-turn and repair examples of the training split; mutants judged by `eval_fn`.

    Each task gets `first_turn_weight` first-turn examples: ``round(first_turn_weight *
    draft_correct_rate)`` target the reference, the rest cycle over up to `draft_mutants` structured
    mutants (`DRAFT_OPERATORS`) that really fail, so a first draft is correct at a known rate and
    buggy otherwise. Every failing mutant (drafts included) also becomes a repair example
    ``prompt(task, its real feedback) -> reference``. Each of the split's `refine` tasks gets one draft as every
    first-turn target (rate 0), and its `unseen` tasks no example at all.

    Returns:
        The examples and statistics (mutants evaluated, kept, statuses, drafts, seconds).
    """
    if not 0.0 <= draft_correct_rate <= 1.0:
        raise ValueError(f"draft_correct_rate is a share in [0, 1], got {draft_correct_rate}")
    by_id = {t.id: t for t in tasks}
    examples: list[WarmupExample] = []
    stats: dict[str, Any] = {"mutants": 0, "kept": 0, "passed": 0, "statuses": {}, "by_op": {}, "drafts": {},
                             "draft_ops": {}}
    start = time.perf_counter()
    for n, task_id in enumerate(split.train):
        if task_id in split.unseen:
            continue
        task = by_id[task_id]
        rate = 0.0 if task_id in split.refine else draft_correct_rate
        refs = [reference_cuda(task, k) for k in range(len(task.reference_solutions))]
        candidates = mutants(refs[0], mutants_per_task, seed=seed * 1000 + n)
        if draft_mutants > 0 and rate < 1.0:
            candidates = mutants(refs[0], 2 * draft_mutants, seed=seed * 1000 + n, only=DRAFT_OPERATORS) + [
                m for m in candidates if m[0] not in DRAFT_OPERATORS]
        judged = judge_mutants(task, refs[0], candidates, eval_fn, as_response)
        judged.count_into(stats)
        for op, _, result in judged.failing:
            stats["by_op"][op] = stats["by_op"].get(op, 0) + 1
            examples.append(WarmupExample(task_id, "repair", mini_prompt(task, result), as_response(refs[0]), op,
                                          result.status))
        failing = judged.failing
        n_drafts = 1 if task_id in split.refine else draft_mutants
        drafts = [f for f in failing if f[0] in DRAFT_OPERATORS][:n_drafts] if rate < 1.0 else []
        if rate < 1.0 and len(drafts) < n_drafts:  # too few structured bugs: any real failure
            drafts += [f for f in failing if f not in drafts][: n_drafts - len(drafts)]
        n_correct = first_turn_weight if not drafts else round(first_turn_weight * rate)
        stats["drafts"][task_id] = len(drafts)
        prompt = mini_prompt(task)
        for k in range(first_turn_weight):
            if k < n_correct:
                examples.append(WarmupExample(task_id, "first_turn", prompt, as_response(refs[k % len(refs)])))
            else:
                op, mutated, result = drafts[(k - n_correct) % len(drafts)]
                stats["draft_ops"][op] = stats["draft_ops"].get(op, 0) + 1
                examples.append(WarmupExample(task_id, "first_draft", prompt, as_response(mutated), op, result.status))
    stats["seconds"] = time.perf_counter() - start
    return examples, stats


def mini_split(config: WarmupConfig | None = None) -> Split:
    """The split (with its training tiers) the warm-up of `config` is built on."""
    config = config or WarmupConfig()
    return make_split(mini_tasks(), config.held_out, config.split_seed, config.refine_tasks, config.unseen_tasks)


def cache_root() -> Path:
    return cache_dir("mini")


def _policy(model: Any, tokenizer: Any, config: WarmupConfig) -> HFPolicy:
    return HFPolicy(model, tokenizer, max_prompt_tokens=config.model.max_position_embeddings, batch_size=32,
                    max_new_tokens=config.max_new_tokens, prompt_format=MiniPrompt())


def warmup_policy(config: WarmupConfig | None = None, cache: Path | None = None, backend: str | None = None,
                  rebuild: bool = False) -> tuple[HFPolicy, Split, dict[str, Any]]:
    """The warm-up policy (reading `MiniPrompt`): loaded from the cache, or built (data, tokenizer, model, SFT)
    and cached.

    Returns:
        The policy, the split, and the build's metadata (data statistics, SFT losses, timings).
    """
    from leap_gym.evaluation.evaluator import Evaluator
    from leap_gym.evaluation.memo import CachingEvaluator, evaluate_all
    from leap_gym.evaluation.pipeline import EvalConfig

    config = config or WarmupConfig()
    path = (cache or cache_root()) / f"warmup-{config.key()}"
    meta_path = path / "warmup.json"
    if meta_path.exists() and not rebuild:
        meta = json.loads(meta_path.read_text())
        model, tokenizer = load_model(path)
        log.info("loaded the cached warm-up policy from %s", path)
        return _policy(model, tokenizer, config), Split(**meta["split"]), meta
    tasks = mini_tasks()
    split = mini_split(config)
    backend = backend or pick_backend()
    t0 = time.perf_counter()
    with Evaluator(EvalConfig(backend=backend, workers=2)) as evaluator:
        judge = functools.partial(evaluate_all, CachingEvaluator(evaluator))
        examples, stats = build_examples(tasks, split, judge, config.mutants_per_task, config.first_turn_weight,
                                         config.seed, config.draft_correct_rate, config.draft_mutants)
    check_split(split, [e.prompt + e.response for e in examples], {t.id: t for t in tasks})
    tokenizer = train_tokenizer(tokenizer_corpus(tasks, split), config.vocab_size, [PAD, EOS], eos_token=EOS,
                                pad_token=PAD, min_frequency=2)
    m = config.model
    model = build_qwen2(tokenizer, hidden_size=m.hidden_size, layers=m.num_hidden_layers, heads=m.num_attention_heads,
                        kv_heads=m.num_key_value_heads, intermediate_size=m.intermediate_size,
                        max_positions=m.max_position_embeddings, seed=config.seed)
    policy = _policy(model, tokenizer, config)
    t1 = time.perf_counter()
    # SFT runs on the caller's torch thread count: on a shared 2-core machine two threads spin against
    # each other and other load, one thread does not.
    encoded = [(tokenizer(e.prompt, add_special_tokens=False)["input_ids"], policy.encode_response(e.response))
               for e in examples]
    losses = sft(model, encoded, config.sft_steps, config.batch_size, config.lr, pad_id=tokenizer.pad_token_id,
                 seed=config.seed, weight_decay=0.01, betas=(0.9, 0.98), warmup_fraction=0.05)
    t2 = time.perf_counter()
    meta = {"config": asdict(config), "split": split.to_dict(), "backend": backend, "data": stats,
            "examples": {kind: sum(e.kind == kind for e in examples) for kind in ("first_turn", "first_draft", "repair")},
            "sft_losses": losses[:: max(1, len(losses) // 50)], "final_loss": losses[-1] if losses else None,
            "seconds": {"data": t1 - t0, "sft": t2 - t1},
            "parameters": sum(p.numel() for p in model.parameters())}
    save_model(model, tokenizer, path)
    (path / "examples.jsonl").write_text("".join(json.dumps(asdict(e)) + "\n" for e in examples))
    meta_path.write_text(json.dumps(meta, indent=1))
    log.info("warm-up built in %.0f s (data %.0f s, SFT %.0f s), cached at %s", t2 - t0, t1 - t0, t2 - t1, path)
    return policy, split, meta
