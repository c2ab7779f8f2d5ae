"""The backend protocol and registry.

A backend turns a compiled `cuda` block into a `KernelLauncher` for the `kernels` handle, and says
on which device tensors live. NVRTC compilation (`leap_gym.backends.nvrtc`) is shared by all.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

from leap_gym.evaluation.kernels import KernelLauncher, KernelSignature

log = logging.getLogger(__name__)


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


def request_worker_replacement() -> None:
    """Inside a sandbox worker, ask the pool to replace this process after the current call: a kernel
    left it in a state later calls must not inherit. Outside a worker this does nothing."""
    from leap_gym.sandbox import request_replacement

    request_replacement()


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


#: The environment variable that carries registrations beyond the built-in backends into sandbox workers:
#: JSON, registry name to ``"module:Class"``. `register_backend` sets it; the sandbox passes it to every worker
#: it starts (`leap_gym.sandbox.DEFAULT_ENV_ALLOW`), and this module reads it on import there.
BACKENDS_ENV = "LEAP_GYM_BACKENDS"

_BUILTIN: dict[str, str] = {
    "compile-only": "leap_gym.backends.compile_only:CompileOnlyBackend",
    "cpu": "leap_gym.backends.cpu:CpuBackend",
    "cuda": "leap_gym.backends.cuda:CudaBackend",
}
_REGISTRY: dict[str, str] = dict(_BUILTIN)
_INSTANCES: dict[str, Backend] = {}


def _check_target(name: str, target: str) -> None:
    module_name, _, cls_name = target.partition(":")
    if not name or name == "auto":
        raise ValueError(f"register_backend({name!r}, ...): the name must be non-empty and not 'auto'")
    if not (module_name and cls_name and all(p.isidentifier() for p in module_name.split("."))
            and cls_name.isidentifier()):
        raise ValueError(f"register_backend({name!r}, {target!r}): the target must be 'package.module:Class', "
                         "importable by name (a sandbox worker imports it)")


def register_backend(name: str, target: str) -> None:
    """Register a backend class by ``"module:Class"`` path, here and in the sandbox workers.

    Evaluations run in sandbox workers, fresh interpreters that never see this process's objects, so the
    registration is a path the worker imports: it travels in the environment variable `BACKENDS_ENV`, which
    every worker started afterwards receives. The module must therefore be importable in a worker: an
    installed package, or a module on this process's ``sys.path`` (workers get the same ``sys.path``).
    Register before the first evaluation on that backend: a worker already running keeps the registrations
    it started with.

    Args:
        name: the name that ``backend=`` then takes (``gym.make``, `leap_gym.evaluate`, `leap_gym.Evaluator`).
        target: ``"package.module:Class"``, a subclass of `Backend` constructible with no arguments.

    Raises:
        ValueError: `target` is not of the form ``"package.module:Class"``, or `name` is empty or ``"auto"``.
    """
    _check_target(name, target)
    _REGISTRY[name] = target
    _INSTANCES.pop(name, None)
    custom = {n: t for n, t in _REGISTRY.items() if _BUILTIN.get(n) != t}
    os.environ[BACKENDS_ENV] = json.dumps(custom, sort_keys=True)


def _register_from_environment() -> None:
    """In a worker (or any process started after a `register_backend`): the registrations its parent made."""
    text = os.environ.get(BACKENDS_ENV)
    if not text:
        return
    try:
        entries = json.loads(text)
        if not isinstance(entries, dict):
            raise ValueError("not a JSON object")
        for name, target in entries.items():
            _check_target(name, target)
    except (ValueError, TypeError, AttributeError) as exc:
        log.warning("ignoring %s=%r: %s (it holds JSON, name to 'module:Class')", BACKENDS_ENV, text, exc)
        return
    _REGISTRY.update(entries)


_register_from_environment()


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
        backend = getattr(importlib.import_module(module_name), cls_name)()
        backend.name = name  # the registry name is what jobs carry to the worker, whatever the class calls itself
        _INSTANCES[name] = backend
    return _INSTANCES[name]
