"""What the evaluation keeps out of a hostile response's reach: the reference side (run first, outputs
sealed, freed memory poisoned), snapshots of the response's state and of the environment around it,
a second set of shapes, and a launch counter the response cannot touch.

Used by `leap_gym.evaluation.pipeline.run_cuda_job` in the order `leap_gym.evaluation.correctness` describes.
"""

from __future__ import annotations

import builtins
import inspect
import logging
import math
import os
import sys
import types
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from leap_gym.evaluation import correctness
from leap_gym.evaluation.correctness import ForwardGuard, guards_suspended, has_internal_overlap, raw_bytes

if TYPE_CHECKING:
    from leap_gym.backends.base import Backend
    from leap_gym.tasks import Task

log = logging.getLogger(__name__)


class Sealed:
    """A reference output kept XOR-masked with a random key: no plain copy of it stays in memory."""

    def __init__(self, tensor: torch.Tensor):
        t = tensor.detach()
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device
        self.overlapping = t.numel() > 1 and has_internal_overlap(t)
        raw = t.contiguous().reshape(-1).view(torch.uint8)
        self.nbytes = raw.numel()
        generator = torch.Generator(device=raw.device)
        generator.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        self._key = torch.randint(0, 256, (raw.numel(),), dtype=torch.uint8, device=raw.device, generator=generator)
        self._masked = raw ^ self._key

    def open(self) -> torch.Tensor:
        """The reference output, unmasked into new memory."""
        return (self._masked ^ self._key).view(self.dtype).reshape(self.shape)


def seal_all(outputs: list[Any]) -> list[Any]:
    return [Sealed(x) if isinstance(x, torch.Tensor) else x for x in outputs]


def open_all(sealed: list[Any]) -> list[Any]:
    return [x.open() if isinstance(x, Sealed) else x for x in sealed]


def poison_memory(nbytes: list[int], device: str | torch.device, byte: int = 0xFF) -> None:
    """Allocate blocks of these sizes (and a few larger), fill them with `byte`, free them.

    Freed memory is handed out again by the allocator (torch's caching allocator on a GPU, malloc's
    bins on the CPU), so this overwrites what the reference left there.
    """
    sizes = [n for n in nbytes if n > 0]
    sizes += [2 * n for n in sizes[:4]]
    blocks = [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes]
    for block in blocks:
        block.fill_(byte)
    del blocks


# ------------------------------------------------------------------------------------------------
# State: module-level and instance state of the response, and the environment around it
# ------------------------------------------------------------------------------------------------

_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)
_MAX_ITEMS = 20000


class StateSnapshot:
    """Everything reachable from the response's namespace and model, by identity and value.

    Tensors are compared by their bytes (a kernel writing through a pointer changes no version
    counter), containers by identity and contents, functions by their defaults and closures, objects
    (the model, helper instances, classes of the block) by their attributes.

    Args:
        roots: name -> object to walk (``{"self": model_new, "CACHE": ...}``).
        skip: objects not walked (the `kernels` handle).
    """

    def __init__(self, roots: dict[str, Any], skip: tuple[Any, ...] = ()):
        self._skip = {id(s) for s in skip}
        self.tokens: dict[str, Any] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        seen: set[int] = set()
        for name, obj in roots.items():
            self._walk(obj, name, seen, 0)

    def _walk(self, obj: Any, path: str, seen: set[int], depth: int) -> None:
        if len(self.tokens) > _MAX_ITEMS or depth > 12:
            return
        if id(obj) in self._skip:
            self.tokens[path] = ("skipped", id(obj))
            return
        if isinstance(obj, torch.Tensor):
            self.tokens[path] = ("tensor", id(obj), tuple(obj.shape), obj.dtype, str(obj.device),
                                 obj.data_ptr() if not obj.is_meta else 0)
            if not obj.is_meta:
                self.tensors[path] = raw_bytes(obj)
            return
        if isinstance(obj, _PLAIN):
            self.tokens[path] = ("value", obj)
            return
        if id(obj) in seen:
            self.tokens[path] = ("ref", id(obj))
            return
        seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            self.tokens[path] = ("module", id(obj))
        elif isinstance(obj, (list, tuple)):
            self.tokens[path] = (type(obj).__name__, id(obj), len(obj))
            for i, item in enumerate(list(obj)):
                self._walk(item, f"{path}[{i}]", seen, depth + 1)
        elif isinstance(obj, dict) or isinstance(obj, types.MappingProxyType):
            items = list(obj.items())
            self.tokens[path] = ("dict", id(obj), len(items))
            for key, value in items:
                self._walk(value, f"{path}[{key!r}]" if isinstance(key, _PLAIN) else f"{path}[#{id(key)}]",
                           seen, depth + 1)
        elif isinstance(obj, (set, frozenset)):
            self.tokens[path] = ("set", id(obj), frozenset(id(x) if not isinstance(x, _PLAIN) else x for x in obj))
        elif isinstance(obj, (types.FunctionType, types.MethodType)):
            fn = obj.__func__ if isinstance(obj, types.MethodType) else obj
            self.tokens[path] = ("function", id(obj))
            self._walk(fn.__defaults__, f"{path}.defaults", seen, depth + 1)
            self._walk(fn.__kwdefaults__, f"{path}.kwdefaults", seen, depth + 1)
            for i, cell in enumerate(fn.__closure__ or ()):
                try:
                    content = cell.cell_contents
                except ValueError:
                    content = None
                self._walk(content, f"{path}.closure[{i}]", seen, depth + 1)
        elif isinstance(obj, (staticmethod, classmethod)):
            self.tokens[path] = ("method", id(obj))
            self._walk(obj.__func__, f"{path}.func", seen, depth + 1)
        elif isinstance(obj, type):
            self.tokens[path] = ("class", id(obj))
            if obj.__module__ == "model_new":  # classes of the block: their attributes are state too
                self._attributes(vars(obj), path, seen, depth)
        elif hasattr(obj, "__dict__") and type(obj).__module__ == "model_new" or isinstance(obj, torch.nn.Module):
            self.tokens[path] = ("object", id(obj), id(type(obj)))
            self._attributes(vars(obj), path, seen, depth)
        else:
            self.tokens[path] = ("other", id(obj), type(obj).__name__)

    def _attributes(self, attrs: Any, path: str, seen: set[int], depth: int) -> None:
        items = list(attrs.items())
        self.tokens[f"{path}.__dict__"] = ("attributes", len(items))
        for key, value in items:
            self._walk(value, f"{path}.{key}", seen, depth + 1)

    def changed_since(self, before: StateSnapshot) -> str | None:
        """The first path whose identity or value differs from `before`, or None."""
        for path in sorted(set(before.tokens) | set(self.tokens)):
            if before.tokens.get(path) != self.tokens.get(path):
                return path
            if path in before.tensors and not torch.equal(before.tensors[path], self.tensors[path]):
                return path
        return None


def public_namespace(namespace: dict[str, Any]) -> dict[str, Any]:
    """The block's module-level names that are state (not dunders, not modules)."""
    return {k: v for k, v in namespace.items() if not k.startswith("__") and not isinstance(v, types.ModuleType)}


def _guarded_objects() -> dict[str, Any]:
    import torch.nn.functional as F

    targets: dict[str, Any] = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn": torch.nn,
                               "torch.nn.Module": torch.nn.Module, "torch.nn.Parameter": torch.nn.Parameter,
                               "torch.nn.functional": F, "torch.cuda": torch.cuda, "torch.linalg": torch.linalg,
                               "math": math, "builtins": builtins}
    for name in ("leap_gym.evaluation.correctness", "leap_gym.evaluation.pipeline", "leap_gym.evaluation.languages",
                 "leap_gym.evaluation.kernels", "leap_gym.result", "leap_gym.backends.base", "leap_gym.backends.cpu",
                 "leap_gym.backends.cpu_checked", "leap_gym.backends.cuda", "leap_gym.backends.cuda_driver",
                 "leap_gym.backends.timing", "leap_gym.sandbox", "leap_gym.sandbox.pool", "leap_gym.kernelbench.build",
                 "torch._tensor",
                 "torch.overrides", "torch.utils._python_dispatch"):
        if name in sys.modules:
            targets[name] = sys.modules[name]
    return targets


class EnvironmentSnapshot:
    """The public attributes of torch, builtins and the harness modules (a class's inherited ones too),
    and torch's global settings, to find any the python block swapped."""

    def __init__(self) -> None:
        with ForwardGuard():  # entering a mode the first time imports torch._dynamo, which rebinds torch names
            torch.empty(0)
        self.values = {label: _attributes(obj) for label, obj in _guarded_objects().items()}
        self.settings = global_settings()

    def tampered(self) -> str | None:
        """``"torch.Tensor.add"`` for the first attribute or global setting changed since the snapshot, or None."""
        now = global_settings()
        for name, value in self.settings.items():
            if now.get(name) != value:
                return f"{name} (was {value!r}, now {now.get(name)!r})"
        current = _guarded_objects()
        for label, attrs in self.values.items():
            obj = current.get(label)
            for name, value in attrs.items():
                if _static(obj, name) is not value:
                    return f"{label}.{name}"
        return None


def _static(obj: Any, name: str) -> Any:
    if obj is None:
        return _MISSING
    if isinstance(obj, type):
        try:
            return inspect.getattr_static(obj, name)
        except AttributeError:
            return _MISSING
    return vars(obj).get(name, _MISSING)


def _attributes(obj: Any) -> dict[str, Any]:
    """Name -> raw attribute (unbound descriptors, so identity is stable) of what a response could swap."""
    is_class = isinstance(obj, type)
    names = dir(obj) if is_class else list(vars(obj))
    out = {}
    for name in names:
        if name.startswith("_") and not (is_class and name.startswith("__") and name.endswith("__")):
            continue
        if name in ("__dict__", "__doc__", "__weakref__", "__module__", "__annotations__", "__slots__"):
            continue
        value = _static(obj, name)
        if value is not _MISSING and (callable(value) or isinstance(value, (type, types.ModuleType, property,
                                                                             staticmethod, classmethod))
                                      or type(value).__name__.endswith("descriptor")):
            out[name] = value
    return out


_MISSING = object()


def global_settings() -> dict[str, Any]:
    """Process-wide torch settings a response could change to slow the reference or loosen the checks."""
    settings: dict[str, Any] = {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.backends.cudnn.enabled": torch.backends.cudnn.enabled,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    }
    profiler = getattr(torch.autograd, "_profiler_enabled", None)
    if callable(profiler):
        settings["torch.autograd profiler"] = profiler()
    return settings


# ------------------------------------------------------------------------------------------------
# A second set of shapes
# ------------------------------------------------------------------------------------------------

def _grow(value: int) -> int:
    grown = value + value // 4 + 1
    multiple = 1
    while multiple < 16 and value % (multiple * 2) == 0:
        multiple *= 2
    return -(-grown // multiple) * multiple


def shape_variant(task: Any) -> Any | None:
    """The task at a second set of sizes (its size constants of at least 8 grown by about a quarter).

    Only for tasks whose ``sizes`` presets name their size constants, and whose ``LEAP_TASK`` does not
    say ``shape_check=False``; None otherwise. Divisibility by powers of two up to 16 is kept.
    """
    names = {n for preset in getattr(task, "sizes", {}).values() for n in preset}
    if not names:
        return None
    namespace = task.module()
    if not dict(namespace.get("LEAP_TASK", {})).get("shape_check", True):
        return None
    grown = {}
    for name in sorted(names):
        value = namespace.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 8:
            grown[name] = _grow(value)
    if not grown:
        return None
    return replace(task, overrides={**task.overrides, **grown})


# ------------------------------------------------------------------------------------------------
# The reference side, computed before any code of the response runs
# ------------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One input set: pristine inputs (the candidate always gets clones) and the sealed reference outputs."""

    inputs: list[Any]
    expected: list[Any]

    def expected_outputs(self) -> list[Any]:
        return open_all(self.expected)


@dataclass
class Reference:
    """The reference side of an evaluation, at one set of sizes."""

    task: Task
    init_inputs: list[Any]
    model: torch.nn.Module
    cases: list[Case]


def device_copy(x: Any, device: str) -> Any:
    return x.to(device).clone() if isinstance(x, torch.Tensor) else x


def reference_at(task: Task, seed: int, trials: int, backend: Backend, freed: list[int]) -> Reference:
    device = backend.device
    namespace = task.module()
    init_inputs = list(namespace["get_init_inputs"]())
    torch.manual_seed(seed)
    model = namespace["Model"](*init_inputs).to(device)
    cases = []
    for trial in range(trials):
        torch.manual_seed(seed + 1009 * (trial + 1))
        inputs = [device_copy(x, device) for x in namespace["get_inputs"]()]
        with torch.no_grad():
            output = correctness.flatten(model(*correctness.fresh_copy(inputs)))
        backend.synchronize()
        freed += [t.untyped_storage().nbytes() for t in output if isinstance(t, torch.Tensor)]
        cases.append(Case(inputs, seal_all(output)))
        del output
    return Reference(task, init_inputs, model, cases)


def reference_phase(job: Any, backend: Backend) -> tuple[Reference, Reference | None]:
    """Reference outputs for every trial and for the shape check, sealed, then freed memory poisoned.

    Runs before any code of the response does, so nothing the response does can touch them.
    """
    freed: list[int] = []
    main = reference_at(job.task, job.seed, job.trials, backend, freed)
    shape = None
    variant = shape_variant(job.task) if job.shape_check else None
    if variant is not None:
        try:
            shape = reference_at(variant, job.seed, 1, backend, freed)
        except Exception:  # the task does not run at other sizes: no shape check
            log.debug("task %s has no second set of sizes", job.task.id, exc_info=True)
    poison_memory(freed, backend.device)
    backend.synchronize()
    return main, shape


# ------------------------------------------------------------------------------------------------
# Launch counting out of the response's reach
# ------------------------------------------------------------------------------------------------

class CountingLauncher:
    """Stands between the `kernels` handle and the backend's launcher: counts launches where the response
    cannot reach (``kernels.launches`` is the response's to read and write), and can skip the kernels
    (`noop`) to find outputs that do not come from them."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.counts: dict[str, int] = {}
        self.noop = False

    @property
    def device(self) -> str:
        return self._inner.device

    @property
    def max_shared_mem(self) -> int:
        return self._inner.max_shared_mem

    @property
    def inner(self) -> Any:
        """The backend's own launcher."""
        return self._inner

    def total(self) -> int:
        return sum(self.counts.values())

    def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
               args: list[Any], tensors: list[Any]) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.noop:
            return
        with guards_suspended():
            self._inner.launch(name, grid, block, shared_mem, args, tensors)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)


