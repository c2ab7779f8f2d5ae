"""The evaluator: a pool of sandboxed workers that runs the pipeline, one response at a time or many at once.

`Evaluator` parses and checks a response here (cheap, no user code runs) and runs the rest of the
pipeline (`leap_gym.evaluation.languages.run_job`) in a worker of `leap_gym.sandbox`, so a crash,
hang or poisoned CUDA context costs only that worker.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Callable

from leap_gym.backends.base import BackendUnavailable, get_backend
from leap_gym.evaluation.languages import prepare
from leap_gym.evaluation.parse import ParsedResponse
from leap_gym.evaluation.pipeline import EvalConfig, EvalJob, finish
from leap_gym.kernelbench.answer import BUILD_TIMEOUT_S
from leap_gym.result import RUNTIME_ERROR, TIMEOUT, EvalResult
from leap_gym.tasks import Task

log = logging.getLogger(__name__)

def cuda_probe(_: Any = None) -> str:
    """Run in a worker: "" when torch can use the GPU there, else why not."""
    try:
        import torch

        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return ""
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _gpu_error(pool: Any) -> str:
    """Why torch cannot use the GPU in `pool`'s workers ("" when it can)."""
    outcome = pool.run("leap_gym.evaluation.pipeline:cuda_probe", None, timeout=120)
    return outcome.value if outcome.ok else f"{outcome.failure}: {outcome.message}"


def _gpu_pool(make: Callable[..., Any]) -> Any:
    """A pool from ``make(read_only_fs=...)`` whose workers can reach the GPU.

    The CUDA driver needs more of the system than a CPU worker does (``cuInit`` returned 304,
    operating-system call failed, under a read-only ``/proc`` on an H200 machine; the view now
    leaves ``/proc`` writable). Where the driver still does not start under the workers' read-only
    view of the file system, the pool is replaced by one without that view, with a warning, rather
    than every evaluation failing; `WorkerPool.isolation` tells which.
    """
    pool = make()
    error = _gpu_error(pool)
    if error:
        log.warning("the CUDA driver does not start in a worker with a read-only file system view (%s); "
                    "workers run without that view", error)
        pool.close()
        pool = make(read_only_fs=False)
        error = _gpu_error(pool)
        if error:
            log.warning("the GPU is unusable in a sandbox worker: %s", error)
    return pool


class Evaluator:
    """Evaluates responses on one backend through a pool of sandboxed workers.

    Args:
        config: how responses are judged; `EvalConfig()` by default.
    """

    def __init__(self, config: EvalConfig | None = None, **overrides: Any):
        config = replace(config or EvalConfig(), **overrides)
        self.backend = get_backend(config.backend)
        available = self.backend.availability()
        if not available.ok:
            raise BackendUnavailable(f"backend '{self.backend.name}' is unavailable: {available.reason}")
        self.config = replace(config, backend=self.backend.name, arch=config.arch or self.backend.default_arch())
        self._pool = None
        self._checked_pool = None
        self._lock = threading.Lock()

    def _get_pool(self, checked: bool = False):
        from leap_gym.sandbox import SandboxLimits, WorkerPool

        with self._lock:
            if checked:
                if self._checked_pool is None:
                    from leap_gym.backends.cpu_checked import checked_worker_env

                    self._checked_pool = WorkerPool(size=1, limits=SandboxLimits(address_space_bytes=None),
                                                    env=checked_worker_env(), preload=["torch", "leap_gym.evaluation.languages"])
                return self._checked_pool
            if self._pool is None:
                limits = SandboxLimits(wall_time_s=self.config.timeout_s)
                gpu = self.backend.device == "cuda"
                if gpu:
                    limits = replace(limits, address_space_bytes=None)

                def make(read_only_fs: bool = True) -> WorkerPool:
                    return WorkerPool(size=self.config.workers, limits=limits, preload=["torch", "leap_gym.evaluation.languages"],
                                      read_only_fs=read_only_fs)

                self._pool = _gpu_pool(make) if gpu else make()
            return self._pool

    def job_for(self, task: Task, parsed: ParsedResponse, checked: bool = False) -> EvalJob:
        cfg = self.config
        return EvalJob(task=task, cuda=parsed.cuda, python=parsed.python, backend=cfg.backend, arch=cfg.arch or "",
                       trials=cfg.trials, seed=cfg.seed, shuffle_threads=cfg.shuffle_threads,
                       timing_budget_s=cfg.timing_budget_s, checked=checked, strict=cfg.strict,
                       shape_check=cfg.shape_check, extensions=list(getattr(parsed, "extensions", [])),
                       real_build=bool(getattr(parsed, "real_build", False)))

    def evaluate(self, task: Task, response: str) -> EvalResult:
        """Judge one response to `task`; always returns a result, whatever the response does."""
        start = time.perf_counter()
        if not task.size:
            task = task.with_size(self.backend.size_preset)
        prepared = prepare(task, response, self.config.backend)
        if isinstance(prepared, EvalResult):
            prepared.backend = self.config.backend
            return finish(prepared, start)
        job = self.job_for(task, prepared)
        timeout = self.config.timeout_s + (BUILD_TIMEOUT_S if job.real_build else 0.0)
        outcome = self._get_pool().run("leap_gym.evaluation.languages:run_job", job, timeout=timeout)
        if outcome.ok:
            return outcome.value
        result = self._failure_result(task, outcome)
        if outcome.failure == "crash" and self.config.locate_faults and self.backend.name == "cpu" and prepared.cuda:
            self._locate_fault(task, prepared, result)
        return finish(result, start)

    def submit(self, task: Task, response: str) -> Future:
        """`evaluate` on a thread, for concurrent evaluations across the worker pool."""
        future: Future = Future()

        def work() -> None:
            try:
                future.set_result(self.evaluate(task, response))
            except BaseException as exc:  # pragma: no cover - evaluate() itself does not raise
                future.set_exception(exc)

        threading.Thread(target=work, daemon=True).start()
        return future

    def _failure_result(self, task: Task, outcome: Any) -> EvalResult:
        result = EvalResult(RUNTIME_ERROR, task_id=task.id, backend=self.config.backend, wall_time_s=outcome.wall_time_s)
        if outcome.failure == "timeout":
            result.status, result.detail = TIMEOUT, "timeout"
            result.message = (f"the evaluation ran past its {self.config.timeout_s:g} s limit and was killed: an "
                              "infinite loop, a deadlock, or a kernel far too slow")
        elif outcome.failure == "crash":
            result.detail = "crash"
            result.message = f"the kernel crashed the evaluation process: {outcome.message}"
        else:
            result.detail = outcome.failure or "worker_error"
            result.message = outcome.message or "the evaluation failed"
        result.errors = [result.message]
        return result

    def _locate_fault(self, task: Task, parsed: ParsedResponse, result: EvalResult) -> None:
        """Rerun a crashed response in an AddressSanitizer build to name the faulting kernel line."""
        from leap_gym.backends.cpu_checked import describe_memory_error

        job = replace(self.job_for(task, parsed, checked=True), trials=1)
        outcome = self._get_pool(checked=True).run("leap_gym.evaluation.languages:run_job", job,
                                                   timeout=self.config.timeout_s * 2)
        report = describe_memory_error(outcome.stderr_tail, parsed.cuda) if not outcome.ok else ""
        if report:
            result.detail = "out_of_bounds"
            result.message = report.splitlines()[0]
            result.errors = report.splitlines()

    def close(self) -> None:
        for pool in (self._pool, self._checked_pool):
            if pool is not None:
                pool.close()
        self._pool = self._checked_pool = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_shared: dict[tuple, Evaluator] = {}
_shared_lock = threading.Lock()


def shared_evaluator(config: EvalConfig) -> Evaluator:
    """One process-wide `Evaluator` per configuration, closed at exit (environments share them)."""
    key = tuple(sorted(vars(config).items()))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Evaluator(config)
        return _shared[key]


@atexit.register
def _close_shared() -> None:
    for evaluator in _shared.values():
        evaluator.close()
    _shared.clear()


def evaluate(task: Task, response: str, backend: str = "cpu", **config: Any) -> EvalResult:
    """Judge `response` to `task` without an environment.

    Args:
        task: a `Task` (its sizes as given; use ``task.with_size("cpu")`` for the CPU preset).
        response: the model's whole response text.
        backend: ``"cpu"``, ``"cuda"``, ``"compile-only"`` or ``"auto"``.
        **config: further `EvalConfig` fields (``trials``, ``timeout_s``, ``arch``, ...).
    """
    return shared_evaluator(EvalConfig(backend=backend, **config)).evaluate(task, response)
