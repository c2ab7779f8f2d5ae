"""Faulty responses to ``level1/relu`` for the fault tests (``test_fault.py``, ``benchmarks/fault_storm.py``).

Each kind attacks the evaluation process rather than its checks: a crash (null-pointer write,
``__trap()``, out-of-bounds writes, integer division by zero, a stack overflow), a hang (infinite loop,
deadlock), resource abuse (huge allocation, output flood), escapes (fork, file writes outside the
working directory, network connect). Variants differ in their Python block or the text around the
blocks, so a long run reuses a few compiled kernels. Files the escapes try to create are named by
`SENTINELS`; none may exist after a run.
"""

from __future__ import annotations

import itertools
from typing import Iterator

SENTINELS = ("/tmp/leap_fault_sentinel.txt", "/root/leap_fault_sentinel.txt", "/work/leap_fault_sentinel.txt")

_PY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
{body}
'''
_LAUNCH = ("        y = torch.empty_like(x)\n        n = x.numel()\n"
           "        kernels.relu_kernel(((n + {block} - 1) // {block},), ({block},), x, y, n)\n        return y")


def _kernel(body: str, head: str = "") -> str:
    return (f'{head}extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {{\n'
            f'    int i = blockIdx.x * blockDim.x + threadIdx.x;\n{body}\n}}')


def _response(cuda: str, python: str | None, note: str) -> str:
    text = f"{note}\n\n```cuda\n{cuda}\n```\n"
    return text + (f"\n```python\n{python}\n```\n" if python is not None else "")


def _launch_py(block: int = 256, extra: str = "") -> str:
    return _PY.format(body=extra + _LAUNCH.format(block=block))


KERNELS = {
    "null_write": _kernel("    if (i == 0) *((volatile int*)0) = 1;\n    if (i < n) y[i] = fmaxf(x[i], 0.0f);"),
    "trap": _kernel("    if (i == 7) __trap();\n    if (i < n) y[i] = fmaxf(x[i], 0.0f);"),
    "oob_far": _kernel("    if (i < n) y[i + (1 << 28)] = fmaxf(x[i], 0.0f);"),
    "oob_near": _kernel("    if (i <= n + 64) y[i] = fmaxf(x[i], 0.0f);"),
    "div_zero": _kernel("    volatile int z = 0;\n    if (i < n) y[i] = (float)(i / z);"),
    "stack_overflow": _kernel("    if (i < n) y[i] = deep(i, x);",
                              head="__device__ float deep(int d, const float* x) {\n"
                                   "    volatile float pad[256]; pad[d & 255] = x[0];\n"
                                   "    return d > 100000000 ? pad[0] : deep(d + 1, x) + pad[d & 255];\n}\n"),
    "infinite_loop": _kernel("    volatile int k = 1;\n    while (k) { }\n    if (i < n) y[i] = x[i];"),
    "deadlock": _kernel("    __shared__ volatile int flag;\n    if (threadIdx.x == 0) flag = 0;\n    __syncthreads();\n"
                        "    while (flag == 0) { }\n    if (i < n) y[i] = x[i];"),
    "printf_flood": _kernel('    for (int k = 0; k < 200000; ++k) printf("flood %d %d\\n", i, k);\n'
                            "    if (i < n) y[i] = fmaxf(x[i], 0.0f);"),
    "fork_device": _kernel("    if (i == 0) fork();\n    if (i < n) y[i] = x[i];", head='extern "C" int fork();\n'),
    "fopen_device": _kernel(f'    if (i == 0) fopen("{SENTINELS[0]}", "w");\n    if (i < n) y[i] = x[i];',
                            head="#include <cstdio>\n"),
    "clean": _kernel("    if (i < n) y[i] = fmaxf(x[i], 0.0f);"),
}

PYTHON_FAULTS = {
    "huge_alloc": _PY.format(body="        big = torch.empty(1 << 40)\n" + _LAUNCH.format(block=256)),
    "huge_list": _PY.format(body="        big = [0.0] * (1 << 36)\n" + _LAUNCH.format(block=256)),
    "recursion": "import torch\nimport torch.nn as nn\n\n\ndef down(k):\n    return down(k + 1) + 1\n\n\n" +
                 _PY.split("\n\n\n", 1)[1].format(body="        down(0)\n" + _LAUNCH.format(block=256)),
    "fork_python": "import os\n" + _launch_py(extra="        os.fork()\n"),
    "file_write": _launch_py(extra=f"        open('{SENTINELS[1]}', 'w').write('x')\n"),
    "torch_save": _launch_py(extra=f"        torch.save(x, '{SENTINELS[2]}')\n"),
    "network": "import socket\n" + _launch_py(extra="        socket.create_connection(('1.1.1.1', 80), timeout=1)\n"),
    "subprocess": "import subprocess\n" + _launch_py(extra="        subprocess.run(['touch', '/tmp/x'])\n"),
    "infinite_python": _launch_py(extra="        while True:\n            pass\n"),
    "exit": _launch_py(extra="        exit(3)\n"),
}

CUDA_FAULTS = [k for k in KERNELS if k != "clean"]
KINDS = CUDA_FAULTS + list(PYTHON_FAULTS)


def fault_response(kind: str, variant: int = 0) -> str:
    """The faulty response of `kind`; `variant` changes the launch block size and the note (not the kernel)."""
    block = (128, 256, 512)[variant % 3]
    note = f"Attempt {variant} ({kind})."
    if kind in PYTHON_FAULTS:
        return _response(KERNELS["clean"], PYTHON_FAULTS[kind].replace("256", str(block)), note)
    return _response(KERNELS[kind], _launch_py(block), note)


def fault_stream(count: int) -> Iterator[tuple[str, str]]:
    """`count` (kind, response) pairs cycling through every kind and its variants."""
    pairs = ((kind, variant) for variant in itertools.count() for kind in KINDS)
    for kind, variant in itertools.islice(pairs, count):
        yield kind, fault_response(kind, variant)


HONEST = _response(KERNELS["clean"], _launch_py(256), "An honest ReLU.")
