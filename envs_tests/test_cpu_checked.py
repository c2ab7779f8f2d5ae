"""Checked (AddressSanitizer) runs of the CPU runtime, as the evaluator's fault-locating worker does them.

A subprocess gets `checked_worker_env()` (libasan preloaded), loads a kernel with ``checked=True``
and runs an out-of-bounds access; `describe_memory_error` must read the report back to the
kernel, the line of the cuda block and the element index.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from leap_gym.backends.cpu import find_compiler
from leap_gym.backends.cpu_checked import checked_worker_env, describe_memory_error

pytestmark = pytest.mark.skipif(find_compiler() is None or not checked_worker_env(),
                                reason="needs a host C++ compiler with AddressSanitizer (libasan)")

CUDA = r'''
extern "C" __global__ void shift_read(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i + 1];
    }
}
'''

SCRIPT = textwrap.dedent(f'''
    import torch
    from leap_gym.backends.cpu import CpuBackend, asan_loaded
    from leap_gym.evaluation.kernels import Kernels, parse_kernel_signatures
    assert asan_loaded()
    src = {CUDA!r}
    sigs = parse_kernel_signatures(src)
    launcher = CpuBackend().load(src, b"", sigs, "sm_90", checked=True)
    assert launcher.checked
    k = Kernels(sigs, launcher)
    x = torch.randn(300)
    y = torch.empty(300)
    k.shift_read(2, 256, x, y, 300)
    print("NO ERROR")
''')


def test_checked_build_reports_the_line_of_an_out_of_bounds_read():
    env = dict(os.environ, **checked_worker_env())
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert "NO ERROR" not in proc.stdout, proc.stderr[-3000:]
    report = describe_memory_error(proc.stderr, CUDA)
    assert report, proc.stderr[-3000:]
    headline = report.splitlines()[0]
    assert "read of 4 bytes" in headline and "kernel 'shift_read'" in headline and "line 5" in headline
    assert "element 300" in headline
    assert "y[i] = x[i + 1];" in report


def test_describe_memory_error_without_a_report_is_empty():
    assert describe_memory_error("", CUDA) == ""
    assert describe_memory_error("Segmentation fault (core dumped)", CUDA) == ""
