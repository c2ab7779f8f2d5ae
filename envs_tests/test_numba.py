"""Numba kernels: detection, static check, and real runs in Numba's CUDA simulator (cpu backend).

Runs go through a sandboxed worker (`run_numba_job`, what ``evaluate.run_job`` hands Numba jobs to)
and, when `leap_gym.evaluation.languages` lists the numba language, through the pipeline and
the environment. Sizes are tiny: the simulator runs every CUDA thread as a Python thread.
"""

from __future__ import annotations

import importlib

import pytest

import leap_gym
from leap_gym.evaluation.parse import ParsedResponse
from leap_gym.evaluation.pipeline import EvalJob
from leap_gym.integrations import numba_examples as ne
from leap_gym.integrations import numba_kernels as nk
from leap_gym.result import COMPILED, CORRECT, FORMAT_ERROR, RUNTIME_ERROR, WRONG_OUTPUT
from leap_gym.sandbox import SandboxLimits, WorkerPool
from leap_gym.tasks import load_tasks

TASKS = {t.id: t for t in load_tasks("builtin")}
languages = importlib.import_module("leap_gym.evaluation.languages")
HOOKED = any(language.name == "numba" for language in languages.LANGUAGES)
needs_hook = pytest.mark.skipif(not HOOKED, reason="leap_gym.evaluation.languages has no numba language")


def _task(task_id: str):
    return ne.simulator_task(TASKS[task_id])


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(size=1, limits=SandboxLimits(wall_time_s=60),
                    preload=["torch", "leap_gym.evaluation.languages"]) as p:
        yield p


def _run(pool: WorkerPool, task, response: str, backend: str = "cpu"):
    parsed = nk.prepare_numba(task, response)
    assert isinstance(parsed, ParsedResponse), parsed
    job = EvalJob(task=task, cuda=parsed.cuda, python=parsed.python, backend=backend, arch="sm_90")
    assert nk.is_numba_job(job)
    outcome = pool.run("leap_gym.integrations.numba_kernels:run_numba_job", job, timeout=60)
    assert outcome.ok, (outcome.failure, outcome.message, outcome.stderr_tail[-2000:])
    return outcome.value


def test_detection():
    assert nk.is_numba_response(ne.RELU)
    assert not nk.is_numba_response(TASKS["level1/relu"].reference_solutions[0])       # CUDA C++
    assert not nk.is_numba_response("```python\nimport torch\nclass ModelNew: pass\n```")
    both = "```cuda\nextern \"C\" __global__ void k() {}\n```\n" + ne.RELU
    assert not nk.is_numba_response(both)          # a cuda block makes it a CUDA response
    assert nk.is_numba_response(ParsedResponse("", "from numba import cuda\n", False, 0))


def test_format_errors_show_the_numba_layout():
    task = _task("level1/relu")
    cases = {
        ne.RELU.replace("from numba import cuda", "from numba import cuda\nimport os"): "importing `os`",
        ne.RELU.replace("@cuda.jit\n", ""): "no @cuda.jit kernel",
        ne.RELU.replace("class ModelNew", "class Model2"): "ModelNew",
        ne.RELU + "\n```python\nimport numba\n```\n": "2 ```python blocks",
        ne.RELU.replace("n = x.numel()", "n = x.numpy()"): "numpy",
    }
    for response, expected in cases.items():
        result = nk.prepare_numba(task, response)
        assert result.status == FORMAT_ERROR and expected in result.message, result.message
    assert nk.kernel_names(nk.parse_numba_response(ne.SOFTMAX).python) == ["softmax_rows_kernel"]


@pytest.mark.parametrize("task_id", sorted(ne.NUMBA_RESPONSES))
def test_numba_responses_correct_in_simulator(pool, task_id):
    result = _run(pool, _task(task_id), ne.NUMBA_RESPONSES[task_id])
    assert result.status == CORRECT, (result.message, result.errors)
    assert result.trials == 3 and sum(result.launches.values()) >= 3


def test_broken_numba_kernels(pool):
    task = _task("level1/relu")
    oob = _run(pool, task, ne.BROKEN_RELU)
    assert oob.status == RUNTIME_ERROR and oob.detail == "out_of_bounds"
    assert "relu_kernel" in "\n".join(oob.errors) and "out of bounds" in oob.message
    wrong = _run(pool, task, ne.WRONG_RELU)
    assert wrong.status == WRONG_OUTPUT and wrong.mismatch is not None and wrong.mismatch.max_abs_error > 0
    torch_op = _run(pool, task, ne.RELU.replace("y = torch.empty_like(x)", "y = torch.relu(x)"))
    assert torch_op.status == RUNTIME_ERROR and torch_op.detail == "torch_op_in_forward"
    unlaunched = _run(pool, task, ne.RELU.replace("relu_kernel[(n + 63) // 64, 64](x.view(-1), y.view(-1), n)",
                                                  "pass"))
    assert unlaunched.status == WRONG_OUTPUT and unlaunched.detail == "kernel_not_launched"


def test_compile_only_backend_defines_kernels(pool):
    result = _run(pool, _task("level1/relu"), ne.RELU, backend="compile-only")
    assert result.status == COMPILED and "1 Numba kernel" in result.message


@needs_hook
def test_evaluate_and_env_judge_numba_like_cuda():
    task = _task("level1/add")
    assert leap_gym.evaluate(task, ne.ADD, backend="cpu").status == CORRECT
    assert leap_gym.evaluate(task, "```python\nimport numba\n```", backend="cpu").status == FORMAT_ERROR
    import gymnasium as gym

    from leap_gym.integrations.wrappers import KernelLanguageWrapper

    env = KernelLanguageWrapper(gym.make("KernelDebugEnv-v0", tasks=[_task("level1/relu")], backend="cpu",
                                         max_turns=2), language="numba")
    prompt, _ = env.reset(seed=0)
    assert "@cuda.jit" in prompt
    obs, reward, terminated, truncated, info = env.step(ne.BROKEN_RELU)
    assert obs.startswith("RUNTIME_ERROR") and reward == 0.0 and not terminated
    obs, reward, terminated, truncated, info = env.step(ne.RELU)
    assert obs.startswith("CORRECT") and reward == 1.0 and terminated


@pytest.mark.gpu
def test_numba_on_the_cuda_backend():
    from leap_gym.backends.base import get_backend

    available = get_backend("cuda").availability()
    if not available.ok:
        pytest.skip(f"the cuda backend is unavailable here: {available.reason}")
    limits = SandboxLimits(wall_time_s=120, address_space_bytes=None)
    with WorkerPool(size=1, limits=limits, preload=["torch", "leap_gym.evaluation.languages"]) as gpu_pool:
        results = {tid: _run(gpu_pool, TASKS[tid].with_size("gpu"), ne.NUMBA_RESPONSES[tid], backend="cuda")
                   for tid in ("level1/relu", "level1/softmax")}
    if any(r.detail == "numba_unavailable" for r in results.values()):
        pytest.skip(f"numba cannot compile for this GPU: {results['level1/relu'].message}")
    assert all(r.status == CORRECT for r in results.values()), {k: r.message for k, r in results.items()}
    assert results["level1/relu"].resources["relu_kernel"].registers > 0


def test_examples_doctest():
    import doctest

    assert doctest.testmod(ne, raise_on_error=False).failed == 0
