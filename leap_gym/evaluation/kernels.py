"""Kernel signatures and the `kernels` handle that a response's `ModelNew.forward` launches through.

The handle is the same object on every backend: it checks the launch configuration and marshals
each argument against the kernel's C signature (a tensor for a pointer, a Python number for a
scalar), counts launches, and hands packed arguments to the backend's `KernelLauncher`.
"""

from __future__ import annotations

import bisect
import ctypes
import re
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from leap_gym.evaluation.parse import strip_comments

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)


class LaunchError(RuntimeError):
    """A launch that the CUDA runtime would refuse, or arguments that do not fit the signature."""


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a kernel: `type` is the base type with qualifiers removed (``"float"``)."""

    name: str
    type: str
    pointer: bool
    const: bool = False


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[KernelParam, ...]

    def __str__(self) -> str:
        parts = [f"{'const ' if p.const else ''}{p.type}{'*' if p.pointer else ''} {p.name}" for p in self.params]
        return f"{self.name}({', '.join(parts)})"


# C scalar types a kernel may take by value, with their ctypes and the Python types they accept.
_INT_TYPES = {
    "int": ctypes.c_int32, "int32_t": ctypes.c_int32, "signed": ctypes.c_int32, "signed int": ctypes.c_int32,
    "unsigned": ctypes.c_uint32, "unsigned int": ctypes.c_uint32, "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_int64, "long int": ctypes.c_int64, "long long": ctypes.c_int64, "long long int": ctypes.c_int64,
    "int64_t": ctypes.c_int64, "ptrdiff_t": ctypes.c_int64,
    "unsigned long": ctypes.c_uint64, "unsigned long long": ctypes.c_uint64, "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_uint64,
    "short": ctypes.c_int16, "int16_t": ctypes.c_int16, "unsigned short": ctypes.c_uint16, "uint16_t": ctypes.c_uint16,
    "char": ctypes.c_int8, "signed char": ctypes.c_int8, "int8_t": ctypes.c_int8,
    "unsigned char": ctypes.c_uint8, "uint8_t": ctypes.c_uint8,
    "bool": ctypes.c_bool,
}
_FLOAT_TYPES = {"float": ctypes.c_float, "double": ctypes.c_double}

# Pointer base types and the torch dtypes whose storage they may point at.
POINTER_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "float": (torch.float32,), "float2": (torch.float32,), "float4": (torch.float32,),
    "double": (torch.float64,), "double2": (torch.float64,),
    "__half": (torch.float16,), "half": (torch.float16,), "__half2": (torch.float16,), "half2": (torch.float16,),
    "__nv_bfloat16": (torch.bfloat16,), "nv_bfloat16": (torch.bfloat16,), "__nv_bfloat162": (torch.bfloat16,),
    "int": (torch.int32,), "int32_t": (torch.int32,), "int2": (torch.int32,), "int4": (torch.int32,),
    "unsigned": (torch.int32, torch.uint32), "unsigned int": (torch.int32, torch.uint32), "uint32_t": (torch.int32, torch.uint32),
    "long": (torch.int64,), "long long": (torch.int64,), "int64_t": (torch.int64,),
    "unsigned long long": (torch.int64, torch.uint64), "uint64_t": (torch.int64, torch.uint64), "size_t": (torch.int64,),
    "short": (torch.int16,), "int16_t": (torch.int16,),
    "char": (torch.int8, torch.uint8, torch.bool), "int8_t": (torch.int8,), "signed char": (torch.int8,),
    "unsigned char": (torch.uint8, torch.bool), "uint8_t": (torch.uint8, torch.bool), "bool": (torch.bool,),
    "void": (),  # any dtype
}
# Vector types read several elements per pointee: the tensor must hold a multiple of them.
VECTOR_WIDTH = {"float2": 2, "float4": 4, "double2": 2, "__half2": 2, "half2": 2, "__nv_bfloat162": 2, "int2": 2, "int4": 4}

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "__grid_constant__"}
_LAUNCH_BOUNDS = r"(?:__launch_bounds__\s*\([^()]*\)\s*)?"
_GLOBAL_RE = re.compile(
    r'(extern\s+"C"\s+)?' + _LAUNCH_BOUNDS + r"__global__\s+" + _LAUNCH_BOUNDS + r"void\s+" + _LAUNCH_BOUNDS
    + r"([A-Za-z_]\w*)\s*\(([^()]*)\)"
)
_EXTERN_C_BLOCK_RE = re.compile(r'extern\s+"C"\s*\{|[{}]')


def _parse_param(text: str, index: int) -> KernelParam:
    text = " ".join(text.replace("*", " * ").replace("&", " & ").split())
    if "&" in text:
        raise ValueError(f"kernel parameter '{text}' is a reference; pass pointers or values")
    if "[" in text:
        raise ValueError(f"kernel parameter '{text}' is an array; declare it as a pointer")
    words = text.split()
    stars = words.count("*")
    const = "const" in words
    words = [w for w in words if w not in _QUALIFIERS and w != "*"]
    if not words:
        raise ValueError(f"cannot read kernel parameter '{text}'")
    name = f"arg{index}"
    if len(words) > 1 and words[-1] not in {"int", "long", "short", "char", "unsigned", "signed", "float", "double"}:
        name = words.pop()
    base = " ".join(words)
    base = {"long long int": "long long", "unsigned long long int": "unsigned long long", "signed": "int",
            "unsigned long int": "unsigned long", "short int": "short", "std::size_t": "size_t"}.get(base, base)
    if stars > 1:
        raise ValueError(f"kernel parameter '{text}' is a pointer to pointer; pass flat buffers")
    return KernelParam(name=name, type=base, pointer=stars == 1, const=const)


def parse_kernel_signatures(cuda_source: str) -> dict[str, KernelSignature]:
    """Find the `extern "C" __global__` kernels of a source and read their parameter lists.

    Kernels declared inside an ``extern "C" { ... }`` block are found too. Raises `ValueError` for a
    parameter the handle cannot marshal (references, arrays, pointers to pointers, structs by value).
    Runs in time linear in the source, whatever its nesting.
    """
    source = strip_comments(cuda_source)
    starts, ends = _extern_c_regions(source)
    found: dict[str, KernelSignature] = {}
    for match in _GLOBAL_RE.finditer(source):
        region = bisect.bisect_right(starts, match.start()) - 1
        if match.group(1) or (region >= 0 and match.start() < ends[region]):
            found.setdefault(match.group(2), _signature(match.group(2), match.group(3)))
    return found


def _extern_c_spans(source: str) -> list[tuple[int, int]]:
    """The [start, end) spans of ``extern "C" { ... }`` blocks, found in one pass over the braces."""
    spans, stack = [], []
    for match in _EXTERN_C_BLOCK_RE.finditer(source):
        token = match.group(0)
        if token == "}":
            if stack:
                opened = stack.pop()
                if opened is not None:
                    spans.append((opened, match.end()))
        else:
            stack.append(match.end() if token != "{" else None)
    spans.extend((opened, len(source)) for opened in stack if opened is not None)
    return spans


def _extern_c_regions(source: str) -> tuple[list[int], list[int]]:
    """The extern "C" blocks merged into disjoint regions: sorted starts and their ends."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(_extern_c_spans(source)):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _signature(name: str, params_text: str) -> KernelSignature:
    params_text = params_text.strip()
    if params_text in {"", "void"}:
        return KernelSignature(name, ())
    params = tuple(_parse_param(p, i) for i, p in enumerate(params_text.split(",")))
    for p in params:
        known = POINTER_DTYPES if p.pointer else {**_INT_TYPES, **_FLOAT_TYPES}
        if p.type not in known:
            raise ValueError(
                f"kernel '{name}' parameter '{p.name}' has type '{p.type}{'*' if p.pointer else ''}', which the "
                f"launcher cannot pass; use float/double/__half/__nv_bfloat16/int/long long pointers or scalars"
            )
    return KernelSignature(name, params)


def normalize_dims(value: Any, what: str) -> tuple[int, int, int]:
    """Turn an int or a tuple of one to three ints into (x, y, z), as `dim3` does."""
    if isinstance(value, bool):
        raise LaunchError(f"{what} must be an int or a tuple of 1-3 ints, got a bool")
    if isinstance(value, int):
        dims = [value]
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        dims = list(value)
    else:
        raise LaunchError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}")
    out = []
    for d in dims:
        if isinstance(d, torch.Tensor) and d.numel() == 1 and not d.is_floating_point():
            d = int(d.item())
        if isinstance(d, bool) or not isinstance(d, int):
            raise LaunchError(f"{what} entries must be ints, got {type(d).__name__} ({d!r}); use integer division //")
        out.append(d)
    while len(out) < 3:
        out.append(1)
    return out[0], out[1], out[2]


def check_launch(name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                 max_shared_mem: int) -> None:
    """Refuse the launch configurations a GPU refuses, with the error CUDA would report."""
    if any(d <= 0 for d in grid) or any(d <= 0 for d in block):
        raise LaunchError(f"CUDA error: invalid configuration argument (kernel '{name}': grid={grid}, block={block}; "
                          "every dimension must be at least 1)")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK or any(b > m for b, m in zip(block, MAX_BLOCK_DIMS)):
        raise LaunchError(f"CUDA error: invalid configuration argument (kernel '{name}': block={block} has {threads} "
                          f"threads; at most {MAX_THREADS_PER_BLOCK} per block, dims at most {MAX_BLOCK_DIMS})")
    if any(g > m for g, m in zip(grid, MAX_GRID_DIMS)):
        raise LaunchError(f"CUDA error: invalid configuration argument (kernel '{name}': grid={grid}; dims at most "
                          f"{MAX_GRID_DIMS})")
    if shared_mem < 0 or shared_mem > max_shared_mem:
        raise LaunchError(f"CUDA error: invalid argument (kernel '{name}': {shared_mem} bytes of dynamic shared memory "
                          f"requested; at most {max_shared_mem} on this architecture)")


def marshal_args(sig: KernelSignature, args: tuple[Any, ...], device: str) -> list[Any]:
    """Check `args` against the signature; return ctypes values (pointers as `c_void_p`)."""
    if len(args) != len(sig.params):
        raise LaunchError(f"kernel '{sig.name}' takes {len(sig.params)} arguments ({sig}), got {len(args)}")
    packed: list[Any] = []
    for i, (param, arg) in enumerate(zip(sig.params, args)):
        where = f"kernel '{sig.name}' argument {i} ('{param.name}', {param.type}{'*' if param.pointer else ''})"
        if param.pointer:
            if not isinstance(arg, torch.Tensor):
                raise LaunchError(f"{where} expects a tensor, got {type(arg).__name__}")
            if arg.device.type != device:
                raise LaunchError(f"{where}: tensor is on {arg.device}, kernels run on {device}")
            allowed = POINTER_DTYPES[param.type]
            if allowed and arg.dtype not in allowed:
                names = " or ".join(str(d).replace("torch.", "") for d in allowed)
                raise LaunchError(f"{where} expects a {names} tensor, got {str(arg.dtype).replace('torch.', '')}")
            if not arg.is_contiguous():
                raise LaunchError(f"{where}: tensor is not contiguous; call .contiguous() first")
            width = VECTOR_WIDTH.get(param.type, 1)
            if width > 1 and (arg.numel() % width or arg.data_ptr() % (width * arg.element_size())):
                raise LaunchError(f"{where}: tensor must hold a multiple of {width} elements and be aligned to "
                                  f"{width * arg.element_size()} bytes")
            packed.append(ctypes.c_void_p(arg.data_ptr()))
        elif param.type in _FLOAT_TYPES:
            if isinstance(arg, torch.Tensor) or not isinstance(arg, (int, float)) or isinstance(arg, bool):
                raise LaunchError(f"{where} expects a Python float, got {type(arg).__name__}")
            packed.append(_FLOAT_TYPES[param.type](float(arg)))
        else:
            if isinstance(arg, torch.Tensor) or not isinstance(arg, int) or (isinstance(arg, bool) and param.type != "bool"):
                raise LaunchError(f"{where} expects a Python int, got {type(arg).__name__} ({arg!r})")
            ctype = _INT_TYPES[param.type]
            bits = ctypes.sizeof(ctype) * 8
            signed = ctype(-1).value == -1 if ctype is not ctypes.c_bool else False
            lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
            if ctype is not ctypes.c_bool and not lo <= arg <= hi:
                raise LaunchError(f"{where}: value {arg} does not fit in {param.type}")
            packed.append(ctype(arg))
    return packed


class KernelLauncher(Protocol):
    """What a backend provides to run one compiled module's kernels."""

    device: str
    max_shared_mem: int

    def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
               args: list[Any], tensors: list[Any]) -> None:
        """Run kernel `name`: `args` as `marshal_args` packs them; `tensors` the launch's own arguments,
        each a tensor where a pointer goes and `None` elsewhere."""


class Kernels:
    """The `kernels` object injected into a response's Python block.

    ``kernels.<name>(grid, block, *args, shared_mem=0)`` launches the kernel `name`; `launches`
    counts the launches of each kernel.
    """

    def __init__(self, signatures: dict[str, KernelSignature], launcher: KernelLauncher):
        self._signatures = signatures
        self._launcher = launcher
        self.launches: dict[str, int] = {name: 0 for name in signatures}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._signatures:
            known = ", ".join(sorted(self._signatures)) or "none"
            raise LaunchError(f"no kernel named '{name}' in the cuda block (extern \"C\" __global__ kernels: {known})")
        return lambda grid, block, *args, shared_mem=0: self._launch(name, grid, block, args, shared_mem)

    def __dir__(self) -> list[str]:
        return sorted(self._signatures)

    def _launch(self, name: str, grid: Any, block: Any, args: tuple[Any, ...], shared_mem: Any) -> None:
        g = normalize_dims(grid, "grid")
        b = normalize_dims(block, "block")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int):
            raise LaunchError(f"shared_mem must be an int number of bytes, got {shared_mem!r}")
        check_launch(name, g, b, shared_mem, self._launcher.max_shared_mem)
        packed = marshal_args(self._signatures[name], args, self._launcher.device)
        self.launches[name] += 1
        tensors = [a if isinstance(a, torch.Tensor) else None for a in args]
        self._launcher.launch(name, g, b, shared_mem, packed, tensors)
