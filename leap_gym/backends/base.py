"""The backend protocol and registry.

A backend turns a compiled `cuda` block into a `KernelLauncher` for the `kernels` handle, and says
on which device tensors live. NVRTC compilation (`leap_gym.backends.nvrtc`) is shared by all.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from leap_gym.evaluation.kernels import KernelLauncher, KernelSignature


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine; the message says why and what to install."""


class KernelRuntimeError(RuntimeError):
    """A kernel failed while running (bad access, deadlock, unsupported feature).

    Args:
        message: what a kernel engineer reads, naming the kernel and, where known, the line.
        detail: a machine-readable sub-status such as ``"out_of_bounds"`` or ``"deadlock"``.
    """

    def __init__(self, message: str, detail: str = "kernel_error"):
        super().__init__(message)
        self.detail = detail


@dataclass
class Availability:
    ok: bool
    reason: str


class Backend:
    """Base class of backends.

    Attributes:
        name: registry name.
        device: torch device type of the tensors kernels see (``"cpu"`` or ``"cuda"``).
        runs_kernels: `False` for `compile-only`, which stops after NVRTC.
        reports_speedup: whether its timings say anything about a GPU.
        size_preset: the task size preset that fits it (``"cpu"`` or ``"gpu"``).
    """

    name = "base"
    device = "cpu"
    runs_kernels = True
    reports_speedup = False
    size_preset = "cpu"

    def availability(self) -> Availability:
        return Availability(True, "")

    def default_arch(self) -> str:
        return "sm_90"

    def load(self, cuda_source: str, cubin: bytes, signatures: dict[str, KernelSignature], arch: str,
             checked: bool = False) -> KernelLauncher:
        """Make the compiled module's kernels launchable. `checked` asks for a build that locates faults."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all launched work to finish (every stream)."""

    def time_ms(self, fn: Callable[[], Any], budget_s: float) -> tuple[float, float, int]:
        """Median and spread (ms) of `fn` over trials, and the trial count. Only for `reports_speedup`."""
        raise NotImplementedError(f"backend {self.name} does not time kernels")


_REGISTRY: dict[str, str] = {
    "compile-only": "leap_gym.backends.compile_only:CompileOnlyBackend",
    "cpu": "leap_gym.backends.cpu:CpuBackend",
    "cuda": "leap_gym.backends.cuda:CudaBackend",
}
_INSTANCES: dict[str, Backend] = {}


def register_backend(name: str, target: str) -> None:
    """Register a backend class by ``"module:Class"`` path."""
    _REGISTRY[name] = target
    _INSTANCES.pop(name, None)


def backend_names() -> list[str]:
    return ["auto", *_REGISTRY]


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; ``"auto"`` is `cuda` where a GPU is visible, else `cpu`."""
    if isinstance(name, Backend):
        return name
    if name == "auto":
        name = "cuda" if get_backend("cuda").availability().ok else "cpu"
    if name not in _REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of {backend_names()}")
    if name not in _INSTANCES:
        module_name, cls_name = _REGISTRY[name].split(":")
        _INSTANCES[name] = getattr(importlib.import_module(module_name), cls_name)()
    return _INSTANCES[name]
