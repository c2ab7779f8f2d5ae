"""Triton's interpreter as the ``cpu`` backend of Triton responses, with every memory access checked first.

With ``TRITON_INTERPRET=1`` Triton runs ``@triton.jit`` kernels on the CPU through numpy: each
program of the grid is a call of the kernel's Python function, and ``tl.load``/``tl.store`` read
and write raw addresses. An unmasked load past the end of a tensor reads (or writes) memory the
kernel does not own and can corrupt the interpreting process ("double free or corruption"). This
module patches the interpreter's memory operations (masked loads and stores, atomics: every
``tl.load``, ``tl.store``, ``tl.atomic_*``, block-pointer and descriptor access goes through them)
so each active lane's address range is checked against the tensors of the current launch
*before* the access happens; one outside every tensor stops the kernel with `OutOfBounds`,
naming the kernel, the pointer argument and the offending element offsets.

The interpreter stores bfloat16 values as their raw 16-bit patterns and would compute on them as
integers; its arithmetic on bf16 values is refused with `InterpreterGap` (loading, storing and
converting bf16 with ``.to(tl.float32)`` are exact and allowed). libdevice functions do not run in
the interpreter either. A gap is reported as such, never as a verdict on the kernel.

Only `leap_gym.integrations.triton_kernels.run_triton_job`, in a sandboxed worker, uses this module.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch

#: Offending offsets shown in an out-of-bounds report.
MAX_OFFSETS_SHOWN = 6

# Builder operations that compute on the values of a floating tensor; on bf16 data (raw uint16) they would be wrong.
_BF16_UNSAFE = re.compile(r"create_(f(add|sub|mul|div|rem|ma|neg|abs|cmp\w+|p_to_si|p_to_ui)|exp2?|log2?|sqrt|rsqrt|"
                          r"precise_\w+|approx_divf|erf|sin|cos|floor|ceil|clampf|(max|min)(imum|num)f|dot|dot_scaled|"
                          r"extern_elementwise|atomic_rmw|atomic_cas)$")


class OutOfBounds(Exception):
    """A kernel's load or store reached memory outside every tensor of its launch (stopped before the access)."""


class InterpreterGap(Exception):
    """The kernel uses something Triton's interpreter cannot run faithfully (bf16 arithmetic, libdevice)."""


@dataclass(frozen=True)
class Allocation:
    """The memory one pointer argument of a launch owns."""

    name: str       # the kernel parameter's name
    start: int      # first byte of the tensor's storage
    end: int        # one past its last byte
    base: int       # the tensor's data_ptr (offset 0 of the pointer argument)
    numel: int
    dtype: str


@dataclass
class Launch:
    """The launch whose kernel is running: its name and tensors, and what stopped it."""

    kernel: str
    allocations: list[Allocation]
    fault: str = ""
    gap: str = ""
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))

    def __post_init__(self) -> None:
        ordered = sorted(self.allocations, key=lambda a: a.start)
        self.allocations = ordered
        self.starts = np.array([a.start for a in ordered], dtype=np.uint64)
        self.ends = np.array([a.end for a in ordered], dtype=np.uint64)


_current: Launch | None = None
_installed = False


def enable_interpreter() -> None:
    """Set ``TRITON_INTERPRET=1`` in this process (read when a kernel is decorated); refuse outside a worker.

    Raises:
        RuntimeError: when called outside a `leap_gym.sandbox` worker, the only place the interpreter may run.
    """
    if "_leap_sandbox_worker" not in sys.modules:
        raise RuntimeError("Triton's interpreter runs responses only inside a sandboxed worker; evaluate through "
                           "leap_gym.evaluate or an Evaluator")
    os.environ["TRITON_INTERPRET"] = "1"


def install() -> None:
    """Patch the interpreter's memory and floating-point operations (once per process)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    _interpret_library_functions()
    builder = interpreter.interpreter_builder
    memory_ops = ("create_masked_load", "create_masked_store", "create_atomic_cas", "create_atomic_rmw")
    for name in dir(type(builder)):
        if name.startswith("create_") and name not in memory_ops:
            setattr(builder, name, _propagating(getattr(builder, name)))
        if _BF16_UNSAFE.match(name):
            setattr(builder, name, _bf16_refused(name, getattr(builder, name)))
    for name in memory_ops:
        setattr(builder, name, _checked_memory_op(name, getattr(builder, name)))
    interpreter._implicit_cvt = _tagging(interpreter._implicit_cvt)
    for ops in (interpreter.ReduceOps, interpreter.ScanOps):
        ops.apply = _bf16_reduce_refused(ops.apply)
    from triton.language.extra import libdevice

    for name in dir(libdevice):  # stubs that the interpreter runs as `...`, returning None
        if not name.startswith("_") and callable(getattr(libdevice, name)):
            setattr(libdevice, name, _libdevice_refused(name))
    _installed = True


def tensor_allocations(kernel_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Allocation]:
    """The memory each tensor argument of a launch of `kernel_fn` owns, by parameter name."""
    import inspect

    try:
        bound = inspect.signature(kernel_fn).bind_partial(*args, **kwargs).arguments
    except TypeError:  # the launch itself will report the bad arguments
        bound = {f"argument {i}": a for i, a in enumerate(args)} | dict(kwargs)
    found = []
    for name, value in bound.items():
        if isinstance(value, torch.Tensor) and not value.is_meta:
            storage = value.untyped_storage()
            found.append(Allocation(name, storage.data_ptr(), storage.data_ptr() + storage.nbytes(), value.data_ptr(),
                                    value.numel(), str(value.dtype).replace("torch.", "")))
    return found


@contextmanager
def checked_launch(kernel: str, allocations: list[Allocation]) -> Iterator[Launch]:
    """While a launch of `kernel` runs, allow memory accesses only inside its tensor arguments (`allocations`)."""
    global _current
    launch = Launch(kernel, allocations)
    previous, _current = _current, launch
    try:
        yield launch
    finally:
        _current = previous


def _interpret_library_functions() -> None:
    """Make triton.language's own ``@jit`` functions (``tl.sum``, ``tl.max``, ``tl.softmax``...) interpretable.

    They are decorated when triton.language is first imported, as compiled `JITFunction`s unless
    ``TRITON_INTERPRET`` was set then; a worker may have imported triton before (torch imports it),
    and an interpreted kernel calling one then fails ("Cannot call @triton.jit'd outside of the scope
    of a kernel"). Each is replaced, in every triton.language module, by one `InterpretedFunction`.
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    replaced: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                if id(value) not in replaced:
                    replaced[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attr, replaced[id(value)])


#: TensorHandle.attr key: the data_ptr of the tensor argument a pointer was derived from (0: several).
BASE = "leap_base"


def _tagging(convert: Any) -> Any:
    """Tag the pointer a tensor argument becomes with that tensor's address (its provenance)."""
    def tagged(arg: Any) -> Any:
        out = convert(arg)
        if hasattr(arg, "data_ptr") and hasattr(out, "handle") and hasattr(out.handle, "attr"):
            out.handle.attr[BASE] = int(arg.data_ptr())
        return out

    return tagged


def _propagating(original: Any) -> Any:
    """A builder operation whose pointer result keeps the provenance of its pointer operands."""
    def propagate(*args: Any) -> Any:
        out = original(*args)
        attr = getattr(out, "attr", None)
        if attr is None or BASE in attr:
            return out
        bases = {a.attr[BASE] for a in args if isinstance(getattr(a, "attr", None), dict) and BASE in a.attr}
        if bases:
            attr[BASE] = bases.pop() if len(bases) == 1 else 0
        return out

    return propagate


def _program_id() -> tuple[int, ...]:
    from triton.runtime import interpreter

    return tuple(getattr(interpreter.interpreter_builder, "grid_idx", ()))


def _element_bytes(ptrs: Any) -> int:
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


def _check(op: str, ptrs: Any, mask: Any) -> None:
    launch = _current
    if launch is None:
        raise OutOfBounds(f"a Triton kernel accessed memory outside a kernel[grid](...) launch ({op}); launch kernels "
                          "only as kernel[grid](*args)")
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    active = addresses if mask is None else addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool),
                                                                      addresses.shape)]
    active = active.reshape(-1)
    if active.size == 0:
        return
    size = np.uint64(_element_bytes(ptrs))
    base = ptrs.attr.get(BASE, 0) if isinstance(getattr(ptrs, "attr", None), dict) else 0
    owner = next((a for a in launch.allocations if a.base == base), None) if base else None
    if owner is not None:  # derived from one tensor argument: it must stay inside that tensor's storage
        inside = (active >= np.uint64(owner.start)) & (active + size <= np.uint64(owner.end))
        slot = np.full(active.shape, launch.allocations.index(owner), dtype=np.int64)
    else:  # an integer turned pointer, or a select between tensors: inside some tensor of the launch
        slot = np.searchsorted(launch.starts, active, side="right").astype(np.int64) - 1
        inside = slot >= 0
        inside[inside] = active[inside] + size <= launch.ends[slot[inside]]
    if inside.all():
        return
    launch.fault = _report(launch, op, active, inside, slot, int(size), owner)
    raise OutOfBounds(launch.fault)


def _report(launch: Launch, op: str, active: np.ndarray, inside: np.ndarray, slot: np.ndarray, size: int,
            owner: Allocation | None) -> str:
    """Name the pointer argument the access went through and the offending offsets, in its elements."""
    bad = active[~inside]
    if not launch.allocations:
        return (f"out-of-bounds {op} in Triton kernel `{launch.kernel}`: the launch passed no tensor, yet the kernel "
                f"accessed address {int(bad[0]):#x}")
    if owner is not None:
        pass
    elif inside.any():  # the lanes of one access share a base pointer: the in-bounds lanes name it
        owner = launch.allocations[int(np.bincount(slot[inside]).argmax())]
    else:
        distance = [min(abs(int(bad[0]) - a.start), abs(int(bad[0]) - a.end)) for a in launch.allocations]
        owner = launch.allocations[int(np.argmin(distance))]
    offsets = sorted({(int(a) - owner.base) // size for a in bad})
    shown = ", ".join(str(o) for o in offsets[:MAX_OFFSETS_SHOWN])
    shown += ", ..." if len(offsets) > MAX_OFFSETS_SHOWN else ""
    pid = ", ".join(str(i) for i in _program_id())
    verb = "read" if op == "tl.load" else "written"
    return (f"out-of-bounds {op} in Triton kernel `{launch.kernel}` (program_id ({pid})): pointer argument "
            f"`{owner.name}` ({owner.dtype}, {owner.numel} elements, valid offsets 0..{owner.numel - 1}) {verb} at "
            f"offset{'s' if len(offsets) > 1 else ''} {shown} ({len(bad)} lane{'s' if len(bad) > 1 else ''} outside "
            "the tensor); stopped before the access. Mask the access (mask=offsets < n) or bound the offsets")


def _checked_memory_op(name: str, original: Any) -> Any:
    op = {"create_masked_load": "tl.load", "create_masked_store": "tl.store"}.get(name, "atomic")

    def checked(*args: Any) -> Any:
        if name == "create_masked_load":
            ptrs, mask = args[0], args[1]
        elif name == "create_masked_store":
            ptrs, mask = args[0], args[2]
        elif name == "create_atomic_cas":
            ptrs, mask = args[0], None
        else:  # create_atomic_rmw(rmwOp, ptr, val, mask, sem, scope)
            ptrs, mask = args[1], args[3]
        _check(op, ptrs, mask)
        return original(*args)

    return checked


def _is_bf16(value: Any) -> bool:
    import triton.language as tl

    if hasattr(value, "get_element_ty"):
        return value.get_element_ty() == tl.bfloat16
    return value is tl.bfloat16 or getattr(value, "scalar", None) == tl.bfloat16


def _gap(message: str) -> InterpreterGap:
    launch = _current
    kernel = launch.kernel if launch else "?"
    text = (f"Triton's interpreter (the cpu backend) cannot run kernel `{kernel}` faithfully: "
            f"{message}. This is a limit of the cpu backend, not a verdict on your kernel: compute in float32 "
            "(x.to(tl.float32)) and convert back when storing, or evaluate on the cuda backend")
    if launch is not None:
        launch.gap = text
    return InterpreterGap(text)


def _bf16_refused(name: str, original: Any) -> Any:
    def guarded(*args: Any) -> Any:
        if any(_is_bf16(a) for a in args):
            raise _gap(f"it computes on bfloat16 values ({name.removeprefix('create_')}), which the interpreter "
                       "holds as raw 16-bit integers")
        return original(*args)

    return guarded


def _bf16_reduce_refused(original: Any) -> Any:
    def guarded(self: Any, input: Any) -> Any:
        values = input if isinstance(input, (list, tuple)) else [input]
        if any(_is_bf16(getattr(v, "handle", v)) for v in values):
            raise _gap("it reduces or scans bfloat16 values, which the interpreter holds as raw 16-bit integers")
        return original(self, input)

    return guarded


def _libdevice_refused(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise _gap(f"it calls libdevice.{name}, which the interpreter does not provide (tl.exp, tl.log, tl.sqrt, "
                   "tl.sigmoid, tl.erf and tl.math functions run here)")

    return refused


def interpreter_failure(exc: BaseException, launch: Launch) -> tuple[str, str] | None:
    """(detail, message) for an exception of an interpreted launch that is a fault or a gap, else None."""
    if launch.fault:
        return "out_of_bounds", launch.fault
    if launch.gap:
        return "interpreter_unsupported", launch.gap
    return None


__all__ = ["Allocation", "InterpreterGap", "Launch", "OutOfBounds", "checked_launch", "enable_interpreter",
           "install", "interpreter_failure", "tensor_allocations"]
