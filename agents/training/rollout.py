"""The multi-turn group rollout engine: G trajectories per task, turn by turn, generation batched
across all live trajectories, environment evaluations concurrent, DCP as a hook."""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from leap_agents.algorithms.dcp import MAX_TURNS, SOLVED, DCPConfig, DifficultyTracker, dcp_decide
from leap_agents.policies.base import Generation, Policy
from leap_agents.training.trajectory import Trajectory, Turn, group_by_task
from leap_gym.evaluation.evaluator import shared_evaluator
from leap_gym.evaluation.memo import CachingEvaluator
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.result import STATUS_RANK

log = logging.getLogger(__name__)


def default_solved(result: Any) -> bool:
    """Solved: the backend's best outcome, ``CORRECT`` (or ``COMPILED`` on the compile-only backend)."""
    return result.status in ("CORRECT", "COMPILED")


@dataclass
class RolloutConfig:
    """How rollouts are collected."""

    group_size: int = field(default=8, metadata={"help": "trajectories per task (G)"})
    max_turns: int = field(default=4, metadata={"help": "turn budget of each trajectory"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (0: greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass"})
    max_new_tokens: int = field(default=512, metadata={"help": "response length limit in tokens"})
    eval_workers: int = field(default=2, metadata={"help": "concurrent environment evaluations (worker processes)"})
    eval_timeout_s: float = field(default=30.0, metadata={
        "help": "seconds one evaluation may run before it is killed as a TIMEOUT: a kernel that never ends costs "
                "this much of its step; not when env_kwargs names an evaluator of its own"})
    guide_prob: float = field(default=0.0, metadata={
        "help": "probability that a response is replaced by the task's reference solution (off-policy guidance; "
                "gives a from-scratch model a learning signal)"})
    memo: bool = field(default=True, metadata={
        "help": "judge a response identical to one already judged for the same task once (a small policy repeats "
                "itself; the hits are counted); not when env_kwargs names an evaluator of its own"})
    progress_bar: bool = field(default=True, metadata={"help": "show a tqdm progress bar with the live pass rate"})


@dataclass
class RolloutBatch:
    """The trajectories of one rollout and what it cost."""

    trajectories: list[Trajectory]
    generation_s: float = 0.0
    evaluation_s: float = 0.0
    responses: int = 0
    evaluations: int = 0
    memo_hits: int = 0
    tokens: int = 0
    decisions: Counter = field(default_factory=Counter)

    @property
    def groups(self) -> list[list[Trajectory]]:
        return group_by_task(self.trajectories)


class RolloutEngine:
    """Runs groups of multi-turn episodes of `KernelDebugEnv-v0` with one policy.

    Args:
        policy: any `Policy`.
        tasks: the suite (``"builtin"``, a folder, or a list of `Task`), passed to the environments.
        backend: the environments' backend (``"cpu"``, ``"compile-only"``, ``"cuda"``, ``"auto"``).
        config: sampling, group size, turns, concurrency.
        dcp: pruning settings; ``DCPConfig(enabled=False)`` for full refinement.
        tracker: the running per-task difficulty estimate (updated after each rollout).
        solved_fn: when a result counts as solved, besides the environment terminating the episode.
        env_kwargs: further `gym.make` arguments (``reward``, ``mode``, ``feedback_tokens``, ``timeout_s``...).
        env_factory: builds one environment (anything with Gymnasium's ``reset``/``step`` and the
            ``info["result"]``/``info["messages"]`` contract, e.g. a proxy to a remote worker); by
            default ``gym.make("KernelDebugEnv-v0", ...)`` with the arguments above.
    """

    def __init__(self, policy: Policy, tasks: Any = "builtin", backend: str = "cpu", config: RolloutConfig | None = None,
                 dcp: DCPConfig | None = None, tracker: DifficultyTracker | None = None,
                 solved_fn: Callable[[Any], bool] = default_solved, env_kwargs: dict[str, Any] | None = None,
                 env_factory: Callable[[], Any] | None = None):
        import leap_gym

        self.policy = policy
        self.tasks = leap_gym.load_tasks(tasks) if not isinstance(tasks, list) or (tasks and isinstance(tasks[0], str)) \
            else tasks
        self._task_by_id = {t.id: t for t in self.tasks}
        self.backend = backend
        self.config = config or RolloutConfig()
        self.dcp = dcp or DCPConfig()
        self.tracker = tracker if tracker is not None else DifficultyTracker(self.dcp.ema_alpha)
        self.solved_fn = solved_fn
        self.env_kwargs = dict(env_kwargs or {})
        self.env_factory = env_factory
        self._envs: list[Any] = []
        self._memo: CachingEvaluator | None = None

    @property
    def progress_rank(self) -> int:
        """DCP's progress rank, kept below the backend's top status (compile-only tops out at COMPILED = 2,
        which counts as solved there, so a compile error, rank 1, is progress)."""
        top = STATUS_RANK["COMPILED"] if self.backend == "compile-only" else STATUS_RANK["CORRECT"]
        return min(self.dcp.progress_rank, top - 1)

    def _env(self, i: int) -> Any:
        import gymnasium as gym

        while len(self._envs) <= i:
            if self.env_factory is not None:
                self._envs.append(self.env_factory())
                continue
            kwargs = {"timeout_s": self.config.eval_timeout_s, **self.env_kwargs}
            if self.config.memo and "evaluator" not in kwargs:  # an evaluator given (a Ray pool) is used as is
                if self._memo is None:
                    fields = {f.name for f in dataclasses.fields(EvalConfig)}
                    self._memo = CachingEvaluator(shared_evaluator(EvalConfig(
                        backend=self.backend, workers=self.config.eval_workers,
                        **{k: v for k, v in kwargs.items() if k in fields})))
                kwargs["evaluator"] = self._memo
            self._envs.append(gym.make("KernelDebugEnv-v0", tasks=self.tasks, backend=self.backend,
                                       max_turns=self.config.max_turns, workers=self.config.eval_workers, **kwargs))
        return self._envs[i]

    def first_histories(self, task_ids: Sequence[str]) -> list[list[dict[str, str]]]:
        """The chat history each task's episode starts with (the environment's system message and prompt)."""
        env = self._env(0)
        return [env.reset(seed=0, options={"task_id": task_id})[1]["messages"] for task_id in task_ids]

    def _guide(self, live: list[Trajectory], gens: list[Generation], rng: random.Random) -> None:
        p = self.config.guide_prob
        if p <= 0:
            return
        picks = [i for i, t in enumerate(live) if self._task_by_id[t.task_id].reference_solutions and rng.random() < p]
        if not picks:
            return
        refs = [rng.choice(self._task_by_id[live[i].task_id].reference_solutions) for i in picks]
        if hasattr(self.policy, "score"):
            scored = self.policy.score([self._histories[live[i].group, live[i].index] for i in picks], refs,
                                       temperature=self.config.temperature, meta=[self._meta(live[i], 0) for i in picks])
        else:
            scored = [Generation(text=r, off_policy=True) for r in refs]
        for i, g in zip(picks, scored):
            gens[i] = g

    def run(self, task_ids: Sequence[str], seed: int = 0, desc: str = "rollout") -> RolloutBatch:
        """Roll out `group_size` trajectories for each task id (repeats allowed), until every one stops."""
        from tqdm.auto import tqdm

        cfg = self.config
        unknown = [t for t in task_ids if t not in self._task_by_id]
        if unknown:
            raise KeyError(f"unknown task ids {unknown}; the engine's suite has {len(self.tasks)} tasks")
        rng = random.Random(seed)
        trajs = [Trajectory(task_id=tid, group=g, index=i) for g, tid in enumerate(task_ids) for i in range(cfg.group_size)]
        envs = {}
        self._histories: dict[tuple[int, int], list[dict[str, str]]] = {}
        self._last_results: dict[tuple[int, int], Any] = {}
        hits_before = self._memo.cache.hits if self._memo is not None else 0
        for n, traj in enumerate(trajs):
            env = self._env(n)
            _, info = env.reset(seed=seed + n, options={"task_id": traj.task_id})
            envs[traj.group, traj.index] = env
            self._histories[traj.group, traj.index] = info["messages"]
        batch = RolloutBatch(trajectories=trajs)
        groups = group_by_task(trajs)
        bar = tqdm(total=len(trajs) * cfg.max_turns, desc=desc, unit="eval", disable=not cfg.progress_bar, leave=False)
        with ThreadPoolExecutor(max_workers=max(1, cfg.eval_workers)) as pool:
            for turn in range(1, cfg.max_turns + 1):
                live = [t for t in trajs if t.end_reason is None]
                if not live:
                    break
                histories = [self._histories[t.group, t.index] for t in live]
                meta = [self._meta(t, turn) for t in live]
                start = time.perf_counter()
                gens = self.policy.generate(histories, meta=meta, temperature=cfg.temperature, top_p=cfg.top_p,
                                            max_new_tokens=cfg.max_new_tokens, seed=seed * 1000 + turn)
                self._guide(live, gens, rng)
                batch.generation_s += time.perf_counter() - start
                start = time.perf_counter()
                steps = list(pool.map(lambda tg: envs[tg[0].group, tg[0].index].step(tg[1].text), zip(live, gens)))
                batch.evaluation_s += time.perf_counter() - start
                prev_best = {id(t): t.best_progress for t in trajs}
                for traj, gen, history, (_, score, terminated, truncated, info) in zip(live, gens, histories, steps):
                    result = info["result"]
                    traj.turns.append(Turn(turn=turn, prompt=list(history), response=gen.text, token_ids=list(gen.token_ids),
                                           logprobs=list(gen.logprobs), prompt_token_ids=list(gen.prompt_token_ids),
                                           result=result.to_dict(), status=result.status, score=float(score),
                                           off_policy=gen.off_policy, finish_reason=gen.finish_reason))
                    traj.best_progress = max(traj.best_progress, STATUS_RANK.get(result.status, 0))
                    if traj.first_solved_turn is None and (terminated or self.solved_fn(result)):
                        traj.first_solved_turn = turn
                    self._histories[traj.group, traj.index] = info["messages"]
                    self._last_results[traj.group, traj.index] = result
                    traj._env_done = terminated or truncated  # type: ignore[attr-defined]
                    batch.responses += 1
                    batch.evaluations += 1
                    batch.tokens += len(gen.token_ids)
                    bar.update(1)
                self._decide(groups, turn, prev_best, batch)
                n_solved = sum(t.solved for t in trajs)
                bar.set_postfix(turn=turn, live=sum(t.end_reason is None for t in trajs),
                                pass_rate=f"{n_solved / len(trajs):.2f}")
        bar.close()
        batch.memo_hits = (self._memo.cache.hits - hits_before) if self._memo is not None else 0
        batch.evaluations -= batch.memo_hits
        for group in groups:
            self.tracker.update(group[0].task_id, sum(t.solved for t in group) / len(group))
        for traj in trajs:
            traj.__dict__.pop("_env_done", None)
        return batch

    def _meta(self, traj: Trajectory, turn: int) -> dict[str, Any]:
        """What a policy may read besides the history: the task and the trajectory's previous result."""
        return {"task_id": traj.task_id, "turn": turn, "group": traj.group, "index": traj.index,
                "task": self._task_by_id[traj.task_id], "last_result": self._last_results.get((traj.group, traj.index))}

    def _decide(self, groups: list[list[Trajectory]], turn: int, prev_best: dict[int, int], batch: RolloutBatch) -> None:
        d = self.dcp
        for group in groups:
            if all(t.end_reason is not None for t in group):
                continue
            task_id = group[0].task_id
            decisions = dcp_decide([t.solved for t in group], [t.best_progress for t in group], turn, self.config.max_turns,
                                   d.easy_threshold, prev_best_progress=[prev_best[id(t)] for t in group],
                                   progress_rank=self.progress_rank, history_estimate=self.tracker.estimate(task_id),
                                   history_count=self.tracker.count(task_id), hopeless_estimate=d.hopeless_estimate,
                                   min_history=d.min_history, enabled=d.enabled)
            for traj, decision in zip(group, decisions):
                if traj.end_reason is not None:
                    continue
                if decision.continues and getattr(traj, "_env_done", False):
                    decision = type(decision)("stop", SOLVED if traj.solved else MAX_TURNS)
                traj.decisions.append({"turn": turn, "action": decision.action, "reason": decision.reason})
                batch.decisions[decision.reason] += 1
                if not decision.continues:
                    traj.end_reason = decision.reason
                    log.debug("task %s traj %d stops after turn %d: %s", task_id, traj.index, turn, decision.reason)
