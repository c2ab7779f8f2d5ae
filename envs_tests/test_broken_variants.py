"""Broken variants of real reference solutions on the `cpu` backend: each gives the status a GPU user
would expect and feedback that points at the problem.

The variants are made mechanically from built-in reference solutions: an off-by-one bound, a wrong
index, an infinite loop, a block too large for the GPU, a tensor of the wrong dtype, and (for kernels
that need it) a missing ``__syncthreads``, run with the threads of a block in a shuffled order.
"""

from __future__ import annotations

import ast
import re

import pytest

from leap_gym.evaluation.evaluator import Evaluator
from leap_gym.evaluation.feedback import render_feedback
from leap_gym.evaluation.parse import parse_response
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.tasks import load_tasks

TASKS = ["level1/relu", "level1/add", "level1/mul", "level1/sigmoid", "level1/tanh", "level1/gelu_tanh",
         "level1/silu", "level1/leaky_relu", "level1/softplus", "level1/elu", "level1/hardtanh", "level1/clamp"]
SYNC_TASKS = ["level1/softmax", "level1/sum_dim", "level1/layernorm", "level1/matmul", "level1/transpose"]


def _launch_calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "kernels"]


def _with_python(response: str, wrapper: str, edit) -> str:
    parsed = parse_response(response, wrapper=wrapper)
    tree = ast.parse(parsed.python)
    edit(_launch_calls(tree)[0])
    return f"```cuda\n{parsed.cuda}```\n\n```python\n{ast.unparse(tree)}\n```\n"


def _with_cuda(response: str, wrapper: str, edit) -> str | None:
    parsed = parse_response(response, wrapper=wrapper)
    cuda = edit(parsed.cuda)
    if cuda == parsed.cuda:
        return None
    return f"```cuda\n{cuda}```\n\n```python\n{parsed.python}```\n"


def off_by_one(cuda: str) -> str:
    return re.sub(r"(\b\w+)\s*<\s*(n|numel|N|size|total)\b", r"\1 <= \2", cuda, count=1)


def wrong_index(cuda: str) -> str:
    return re.sub(r"blockIdx\.x\s*\*\s*blockDim\.x\s*\+\s*threadIdx\.x", "threadIdx.x", cuda, count=1)


def infinite_loop(cuda: str) -> str:
    return re.sub(r"(__global__[^{]*\{)", r"\1\n    while (true) { }", cuda, count=1)


def block_too_large(call: ast.Call) -> None:
    call.args[1] = ast.Constant(2048)


def wrong_dtype(call: ast.Call) -> None:
    first = next(i for i, a in enumerate(call.args[2:], 2) if isinstance(a, ast.Name))
    call.args[first] = ast.Call(ast.Attribute(call.args[first], "double", ast.Load()), [], [])


# variant -> (how to make it, expected status, detail, phrase the feedback must hold)
VARIANTS = {
    "off_by_one": (lambda r, w: _with_cuda(r, w, off_by_one), "RUNTIME_ERROR", "out_of_bounds", "out-of-bounds"),
    "wrong_index": (lambda r, w: _with_cuda(r, w, wrong_index), "WRONG_OUTPUT", None, "WRONG_OUTPUT"),
    "infinite_loop": (lambda r, w: _with_cuda(r, w, infinite_loop), "TIMEOUT", "timeout", "infinite loop"),
    "block_too_large": (lambda r, w: _with_python(r, w, block_too_large), "RUNTIME_ERROR", "launch",
                        "invalid configuration argument"),
    "wrong_dtype": (lambda r, w: _with_python(r, w, wrong_dtype), "RUNTIME_ERROR", "launch", "got float64"),
}


@pytest.fixture(scope="module")
def results():
    tasks = {t.id: t.with_size("cpu") for t in load_tasks(TASKS + SYNC_TASKS)}
    jobs = []
    for task_id in TASKS:
        task = tasks[task_id]
        for name, (make, status, detail, phrase) in VARIANTS.items():
            response = make(task.reference_solutions[0], task.wrapper)
            if response is not None:
                jobs.append((task_id, name, response, status, detail, phrase))
    with Evaluator(EvalConfig(backend="cpu", timeout_s=10, workers=2)) as evaluator:
        futures = [(job, evaluator.submit(tasks[job[0]], job[2])) for job in jobs]
        out = [(job, future.result()) for job, future in futures]
    with Evaluator(EvalConfig(backend="cpu", timeout_s=60, workers=2, shuffle_threads=True)) as evaluator:
        for task_id in SYNC_TASKS:
            response = _with_cuda(tasks[task_id].reference_solutions[0], tasks[task_id].wrapper,
                                  lambda c: c.replace("__syncthreads();", ""))
            out.append(((task_id, "missing_syncthreads", response, "WRONG_OUTPUT", None, "WRONG_OUTPUT"),
                        evaluator.evaluate(tasks[task_id], response)))
    return out


def test_each_variant_applies_to_at_least_ten_tasks(results):
    for name in VARIANTS:
        covered = {job[0] for job, _ in results if job[1] == name}
        assert len(covered) >= 10, (name, sorted(covered))


def test_each_variant_gets_its_status_and_feedback_pointing_at_the_problem(results):
    failures = []
    for (task_id, name, _, status, detail, phrase), result in results:
        feedback = render_feedback(result, 1, 4, token_budget=1024)
        if result.status != status or (detail and result.detail != detail) or phrase not in feedback:
            failures.append(f"{task_id} {name}: {result.status}/{result.detail}: {feedback[:300]!r}")
    assert not failures, "\n".join(failures)


def test_out_of_bounds_feedback_names_the_kernel_and_index(results):
    with_line = 0
    off_by_one = [(job, result) for job, result in results if job[1] == "off_by_one"]
    for (task_id, _, response, *_), result in off_by_one:
        kernel = re.search(r"__global__\s+void\s+(\w+)", response).group(1)
        assert kernel in result.message and "element" in result.message, (task_id, result.message)
        with_line += " line " in result.message
    assert with_line >= 1, [r.message for _, r in off_by_one]  # the line is named where the backend can tell
