"""Numba reference responses for built-in tasks, and the tiny sizes at which the CPU simulator runs them.

Each response is a whole Numba-form response (see `leap_gym.integrations.numba_kernels`): one ```python block
with ``@cuda.jit`` kernels and ``ModelNew``. `simulator_task` shrinks a task so that Numba's CUDA
simulator (one Python thread per CUDA thread) judges it in about a second.

Examples:
    >>> from leap_gym.integrations.numba_examples import NUMBA_RESPONSES
    >>> sorted(NUMBA_RESPONSES)[:3]
    ['level1/add', 'level1/leaky_relu', 'level1/matmul']
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

_HEADER = "import math\nimport torch\nimport torch.nn as nn\nfrom numba import cuda\n"


def _response(body: str, note: str) -> str:
    return f"{note}\n\n```python\n{_HEADER}\n{body.strip()}\n```\n"


RELU = _response('''
@cuda.jit
def relu_kernel(x, y, n):
    i = cuda.grid(1)
    if i < n:
        v = x[i]
        y[i] = v if v > 0.0 else 0.0


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(n + 63) // 64, 64](x.view(-1), y.view(-1), n)
        return y
''', "One thread per element with a bound check.")

ADD = _response('''
@cuda.jit
def add_kernel(a, b, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = a[i] + b[i]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        y = torch.empty_like(a)
        n = a.numel()
        add_kernel[(n + 63) // 64, 64](a.view(-1), b.view(-1), y.view(-1), n)
        return y
''', "Elementwise add over the flattened tensors.")

LEAKY_RELU = _response('''
@cuda.jit
def leaky_relu_kernel(x, y, n, slope):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, n, stride):
        v = x[i]
        y[i] = v if v > 0.0 else v * slope


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        blocks = min((n + 63) // 64, 4)
        leaky_relu_kernel[blocks, 64](x.view(-1), y.view(-1), n, self.negative_slope)
        return y
''', "A grid-stride loop, so a capped grid still covers every element.")

SUM_DIM = _response('''
THREADS = 32


@cuda.jit
def sum_rows_kernel(x, y, rows, cols):
    partial = cuda.shared.array(32, dtype=numba_float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    acc = 0.0
    for c in range(tid, cols, cuda.blockDim.x):
        acc += x[row, c]
    partial[tid] = acc
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            partial[tid] += partial[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        y[row] = partial[0]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, dtype=x.dtype, device=x.device)
        sum_rows_kernel[rows, THREADS](x, y, rows, cols)
        return y
''', "One block per row: strided partial sums, then a shared-memory tree reduction.").replace(
    "from numba import cuda\n", "from numba import cuda\nfrom numba import float32 as numba_float32\n")

SOFTMAX = _response('''
THREADS = 32


@cuda.jit
def softmax_rows_kernel(x, y, rows, cols):
    scratch = cuda.shared.array(32, dtype=numba_float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    best = -math.inf
    for c in range(tid, cols, cuda.blockDim.x):
        best = max(best, x[row, c])
    scratch[tid] = best
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            scratch[tid] = max(scratch[tid], scratch[tid + step])
        cuda.syncthreads()
        step //= 2
    row_max = scratch[0]
    cuda.syncthreads()
    total = 0.0
    for c in range(tid, cols, cuda.blockDim.x):
        total += math.exp(x[row, c] - row_max)
    scratch[tid] = total
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            scratch[tid] += scratch[tid + step]
        cuda.syncthreads()
        step //= 2
    denom = scratch[0]
    for c in range(tid, cols, cuda.blockDim.x):
        y[row, c] = math.exp(x[row, c] - row_max) / denom


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        softmax_rows_kernel[rows, THREADS](x.view(rows, cols), y.view(rows, cols), rows, cols)
        return y
''', "One block per row: a max reduction, a sum of exponentials, then the normalised outputs.").replace(
    "from numba import cuda\n", "from numba import cuda\nfrom numba import float32 as numba_float32\n")

MATMUL = _response('''
TILE = 8


@cuda.jit
def matmul_kernel(a, b, c, n):
    sa = cuda.shared.array((8, 8), dtype=numba_float32)
    sb = cuda.shared.array((8, 8), dtype=numba_float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * 8 + ty
    col = cuda.blockIdx.x * 8 + tx
    acc = 0.0
    for t in range((n + 7) // 8):
        k = t * 8 + tx
        sa[ty, tx] = a[row, k] if row < n and k < n else 0.0
        k = t * 8 + ty
        sb[ty, tx] = b[k, col] if k < n and col < n else 0.0
        cuda.syncthreads()
        for j in range(8):
            acc += sa[ty, j] * sb[j, tx]
        cuda.syncthreads()
    if row < n and col < n:
        c[row, col] = acc


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        n = a.shape[0]
        c = torch.empty(n, n, dtype=a.dtype, device=a.device)
        blocks = ((n + TILE - 1) // TILE, (n + TILE - 1) // TILE)
        matmul_kernel[blocks, (TILE, TILE)](a, b, c, n)
        return c
''', "Shared-memory tiles of 8x8, zero-padded at the edges.").replace(
    "from numba import cuda\n", "from numba import cuda\nfrom numba import float32 as numba_float32\n")

#: Numba responses that are CORRECT, by task id.
NUMBA_RESPONSES: dict[str, str] = {
    "level1/relu": RELU,
    "level1/add": ADD,
    "level1/leaky_relu": LEAKY_RELU,
    "level1/sum_dim": SUM_DIM,
    "level1/softmax": SOFTMAX,
    "level1/matmul": MATMUL,
}

#: Sizes at which the CPU simulator judges each task in about a second.
SIMULATOR_SIZES: dict[str, dict[str, int]] = {
    "level1/relu": {"N": 200},
    "level1/add": {"BATCH": 3, "DIM": 50},
    "level1/leaky_relu": {"BATCH": 4, "DIM": 100},
    "level1/sum_dim": {"BATCH": 3, "DIM": 70},
    "level1/softmax": {"BATCH": 3, "DIM": 50},
    "level1/matmul": {"N": 12},
}

#: A broken Numba response (the bound check is gone: threads past the end read and write out of bounds).
BROKEN_RELU = RELU.replace("    if i < n:\n        v = x[i]\n        y[i] = v if v > 0.0 else 0.0",
                           "    v = x[i]\n    y[i] = v if v > 0.0 else 0.0")
#: A wrong-output Numba response (ReLU with the wrong threshold).
WRONG_RELU = RELU.replace("v if v > 0.0 else 0.0", "v if v > 0.5 else 0.0")


def simulator_task(task: Any, sizes: dict[str, int] | None = None) -> Any:
    """`task` at tiny sizes for Numba's CUDA simulator (its `SIMULATOR_SIZES` entry unless `sizes` is given)."""
    overrides = dict(sizes if sizes is not None else SIMULATOR_SIZES.get(task.id, {}))
    if not overrides:
        raise KeyError(f"no simulator sizes for {task.id}; pass sizes={{'N': 64, ...}} with the task's size constants")
    # The sizes become the task's "cpu" preset, so an environment that applies its backend's preset keeps them.
    return replace(task, sizes={**task.sizes, "cpu": overrides}, size="cpu", overrides=overrides)
