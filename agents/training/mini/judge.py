"""Judging responses for LEAP-mini: the environment's evaluator behind one call over (task, response) pairs.

Evaluations run concurrently across the evaluator's worker pool. Identical responses to the same
task within one run are judged once (`cache=True`): a small policy often repeats itself, and a
memo is what any real trainer would keep. The hits are counted, so the saving is visible.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from leap_gym.result import EvalResult
from leap_gym.tasks import Task

log = logging.getLogger(__name__)


class Judge:
    """Evaluate responses on a backend.

    Args:
        backend: ``"cpu"`` (real execution), ``"compile-only"`` (judged in this process: no response
            code runs), or any registered backend.
        workers: evaluator worker processes (concurrent evaluations).
        cache: judge identical (task, response) pairs once.
        **config: further `EvalConfig` fields.
    """

    def __init__(self, backend: str = "cpu", workers: int = 2, cache: bool = True, **config: Any):
        self.backend = backend
        self.cache = cache
        self._memo: dict[tuple[str, str], EvalResult] = {}
        self.evaluations = 0
        self.hits = 0
        self._evaluator = None
        if backend != "compile-only":
            from leap_gym.evaluation.pipeline import EvalConfig
            from leap_gym.evaluation.evaluator import Evaluator

            self._evaluator = Evaluator(EvalConfig(backend=backend, workers=workers, **config))

    def _compile_only(self, task: Task, response: str) -> EvalResult:
        from leap_gym.evaluation.pipeline import EvalJob
        from leap_gym.evaluation.languages import prepare, run_job

        parsed = prepare(task, response)
        if isinstance(parsed, EvalResult):
            return parsed
        return run_job(EvalJob(task=task, cuda=parsed.cuda, python=parsed.python, backend="compile-only",
                               arch="sm_90"))

    def __call__(self, pairs: Sequence[tuple[Task, str]]) -> list[EvalResult]:
        """Judge each (task, response); results in order."""
        out: list[EvalResult | None] = [None] * len(pairs)
        pending: dict[tuple[str, str], list[int]] = {}
        for i, (task, response) in enumerate(pairs):
            key = (task.id, response.strip())
            if self.cache and key in self._memo:
                out[i] = self._memo[key]
                self.hits += 1
            elif key in pending and self.cache:
                pending[key].append(i)
                self.hits += 1
            else:
                pending.setdefault(key, []).append(i)
        jobs = [(idx[0], pairs[idx[0]][0], pairs[idx[0]][1]) for idx in pending.values()]
        if self._evaluator is None:
            results = [self._compile_only(task, response) for _, task, response in jobs]
        else:
            futures = [self._evaluator.submit(task, response) for _, task, response in jobs]
            results = [f.result() for f in futures]
        self.evaluations += len(jobs)
        for (key, idx), result in zip(pending.items(), results):
            if self.cache:
                self._memo[key] = result
            for i in idx:
                out[i] = result
        return [r for r in out if r is not None]

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
