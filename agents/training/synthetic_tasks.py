"""Synthetic elementwise tasks: extra warm-up data that teaches a model to transcribe a `forward` into a kernel.

LEAP-mini's 19 training tasks are too few for a pretrained model to learn the general skill (read the
reference `forward`, write the same arithmetic per element) rather than the 19 answers. These tasks
add more of that skill: each is an ordinary `Task` (a KernelBench-format source, a short-form wrapper
and signature, a reference solution) for one unary or same-shape binary elementwise operator, with ids
``synthetic/<name>``. Each reference is judged like any response before it becomes training data.

None of them is a held-out operator, nor one equivalent to it (no tanh, silu or x * sigmoid(x),
hardtanh or clamp to [-1, 1], a + b, max or sum over a dim); `check_split` checks every rendered example
against the held-out tasks' kernels and names besides.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from leap_gym.tasks import Task


@dataclass(frozen=True)
class ElementwiseOp:
    """One operator: `torch_expr` over ``x`` (unary) or ``a, b`` (binary), `cuda_expr` over ``v`` or ``va, vb``."""

    name: str
    description: str
    torch_expr: str
    cuda_expr: str
    binary: bool = False
    input_scale: float = 3.0


UNARY = [
    ElementwiseOp("exp", "Exponential: y = exp(x), elementwise.", "torch.exp(x)", "expf(v)", input_scale=1.0),
    ElementwiseOp("abs", "Absolute value: y = |x|, elementwise.", "torch.abs(x)", "fabsf(v)"),
    ElementwiseOp("neg", "Negation: y = -x, elementwise.", "-x", "-v"),
    ElementwiseOp("square", "Square: y = x * x, elementwise.", "x * x", "v * v"),
    ElementwiseOp("cube", "Cube: y = x * x * x, elementwise.", "x * x * x", "v * v * v"),
    ElementwiseOp("sin", "Sine: y = sin(x), elementwise.", "torch.sin(x)", "sinf(v)"),
    ElementwiseOp("cos", "Cosine: y = cos(x), elementwise.", "torch.cos(x)", "cosf(v)"),
    ElementwiseOp("sqrt_abs", "Square root of the magnitude: y = sqrt(|x|), elementwise.",
                  "torch.sqrt(torch.abs(x))", "sqrtf(fabsf(v))"),
    ElementwiseOp("log1p_abs", "y = log(1 + |x|), elementwise.", "torch.log1p(torch.abs(x))", "log1pf(fabsf(v))"),
    ElementwiseOp("softsign", "Softsign: y = x / (1 + |x|), elementwise.", "x / (1 + torch.abs(x))",
                  "v / (1.0f + fabsf(v))"),
    ElementwiseOp("relu6", "ReLU6: y = min(max(x, 0), 6), elementwise.", "torch.clamp(x, 0.0, 6.0)",
                  "fminf(fmaxf(v, 0.0f), 6.0f)", input_scale=5.0),
    ElementwiseOp("hardsigmoid", "Hard sigmoid: y = min(max(x / 6 + 0.5, 0), 1), elementwise.",
                  "torch.clamp(x / 6 + 0.5, 0.0, 1.0)", "fminf(fmaxf(v / 6.0f + 0.5f, 0.0f), 1.0f)", input_scale=5.0),
    ElementwiseOp("erf", "Error function: y = erf(x), elementwise.", "torch.erf(x)", "erff(v)", input_scale=1.5),
    ElementwiseOp("atan", "Arctangent: y = atan(x), elementwise.", "torch.atan(x)", "atanf(v)"),
    ElementwiseOp("asinh", "Inverse hyperbolic sine: y = asinh(x), elementwise.", "torch.asinh(x)", "asinhf(v)"),
    ElementwiseOp("sinh", "Hyperbolic sine: y = sinh(x), elementwise.", "torch.sinh(x)", "sinhf(v)", input_scale=1.0),
    ElementwiseOp("floor", "Floor: y = floor(x), elementwise.", "torch.floor(x)", "floorf(v)"),
    ElementwiseOp("inverse_square", "y = 1 / (1 + x * x), elementwise.", "1 / (1 + x * x)", "1.0f / (1.0f + v * v)"),
    ElementwiseOp("logsigmoid", "Log-sigmoid: y = -log(1 + exp(-x)), elementwise.", "-torch.log1p(torch.exp(-x))",
                  "-log1pf(expf(-v))"),
    ElementwiseOp("affine", "Affine map: y = 2 * x + 1, elementwise.", "x * 2.0 + 1.0", "v * 2.0f + 1.0f"),
    ElementwiseOp("relu_square", "Squared ReLU: y = max(x, 0)^2, elementwise.", "torch.relu(x) * torch.relu(x)",
                  "v > 0.0f ? v * v : 0.0f"),
    ElementwiseOp("softshrink", "Soft shrinkage: y = x - 0.5 if x > 0.5, x + 0.5 if x < -0.5, else 0, elementwise.",
                  "torch.where(x > 0.5, x - 0.5, torch.where(x < -0.5, x + 0.5, torch.zeros_like(x)))",
                  "v > 0.5f ? v - 0.5f : (v < -0.5f ? v + 0.5f : 0.0f)"),
    ElementwiseOp("hardshrink", "Hard shrinkage: y = x if |x| > 0.5, else 0, elementwise.",
                  "torch.where(torch.abs(x) > 0.5, x, torch.zeros_like(x))", "fabsf(v) > 0.5f ? v : 0.0f"),
    ElementwiseOp("gaussian", "Gaussian: y = exp(-x * x), elementwise.", "torch.exp(-x * x)", "expf(-v * v)"),
    ElementwiseOp("threshold", "Threshold: y = x if x > 1, else 0, elementwise.",
                  "torch.where(x > 1.0, x, torch.zeros_like(x))", "v > 1.0f ? v : 0.0f"),
    ElementwiseOp("exp2", "Base-2 exponential: y = 2^x, elementwise.", "torch.exp2(x)", "exp2f(v)", input_scale=1.0),
]

BINARY = [
    ElementwiseOp("sub", "Elementwise difference of two tensors of the same shape: y = a - b.", "a - b", "va - vb",
                  binary=True),
    ElementwiseOp("maximum", "Elementwise maximum of two tensors of the same shape: y = max(a, b).",
                  "torch.maximum(a, b)", "fmaxf(va, vb)", binary=True),
    ElementwiseOp("minimum", "Elementwise minimum of two tensors of the same shape: y = min(a, b).",
                  "torch.minimum(a, b)", "fminf(va, vb)", binary=True),
    ElementwiseOp("squared_diff", "Squared difference of two tensors of the same shape: y = (a - b)^2.",
                  "(a - b) * (a - b)", "(va - vb) * (va - vb)", binary=True),
    ElementwiseOp("abs_diff", "Absolute difference of two tensors of the same shape: y = |a - b|.",
                  "torch.abs(a - b)", "fabsf(va - vb)", binary=True),
    ElementwiseOp("hypot", "Hypotenuse of two tensors of the same shape: y = sqrt(a^2 + b^2).",
                  "torch.hypot(a, b)", "hypotf(va, vb)", binary=True),
    ElementwiseOp("atan2", "Two-argument arctangent of two tensors of the same shape: y = atan2(a, b).",
                  "torch.atan2(a, b)", "atan2f(va, vb)", binary=True),
    ElementwiseOp("product", "Elementwise product of two tensors of the same shape: y = a * b.", "a * b",
                  "va * vb", binary=True),
    ElementwiseOp("damped_ratio", "Damped ratio of two tensors of the same shape: y = a / (1 + b * b).",
                  "a / (1 + b * b)", "va / (1.0f + vb * vb)", binary=True),
]

OPS = UNARY + BINARY

_UNARY_WRAPPER = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        kernels.{name}_kernel(blocks, threads, x, y, n)
        return y
'''

_BINARY_WRAPPER = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        y = torch.empty_like(a)
        n = a.numel()
        kernels.{name}_kernel(((n + 255) // 256,), (256,), a, b, y, n)
        return y
'''


def _source(op: ElementwiseOp) -> str:
    args = "a: torch.Tensor, b: torch.Tensor" if op.binary else "x: torch.Tensor"
    inputs = (f"torch.randn(BATCH, DIM) * {op.input_scale}, torch.randn(BATCH, DIM) * {op.input_scale}"
              if op.binary else f"torch.randn(BATCH, DIM) * {op.input_scale}")
    return f'''"""{op.description}"""

import torch
import torch.nn as nn

BATCH = 4096
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}) -> torch.Tensor:
        return {op.torch_expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


_UNARY_KERNEL = """\
extern "C" __global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{
        float v = x[i];
        y[i] = {expr};
    }}
}}
"""

_BINARY_KERNEL = """\
extern "C" __global__ void {name}_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float va = a[i];
        float vb = b[i];
        y[i] = {expr};
    }}
}}
"""


def _kernel(op: ElementwiseOp) -> str:
    return (_BINARY_KERNEL if op.binary else _UNARY_KERNEL).format(name=op.name, expr=op.cuda_expr)


def synthetic_task(op: ElementwiseOp) -> Task:
    """The `Task` of one operator, at CPU sizes, with its reference solution."""
    wrapper = (_BINARY_WRAPPER if op.binary else _UNARY_WRAPPER).replace("{name}", op.name)
    params = "const float* a, const float* b, float* y, int n" if op.binary else "const float* x, float* y, int n"
    solution = f"```cuda\n{_kernel(op)}```\n\n```python\n{wrapper.strip()}\n```\n"
    sizes = {"cpu": {"BATCH": 8, "DIM": 999} if op.binary else {"BATCH": 16, "DIM": 300},
             "gpu": {"BATCH": 4096, "DIM": 4096}}
    signature = f'extern "C" __global__ void {op.name}_kernel({params})'
    task = Task(id=f"synthetic/{op.name}", source=_source(op), level=1, name=op.name, description=op.description,
                tags=["elementwise", "synthetic"] + (["binary"] if op.binary else []), atol=1e-5, rtol=1e-5,
                sizes=sizes, wrapper=wrapper, wrapper_signature=signature, reference_solutions=[solution])
    return task.with_size("cpu")


def synthetic_tasks() -> list[Task]:
    """Every synthetic elementwise task, unary then binary."""
    return [synthetic_task(op) for op in OPS]


def wrong_operator_kernels(task_id: str, count: int, seed: int = 0) -> list[tuple[str, str]]:
    """Up to `count` wrong answers to a synthetic task: its kernel computing another operator of the same arity.

    The mistake a small model makes on a new operator is the body of one it knows; repairs from these teach it to
    go back to the reference `forward` instead of its previous kernel. Returns ``("wrong_operator:<other>",
    kernel)`` pairs, seeded; none for a task id that is not synthetic.
    """
    by_id = {f"synthetic/{op.name}": op for op in OPS}
    op = by_id.get(task_id)
    if op is None or count <= 0:
        return []
    others = [o for o in OPS if o.binary == op.binary and o.cuda_expr != op.cuda_expr]
    random.Random(f"{seed}:{task_id}").shuffle(others)
    return [(f"wrong_operator:{o.name}", _kernel(replace(op, cuda_expr=o.cuda_expr))) for o in others[:count]]
