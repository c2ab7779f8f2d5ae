"""Triton kernels: a kernel language judged like CUDA C++ responses (the worker side).

The response form and its static check are `leap_gym.integrations.triton_check`; this module runs
a checked block in a sandboxed worker. The reference runs first (as for CUDA C++), then the block
is executed; every top-level kernel object (a ``@triton.jit`` function, or the ``triton.autotune``
wrapper around one) is made to count its ``kernel[grid](...)`` launches, where the response cannot
reach, and run them with the torch guards suspended. The correctness trials are
`leap_gym.evaluation.pipeline.run_trials`, so statuses, feedback and rewards are those of CUDA C++.

- ``cpu``: Triton's interpreter (``TRITON_INTERPRET=1``, set here before any kernel is decorated),
  every memory access checked against the launch's tensors before it happens
  (`leap_gym.integrations.triton_interpreter`): an out-of-bounds access is a RUNTIME_ERROR
  (``out_of_bounds``) naming the kernel, pointer argument and offsets; a construct the interpreter
  cannot run faithfully (bf16 arithmetic, libdevice) is a RUNTIME_ERROR ``interpreter_unsupported``
  that says so. A broken Triton language rule (``tl.arange`` of a non-power-of-two...) is a
  COMPILE_ERROR with the kernel's line, as the compiler would report it.
- ``cuda``: Triton's compiler and launcher on the GPU; a `CompilationError` is a COMPILE_ERROR
  naming the kernel and its line; timing through the backend's `time_ms` (CUDA events, as for
  CUDA C++); registers, spills and shared memory from each compiled kernel.
- ``compile-only``: the block runs (defining the kernels) and stops at ``COMPILED``.
"""

from __future__ import annotations

import linecache
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from leap_gym.integrations.triton_check import kernel_names
from leap_gym.result import COMPILE_ERROR, COMPILED, RUNTIME_ERROR, EvalResult, KernelResources

INSTALL_HINT = "Triton responses need triton: pip install 'leap-gym[triton]' (triton>=3.9)"
#: Exceptions of Triton's compiler (triton.compiler.errors), by name: a COMPILE_ERROR.
COMPILER_ERRORS = frozenset({"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"})


@dataclass
class TritonLaunches:
    """Launch bookkeeping `run_trials` reads: ``counts``/``launches``, ``noop`` (skip the kernels), ``inner``."""

    counts: dict[str, int] = field(default_factory=dict)
    noop: bool = False
    interpret: bool = True
    inner: Any = None  # no CUDA-C++ launcher to profile
    resources: dict[str, KernelResources] = field(default_factory=dict)

    @property
    def launches(self) -> dict[str, int]:
        return self.counts


class TritonCompileError(Exception):
    """A kernel that Triton's compiler (or, on the cpu backend, its language rules) refused."""

    def __init__(self, message: str, errors: list[str]):
        super().__init__(message)
        self.errors = errors


def _python_function(kernel: Any) -> Any:
    """The plain function under a ``@triton.jit`` object (through autotune/heuristics wrappers)."""
    fn = kernel
    while hasattr(fn, "fn"):
        fn = fn.fn
    return fn


def _block_line(lineno: int, source: str) -> str:
    lines = source.splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def _compile_error(exc: BaseException, name: str, kernel: Any, source: str) -> TritonCompileError:
    """The compiler's error as a kernel engineer reads it: kernel, line of the python block, message."""
    node = getattr(exc, "node", None)
    jit = _jit_function(kernel)  # the error's line counts from the `def` line (1)
    first = getattr(jit, "def_file_line_number", 0) or getattr(jit, "starting_line_number", 0) or 0
    line = first + node.lineno - 1 if node is not None and getattr(node, "lineno", None) and first else 0
    reason = getattr(exc, "error_message", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
    where = f", line {line}: `{_block_line(line, source)}`" if line else ""
    message = f"Triton could not compile kernel `{name}`{where}: {reason}"
    errors = [message] + [ln for ln in str(exc).splitlines() if ln.strip()][:20]
    return TritonCompileError(message, errors)


def _jit_function(kernel: Any) -> Any:
    fn = kernel
    for _ in range(8):
        if hasattr(fn, "starting_line_number") or not hasattr(fn, "fn"):
            return fn
        fn = fn.fn
    return fn


def _language_error(exc: BaseException, name: str) -> TritonCompileError | None:
    """On the interpreter: a Triton language rule broken inside the kernel (what the compiler would refuse)."""
    from leap_gym.evaluation.pipeline import PYTHON_BLOCK_NAME

    cause = exc.__cause__ or exc
    frames = traceback.extract_tb(cause.__traceback__)
    if not frames or "triton/language/" not in frames[-1].filename.replace("\\", "/"):
        return None
    if not isinstance(cause, (ValueError, TypeError, AssertionError, NotImplementedError)):
        return None
    own = [f for f in frames if f.filename == PYTHON_BLOCK_NAME]
    where = f", line {own[-1].lineno}: `{(own[-1].line or '').strip()}`" if own else ""
    message = f"Triton could not compile kernel `{name}`{where}: {type(cause).__name__}: {cause}".splitlines()[0]
    return TritonCompileError(message[:600], [message[:600]])


def _record_resources(registry: TritonLaunches, name: str, compiled: Any) -> None:
    """Registers, spills and shared memory of a compiled kernel (what the launch returned)."""
    metadata = getattr(compiled, "metadata", None)
    if metadata is None or name in registry.resources:
        return
    registers = getattr(compiled, "n_regs", None)
    spills = getattr(compiled, "n_spills", None)
    registry.resources[name] = KernelResources(  # Triton's n_spills counts 4-byte words of local memory per thread
        registers=int(registers or 0), shared_mem_bytes=int(getattr(metadata, "shared", 0) or 0),
        spill_stores_bytes=int(spills or 0) * 4)


def _launch(kernel: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any], source: str) -> Any:
    """One counted, checked launch of a top-level kernel object.

    The torch guards stay on here: ``triton.heuristics`` functions run under them; only the kernel's
    own run (the innermost ``@triton.jit`` object's ``run``, see `_count_kernels`) is unguarded.
    """
    from leap_gym.backends.base import KernelRuntimeError
    from leap_gym.evaluation.correctness import guards_suspended
    from leap_gym.integrations import triton_interpreter

    name, registry = kernel._leap_launch
    registry.counts[name] = registry.counts.get(name, 0) + 1
    if registry.noop:
        return None
    launcher = type(kernel).__mro__[1].__getitem__(kernel, grid)
    if not registry.interpret:
        try:
            compiled = launcher(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ in COMPILER_ERRORS:
                raise _compile_error(exc, name, kernel, source) from None
            raise
        _record_resources(registry, name, compiled)
        return compiled
    with guards_suspended():
        allocations = triton_interpreter.tensor_allocations(_python_function(kernel), args, kwargs)
    with triton_interpreter.checked_launch(name, allocations) as launch:
        try:
            return launcher(*args, **kwargs)
        except Exception as exc:
            failure = triton_interpreter.interpreter_failure(exc, launch)
            if failure is not None:
                raise KernelRuntimeError(failure[1], failure[0]) from None
            language = _language_error(exc, name)
            if language is not None:
                raise language from None
            raise


def _unguarded(run: Any) -> Any:
    """`run` with the torch guards suspended (Triton's launcher and interpreter use torch on the arguments)."""
    from leap_gym.evaluation.correctness import guards_suspended

    def run_unguarded(*args: Any, **kwargs: Any) -> Any:
        with guards_suspended():
            return run(*args, **kwargs)

    return run_unguarded


def _gpu_benchmark(kernel_call: Any, *args: Any, **kwargs: Any) -> Any:
    """``triton.autotune``'s benchmarker on the GPU, unguarded (it times with torch's CUDA events)."""
    from triton.runtime.driver import driver

    return _unguarded(driver.active.get_benchmarker())(kernel_call, *args, **kwargs)


_COUNTED: dict[type, type] = {}


def _counted_class(cls: type) -> type:
    """A subclass of a kernel's class whose ``kernel[grid]`` goes through `_launch` (the object stays the same,
    so other kernels that call it, and Triton's own isinstance checks, still see a kernel)."""
    if cls not in _COUNTED:
        def __getitem__(self: Any, grid: Any) -> Any:
            return lambda *args, **kwargs: _launch(self, grid, args, kwargs, self._leap_source)

        _COUNTED[cls] = type(f"Counted{cls.__name__}", (cls,), {"__getitem__": __getitem__})
    return _COUNTED[cls]


def _no_benchmark(kernel_call: Any, quantiles: Any = None, **_: Any) -> Any:
    """The interpreter's stand-in for ``triton.autotune``'s benchmarker (there is no GPU to time): every config
    ties, so the first one is used."""
    return [0.0] * len(quantiles) if quantiles else 0.0


def _count_kernels(namespace: dict[str, Any], source: str, interpret: bool) -> TritonLaunches:
    from triton.runtime.jit import KernelInterface

    registry = TritonLaunches(interpret=interpret)
    names = set(kernel_names(source))
    for name, value in list(namespace.items()):
        if isinstance(value, KernelInterface) and name in names:
            value.__class__ = _counted_class(type(value))
            value._leap_launch = (name, registry)
            value._leap_source = source
            wrapper = value
            while isinstance(getattr(wrapper, "fn", None), KernelInterface):  # autotune, heuristics wrappers
                if hasattr(wrapper, "configs"):
                    wrapper._do_bench = _no_benchmark if interpret else _gpu_benchmark
                wrapper = wrapper.fn
            wrapper.run = _unguarded(wrapper.run)  # the @triton.jit object itself
    return registry


def _import_triton(interpret: bool) -> Any:
    """``triton``, with the interpreter on (cpu) or off (cuda) for the kernels decorated from now on."""
    if interpret:
        from leap_gym.integrations.triton_interpreter import enable_interpreter

        enable_interpreter()
    else:
        os.environ["TRITON_INTERPRET"] = "0"
        # Triton caches kernels and its launcher stub under ~/.triton; a worker's home may be read-only.
        cache = Path(os.environ.get("LEAP_GYM_CACHE", Path.home() / ".cache" / "leap_gym")) / "triton"
        os.environ.setdefault("TRITON_HOME", str(cache))
        os.environ.setdefault("TRITON_CACHE_DIR", str(cache / "cache"))
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    try:
        import triton
    except ImportError as exc:
        raise RuntimeError(f"{INSTALL_HINT} ({exc})") from exc
    if interpret:
        from leap_gym.integrations import triton_interpreter

        triton_interpreter.install()
    return triton


def run_triton_job(job: Any) -> EvalResult:
    """Run and check one Triton response (inside a worker process), as `run_cuda_job` does CUDA C++.

    Args:
        job: an `EvalJob` whose ``cuda`` is empty and whose ``python`` is the Triton block.
    """
    from leap_gym.backends.base import KernelRuntimeError, get_backend
    from leap_gym.evaluation import correctness, hostile
    from leap_gym.evaluation.pipeline import (
        PYTHON_BLOCK_NAME,
        check_environment,
        finish,
        record_runtime_error,
        reference_outputs,
        run_trials,
        user_traceback,
    )

    start = time.perf_counter()
    result = EvalResult(COMPILED, task_id=job.task.id, backend=job.backend, answer_format="triton")
    backend = get_backend(job.backend)
    interpret = backend.device != "cuda"
    try:
        _import_triton(interpret)
    except RuntimeError as exc:
        result.status, result.detail, result.message = RUNTIME_ERROR, "triton_unavailable", str(exc)
        result.errors = [str(exc)]
        return finish(result, start)
    references = None
    if backend.runs_kernels:
        references = reference_outputs(job, backend, result)
        if references is None:
            return finish(result, start)
    environment = hostile.EnvironmentSnapshot()
    registry: TritonLaunches | None = None
    try:
        namespace: dict[str, Any] = {"__name__": "model_new"}
        # Triton reads each kernel's source (inspect.getsource); tracebacks show the block's lines.
        linecache.cache[PYTHON_BLOCK_NAME] = (len(job.python), None, job.python.splitlines(True), PYTHON_BLOCK_NAME)
        exec(compile(job.python, PYTHON_BLOCK_NAME, "exec"), namespace)
        registry = _count_kernels(namespace, job.python, interpret)
        model_new = namespace.get("ModelNew")
        if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
            raise TypeError("the python block must define `class ModelNew(nn.Module)`")
        if not backend.runs_kernels:
            result.message = f"defined {len(kernel_names(job.python))} Triton kernel(s); the {backend.name} backend " \
                             "does not run kernels"
            return finish(result, start)
        # The interpreter adds its own helpers to the block's globals on a first launch: judge the block's names.
        state = {k: v for k, v in namespace.items() if k not in kernel_names(job.python)}
        run_trials(job, backend, registry, model_new, result, references=references, namespace=state,
                   counter=registry)
    except TritonCompileError as exc:
        result.status, result.detail, result.message, result.errors = COMPILE_ERROR, "triton", str(exc), exc.errors
    except (KernelRuntimeError, correctness.TorchOpError) as exc:
        record_runtime_error(result, exc)
    except Exception as exc:
        record_runtime_error(result, exc)
        result.errors = user_traceback(exc)[-12:]
    finally:
        if registry is not None:
            if registry.resources:
                result.resources = dict(registry.resources)
            if registry.counts:
                result.launches = dict(registry.counts)
        if hasattr(backend, "check_health"):
            backend.check_health()
    check_environment(environment, result)
    return finish(result, start)


__all__ = ["INSTALL_HINT", "TritonLaunches", "run_triton_job"]
