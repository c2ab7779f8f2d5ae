"""Stable-Baselines3 on `KernelDebugEnv`: choose among candidate responses, observe numeric features.

SB3's algorithms act on fixed-size spaces, not text. `CandidateChoiceEnv` wraps a `KernelDebugEnv`
so that each action is ``Discrete(K)``: which of the task's K candidate responses to submit, and
each observation a float32 feature vector (`FeatureSpec`): the task (level, tags, input size,
which task), the last status, compile and correctness flags, kernel resources, speedup, which
candidates were tried, and the turn. Rewards, termination and truncation are the environment's.

Candidates per task are built by `make_candidates`: the reference solutions, tuned variants (the
launch's block size changed) and broken mutants (a syntax slip, a wrong index, a missing bound
check, a renamed kernel, lost code fences...), shuffled per task; or any responses you pass (for
example what an LLM proposed earlier). Their outcomes are deterministic, so results are cached per
(task, size, backend, response) in an `EvalCache`, optionally saved to a JSON file and filled
ahead of time with `precompute`.

Examples:
    >>> from leap_gym.integrations.sb3 import make_candidate_env
    >>> env = make_candidate_env(["level1/relu"], backend="compile-only", num_candidates=4, max_turns=1)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape == env.observation_space.shape, env.action_space
    (True, Discrete(4))
    >>> obs, reward, terminated, truncated, info = env.step(0)
    >>> info["result"].status in ("COMPILED", "COMPILE_ERROR", "FORMAT_ERROR")
    True
"""

from __future__ import annotations

import logging
import math
import random
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from leap_gym.evaluation.memo import CachingEvaluator, EvalCache, cacheable
from leap_gym.result import CORRECT, STATUSES, EvalResult
from leap_gym.tasks import Task, input_numel
from leap_gym.tasks.mutants import OPERATORS

log = logging.getLogger(__name__)

LEVELS = (1, 2, 3, 4)
TAG_VOCAB = ("elementwise", "activation", "binary", "broadcast", "fused", "reduction", "warp", "softmax",
             "normalization", "matmul", "gemv", "batched", "tiling", "shared-memory", "convolution", "pooling",
             "stencil", "attention", "causal", "transformer", "mlp", "block", "gating", "residual", "recurrent",
             "loss", "atomics", "gather", "index", "scan", "transpose", "memory-bound", "strided", "fp16", "bf16")


# ------------------------------------------------------------------------------------------------ candidates


@dataclass
class Candidate:
    """One response to a task and how it was made (``reference``, ``variant:<what>``, ``mutant:<what>``)."""

    text: str
    kind: str


_FENCE_RE = re.compile(r"^```[ \t]*python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_CUDA_FENCE_RE = re.compile(r"^```[ \t]*(?:cuda|cu|c\+\+|cpp)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _edit_block(text: str, pattern: re.Pattern, edit: Callable[[str], str]) -> str:
    match = pattern.search(text)
    if match is None:
        return text
    return text[:match.start(1)] + edit(match.group(1)) + text[match.end(1):]


def _block_size_variant(size: int) -> Callable[[str], str]:
    def edit(python: str) -> str:
        return re.sub(r"\b255\b", str(size - 1), re.sub(r"\b256\b", str(size), python))
    return edit


def _rename_kernel(cuda: str) -> str:
    match = re.search(r"__global__\s+void\s+(\w+)", cuda)
    return cuda if match is None else re.sub(rf"\b{match.group(1)}\b", match.group(1) + "_v2", cuda, count=1)


def _bug(operator: str) -> Callable[[str], str]:
    """A seeded application of one of `leap_gym.tasks.mutants`'s operators (the source unchanged where it does
    not apply)."""
    fn = {op.name: op.fn for op in OPERATORS}[operator]
    return lambda cuda: fn(cuda, random.Random(0)) or cuda


# (kind, block, edit): edits of a reference solution, most informative first.
_MUTATIONS: list[tuple[str, str, Callable[[str], str]]] = [
    ("variant:block128", "python", _block_size_variant(128)),
    ("mutant:syntax_slip", "cuda", _bug("missing_semicolon")),
    ("mutant:wrong_index", "cuda", _bug("wrong_index")),
    ("mutant:renamed_kernel", "cuda", _rename_kernel),
    ("mutant:no_bound_check", "cuda", _bug("missing_bound_check")),
    ("mutant:wrong_operator", "cuda", _bug("wrong_operator")),
    ("mutant:half_grid", "python", lambda python: re.sub(r"\+\s*255\)\s*//\s*256", "+ 255) // 512", python, count=1)),
    ("variant:block512", "python", _block_size_variant(512)),
]


def _no_fences(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("```"))


def make_candidates(task: Task, num_candidates: int, seed: int = 0, shuffle: bool = True,
                    extra: list[str] | None = None) -> list[Candidate]:
    """`num_candidates` responses to `task`: references, tuned variants, broken mutants (or `extra`).

    Args:
        task: a task with at least one reference solution (unless `extra` supplies the responses).
        num_candidates: K, the size of the action space.
        seed: seeds the per-task shuffle (with the task id), so positions differ between tasks.
        shuffle: shuffle the candidates; otherwise the first reference is action 0.
        extra: responses to use first (e.g. earlier LLM proposals); the generated ones fill up to K.

    Returns:
        Exactly `num_candidates` distinct candidates where possible (padded with format errors).
    """
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be at least 1, got {num_candidates}")
    pool: list[Candidate] = [Candidate(t, "given") for t in extra or []]
    references = list(task.reference_solutions)
    pool += [Candidate(t, "reference") for t in references]
    for text in references[:1]:
        for kind, block, edit in _MUTATIONS:
            pattern = _FENCE_RE if block == "python" else _CUDA_FENCE_RE
            pool.append(Candidate(_edit_block(text, pattern, edit), kind))
        pool.append(Candidate(_no_fences(text), "mutant:no_fences"))
    seen: set[str] = set()
    chosen: list[Candidate] = []
    for cand in pool:
        if cand.text not in seen:
            seen.add(cand.text)
            chosen.append(cand)
    chosen = chosen[:num_candidates]
    filler = 0
    while len(chosen) < num_candidates:
        filler += 1
        chosen.append(Candidate(f"I could not write this kernel (attempt {filler}).", "mutant:no_code"))
    if shuffle:
        rng = np.random.default_rng([seed, zlib.crc32(task.id.encode())])
        chosen = [chosen[i] for i in rng.permutation(len(chosen))]
    return chosen


# ------------------------------------------------------------------------------------------------ features


@dataclass
class FeatureSpec:
    """Layout of the observation vector (all values in [-1, 1])."""

    num_tasks: int
    num_candidates: int
    slices: dict[str, slice] = field(default_factory=dict)
    size: int = 0

    def __post_init__(self) -> None:
        widths = [("level", len(LEVELS)), ("tags", len(TAG_VOCAB) + 1), ("log_numel", 1), ("task", self.num_tasks),
                  ("status", len(STATUSES) + 1), ("flags", 2), ("resources", 3), ("speedup", 1),
                  ("tried", self.num_candidates), ("turn", 1)]
        start = 0
        for name, width in widths:
            self.slices[name] = slice(start, start + width)
            start += width
        self.size = start


def task_features(task: Task, index: int, spec: FeatureSpec) -> np.ndarray:
    """The task part of the observation: level one-hot, tags multi-hot, log2 input size / 32, task one-hot."""
    vec = np.zeros(spec.size, dtype=np.float32)
    level = LEVELS.index(task.level) if task.level in LEVELS else len(LEVELS) - 1
    vec[spec.slices["level"].start + level] = 1.0
    for tag in task.tags:
        pos = TAG_VOCAB.index(tag) if tag in TAG_VOCAB else len(TAG_VOCAB)
        vec[spec.slices["tags"].start + pos] = 1.0
    try:
        numel = input_numel(task)
    except Exception:  # a task whose inputs cannot be built on the meta device
        numel = 1
    vec[spec.slices["log_numel"].start] = min(math.log2(max(numel, 1)) / 32.0, 1.0)
    vec[spec.slices["task"].start + index] = 1.0
    return vec


def result_features(vec: np.ndarray, result: EvalResult | None, spec: FeatureSpec) -> None:
    """Write the last result's status one-hot, flags, resources and speedup into `vec` (in place)."""
    status = spec.slices["status"]
    vec[status] = 0.0
    vec[status.start + (STATUSES.index(result.status) if result is not None else len(STATUSES))] = 1.0
    flags, res, speed = spec.slices["flags"], spec.slices["resources"], spec.slices["speedup"]
    vec[flags] = 0.0
    vec[res] = 0.0
    vec[speed] = 0.0
    if result is None:
        return
    vec[flags.start] = float(result.compiled)
    vec[flags.start + 1] = float(result.correct)
    if result.resources:
        figures = list(result.resources.values())
        vec[res.start] = min(max(r.registers for r in figures) / 255.0, 1.0)
        vec[res.start + 1] = min(max(r.shared_mem_bytes for r in figures) / 49152.0, 1.0)
        vec[res.start + 2] = float(any(r.spill_stores_bytes or r.spill_loads_bytes for r in figures))
    if result.speedup is not None and result.speedup > 0:
        vec[speed.start] = float(np.clip(math.log2(result.speedup) / 4.0, -1.0, 1.0))


# ------------------------------------------------------------------------------------------------ the env


class CandidateChoiceEnv(gym.Wrapper):
    """A `KernelDebugEnv` as a fixed-size problem: pick one of K candidate responses each turn.

    ## Action Space

    `Discrete(K)`: the index of the candidate response submitted this turn.

    ## Observation Space

    `Box(-1, 1, (D,), float32)` laid out by `FeatureSpec`: level one-hot, tags multi-hot over
    `TAG_VOCAB` (+ other), log2 of the input elements / 32, task one-hot (over this env's tasks),
    last status one-hot (+ none), compiled and correct flags, max registers / 255, max shared
    memory / 48 KiB, spills, log2 speedup / 4, tried-candidates mask, turn / max_turns.

    ## Rewards, Episode End

    The wrapped environment's (reward function, termination when correct, truncation at max_turns).
    ``info`` adds ``candidate`` (the index), ``candidate_kind`` and ``candidates`` (their kinds), and
    leaves out the chat history unless `keep_messages`.

    Args:
        env: a `KernelDebugEnv` (or a wrapper of one).
        num_candidates: K.
        candidates: responses per task id to choose among (padded with generated ones up to K).
        shuffle: shuffle each task's candidates (else the first reference is action 0).
        seed: seed of the candidate shuffle.
        cache: an `EvalCache` to share between environments or keep on disk.
        keep_messages: keep the chat history in ``info`` (SB3 copies infos every step, so it is left out).
    """

    def __init__(self, env: gym.Env, num_candidates: int = 6, candidates: dict[str, list[str]] | None = None,
                 shuffle: bool = True, seed: int = 0, cache: EvalCache | None = None, keep_messages: bool = False):
        super().__init__(env)
        self.keep_messages = keep_messages
        base = env.unwrapped
        if not hasattr(base, "evaluator") or not hasattr(base, "tasks"):
            raise TypeError("CandidateChoiceEnv wraps a KernelDebugEnv: gym.make('KernelDebugEnv-v0', ...)")
        if not isinstance(base.evaluator, CachingEvaluator):
            base.evaluator = CachingEvaluator(base.evaluator, cache)
        elif cache is not None:
            base.evaluator.cache = cache
        self.cache: EvalCache = base.evaluator.cache
        self.tasks: list[Task] = list(base.tasks)
        self.task_index = {t.id: i for i, t in enumerate(self.tasks)}
        self.num_candidates = num_candidates
        given = candidates or {}
        self.candidates: dict[str, list[Candidate]] = {
            t.id: make_candidates(t, num_candidates, seed, shuffle, given.get(t.id)) for t in self.tasks}
        self.features = FeatureSpec(len(self.tasks), num_candidates)
        self._task_vecs = {t.id: task_features(t, i, self.features) for i, t in enumerate(self.tasks)}
        self.observation_space = spaces.Box(-1.0, 1.0, (self.features.size,), dtype=np.float32)
        self.action_space = spaces.Discrete(num_candidates)
        self._obs = np.zeros(self.features.size, dtype=np.float32)
        self._task_id = ""

    def _base_obs(self, task_id: str) -> np.ndarray:
        vec = self._task_vecs[task_id].copy()
        result_features(vec, None, self.features)
        return vec

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        _, info = self.env.reset(seed=seed, options=options)
        self._task_id = info["task_id"]
        self._obs = self._base_obs(self._task_id)
        info = {k: v for k, v in info.items() if k != "messages" or self.keep_messages}
        return self._obs.copy(), dict(info, candidates=[c.kind for c in self.candidates[self._task_id]])

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        index = int(action)
        if not 0 <= index < self.num_candidates:
            raise ValueError(f"action must be in [0, {self.num_candidates}), got {action!r}")
        candidate = self.candidates[self._task_id][index]
        _, reward, terminated, truncated, info = self.env.step(candidate.text)
        result: EvalResult = info["result"]
        result_features(self._obs, result, self.features)
        self._obs[self.features.slices["tried"].start + index] = 1.0
        self._obs[self.features.slices["turn"].start] = info["turn"] / max(info["max_turns"], 1)
        info = {k: v for k, v in info.items() if k != "messages" or self.keep_messages}
        info.update(candidate=index, candidate_kind=candidate.kind)
        return self._obs.copy(), float(reward), bool(terminated), bool(truncated), info

    def precompute(self, task_ids: list[str] | None = None, concurrent: bool = True) -> dict[str, list[str]]:
        """Evaluate every candidate of these tasks (all by default) into the cache; statuses per task id."""
        evaluator: CachingEvaluator = self.env.unwrapped.evaluator
        ids = task_ids or [t.id for t in self.tasks]
        by_id = {t.id: t for t in self.tasks}
        jobs = [(tid, c) for tid in ids for c in self.candidates[tid]]
        if concurrent:
            futures = [evaluator.submit(by_id[tid], c.text) for tid, c in jobs]
            results = [f.result() for f in futures]
        else:
            results = [evaluator.evaluate(by_id[tid], c.text) for tid, c in jobs]
        for i, ((tid, cand), result) in enumerate(zip(jobs, results)):
            if not cacheable(result):   # the machinery failed (e.g. a worker killed for memory): one more try
                log.warning("re-evaluating a %s candidate of %s after %s", cand.kind, tid, result.detail)
                results[i] = evaluator.evaluate(by_id[tid], cand.text)
        table: dict[str, list[str]] = {tid: [] for tid in ids}
        for (tid, _), result in zip(jobs, results):
            table[tid].append(result.status)
        return table

    def outcomes(self, task_id: str) -> list[EvalResult | None]:
        """The cached result of each candidate of a task (`None` where not yet evaluated)."""
        evaluator: CachingEvaluator = self.env.unwrapped.evaluator
        task = next(t for t in self.tasks if t.id == task_id)
        return [self.cache.get(evaluator._key(task, c.text)) for c in self.candidates[task_id]]

    def random_success_rate(self) -> float:
        """Chance that a uniformly random first pick is correct, averaged over tasks (needs `precompute`)."""
        rates = []
        for task in self.tasks:
            outcomes = self.outcomes(task.id)
            if any(r is None for r in outcomes):
                raise RuntimeError("call precompute() first: some candidates have not been evaluated")
            rates.append(sum(r.status == CORRECT for r in outcomes) / len(outcomes))
        return float(np.mean(rates))


def make_candidate_env(tasks: list[str] | list[Task] | str = "builtin", backend: str = "cpu", num_candidates: int = 6,
                       max_turns: int = 1, reward: Any = "binary", seed: int = 0, shuffle: bool = True,
                       candidates: dict[str, list[str]] | None = None, cache: EvalCache | None = None,
                       **env_kwargs: Any) -> CandidateChoiceEnv:
    """`gym.make("KernelDebugEnv-v0", ...)` wrapped in a `CandidateChoiceEnv`.

    Args:
        tasks: task ids, `Task` objects, or ``"builtin"`` (every built-in task).
        backend: passed to the environment.
        num_candidates: passed to `CandidateChoiceEnv`.
        max_turns: passed to the environment.
        reward: passed to the environment.
        seed: passed to `CandidateChoiceEnv`.
        shuffle: passed to `CandidateChoiceEnv`.
        candidates: passed to `CandidateChoiceEnv`.
        cache: passed to `CandidateChoiceEnv`.
        **env_kwargs: passed to the environment.
    """
    if isinstance(tasks, list) and tasks and isinstance(tasks[0], str):
        env = gym.make("KernelDebugEnv-v0", task_ids=tasks, backend=backend, max_turns=max_turns, reward=reward,
                       **env_kwargs)
    else:
        env = gym.make("KernelDebugEnv-v0", tasks=tasks, backend=backend, max_turns=max_turns, reward=reward,
                       **env_kwargs)
    return CandidateChoiceEnv(env, num_candidates=num_candidates, candidates=candidates, shuffle=shuffle, seed=seed,
                              cache=cache)


def success_rate(env: CandidateChoiceEnv, policy: Callable[[np.ndarray], int], episodes: int, seed: int = 0,
                 task_ids: list[str] | None = None) -> float:
    """Fraction of `episodes` that end CORRECT when `policy(obs) -> action` acts.

    Episodes reset with seeds ``seed, seed + 1, ...``; with `task_ids` they cycle through those tasks
    (``options={"task_id": ...}``), otherwise the environment draws the task.
    """
    solved = 0
    for episode in range(episodes):
        options = {"task_id": task_ids[episode % len(task_ids)]} if task_ids else None
        obs, _ = env.reset(seed=seed + episode, options=options)
        done = False
        info: dict[str, Any] = {}
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        solved += int(info["result"].status == CORRECT)
    return solved / episodes


__all__ = ["Candidate", "CandidateChoiceEnv", "FeatureSpec", "LEVELS", "TAG_VOCAB",
           "make_candidate_env", "make_candidates", "result_features", "success_rate", "task_features"]
