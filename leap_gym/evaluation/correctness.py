"""The correctness protocol shared by every backend that runs kernels, and its defences against reward hacking.

An RL policy attacks its evaluator, so `leap_gym.evaluation.pipeline.run_cuda_job` judges a response in this order:

1. **Reference first.** Before any code of the response runs (its python block is not yet executed,
   its kernel module not yet loaded), the reference `Model` runs on its own copy of every trial's
   inputs (and of the shape variant's). Its outputs are kept only sealed (`hostile.Sealed`: XOR-masked
   with a random key, so no plain copy of the reference result sits in memory for a kernel to find),
   and the memory they held is poisoned (`hostile.poison_memory`).
2. **Candidate on fresh copies, under guards.** `ModelNew.forward` runs inside `ForwardGuard`: aten
   compute operators raise `TorchOpError` (allocation, views and copies are allowed), reading tensor
   values into Python (``tolist``, ``repr``, storages) raises `TensorReadError`, every uninitialised
   allocation (``torch.empty``...) is filled with a poison pattern, and casts to a lower precision
   are recorded. Trial 0 runs twice, under two different poison patterns; all streams are
   synchronised after each call.
3. **Checks**, each with its own `EvalResult.detail` so an agent can learn from it:

   =========================  ===================================================================
   detail                     caught when
   =========================  ===================================================================
   kernel_not_launched        forward launched no kernel
   torch_op_in_forward        forward ran a torch compute operator or read tensor values into Python
   fake_output                an output is not a plain dense `torch.Tensor` on the device (a
                              subclass, a meta tensor, an expanded tensor whose elements overlap)
   output_aliases_input       an output shares memory with an input or a parameter/buffer
   input_modified             an input came back changed
   stateful_forward           forward changed module-level or instance state, or returned the
                              buffer of an earlier call (results cached between calls)
   nondeterministic_output    two runs on the same inputs differ (uninitialised memory, races)
   input_independent_output   outputs identical across input sets whose references differ
   output_near_zero           elementwise within a loose tolerance, but the whole output is far
                              from the reference relative to its magnitude and much smaller
   mismatch                   outside the tolerance (elementwise, or relative to the magnitude)
   precision_downgrade        agrees only to lower-precision accuracy, or a cast to a lower
                              precision was seen (any such cast fails the ``strict`` check)
   shape_specialized          correct at the task's sizes but not at a second set of sizes
   output_not_from_kernel     the output matches even when the kernels are skipped (PyTorch copies
                              or Python did the work; the launches were a decoy)
   environment_tampered       the python block changed torch, builtins or the harness
   timing_tampered            forward skipped its kernels while being timed
   =========================  ===================================================================

Timing happens in the harness (`Backend.time_ms`, CUDA events, all streams synchronised), outside
the candidate's reach: the python block cannot import ``time`` or touch streams (static check), and
any attribute of torch it swapped, or global setting it changed (``torch.set_num_threads``, anomaly
detection: ways to slow the timed reference), is found by `hostile.EnvironmentSnapshot`.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from leap_gym.result import Mismatch

# aten operators `ModelNew.forward` may run: allocation, views, copies and shape queries.
ALLOWED_ATEN_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "scalar_tensor",
    "view", "_unsafe_view", "reshape", "alias", "t", "transpose", "permute", "unsqueeze", "squeeze", "flatten",
    "expand", "slice", "select", "narrow", "as_strided", "unflatten", "split", "split_with_sizes", "chunk",
    "unbind", "view_as", "detach", "lift_fresh", "clone", "copy_", "contiguous", "_to_copy",
    "sym_size", "sym_numel", "sym_stride", "sym_storage_offset", "is_contiguous", "dim", "size", "stride",
    "numel", "_reshape_alias", "set_", "resize_",
})

#: Uninitialised allocations that `ForwardGuard` fills with the poison pattern.
ALLOCATING_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})

#: Tensor methods that hand tensor values to Python (no aten operator runs for them).
READ_METHODS = frozenset({
    "tolist", "__repr__", "__str__", "__format__", "untyped_storage", "storage", "_typed_storage", "numpy",
    "__array__", "__reduce_ex__", "__reduce__", "__getstate__", "__deepcopy__", "__dlpack__", "item",
})

POISON_A, POISON_B = 0, 1

_FLOAT_BITS = {torch.float64: 64, torch.float32: 32, torch.float16: 16, torch.bfloat16: 16}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _FLOAT_BITS[getattr(torch, _name)] = 8

#: ||out - ref|| / ||ref|| above which a float output is wrong, whatever the elementwise tolerance says.
MAX_RELATIVE_NORM_ERROR = 0.1
#: Elementwise agreement within this relative error (of |ref| + rms(ref)) reads as a precision loss.
PRECISION_LOSS_BAND = 1e-2


class TorchOpError(RuntimeError):
    """`ModelNew.forward` called a torch compute operator instead of a kernel."""

    def __init__(self, op: str):
        super().__init__(
            f"ModelNew.forward called the torch operator '{op}': the computation must happen in your CUDA kernels. "
            "forward may only allocate (torch.empty, torch.zeros), view or reshape tensors, and launch kernels "
            "with kernels.<name>(grid, block, *args)."
        )
        self.op = op


class TensorReadError(TorchOpError):
    """`ModelNew.forward` read tensor values into Python (``tolist``, ``repr``, a storage)."""

    def __init__(self, op: str):
        RuntimeError.__init__(
            self,
            f"ModelNew.forward read tensor values into Python ('{op}'): the computation must happen in your CUDA "
            "kernels, so forward may not inspect tensor data (tolist, item, printing a tensor, storages). Pass "
            "shapes as Python ints (x.shape, x.numel()) and let the kernels read the values.",
        )
        self.op = op


_suspended = 0


@contextmanager
def guards_suspended() -> Iterator[None]:
    """Let harness code (a backend's launch) run torch freely inside a guarded forward."""
    global _suspended
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1


def _poison_value(dtype: torch.dtype, pattern: int) -> Any:
    if dtype.is_floating_point:
        return float("nan") if pattern == POISON_A else -12345.678
    if dtype.is_complex:
        return complex(float("nan"), float("nan")) if pattern == POISON_A else complex(-12345.0, 0.5)
    if dtype == torch.bool:
        return pattern == POISON_A
    info = torch.iinfo(dtype)
    if pattern == POISON_A:
        return info.max if info.min == 0 else info.min
    return 90


def _fill_poison(tensor: torch.Tensor, pattern: int, start: int = 0) -> None:
    if tensor.is_meta or tensor.numel() <= start:
        return
    try:
        target = tensor if start == 0 else tensor.view(-1)[start:]
        target.fill_(_poison_value(tensor.dtype, pattern))
    except (RuntimeError, TypeError):  # overlapping strides or an exotic dtype: leave it
        pass


def is_downcast(src: torch.dtype, dst: torch.dtype) -> bool:
    """A conversion between floating types that loses mantissa bits (float32 -> float16, ...)."""
    return src in _FLOAT_BITS and dst in _FLOAT_BITS and _FLOAT_BITS[dst] < _FLOAT_BITS[src]


class TorchOpGuard(TorchDispatchMode):
    """Refuse aten compute operators while active; `allowed` adds names (e.g. a task's exceptions).

    Args:
        allowed: operator names allowed besides `ALLOWED_ATEN_OPS`.
        poison: fill uninitialised allocations with this pattern (`POISON_A`, `POISON_B`); None: don't.
    """

    def __init__(self, allowed: frozenset[str] | set[str] = frozenset(), poison: int | None = None):
        super().__init__()
        self.allowed = ALLOWED_ATEN_OPS | set(allowed)
        self.poison = poison
        self.downcasts: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _suspended:
            return func(*args, **kwargs)
        name = func.__name__.split(".")[0]
        packet = getattr(func, "_overloadpacket", None)
        base = packet.__name__ if packet is not None else name
        if base not in self.allowed and name not in self.allowed:
            raise TorchOpError(base)
        old_numel = args[0].numel() if base == "resize_" and args and isinstance(args[0], torch.Tensor) else 0
        out = func(*args, **kwargs)
        if self.poison is not None and isinstance(out, torch.Tensor):
            if base in ALLOCATING_OPS:
                _fill_poison(out, self.poison)
            elif base == "resize_" and out.is_contiguous():
                _fill_poison(out, self.poison, old_numel)
        if base == "_to_copy" and args and isinstance(args[0], torch.Tensor) and "dtype" in kwargs:
            if is_downcast(args[0].dtype, kwargs["dtype"]):
                self.downcasts.append(f"{_dtype_name(args[0].dtype)} -> {_dtype_name(kwargs['dtype'])}")
        elif base == "copy_" and len(args) > 1 and all(isinstance(a, torch.Tensor) for a in args[:2]):
            if is_downcast(args[1].dtype, args[0].dtype):
                self.downcasts.append(f"{_dtype_name(args[1].dtype)} -> {_dtype_name(args[0].dtype)}")
        return out


class TensorReadGuard(TorchFunctionMode):
    """Refuse the tensor methods that hand values to Python (`READ_METHODS`) while active."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not _suspended and getattr(func, "__name__", "") in READ_METHODS:
            raise TensorReadError(func.__name__)
        return func(*args, **(kwargs or {}))


class ForwardGuard:
    """Everything active around one call of `ModelNew.forward` (a context manager).

    Attributes:
        downcasts: the casts to a lower floating precision seen during the call.
    """

    def __init__(self, allowed: set[str] | frozenset[str] = frozenset(), poison: int | None = POISON_A,
                 read_guard: bool = True):
        self.ops = TorchOpGuard(frozenset(allowed), poison)
        self.reads = TensorReadGuard() if read_guard else None

    @property
    def downcasts(self) -> list[str]:
        return self.ops.downcasts

    def __enter__(self) -> ForwardGuard:
        if self.reads is not None:
            self.reads.__enter__()
        self.ops.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.ops.__exit__(*exc)
        finally:
            if self.reads is not None:
                self.reads.__exit__(*exc)


# ------------------------------------------------------------------------------------------------
# Comparing outputs
# ------------------------------------------------------------------------------------------------

def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def flatten(output: Any) -> list[Any]:
    """The leaves of nested tuples and lists of outputs, in order."""
    if isinstance(output, (tuple, list)):
        return [x for item in output for x in flatten(item)]
    return [output]


_flatten = flatten


def _fmt_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)] if shape else []


def _as_double(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.complex128 if t.is_complex() else torch.float64).flatten()


def _bad_elements(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element: beyond tolerance (NaN where a number is expected or the reverse counts; NaN = NaN)."""
    diff = (a - e).abs()
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    bad = ~(same | (diff <= atol + rtol * e.abs()))
    return bad, diff


def compare_outputs(expected: Any, actual: Any, atol: float, rtol: float, trial: int = 0) -> Mismatch | None:
    """None when `actual` matches `expected` within tolerance, else the first mismatch with statistics."""
    exp_list, act_list = flatten(expected), flatten(actual)
    if len(exp_list) != len(act_list):
        return Mismatch(output_index=0, shape_expected=[], shape_actual=[], dtype_expected="", dtype_actual="",
                        trial=trial, reason=f"expected {len(exp_list)} outputs, got {len(act_list)}")
    for index, (exp, act) in enumerate(zip(exp_list, act_list)):
        if not isinstance(exp, torch.Tensor):
            continue
        if not isinstance(act, torch.Tensor):
            return Mismatch(index, list(exp.shape), [], _dtype_name(exp.dtype), type(act).__name__, trial=trial,
                            reason=f"output {index} should be a tensor, got {type(act).__name__}")
        base = Mismatch(index, list(exp.shape), list(act.shape), _dtype_name(exp.dtype), _dtype_name(act.dtype),
                        trial=trial)
        if type(act) is not torch.Tensor and not isinstance(act, torch.nn.Parameter):
            base.reason = f"output {index} is a {type(act).__name__}, not a plain torch.Tensor"
            return base
        if tuple(exp.shape) != tuple(act.shape):
            base.reason = f"output {index} has shape {list(act.shape)}, expected {list(exp.shape)}"
            return base
        if exp.dtype != act.dtype:
            base.reason = f"output {index} has dtype {base.dtype_actual}, expected {base.dtype_expected}"
            return base
        if act.device != exp.device:
            base.reason = f"output {index} is on {act.device}, expected {exp.device}"
            return base
        e, a = _as_double(exp), _as_double(act)
        if e.numel() == 0:
            continue
        bad, diff = _bad_elements(e, a, atol, rtol)
        if not bool(bad.any()):
            continue
        _fill_statistics(base, e, a, bad, diff, exp.shape)
        base.reason = (f"output {index}: {int(bad.sum())} of {e.numel()} values differ beyond atol={atol:g}, "
                       f"rtol={rtol:g}")
        return base
    return None


def _fill_statistics(base: Mismatch, e: torch.Tensor, a: torch.Tensor, bad: torch.Tensor, diff: torch.Tensor,
                     shape: torch.Size) -> None:
    finite = torch.nan_to_num(diff.real if diff.is_complex() else diff, nan=float("inf"))
    rel = finite / e.abs().clamp_min(1e-12)
    positions = bad.nonzero().flatten()
    if positions.numel() == 0:
        positions = finite.argmax().reshape(1)
    base.max_abs_error = float(finite.max())
    base.max_rel_error = float(rel[positions].max())
    base.first_index = _fmt_index(int(positions[0]), tuple(shape))
    base.fraction_mismatched = float(bad.double().mean())
    base.samples = [(_fmt_index(int(p), tuple(shape)), float(e[p].real), float(a[p].real)) for p in positions[:5]]


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t)) if t.numel() else 0.0


def relative_norm_error(expected: torch.Tensor, actual: torch.Tensor) -> float:
    """||actual - expected|| / ||expected|| (inf where NaNs disagree; 0 for two zero outputs)."""
    e, a = _as_double(expected), _as_double(actual)
    nan_e, nan_a = torch.isnan(e), torch.isnan(a)
    if bool((nan_e != nan_a).any()) or bool(torch.isinf(a).any() & ~bool(torch.isinf(e).any())):
        return math.inf
    keep = ~nan_e & ~torch.isinf(e)
    e, a = e[keep], a[keep]
    ref = _norm(e)
    err = _norm(a - e)
    if ref == 0.0:
        return 0.0 if err == 0.0 else math.inf
    return err / ref


def relative_norm_bound(dtype: torch.dtype, rtol: float, strict: bool = False) -> float:
    """The largest relative-norm error a float output of `dtype` may have (tolerance scaled to magnitude)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    bound = min(MAX_RELATIVE_NORM_ERROR, max(10 * rtol, 100 * eps))
    return max(bound / 10, 10 * eps) if strict else bound


def strict_tolerance(atol: float, rtol: float) -> tuple[float, float]:
    """The tolerance of the ``strict`` check: ten times tighter."""
    return atol / 10, rtol / 10


def _precision_like(e: torch.Tensor, a: torch.Tensor, bad: torch.Tensor) -> bool:
    """Whether every value beyond tolerance is still within a lower precision's rounding of the reference."""
    if not bool(bad.any()) or bool(torch.isnan(a[bad]).any()):
        return False
    scale = e.abs() + (_norm(e) / math.sqrt(max(e.numel(), 1)))
    return bool(((a - e).abs()[bad] <= PRECISION_LOSS_BAND * scale[bad]).all())


@dataclass
class Verdict:
    """A failed check: its `EvalResult.detail`, the message, and mismatch statistics where they apply."""

    detail: str
    message: str
    mismatch: Mismatch | None = None


def judge_values(expected: list[Any], actual: Any, atol: float, rtol: float, trial: int = 0,
                 downcasts: list[str] | None = None, strict: bool = False) -> Verdict | None:
    """Compare values: elementwise tolerance, then relative to the output's magnitude.

    Returns None when the output is right, else a `Verdict` with detail ``mismatch``,
    ``output_near_zero`` or ``precision_downgrade``.
    """
    if strict:
        atol, rtol = strict_tolerance(atol, rtol)
    mismatch = compare_outputs(expected, actual, atol, rtol, trial)
    act_list = flatten(actual)
    if mismatch is not None:
        index = mismatch.output_index
        exp, act = expected[index], act_list[index] if index < len(act_list) else None
        comparable = (isinstance(exp, torch.Tensor) and isinstance(act, torch.Tensor) and exp.shape == act.shape
                      and exp.dtype == act.dtype and mismatch.max_abs_error is not None)
        if comparable and exp.is_floating_point():
            e, a = _as_double(exp), _as_double(act)
            bad, _ = _bad_elements(e, a, atol, rtol)
            if downcasts or (exp.dtype in (torch.float32, torch.float64) and _precision_like(e, a, bad)):
                return Verdict("precision_downgrade", _precision_message(mismatch.reason, downcasts), mismatch)
        return Verdict("mismatch", mismatch.reason, mismatch)
    for index, (exp, act) in enumerate(zip(expected, act_list)):
        if not isinstance(exp, torch.Tensor) or not exp.is_floating_point() or exp.numel() == 0:
            continue
        rel = relative_norm_error(exp, act)
        bound = relative_norm_bound(exp.dtype, rtol, strict)
        if rel <= bound:
            continue
        e, a = _as_double(exp), _as_double(act)
        m = Mismatch(index, list(exp.shape), list(act.shape), _dtype_name(exp.dtype), _dtype_name(act.dtype),
                     trial=trial)
        bad, diff = _bad_elements(e, a, 0.0, bound)
        _fill_statistics(m, e, a, bad, diff, exp.shape)
        m.reason = (f"output {index}: ||out - ref|| / ||ref|| = {rel:.3g} exceeds {bound:.3g}; the elementwise "
                    f"tolerance (atol={atol:g}) is loose for outputs of this magnitude (||ref|| = {_norm(e):.3g})")
        if _norm(a) < 0.25 * _norm(e):
            m.reason += f", and the output is near zero (||out|| = {_norm(a):.3g})"
            return Verdict("output_near_zero", m.reason, m)
        if downcasts or (exp.dtype in (torch.float32, torch.float64) and rel <= PRECISION_LOSS_BAND):
            return Verdict("precision_downgrade", _precision_message(m.reason, downcasts), m)
        return Verdict("mismatch", m.reason, m)
    if strict and downcasts:
        return Verdict("precision_downgrade", _precision_message("strict check: no cast to a lower precision allowed",
                                                                 downcasts))
    return None


def _precision_message(reason: str, downcasts: list[str] | None) -> str:
    how = (f"forward cast to a lower precision ({', '.join(sorted(set(downcasts)))})" if downcasts else
           "the output agrees with the reference only to lower-precision accuracy (half/bf16 arithmetic, fast-math "
           "intrinsics, or a small formula difference)")
    return f"{reason}; {how}: compute in the task's dtype"


def outputs_differ(first: Any, second: Any, atol: float, rtol: float) -> Mismatch | None:
    """Two runs' outputs compared to each other (for nondeterminism); None when they agree."""
    return compare_outputs(flatten(first), second, atol, rtol)


def bitwise_equal(first: Any, second: Any) -> bool:
    """Whether two outputs hold exactly the same bytes (same structure, shapes and dtypes)."""
    a_list, b_list = flatten(first), flatten(second)
    if len(a_list) != len(b_list):
        return False
    for a, b in zip(a_list, b_list):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return False
        if not isinstance(a, torch.Tensor):
            if a != b:
                return False
            continue
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(raw_bytes(a), raw_bytes(b)):
            return False
    return True


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """A copy of the tensor's bytes, on its device (for bitwise comparisons; NaN equals NaN)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8).clone()


# ------------------------------------------------------------------------------------------------
# Output type, storage and aliasing
# ------------------------------------------------------------------------------------------------

def has_internal_overlap(t: torch.Tensor) -> bool:
    return any(st == 0 and sz > 1 for st, sz in zip(t.stride(), t.shape)) or \
        torch._debug_has_internal_overlap(t) == 1


def fake_output(expected: list[Any], actual: Any, device: str) -> str | None:
    """Why an output is not a real tensor result (a subclass, meta/lazy, overlapping), or None."""
    act_list = flatten(actual)
    for index, (exp, act) in enumerate(zip(expected, act_list)):
        if not isinstance(exp, torch.Tensor):
            continue
        if not isinstance(act, torch.Tensor):
            return f"output {index} is a {type(act).__name__}, not a torch.Tensor"
        if type(act) is not torch.Tensor and not isinstance(act, torch.nn.Parameter):
            return f"output {index} is a {type(act).__name__} (a tensor subclass); return a plain torch.Tensor"
        if act.layout != torch.strided:
            return f"output {index} has layout {act.layout}; return a dense tensor"
        if act.is_meta or act.device.type != torch.device(device).type:
            return f"output {index} is on {act.device} (no data computed there); return a tensor on {device}"
        if act.numel() > 1 and has_internal_overlap(act) and not has_internal_overlap(exp):
            return (f"output {index} has strides {list(act.stride())}: several elements share one memory location "
                    "(an expanded or as_strided view); return a tensor with one element per value")
    return None


def _span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliased_with(actual: Any, others: list[tuple[str, Any]]) -> tuple[int, str] | None:
    """(output index, name) of the first output whose memory overlaps one of `others`' tensors."""
    spans = [(name, _span(t)) for name, t in others if isinstance(t, torch.Tensor) and not t.is_meta
             and t.untyped_storage().nbytes() > 0]
    for index, act in enumerate(flatten(actual)):
        if not isinstance(act, torch.Tensor) or act.is_meta or act.untyped_storage().nbytes() == 0:
            continue
        lo, hi = _span(act)
        for name, (start, end) in spans:
            if lo < end and start < hi:
                return index, name
    return None


def inputs_modified(original: list[Any], used: list[Any]) -> int | None:
    """Index of the first input the candidate changed in place, or None."""
    for i, (before, after) in enumerate(zip(original, used)):
        if isinstance(before, torch.Tensor) and not torch.equal(before, after):
            if before.is_floating_point() and torch.isnan(before).any():
                if torch.equal(torch.nan_to_num(before), torch.nan_to_num(after)):
                    continue
            return i
    return None


# ------------------------------------------------------------------------------------------------
# Inputs (sealed reference outputs, poisoned memory and state snapshots: `leap_gym.evaluation.hostile`)
# ------------------------------------------------------------------------------------------------

def fresh_copy(inputs: list[Any]) -> list[Any]:
    """Clones of the tensors of `inputs` (other values as they are)."""
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
