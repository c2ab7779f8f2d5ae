"""A default wrapper derived for a KernelBench task, where one can be derived exactly.

Built-in tasks ship a default ``ModelNew`` (the short form: a response with only the ```cuda block is
complete). KernelBench's files ship none; `derive_wrapper` derives one by running the reference:

- **shapes**, on meta tensors at the file's own sizes: every input a contiguous floating tensor of one
  shape and dtype, the output one tensor of that shape and dtype, the model without parameters or
  buffers;
- **elementwise dependence**, at a small size: perturbing one element of one input changes the
  output at that element only (checked at every element of the small inputs, over two draws), and
  the model is deterministic;
- **scalar constructor arguments** (``alpha`` of ELU...) become kernel parameters, in order, and
  ``ModelNew`` takes the same constructor arguments as ``Model``.

The wrapper then launches ``<name>_kernel(const T* x..., T* out, [scalars...], int n)`` over one
element per thread. A task where any check fails gets no wrapper (the full form is still accepted).
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from typing import Any

import torch

#: C element type of a floating dtype in the kernel signature.
_C_TYPES = {torch.float32: "float", torch.float64: "double", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}
SMALL_DIM = 4
MAX_PROBES = 96


@dataclass
class DerivedWrapper:
    """A derived default wrapper: the kernel signature it launches and the ``ModelNew`` source."""

    signature: str
    wrapper: str
    kernel: str


def derive_wrapper(namespace: dict[str, Any], name: str) -> DerivedWrapper | None:
    """The default wrapper of a KernelBench task namespace (``Model``, ``get_inputs``, ``get_init_inputs``),
    or None where it cannot be derived exactly. Never raises: a reference that fails any check gets none."""
    try:
        return _derive(namespace, name)
    except Exception:  # the task's own code failed somewhere in the probes: no wrapper, the task still loads
        return None


def _constructor(model_cls: type, init_inputs: list[Any]) -> tuple[str, list[tuple[str, str]]] | None:
    """(``__init__`` parameter text, [(kernel parameter, C type)] for each scalar argument), or None."""
    params = list(inspect.signature(model_cls.__init__).parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        return None
    if len(init_inputs) > len(params) or any(p.default is p.empty for p in params[len(init_inputs):]):
        return None
    texts, scalars = [], []
    for index, param in enumerate(params):
        if not re.fullmatch(r"[A-Za-z_]\w*", param.name) or param.name in ("self", "out", "n", "kernels"):
            return None
        if param.default is param.empty:
            texts.append(param.name)
        else:
            default = repr(param.default)
            try:
                ast.literal_eval(default)
            except (ValueError, SyntaxError):
                return None
            texts.append(f"{param.name}={default}")
        value = init_inputs[index] if index < len(init_inputs) else param.default
        if isinstance(value, bool) or isinstance(value, int):
            scalars.append((param.name, "int"))
        elif isinstance(value, float):
            scalars.append((param.name, "float"))
        else:
            return None
    return ", ".join(texts), scalars


def _forward_names(model_cls: type, count: int) -> list[str] | None:
    params = list(inspect.signature(model_cls.forward).parameters.values())[1:]
    if len(params) != count or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return None
    names = [p.name for p in params]
    if any(n in ("self", "out", "n", "kernels", "torch", "nn") for n in names):
        return None
    return names


def _same_elsewhere(a: torch.Tensor, b: torch.Tensor, index: int | None) -> bool:
    """Whether `a` and `b` are equal (NaN equal to NaN) at every element but `index` (all of them for None)."""
    a, b = a.reshape(-1).clone(), b.reshape(-1).clone()
    if index is not None:
        a[index] = b[index] = 0
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _elementwise(model: torch.nn.Module, shape: tuple[int, ...], dtype: torch.dtype, count: int) -> bool:
    """Whether each output element depends on the same element of the inputs only (perturbation probes)."""
    small = tuple(min(d, SMALL_DIM) for d in shape)
    numel = 1
    for d in small:
        numel *= d
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        inputs = [(torch.randn(small, generator=generator) * 2).to(dtype) for _ in range(count)]
        with torch.no_grad():
            base = model(*inputs)
            again = model(*inputs)
        if not isinstance(base, torch.Tensor) or base.shape != small or not _same_elsewhere(base, again, None):
            return False
        probes = range(numel) if numel <= MAX_PROBES else \
            sorted(set(torch.randperm(numel, generator=generator)[:MAX_PROBES].tolist()) | {0, numel - 1})
        for k in range(count):
            for index in probes:
                moved = [x.clone() for x in inputs]
                moved[k].reshape(-1)[index] += 0.75
                with torch.no_grad():
                    out = model(*moved)
                if not _same_elsewhere(base, out, index):
                    return False
    return True


def _derive(namespace: dict[str, Any], name: str) -> DerivedWrapper | None:
    model_cls = namespace["Model"]
    init_inputs = list(namespace["get_init_inputs"]())
    constructor = _constructor(model_cls, init_inputs)
    if constructor is None:
        return None
    with torch.device("meta"):
        inputs = list(namespace["get_inputs"]())
        model = model_cls(*init_inputs)
        if any(True for _ in model.parameters()) or any(True for _ in model.buffers()):
            return None
        if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
            return None
        shape, dtype = inputs[0].shape, inputs[0].dtype
        if dtype not in _C_TYPES or any(x.shape != shape or x.dtype != dtype or not x.is_contiguous() for x in inputs):
            return None
        with torch.no_grad():
            output = model(*inputs)
    if not isinstance(output, torch.Tensor) or output.shape != shape or output.dtype != dtype or len(shape) == 0:
        return None
    names = _forward_names(model_cls, len(inputs))
    if names is None:
        return None
    torch.manual_seed(0)
    if not _elementwise(model_cls(*init_inputs), tuple(shape), dtype, len(inputs)):
        return None
    return _render(name, names, constructor, _C_TYPES[dtype], output.numel())


def _render(name: str, inputs: list[str], constructor: tuple[str, list[tuple[str, str]]], ctype: str,
            numel: int) -> DerivedWrapper:
    init_text, scalars = constructor
    base = re.sub(r"\W+", "_", name).strip("_").lower() or "elementwise"
    kernel = f"{'k_' if base[0].isdigit() else ''}{base}_kernel"
    count_type = "int" if numel < 2 ** 31 else "long long"
    params = [f"const {ctype}* {x}" for x in inputs] + [f"{ctype}* out"] + \
        [f"{ctype_} {scalar}" for scalar, ctype_ in scalars] + [f"{count_type} n"]
    signature = f'extern "C" __global__ void {kernel}({", ".join(params)})'
    init_lines = [f"        self.{scalar} = {scalar}" for scalar, _ in scalars]
    args = ", ".join([*inputs, "out", *[f"self.{scalar}" for scalar, _ in scalars], "n"])
    wrapper = "\n".join([
        "import torch",
        "import torch.nn as nn",
        "",
        "",
        "class ModelNew(nn.Module):",
        f"    def __init__(self{', ' + init_text if init_text else ''}):",
        "        super().__init__()",
        *init_lines,
        "",
        f"    def forward(self, {', '.join(inputs)}):",
        f"        out = torch.empty_like({inputs[0]})",
        f"        n = {inputs[0]}.numel()",
        f"        kernels.{kernel}(((n + 255) // 256,), (256,), {args})",
        "        return out",
        "",
    ])
    return DerivedWrapper(signature, wrapper, kernel)
