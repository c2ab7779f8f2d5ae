"""Triton responses on the GPU (the `cuda` backend): real Triton compilation and launch.

Every reference Triton solution CORRECT at the `gpu` size with a speedup and the compiled kernel's
registers; a compile error names the kernel's line. Written without a GPU; not yet run.
"""

from __future__ import annotations

import os

import pytest

from leap_gym import evaluate
from leap_gym.result import COMPILE_ERROR, CORRECT
from leap_gym.tasks import load_tasks

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton", reason="pip install 'leap-gym[triton]'")

TIMING_BUDGET_S = float(os.environ.get("LEAP_GPU_TIMING_BUDGET", "0.25"))
CONFIG = dict(backend="cuda", timing_budget_s=TIMING_BUDGET_S, timeout_s=180.0)
TASKS = [t for t in load_tasks("builtin") if t.triton_solutions]


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_reference_triton_solution_correct_on_gpu(task, record):
    result = evaluate(task.with_size("gpu"), task.triton_solutions[0], **CONFIG)
    record("triton_reference", task=task.id, status=result.status, detail=result.detail,
           speedup=result.speedup, wall_time_s=result.wall_time_s,
           registers={k: v.registers for k, v in (result.resources or {}).items()})
    assert result.status == CORRECT, (result.detail, result.message)
    assert result.timing is not None and result.timing.kernel_ms > 0
    assert result.resources and all(r.registers > 0 for r in result.resources.values())


def test_triton_compile_error_names_the_line():
    task = next(t for t in TASKS if t.id == "level1/relu")
    bad = task.triton_solutions[0].replace("tl.maximum(x, 0.0)", "tl.no_such_function(x)")
    result = evaluate(task.with_size("gpu"), bad, **CONFIG)
    assert result.status == COMPILE_ERROR and result.detail == "triton", result.message
    assert "kernel `relu_kernel`, line" in result.message and "no_such_function" in result.message
