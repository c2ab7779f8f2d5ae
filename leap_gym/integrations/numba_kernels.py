"""Numba kernels: a second kernel language, judged like CUDA C++ responses.

A Numba response holds no ```cuda block and one ```python block that imports Numba, defines its
kernels as ``@cuda.jit`` functions and a ``class ModelNew(nn.Module)`` whose ``forward`` allocates
outputs and launches them as ``kernel[grid, block](*args)`` with the torch tensors themselves:

```python
import math
import torch
import torch.nn as nn
from numba import cuda

@cuda.jit
def relu_kernel(x, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = max(x[i], 0.0)

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(n + 255) // 256, 256](x, y, n)
        return y
```

The environment makes the tensors launchable: after the block runs, every kernel in its namespace
is replaced by a handle that converts torch tensors at launch (``numba.cuda.as_cuda_array`` on a
GPU, a zero-copy NumPy view on the CPU) and counts launches. On the ``cuda`` backend kernels run
through numba's CUDA target; on the ``cpu`` backend through Numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``, set in the worker before Numba is imported), which runs each thread
as a Python thread: use tiny sizes (about 20 s for a 1e5-element vector add). The ``compile-only``
backend runs the block (defining the kernels) and stops at ``COMPILED``.

Statuses, feedback and reward are those of CUDA C++ responses: the correctness trials are
`leap_gym.evaluation.pipeline.run_trials`. This module is the ``numba`` entry of
`leap_gym.evaluation.languages`, which dispatches a response here by `is_numba_response`.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from leap_gym.evaluation import parse
from leap_gym.evaluation.parse import FormatError, ParsedResponse
from leap_gym.evaluation.static_check import ALLOWED_IMPORTS, PythonChecker
from leap_gym.pyparse import parse_python
from leap_gym.result import COMPILE_ERROR, COMPILED, FORMAT_ERROR, RUNTIME_ERROR, EvalResult, KernelResources

NUMBA_MODULES = frozenset({"numba", "numba.cuda"})
_IMPORTS_NUMBA_RE = re.compile(r"^[ \t]*(?:from[ \t]+numba\b|import[ \t]+numba\b)", re.MULTILINE)
# Simulated threads run Python code only; a small stack keeps 1024 of them inside the worker's address space.
SIMULATOR_THREAD_STACK_BYTES = 512 * 1024

NUMBA_LAYOUT = '''```python
import torch
import torch.nn as nn
from numba import cuda

@cuda.jit
def scale_kernel(x, y, alpha, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = alpha * x[i]

class ModelNew(nn.Module):
    def __init__(self, alpha):          # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        y = torch.empty_like(x)         # allocate outputs; no torch compute operators here
        n = x.numel()
        scale_kernel[(n + 255) // 256, 256](x, y, self.alpha, n)
        return y
```'''

NUMBA_RESPONSE_FORMAT = (
    "Answer with one ```python block that imports numba, defines your kernels as @cuda.jit functions and "
    "class ModelNew(nn.Module) with the same constructor arguments as Model:\n\n" + NUMBA_LAYOUT + "\n\n"
    "Launch a kernel as kernel[grid, block](*args) with the torch tensors themselves (the environment passes "
    "them to Numba as device arrays); Python ints and floats pass as scalars. forward may only allocate, view "
    "and launch: the computation happens in your kernels.")

NUMBA_RULES = (
    "A Numba response is one ```python block. It may import torch, torch.nn, torch.nn.functional, math, typing, "
    "numba and numba.cuda; defines @cuda.jit kernels (and @cuda.jit(device=True) helpers) and class "
    "ModelNew(nn.Module) whose forward allocates outputs and launches kernel[grid, block](*tensors). The other "
    "rules of CUDA responses' python blocks hold (no eval/exec/open, no dunder or private attributes, no "
    "torch.ops/torch.utils/.numpy(), no global state).")


def imports_numba(source: str) -> bool:
    """Whether Python source has an ``import numba`` or ``from numba ...`` line."""
    return bool(_IMPORTS_NUMBA_RE.search(source))


def is_numba_response(response: Any) -> bool:
    """Whether a response is in the Numba form: no ```cuda block, a ```python block importing numba.

    Accepts the response text or a `ParsedResponse` (one with an empty ``cuda`` block).
    """
    return parse.is_kernel_module_response(response, "numba", imports_numba)


def is_numba_job(job: Any) -> bool:
    """Whether an `EvalJob` carries a Numba response (an empty cuda block, a python block importing numba)."""
    return not (job.cuda or "").strip() and imports_numba(job.python or "")


def numba_layout() -> str:
    return "Expected (Numba form):\n\n" + NUMBA_LAYOUT


class _NumbaChecker(PythonChecker):
    """The python-block static check, with numba imports and ``cuda.jit`` allowed."""

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import) and all(a.name in NUMBA_MODULES for a in node.names):
            for alias in node.names:
                self.module_names.add(alias.asname or alias.name.split(".")[0])
            return
        if isinstance(node, ast.ImportFrom) and not node.level and node.module in NUMBA_MODULES:
            for alias in node.names:
                if alias.name == "*":
                    self.flag(node, f"`from {node.module} import *` is not allowed; write `from numba import cuda`")
                elif alias.name.startswith("_"):
                    self.flag(node, f"`from {node.module} import {alias.name}` is not allowed (private name)")
                elif f"{node.module}.{alias.name}" in NUMBA_MODULES:
                    self.module_names.add(alias.asname or alias.name)
            return
        module = (node.names[0].name if isinstance(node, ast.Import) else "." * node.level + (node.module or ""))
        allowed = sorted(ALLOWED_IMPORTS | NUMBA_MODULES)
        if isinstance(node, ast.Import) and any(a.name not in ALLOWED_IMPORTS for a in node.names) or \
                isinstance(node, ast.ImportFrom) and module not in ALLOWED_IMPORTS:
            self.flag(node, f"importing `{module}` is not allowed; a Numba block may import only {', '.join(allowed)}")
            return
        super().check_import(node)

    def check_attribute(self, node: ast.Attribute, scope: Any) -> None:
        if node.attr == "jit" and isinstance(node.value, (ast.Name, ast.Attribute)):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.module_names and root.id not in {"torch"}:
                return  # cuda.jit / numba.cuda.jit
        super().check_attribute(node, scope)


def _kernel_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "jit" or \
        isinstance(target, ast.Name) and target.id == "jit"


def _is_device_function(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and any(
        k.arg == "device" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)


def kernel_names(source: str) -> list[str]:
    """Names of the top-level ``@cuda.jit`` kernels (not ``device=True`` helpers) of a Numba python block."""
    tree = parse_python(source)
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(_kernel_decorator(d) and not _is_device_function(d) for d in node.decorator_list)]


def check_numba_block(source: str) -> None:
    """The static check of a Numba python block (the CUDA python-block rules plus Numba's API).

    Raises:
        FormatError: naming each refused construct with its line, then `NUMBA_RULES`.
    """
    parse.check_kernel_module(source, lambda tree: _NumbaChecker(tree).run(), kernel_names, "Numba", "@cuda.jit",
                              numba_layout(), NUMBA_RULES)


def parse_numba_response(text: str) -> ParsedResponse:
    """The python block of a Numba response, checked, as a `ParsedResponse` with an empty ``cuda`` block.

    Raises:
        FormatError: two python blocks, a block that does not parse or lacks ModelNew, a refused
            construct, or no ``@cuda.jit`` kernel; the message shows the Numba layout.
    """
    return parse.parse_kernel_module(text, "Numba", "@cuda.jit", numba_layout(), check_numba_block)


def prepare_numba(task: Any, response: str) -> ParsedResponse | EvalResult:
    """`prepare_cuda`, for a Numba response: the parsed block, or a FORMAT_ERROR result."""
    try:
        return parse_numba_response(response)
    except FormatError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="format")


# ---------------------------------------------------------------------------------------------- worker side


def import_numba_cuda(simulate: bool) -> Any:
    """``numba.cuda``, in simulator mode when `simulate` (set before numba's first import in this process).

    Raises:
        RuntimeError: numba is missing, or was already imported in the other mode.
    """
    if simulate:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        if "numba" in sys.modules and "numba.cuda" not in sys.modules:
            from numba.core import config

            config.ENABLE_CUDASIM = True
    try:
        from numba import cuda
    except ImportError as exc:  # pragma: no cover - numba is a dependency
        raise RuntimeError(f"Numba responses need numba: pip install numba ({exc})") from exc
    from numba.core import config

    simulating = bool(config.ENABLE_CUDASIM)
    if simulate != simulating:
        mode = "the CUDA simulator" if simulating else "real CUDA"
        raise RuntimeError(f"numba.cuda was already imported in this process with {mode}; evaluate Numba responses "
                           "for the cpu and cuda backends in separate processes")
    return cuda


def _to_device_array(value: Any, cuda: Any, simulate: bool) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    tensor = value.detach()
    if simulate:
        if tensor.device.type != "cpu":
            raise TypeError(f"the Numba simulator runs on CPU tensors, got a tensor on {tensor.device}")
        return tensor.numpy()
    if tensor.device.type != "cuda":
        raise TypeError(f"a Numba kernel on the GPU needs CUDA tensors, got one on {tensor.device}")
    return cuda.as_cuda_array(tensor)


@dataclass
class NumbaKernels:
    """The launch bookkeeping `run_trials` reads (``launches``), for the kernels of one response."""

    launches: dict[str, int] = field(default_factory=dict)
    handles: dict[str, Any] = field(default_factory=dict)


class _Launch:
    def __init__(self, handle: TensorLaunchKernel, config: Any):
        self.handle = handle
        self.config = config

    def __call__(self, *args: Any) -> Any:
        handle = self.handle
        converted = [_to_device_array(a, handle.cuda, handle.simulate) for a in args]
        handle.registry.launches[handle.name] = handle.registry.launches.get(handle.name, 0) + 1
        return handle.kernel[self.config](*converted)


class TensorLaunchKernel:
    """A ``@cuda.jit`` kernel that accepts torch tensors at launch and counts its launches."""

    def __init__(self, name: str, kernel: Any, registry: NumbaKernels, cuda: Any, simulate: bool):
        self.name, self.kernel, self.registry, self.cuda, self.simulate = name, kernel, registry, cuda, simulate

    def __getitem__(self, config: Any) -> _Launch:
        return _Launch(self, config)

    def __getattr__(self, item: str) -> Any:
        return getattr(self.kernel, item)


def _wrap_kernels(namespace: dict[str, Any], names: list[str], cuda: Any, simulate: bool) -> NumbaKernels:
    registry = NumbaKernels()
    for name in names:
        kernel = namespace.get(name)
        if kernel is None or not hasattr(kernel, "__getitem__"):
            raise TypeError(f"`{name}` is decorated with cuda.jit but is not a launchable kernel")
        handle = TensorLaunchKernel(name, kernel, registry, cuda, simulate)
        namespace[name] = handle
        registry.handles[name] = handle
    return registry


def _resources(registry: NumbaKernels) -> dict[str, KernelResources]:
    """Registers and shared memory of each compiled kernel (real CUDA only; the simulator has none)."""
    figures: dict[str, KernelResources] = {}
    for name, handle in registry.handles.items():
        kernel = handle.kernel
        try:
            registers = kernel.get_regs_per_thread()
            shared = kernel.get_shared_mem_per_block()
            local = kernel.get_local_mem_per_thread()
        except Exception:  # not compiled yet, several overloads, or the simulator
            continue
        if isinstance(registers, dict):
            registers, shared, local = (max(v.values(), default=0) for v in (registers, shared, local))
        figures[name] = KernelResources(registers=int(registers), shared_mem_bytes=int(shared),
                                        stack_frame_bytes=int(local))
    return figures


def _numba_compile_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith("numba") and any(k in type(exc).__name__ for k in ("Typing", "Lowering", "Unsupported",
                                                                                  "Compiler", "Numba"))


def run_numba_job(job: Any) -> EvalResult:
    """Run and check one Numba response (inside a worker process), as `run_cuda_job` does CUDA C++.

    Args:
        job: an `EvalJob` whose ``cuda`` is empty and whose ``python`` is the Numba block.
    """
    from leap_gym.backends.base import KernelRuntimeError, get_backend
    from leap_gym.evaluation import correctness
    from leap_gym.evaluation.pipeline import PYTHON_BLOCK_NAME, record_runtime_error, run_trials, user_traceback

    start = time.perf_counter()
    result = EvalResult(COMPILED, task_id=job.task.id, backend=job.backend)
    backend = get_backend(job.backend)
    simulate = backend.device != "cuda"
    try:
        cuda = import_numba_cuda(simulate)
    except RuntimeError as exc:
        result.status, result.detail, result.message = RUNTIME_ERROR, "numba_unavailable", str(exc)
        result.errors = [str(exc)]
        return _finish(result, start)
    if simulate:
        threading.stack_size(SIMULATOR_THREAD_STACK_BYTES)
    registry: NumbaKernels | None = None
    try:
        namespace: dict[str, Any] = {"__name__": "model_new"}
        # Traceback lines of the block show its source (the simulator reports faults in the kernel's lines).
        linecache.cache[PYTHON_BLOCK_NAME] = (len(job.python), None, job.python.splitlines(True), PYTHON_BLOCK_NAME)
        exec(compile(job.python, PYTHON_BLOCK_NAME, "exec"), namespace)
        registry = _wrap_kernels(namespace, kernel_names(job.python), cuda, simulate)
        model_new = namespace.get("ModelNew")
        if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
            raise TypeError("the python block must define `class ModelNew(nn.Module)`")
        if not backend.runs_kernels:
            result.message = (f"defined {len(registry.handles)} Numba kernel(s); the {backend.name} backend does not "
                              "run kernels")
            return _finish(result, start)
        run_trials(job, backend, registry, model_new, result, namespace=namespace)
    except (KernelRuntimeError, correctness.TorchOpError) as exc:
        record_runtime_error(result, exc)
    except Exception as exc:
        headline = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        if "Nvvm" in type(exc).__name__ or "libNVVM" in str(exc) or "CudaSupportError" in type(exc).__name__:
            result.status, result.detail = RUNTIME_ERROR, "numba_unavailable"
            result.message = (f"Numba cannot compile for this GPU: {headline}; install numba-cuda with its NVVM "
                              "(pip install numba-cuda[cu12] or [cu13])")
            result.errors = [result.message]
        elif _numba_compile_error(exc):
            result.status, result.detail = COMPILE_ERROR, "numba"
            result.message = f"Numba could not compile a kernel: {headline}"
            result.errors = [line for line in str(exc).splitlines() if line.strip()][:20]
        else:
            result.status = RUNTIME_ERROR
            result.detail = "out_of_bounds" if isinstance(exc, IndexError) else "python_exception"
            result.message = headline
            result.errors = user_traceback(exc)
    finally:
        if registry is not None:
            result.resources = _resources(registry)
            if registry.launches:
                result.launches = dict(registry.launches)
    return _finish(result, start)


def _finish(result: EvalResult, start: float) -> EvalResult:
    result.wall_time_s = time.perf_counter() - start
    return result


__all__ = ["NUMBA_LAYOUT", "NUMBA_RESPONSE_FORMAT", "NumbaKernels", "TensorLaunchKernel", "check_numba_block",
           "import_numba_cuda", "imports_numba", "is_numba_job", "is_numba_response", "kernel_names",
           "parse_numba_response", "prepare_numba", "run_numba_job"]
