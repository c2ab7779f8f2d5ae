"""Latency of judging a KernelBench ``load_inline`` answer on the ``cpu`` backend, cold and warm, side by side
with the same kernel answered in the native format, and the C++ compile a real host build would add.

Paths measured:

- ``native``: the built-in relu task's reference answer (a ```cuda block and ``kernels.<name>``);
- ``load_inline (translator)``: corpus answer 03 (a ``dim3`` launch on ``getCurrentCUDAStream()``) and 04
  (a templated kernel in ``AT_DISPATCH_FLOATING_TYPES``), judged through the host-code translator;
- ``host build compile step``: g++ compiling torch's ``<torch/extension.h>`` plus one pybind binding, the
  least a real host build of a load_inline answer compiles, without and with a precompiled header. This
  is the compile step only (no link, no run): the path was measured to choose, not built.

Cold: a fresh cache folder in a fresh process (NVRTC, the CPU runtime, the module build, the worker).
Warm: the same answer again in the same process (caches hit). Run::

    python benchmarks/bench_load_inline_paths.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "envs_tests" / "load_inline_corpus"

_CHILD = r'''
import json, sys, time, warnings
warnings.simplefilter("ignore")
import leap_gym
task = {t.id: t for t in leap_gym.load_tasks("builtin")}["level1/relu"]
response = open(sys.argv[1]).read() if sys.argv[1] != "native" else task.reference_solutions[0]
times = []
for _ in range(4):
    start = time.perf_counter()
    result = leap_gym.evaluate(task, response, backend="cpu", timeout_s=300)
    times.append(time.perf_counter() - start)
print(json.dumps({"status": result.status, "times": times}))
'''


def judge_times(answer: str) -> tuple[str, float, float]:
    """(status, cold seconds, median warm seconds) of one answer, in a fresh process with a fresh cache."""
    with tempfile.TemporaryDirectory(prefix="leap_bench_cache_") as cache:
        env = dict(os.environ, LEAP_GYM_CACHE=cache)
        out = subprocess.run([sys.executable, "-c", _CHILD, answer], capture_output=True, text=True, env=env,
                             cwd=ROOT, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["status"], data["times"][0], statistics.median(data["times"][1:])


BINDING = '''#include <torch/extension.h>
torch::Tensor relu_cuda(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_cuda", torch::wrap_pybind_function(relu_cuda), "relu_cuda"); }
'''


def host_compile_times() -> tuple[float, float, float]:
    """(no-PCH compile, PCH build, compile with the PCH) seconds for the binding TU against torch's headers."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    flags = ["-std=c++17", "-O2", "-fPIC", "-w", "-DTORCH_EXTENSION_NAME=bench_ext",
             *[f"-I{p}" for p in include_paths()], f"-I{sysconfig.get_paths()['include']}"]
    with tempfile.TemporaryDirectory(prefix="leap_bench_host_") as tmp:
        tu = Path(tmp) / "binding.cpp"
        tu.write_text(BINDING)
        start = time.perf_counter()
        subprocess.run(["g++", *flags, "-c", str(tu), "-o", f"{tmp}/a.o"], check=True, timeout=900)
        plain = time.perf_counter() - start
        header = Path(tmp) / "pch" / "ext.h"
        header.parent.mkdir()
        header.write_text("#include <torch/extension.h>\n")
        start = time.perf_counter()
        subprocess.run(["g++", *flags, "-x", "c++-header", str(header), "-o", f"{header}.gch"], check=True, timeout=900)
        pch_build = time.perf_counter() - start
        tu.write_text(BINDING.replace("#include <torch/extension.h>\n", ""))
        start = time.perf_counter()
        subprocess.run(["g++", *flags, "-include", str(header), "-c", str(tu), "-o", f"{tmp}/b.o"], check=True,
                       timeout=900)
        with_pch = time.perf_counter() - start
    return plain, pch_build, with_pch


def main() -> int:
    rows = []
    native = judge_times("native")
    rows.append(("native (```cuda + kernels.relu_kernel)", *native))
    for name in ("03_relu_dim3_stream_min.md", "04_relu_template_dispatch.md"):
        rows.append((f"load_inline translator ({name[:2]})", *judge_times(str(CORPUS / name))))
    print(f"{'path':44s} {'status':8s} {'cold s':>8s} {'warm s':>8s} {'cold/native':>12s} {'warm/native':>12s}")
    for label, status, cold, warm in rows:
        print(f"{label:44s} {status:8s} {cold:8.2f} {warm:8.3f} {cold / native[1]:12.2f} {warm / native[2]:12.2f}")
    plain, pch_build, with_pch = host_compile_times()
    print("\nhost build, compile step only (g++ <torch/extension.h> + one binding; no link, no run):")
    print(f"  without a precompiled header: {plain:.1f} s  ({plain / native[2]:.0f}x the native warm judgement)")
    print(f"  building the precompiled header once: {pch_build:.1f} s")
    print(f"  with the precompiled header: {with_pch:.1f} s  ({with_pch / native[2]:.0f}x the native warm judgement; "
          f"{with_pch / rows[1][3]:.0f}x the translator's warm judgement)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
