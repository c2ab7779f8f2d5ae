"""The built-in task suite: its shape, its metadata, and its reference solutions.

Every task must load with metadata, cpu and gpu size presets and at least one reference solution;
level-1 tasks ship a short-form wrapper. Every reference solution must compile with NVRTC for sm_90,
every reference `Model` must run at the cpu preset, and, where the CPU runtime is available, every
reference solution must be judged CORRECT by `leap_gym.evaluation.pipeline` on the cpu backend.
"""

from __future__ import annotations

import re

import pytest
import torch

from leap_gym.evaluation.kernels import parse_kernel_signatures
from leap_gym.tasks import Task, input_numel, instantiate, load_tasks

CPU_MAX_INPUT_NUMEL = 1 << 16
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

TASKS: list[Task] = load_tasks("builtin")
TASK_IDS = [t.id for t in TASKS]
SOLUTIONS = [(t, i) for t in TASKS for i in range(len(t.reference_solutions))]
SOLUTION_IDS = [f"{t.id}#{i}" for t, i in SOLUTIONS]


def _block(text: str, lang: str) -> str:
    blocks = re.findall(rf"```{lang}\s*\n(.*?)```", text, re.S)
    assert len(blocks) == 1, f"expected exactly one ```{lang} block, found {len(blocks)}"
    return blocks[0]


def test_suite_size_and_levels():
    assert len(TASKS) >= 50
    by_level = {level: [t for t in TASKS if t.level == level] for level in (1, 2, 3)}
    assert len(by_level[1]) >= 28 and len(by_level[2]) >= 12 and len(by_level[3]) >= 8
    assert len(set(TASK_IDS)) == len(TASK_IDS)
    assert {t.dtype for t in TASKS} >= {"float32", "float16", "bfloat16"}


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_task_metadata(task: Task):
    assert re.fullmatch(r"level[123]/[a-z0-9_]+", task.id) and task.id == f"level{task.level}/{task.name}"
    assert task.description and task.tags
    assert task.dtype in DTYPES
    assert 0 <= task.atol <= 1e-2 and 0 <= task.rtol <= 2e-2
    assert task.target_speedup > 0
    assert set(task.sizes) >= {"cpu", "gpu"}
    constants = task.size_constants()
    for preset in ("cpu", "gpu"):
        assert set(task.sizes[preset]) <= set(constants), f"{preset} preset names unknown constants"
    cpu, gpu = task.with_size("cpu"), task.with_size("gpu")
    assert input_numel(cpu) <= CPU_MAX_INPUT_NUMEL
    assert input_numel(cpu) < input_numel(gpu)
    assert task.reference_solutions, "every built-in task needs a reference solution"
    if task.level == 1:
        assert task.has_wrapper and task.wrapper_signature, "level-1 tasks ship a short-form wrapper"


@pytest.mark.parametrize("task", [t for t in TASKS if t.has_wrapper], ids=[t.id for t in TASKS if t.has_wrapper])
def test_wrapper_matches_signature_and_solutions(task: Task):
    (declared,) = parse_kernel_signatures(task.wrapper_signature + " {}").values()
    launched = set(re.findall(r"kernels\.(\w+)\(", task.wrapper))
    assert launched == {declared.name}, "the wrapper must launch exactly the kernel its signature declares"
    first = task.reference_solutions[0]
    # the short form is the first reference solution minus its python block: both must behave the same
    assert _block(first, "python").strip() == task.wrapper.strip()
    for solution in task.reference_solutions:
        kernels = parse_kernel_signatures(_block(solution, "cuda"))
        if _block(solution, "python").strip() == task.wrapper.strip():
            assert declared.name in kernels
            assert [(p.type, p.pointer) for p in kernels[declared.name].params] == \
                [(p.type, p.pointer) for p in declared.params]


@pytest.mark.parametrize("task,index", SOLUTIONS, ids=SOLUTION_IDS)
def test_reference_solution_compiles_for_sm90(task: Task, index: int):
    from leap_gym.backends.nvrtc import compile_cuda

    solution = task.reference_solutions[index]
    cuda, python = _block(solution, "cuda"), _block(solution, "python")
    result = compile_cuda(cuda, "sm_90")
    assert result.ok, "\n".join(str(d) for d in result.errors) or result.log
    defined = parse_kernel_signatures(cuda)
    assert set(re.findall(r"kernels\.(\w+)\(", python)) <= set(defined)
    assert set(result.resources) >= set(defined), "ptxas should report every kernel"
    assert all(r.spill_stores_bytes == 0 for r in result.resources.values()), "reference kernels should not spill"
    assert "class ModelNew(nn.Module)" in python


@pytest.mark.parametrize("task,index", SOLUTIONS, ids=SOLUTION_IDS)
def test_reference_solution_passes_format_and_static_checks(task: Task, index: int):
    from leap_gym.evaluation.languages import prepare
    from leap_gym.result import EvalResult

    parsed = prepare(task, task.reference_solutions[index])
    assert not isinstance(parsed, EvalResult), parsed.message
    if task.has_wrapper and index == 0:  # the short form (cuda block only) is accepted too
        short = "```cuda\n" + _block(task.reference_solutions[0], "cuda") + "```\n"
        parsed_short = prepare(task, short)
        assert not isinstance(parsed_short, EvalResult), parsed_short.message
        assert parsed_short.python.strip() == task.wrapper.strip()


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_reference_model_runs_at_cpu_preset(task: Task):
    _, model, inputs, _ = instantiate(task.with_size("cpu"), seed=0)
    with torch.no_grad():
        out = model(*inputs)
    outputs = out if isinstance(out, tuple) else (out,)
    for o in outputs:
        assert isinstance(o, torch.Tensor) and torch.isfinite(o.double()).all()
        if o.is_floating_point():
            assert o.dtype == DTYPES[task.dtype]


def _cpu_backend_available() -> bool:
    try:
        from leap_gym.backends.base import get_backend

        return bool(get_backend("cpu").availability().ok)
    except Exception:  # the CPU runtime is not installed in this checkout
        return False


@pytest.mark.skipif(not _cpu_backend_available(), reason="the cpu backend (CUDA-on-CPU runtime) is unavailable")
@pytest.mark.parametrize("task,index", SOLUTIONS, ids=SOLUTION_IDS)
def test_reference_solution_is_correct_on_cpu_backend(task: Task, index: int):
    import leap_gym

    # a generous limit: the suite shares two cores with other tests, and a TIMEOUT here would not be the kernel's fault
    result = leap_gym.evaluate(task.with_size("cpu"), task.reference_solutions[index], backend="cpu", timeout_s=120.0)
    assert result.status == "CORRECT", f"{result.status}: {result.message}\n" + "\n".join(result.errors[:10])
