"""Judging a response once: `EvalCache` (results by task, size, backend and response) and
`CachingEvaluator`, an evaluator in front of it that also joins a request for a response already
being judged. A small policy repeats itself often; a memo is what any trainer keeps."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from leap_gym.result import EvalResult
from leap_gym.tasks import Task


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:24]


class EvalCache:
    """Results per (task id, size, size overrides, backend, response hash); optionally kept in a JSON file.

    Args:
        path: a JSON file to load from (if it exists) and `save` to.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.results: dict[str, EvalResult] = {}
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            data = json.loads(self.path.read_text())
            self.results = {k: EvalResult.from_dict(v) for k, v in data.items()}

    @staticmethod
    def key(task: Task, response: str, backend: str) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in sorted(task.overrides.items()))
        return f"{task.id}|{task.size}|{sizes}|{backend}|{_digest(response)}"

    def get(self, key: str) -> EvalResult | None:
        return self.results.get(key)

    def put(self, key: str, result: EvalResult) -> None:
        self.results[key] = result

    def save(self, path: str | Path | None = None) -> Path:
        """Write the cache as JSON (to `path`, else the path it was made with)."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("EvalCache.save needs a path: EvalCache(path=...) or save(path)")
        target.write_text(json.dumps({k: v.to_dict() for k, v in self.results.items()}))
        return target

    def __len__(self) -> int:
        return len(self.results)


#: Sub-statuses that say the evaluation machinery failed (a worker killed for memory, a broken worker),
#: not the response: such results are returned but not cached, so the next request judges again.
INFRASTRUCTURE_DETAILS = frozenset({"oom", "worker_error", "exception"})


def cacheable(result: EvalResult) -> bool:
    """Whether a result is a deterministic verdict on the response (and may be cached)."""
    return result.detail not in INFRASTRUCTURE_DETAILS


class CachingEvaluator:
    """An `Evaluator` in front of an `EvalCache`: a response judged once is never judged again.

    Everything but `evaluate` and `submit` is the wrapped evaluator's (``backend``, ``config``, ``close``).
    """

    def __init__(self, evaluator: Any, cache: EvalCache | None = None):
        self.evaluator = evaluator
        self.cache = cache if cache is not None else EvalCache()
        self._pending: dict[str, Future] = {}
        self._lock = threading.Lock()

    def _key(self, task: Task, response: str) -> str:
        if not task.size:
            task = task.with_size(self.evaluator.backend.size_preset)
        return EvalCache.key(task, response, self.evaluator.config.backend)

    def evaluate(self, task: Task, response: str) -> EvalResult:
        return self.submit(task, response).result()

    def submit(self, task: Task, response: str) -> Future:
        """The cached result, the evaluation of the same response already under way, or a new one."""
        key = self._key(task, response)
        with self._lock:
            cached = self.cache.get(key)
            if cached is not None or key in self._pending:
                self.cache.hits += 1
                if cached is None:
                    return self._pending[key]
                future: Future = Future()
                future.set_result(cached)
                return future
            self.cache.misses += 1
            future = self.evaluator.submit(task, response)
            self._pending[key] = future
        future.add_done_callback(lambda f: self._settle(key, f))
        return future

    def _settle(self, key: str, future: Future) -> None:
        with self._lock:
            self._pending.pop(key, None)
            if future.exception() is None and cacheable(future.result()):
                self.cache.put(key, future.result())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.evaluator, name)


def evaluate_all(evaluator: Any, pairs: Sequence[tuple[Task, str]]) -> list[EvalResult]:
    """Judge every (task, response) concurrently across `evaluator`'s workers; results in order."""
    futures = [evaluator.submit(task, response) for task, response in pairs]
    return [f.result() for f in futures]
