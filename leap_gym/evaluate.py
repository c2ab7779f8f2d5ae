"""The evaluation pipeline: response text to `EvalResult`.

Parsing and the static check of the Python block run here (cheap, no user code runs); NVRTC, the
backend and the correctness trials run in a sandboxed worker process (`leap_gym.sandbox`), so a
crash, hang or poisoned CUDA context costs only that worker.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from leap_gym import correctness
from leap_gym.backends.base import Backend, BackendUnavailable, KernelRuntimeError, get_backend
from leap_gym.backends.nvrtc import compile_cuda
from leap_gym.kernels import Kernels, LaunchError, parse_kernel_signatures
from leap_gym.parse import FormatError, ParsedResponse, parse_response
from leap_gym.result import (COMPILE_ERROR, COMPILED, CORRECT, FORMAT_ERROR, RUNTIME_ERROR, TIMEOUT,
                             WRONG_OUTPUT, EvalResult, Timing)
from leap_gym.static_check import check_python_block
from leap_gym.tasks import Task

log = logging.getLogger(__name__)

PYTHON_BLOCK_NAME = "model_new.py"


@dataclass
class EvalConfig:
    """How responses are judged.

    Attributes:
        backend: registry name (``"cpu"``, ``"cuda"``, ``"compile-only"``, ``"auto"``).
        arch: NVRTC target (``"sm_90"``); `None` takes the backend's default (the device's, on a GPU).
        trials: correctness trials, each with fresh inputs under a new seed.
        seed: seed of the first trial.
        timeout_s: wall-clock limit of one evaluation in its worker.
        workers: worker processes serving concurrent evaluations.
        shuffle_threads: run a block's threads in a random order (CPU backend) so races show.
        timing_budget_s: time spent timing a correct kernel and the reference (backends that time).
        locate_faults: after a crash, rerun in a checked build that names the faulting line.
    """

    backend: str = "cpu"
    arch: str | None = None
    trials: int = 3
    seed: int = 0
    timeout_s: float = 30.0
    workers: int = 1
    shuffle_threads: bool = False
    timing_budget_s: float = 2.0
    locate_faults: bool = True


@dataclass
class EvalJob:
    """One evaluation as the worker receives it."""

    task: Task
    cuda: str
    python: str
    backend: str
    arch: str
    trials: int = 3
    seed: int = 0
    shuffle_threads: bool = False
    timing_budget_s: float = 2.0
    checked: bool = False
    allowed_ops: list[str] = field(default_factory=list)


def prepare(task: Task, response: str) -> ParsedResponse | EvalResult:
    """Parse and statically check a response; a FORMAT_ERROR result when it is not acceptable."""
    try:
        parsed = parse_response(response, wrapper=task.wrapper)
        check_python_block(parsed.python)
        parse_kernel_signatures(parsed.cuda)
    except FormatError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="format")
    except ValueError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="kernel_signature")
    return parsed


def _user_traceback(exc: BaseException) -> list[str]:
    """The traceback lines inside the response's Python block, then the error itself."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == PYTHON_BLOCK_NAME]
    lines = [f'  line {f.lineno}, in {f.name}: {(f.line or "").strip()}' for f in frames]
    return [*lines, f"{type(exc).__name__}: {exc}"]


def _run_python_block(job: EvalJob, kernels: Kernels) -> type:
    namespace: dict[str, Any] = {"__name__": "model_new", "kernels": kernels}
    exec(compile(job.python, PYTHON_BLOCK_NAME, "exec"), namespace)
    model_new = namespace.get("ModelNew")
    if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
        raise TypeError("the python block must define `class ModelNew(nn.Module)`")
    return model_new


def run_job(job: EvalJob) -> EvalResult:
    """Compile, load, run and check one response (runs inside a worker process)."""
    start = time.perf_counter()
    result = EvalResult(COMPILED, task_id=job.task.id, backend=job.backend)
    compiled = compile_cuda(job.cuda, job.arch)
    result.compile_log = compiled.log
    result.diagnostics = compiled.diagnostics
    result.resources = compiled.resources
    if not compiled.ok:
        first = compiled.errors[0] if compiled.errors else None
        where = f" (line {first.line})" if first and first.line else ""
        result.status, result.detail = COMPILE_ERROR, "nvrtc"
        result.message = f"NVRTC error{where}: {first.message if first else 'compilation failed'}"
        result.errors = [f"line {d.line}: {d.message}" if d.line else d.message for d in compiled.errors]
        return _finish(result, start)
    backend = get_backend(job.backend)
    if not backend.runs_kernels:
        result.message = f"compiled for {job.arch}; the {backend.name} backend does not run kernels"
        return _finish(result, start)
    signatures = parse_kernel_signatures(job.cuda)
    launcher = None
    try:
        launcher = backend.load(job.cuda, compiled.cubin, signatures, job.arch, checked=job.checked)
        if job.shuffle_threads and hasattr(launcher, "shuffle"):
            launcher.shuffle = True
        kernels = Kernels(signatures, launcher)
        model_new_cls = _run_python_block(job, kernels)
        _run_trials(job, backend, kernels, model_new_cls, result)
    except KernelRuntimeError as exc:
        result.status, result.detail, result.message = RUNTIME_ERROR, exc.detail, str(exc)
        result.errors = [str(exc)]
    except correctness.TorchOpError as exc:
        result.status, result.detail, result.message = RUNTIME_ERROR, "torch_op_in_forward", str(exc)
        result.errors = _user_traceback(exc)
    except LaunchError as exc:
        result.status, result.detail, result.message = RUNTIME_ERROR, "launch", str(exc)
        result.errors = _user_traceback(exc)
    except Exception as exc:  # the response's Python raised: show its own lines
        result.status, result.detail = RUNTIME_ERROR, "python_exception"
        result.message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        result.errors = _user_traceback(exc)
    finally:
        if launcher is not None and hasattr(launcher, "drain_output"):
            result.device_output = launcher.drain_output()
    return _finish(result, start)


def _finish(result: EvalResult, start: float) -> EvalResult:
    result.wall_time_s = time.perf_counter() - start
    return result


def _run_trials(job: EvalJob, backend: Backend, kernels: Kernels, model_new_cls: type, result: EvalResult) -> None:
    task = job.task
    device = backend.device
    allowed = set(job.allowed_ops) | set(task.allowed_torch_ops)
    namespace = task.module()
    init_inputs = list(namespace["get_init_inputs"]())
    torch.manual_seed(job.seed)
    model = namespace["Model"](*init_inputs).to(device)
    torch.manual_seed(job.seed)
    model_new = model_new_cls(*init_inputs).to(device)
    _share_parameters(model, model_new)
    inputs: list[Any] = []
    for trial in range(job.trials):
        torch.manual_seed(job.seed + 1009 * (trial + 1))
        copies = correctness.copies_of(list(namespace["get_inputs"]()), device)
        launches_before = dict(kernels.launches)
        with torch.no_grad():
            actual = correctness.run_guarded(lambda: model_new(*copies.candidate), allowed)
            backend.synchronize()
            expected = model(*copies.reference)
        backend.synchronize()
        result.trials = trial + 1
        result.launches = dict(kernels.launches)
        if kernels.launches == launches_before:
            result.status, result.detail = WRONG_OUTPUT, "kernel_not_launched"
            result.message = "ModelNew.forward launched no kernel; the output must be computed by your CUDA kernels"
            return
        changed = correctness.inputs_modified(copies.original, copies.candidate)
        if changed is not None:
            result.status, result.detail = WRONG_OUTPUT, "input_modified"
            result.message = f"input {changed} was modified in place; kernels must leave their inputs unchanged"
            return
        mismatch = correctness.compare_outputs(expected, actual, task.atol, task.rtol, trial)
        if mismatch is not None:
            result.status, result.detail, result.mismatch = WRONG_OUTPUT, "mismatch", mismatch
            result.message = mismatch.reason
            return
        inputs = copies.candidate
    result.status, result.message = CORRECT, f"output matches the reference on {job.trials} input sets"
    if backend.reports_speedup and model is not None:
        with torch.no_grad():
            kernel_ms, kernel_spread, n = backend.time_ms(lambda: model_new(*inputs), job.timing_budget_s)
            ref_ms, ref_spread, _ = backend.time_ms(lambda: model(*inputs), job.timing_budget_s)
        result.timing = Timing(kernel_ms, kernel_spread, ref_ms, ref_spread, n)


def _share_parameters(model: torch.nn.Module, model_new: torch.nn.Module) -> None:
    """Give `ModelNew` the reference's values for every parameter and buffer of the same name and shape."""
    theirs = model.state_dict()
    mine = model_new.state_dict()
    shared = {k: v for k, v in theirs.items() if k in mine and mine[k].shape == v.shape and mine[k].dtype == v.dtype}
    if shared:
        model_new.load_state_dict(shared, strict=False)


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
                    from leap_gym.backends.cpu import checked_worker_env

                    self._checked_pool = WorkerPool(size=1, limits=SandboxLimits(address_space_bytes=None),
                                                    env=checked_worker_env(), preload=["torch", "leap_gym.evaluate"])
                return self._checked_pool
            if self._pool is None:
                limits = SandboxLimits(wall_time_s=self.config.timeout_s)
                if self.backend.device == "cuda":
                    limits = replace(limits, address_space_bytes=None)
                self._pool = WorkerPool(size=self.config.workers, limits=limits,
                                        preload=["torch", "leap_gym.evaluate"])
            return self._pool

    def job_for(self, task: Task, parsed: ParsedResponse, checked: bool = False) -> EvalJob:
        cfg = self.config
        return EvalJob(task=task, cuda=parsed.cuda, python=parsed.python, backend=cfg.backend, arch=cfg.arch or "",
                       trials=cfg.trials, seed=cfg.seed, shuffle_threads=cfg.shuffle_threads,
                       timing_budget_s=cfg.timing_budget_s, checked=checked)

    def evaluate(self, task: Task, response: str) -> EvalResult:
        """Judge one response to `task`; always returns a result, whatever the response does."""
        start = time.perf_counter()
        if not task.size:
            task = task.with_size(self.backend.size_preset)
        prepared = prepare(task, response)
        if isinstance(prepared, EvalResult):
            prepared.backend = self.config.backend
            return _finish(prepared, start)
        job = self.job_for(task, prepared)
        outcome = self._get_pool().run("leap_gym.evaluate:run_job", job, timeout=self.config.timeout_s)
        if outcome.ok:
            return outcome.value
        result = self._failure_result(task, outcome)
        if outcome.failure == "crash" and self.config.locate_faults and self.backend.name == "cpu":
            self._locate_fault(task, prepared, result)
        return _finish(result, start)

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
        from leap_gym.backends.cpu import describe_memory_error

        job = replace(self.job_for(task, parsed, checked=True), trials=1)
        outcome = self._get_pool(checked=True).run("leap_gym.evaluate:run_job", job, timeout=self.config.timeout_s * 2)
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
