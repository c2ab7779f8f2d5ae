"""The correctness protocol shared by every backend that runs kernels.

Several trials, each with fresh inputs drawn under a new seed; the candidate runs first, on its own
copies of the inputs, then the reference on its own; outputs are compared per dtype tolerance with
mismatch statistics for the feedback; inputs must come back unmodified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
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


class TorchOpError(RuntimeError):
    """`ModelNew.forward` called a torch compute operator instead of a kernel."""

    def __init__(self, op: str):
        super().__init__(
            f"ModelNew.forward called the torch operator '{op}': the computation must happen in your CUDA kernels. "
            "forward may only allocate (torch.empty, torch.zeros), view or reshape tensors, and launch kernels "
            "with kernels.<name>(grid, block, *args)."
        )
        self.op = op


class TorchOpGuard(TorchDispatchMode):
    """Refuse aten compute operators while active; `allowed` adds names (e.g. a task's exceptions)."""

    def __init__(self, allowed: frozenset[str] | set[str] = frozenset()):
        super().__init__()
        self.allowed = ALLOWED_ATEN_OPS | set(allowed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        packet = getattr(func, "_overloadpacket", None)
        base = packet.__name__ if packet is not None else name
        if base not in self.allowed and name not in self.allowed:
            raise TorchOpError(base)
        return func(*args, **(kwargs or {}))


def _flatten(output: Any) -> list[Any]:
    if isinstance(output, (tuple, list)):
        return [x for item in output for x in _flatten(item)]
    return [output]


def _fmt_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)] if shape else []


def compare_outputs(expected: Any, actual: Any, atol: float, rtol: float, trial: int = 0) -> Mismatch | None:
    """None when `actual` matches `expected` within tolerance, else the first mismatch with statistics."""
    exp_list, act_list = _flatten(expected), _flatten(actual)
    if len(exp_list) != len(act_list):
        return Mismatch(output_index=0, shape_expected=[], shape_actual=[], dtype_expected="", dtype_actual="",
                        trial=trial, reason=f"expected {len(exp_list)} outputs, got {len(act_list)}")
    for index, (exp, act) in enumerate(zip(exp_list, act_list)):
        if not isinstance(exp, torch.Tensor):
            continue
        if not isinstance(act, torch.Tensor):
            return Mismatch(index, list(exp.shape), [], str(exp.dtype), type(act).__name__, trial=trial,
                            reason=f"output {index} should be a tensor, got {type(act).__name__}")
        base = Mismatch(index, list(exp.shape), list(act.shape), str(exp.dtype).replace("torch.", ""),
                        str(act.dtype).replace("torch.", ""), trial=trial)
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
        e = exp.detach().double().cpu().flatten()
        a = act.detach().double().cpu().flatten()
        if e.numel() == 0:
            continue
        diff = (a - e).abs()
        bad = ~(diff <= atol + rtol * e.abs())
        bad |= torch.isnan(a) != torch.isnan(e)
        if not bool(bad.any()):
            continue
        finite = torch.nan_to_num(diff, nan=float("inf"))
        rel = finite / e.abs().clamp_min(1e-12)
        positions = bad.nonzero().flatten()
        base.max_abs_error = float(finite.max())
        base.max_rel_error = float(rel[bad].max())
        base.first_index = _fmt_index(int(positions[0]), tuple(exp.shape))
        base.fraction_mismatched = float(bad.double().mean())
        base.samples = [(_fmt_index(int(p), tuple(exp.shape)), float(e[p]), float(a[p])) for p in positions[:5]]
        base.reason = (f"output {index}: {int(bad.sum())} of {e.numel()} values differ beyond atol={atol:g}, "
                       f"rtol={rtol:g}")
        return base
    return None


@dataclass
class TrialInputs:
    original: list[Any]
    candidate: list[Any]
    reference: list[Any]


def copies_of(inputs: list[Any], device: str) -> TrialInputs:
    """Three independent device copies: pristine, the candidate's, the reference's."""

    def move(x: Any) -> Any:
        return x.to(device).clone() if isinstance(x, torch.Tensor) else x

    return TrialInputs([move(x) for x in inputs], [move(x) for x in inputs], [move(x) for x in inputs])


def inputs_modified(original: list[Any], used: list[Any]) -> int | None:
    """Index of the first input the candidate changed in place, or None."""
    for i, (before, after) in enumerate(zip(original, used)):
        if isinstance(before, torch.Tensor) and not torch.equal(before, after):
            if before.is_floating_point() and torch.isnan(before).any():
                if torch.equal(torch.nan_to_num(before), torch.nan_to_num(after)):
                    continue
            return i
    return None


def run_guarded(fn: Callable[[], Any], allowed_ops: set[str]) -> Any:
    with TorchOpGuard(frozenset(allowed_ops)):
        return fn()
