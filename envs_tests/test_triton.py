"""Triton kernels: detection, static check, and real runs in Triton's interpreter (cpu backend).

Every run goes through a sandboxed `Evaluator` (the interpreter runs only in a worker). The
hostile Triton responses are part of the adversarial corpus (``envs_tests/adversarial/triton_*``,
run by ``test_hostile.py``); the GPU path is ``envs_tests/gpu/test_gpu_triton.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="Triton responses need triton: pip install 'leap-gym[triton]'")

import gymnasium as gym  # noqa: E402

import leap_gym  # noqa: E402
from leap_gym.evaluation import languages  # noqa: E402
from leap_gym.evaluation.evaluator import Evaluator  # noqa: E402
from leap_gym.evaluation.parse import FormatError  # noqa: E402
from leap_gym.integrations import triton_check as tc  # noqa: E402
from leap_gym.integrations.wrappers import KernelLanguageWrapper  # noqa: E402
from leap_gym.result import COMPILE_ERROR, CORRECT, FORMAT_ERROR, RUNTIME_ERROR, WRONG_OUTPUT  # noqa: E402

TASKS = {t.id: t.with_size("cpu") for t in leap_gym.load_tasks("builtin")}
WITH_TRITON = [t for t in TASKS.values() if t.triton_solutions]

RELU = '''```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
```'''

SOFTMAX_BF16 = '''```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.where(mask, tl.exp(x), 0.0)
    tl.store(y_ptr + row * cols + offsets, (e / tl.sum(e, axis=0)).to(tl.bfloat16), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
```'''

BROKEN = {
    "wrong": (RELU.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)"), WRONG_OUTPUT, "mismatch"),
    "unmasked_load": (RELU.replace("x = tl.load(x_ptr + offsets, mask=mask)", "x = tl.load(x_ptr + offsets - 3)"),
                      RUNTIME_ERROR, "out_of_bounds"),
    "unmasked_store": (RELU.replace("tl.maximum(x, 0.0), mask=mask)", "tl.maximum(x, 0.0))"),
                       RUNTIME_ERROR, "out_of_bounds"),
    "arange_not_power_of_two": (RELU.replace("tl.arange(0, BLOCK)", "tl.arange(0, 1000)"), COMPILE_ERROR, "triton"),
    "bf16_arithmetic": (SOFTMAX_BF16.replace(".to(tl.float32)", " * 1.0"), RUNTIME_ERROR, "interpreter_unsupported"),
    "libdevice": (RELU.replace("import triton.language as tl", "import triton.language as tl\n"
                               "from triton.language.extra import libdevice")
                  .replace("tl.maximum(x, 0.0)", "tl.maximum(libdevice.tanh(x) * 0.0 + x, 0.0)"),
                  RUNTIME_ERROR, "interpreter_unsupported"),
}
AUTOTUNED = RELU.replace("@triton.jit", '@triton.autotune(configs=[triton.Config({"BLOCK": 256}), '
                          'triton.Config({"BLOCK": 512})], key=["n"])\n@triton.jit').replace(
    "relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)",
    'relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)')
BROKEN["autotuned_is_fine"] = (AUTOTUNED, CORRECT, "")  # the interpreter cannot time configs: the first one runs
HEURISTIC = RELU.replace("@triton.jit", '@triton.heuristics({"EVEN": lambda args: args["n"] % 1024 == 0})\n@triton.jit') \
    .replace("n, BLOCK: tl.constexpr)", "n, EVEN: tl.constexpr, BLOCK: tl.constexpr)")
BROKEN["heuristics_are_fine"] = (HEURISTIC, CORRECT, "")
BROKEN_TASK = {"bf16_arithmetic": "level1/softmax_bf16"}


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(backend="cpu", workers=2, timeout_s=120) as ev:
        yield ev


@pytest.fixture(scope="module")
def reference_results(evaluator):
    return {(t.id, i): evaluator.submit(t, s) for t in WITH_TRITON for i, s in enumerate(t.triton_solutions)}


@pytest.fixture(scope="module")
def broken_results(evaluator):
    return {name: evaluator.submit(TASKS[BROKEN_TASK.get(name, "level1/relu")], text)
            for name, (text, _, _) in BROKEN.items()}


def test_detection_and_dispatch():
    assert tc.is_triton_response(RELU)
    assert languages.language_of_response(RELU).name == "triton"
    assert not tc.is_triton_response(TASKS["level1/relu"].reference_solutions[0])
    assert not tc.is_triton_response("```cuda\nextern \"C\" __global__ void k() {}\n```\n" + RELU)


def test_reference_solutions_cover_twenty_tasks_of_levels_one_and_two():
    assert len(WITH_TRITON) >= 20
    assert {t.level for t in WITH_TRITON} == {1, 2}
    for task in WITH_TRITON:  # task.reference_solutions stay CUDA C++
        assert all(not tc.is_triton_response(s) for s in task.reference_solutions)
        assert all(isinstance(tc.prepare_triton(task, s), leap_gym.evaluation.parse.ParsedResponse)
                   for s in task.triton_solutions)


@pytest.mark.parametrize("snippet, complaint", [
    ("triton.runtime.driver.active.synchronize()", "`triton.runtime` is not allowed"),
    ("relu_kernel.run(x, y, n, BLOCK=1024, grid=(1,), warmup=False)", "never through its attributes"),
    ("import numpy", "importing `numpy` is not allowed"),
    ("open('/etc/passwd')", "`open` is not allowed"),
    ("self.__dict__", "dunder attribute"),
    ("z = tl.core.builtins", "`tl.core.builtins` is not allowed"),
    ("z = tl.extra.pkgutil", "`tl.extra.pkgutil` is not allowed"),
])
def test_wrapper_rules_hold_for_triton_blocks(snippet, complaint):
    text = RELU.replace("        return y\n", f"        {snippet}\n        return y\n")
    with pytest.raises(FormatError, match=complaint.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        tc.parse_triton_response(text)


def test_kernel_bodies_are_confined():
    with pytest.raises(FormatError, match="`torch` is used inside @triton.jit kernel `relu_kernel`"):
        tc.parse_triton_response(RELU.replace("tl.maximum(x, 0.0)", "torch.relu(x)"))
    with pytest.raises(FormatError, match="from triton a block may take only"):
        tc.parse_triton_response(RELU.replace("import triton\n", "import triton\nfrom triton import runtime\n"))
    with pytest.raises(FormatError, match="defines no @triton.jit kernel"):
        tc.parse_triton_response(RELU.replace("@triton.jit\n", ""))
    result = languages.prepare(TASKS["level1/relu"], RELU + "\n" + RELU)
    assert result.status == FORMAT_ERROR and "ONE ```python block" in result.message


def test_a_correct_kernel_is_correct(evaluator):
    result = evaluator.evaluate(TASKS["level1/relu"], RELU)
    assert result.status == CORRECT, result.message
    assert set(result.launches) == {"relu_kernel"} and result.answer_format == "triton"


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_kernels(broken_results, name):
    _, status, detail = BROKEN[name]
    result = broken_results[name].result(timeout=300)
    assert (result.status, result.detail) == (status, detail), result.message


def test_out_of_bounds_is_caught_before_the_access_and_named(broken_results):
    message = broken_results["unmasked_load"].result(timeout=300).message
    assert "out-of-bounds tl.load in Triton kernel `relu_kernel`" in message
    assert "pointer argument `x_ptr`" in message and "offsets -3, -2, -1" in message
    assert "stopped before the access" in message
    store = broken_results["unmasked_store"].result(timeout=300).message
    assert "tl.store" in store and "`y_ptr`" in store


def test_gaps_and_compile_errors_say_what_they_are(broken_results):
    gap = broken_results["bf16_arithmetic"].result(timeout=300).message
    assert "cannot run kernel `softmax_kernel` faithfully" in gap and "not a verdict on your kernel" in gap
    error = broken_results["arange_not_power_of_two"].result(timeout=300).message
    assert "kernel `relu_kernel`, line 8" in error and "power of 2" in error


def test_bf16_loaded_and_converted_is_exact(evaluator):
    result = evaluator.evaluate(TASKS["level1/softmax_bf16"], SOFTMAX_BF16)
    assert result.status == CORRECT, result.message


@pytest.mark.parametrize("key", [(t.id, i) for t in WITH_TRITON for i in range(len(t.triton_solutions))],
                         ids=lambda k: f"{k[0]}#{k[1]}")
def test_reference_triton_solutions_are_correct(reference_results, key):
    result = reference_results[key].result(timeout=600)
    assert result.status == CORRECT, (result.detail, result.message)


BAD_KERNEL_MODULE = """import triton
import triton.language as tl


@triton.jit
def bad_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.no_such_function(offsets))
"""


def test_compile_error_names_kernel_and_line(tmp_path, monkeypatch):
    """Triton's real front end (no GPU needed up to PTX) raises; the feedback names the kernel's line."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from leap_gym.integrations.triton_kernels import _compile_error

    (tmp_path / "leap_bad_kernel.py").write_text(BAD_KERNEL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    bad_kernel = importlib.import_module("leap_bad_kernel").bad_kernel
    with pytest.raises(Exception) as info:
        triton.compile(ASTSource(bad_kernel, signature={"x_ptr": "*fp32", "BLOCK": "constexpr"},
                                 constexprs={"BLOCK": 64}), target=GPUTarget("cuda", 90, 32))
    error = _compile_error(info.value, "bad_kernel", bad_kernel, BAD_KERNEL_MODULE)
    assert "kernel `bad_kernel`, line 8: `tl.store(x_ptr + offsets, tl.no_such_function(offsets))`" in str(error)
    assert "no_such_function" in str(error)


def test_language_wrapper_asks_for_triton():
    env = KernelLanguageWrapper(gym.make("KernelDebugEnv-v0", backend="compile-only", task_ids=["level1/relu"]),
                                language="triton")
    prompt, info = env.reset(seed=0)
    assert "@triton.jit" in prompt and "kernel[grid]" in prompt and "Short form" not in prompt
    assert info["messages"][-1]["content"] == prompt
    env.close()


def test_kernelbench_folder_takes_triton_answers(tmp_path, evaluator):
    folder = tmp_path / "KernelBench" / "level1"
    folder.mkdir(parents=True)
    (folder / "19_ReLU.py").write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n"
        "batch_size = 16\ndim = 16384\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n"
        "def get_init_inputs():\n    return []\n")
    task = leap_gym.load_tasks(folder, max_numel=4096)[0]
    result = evaluator.evaluate(task, RELU)
    assert result.status == CORRECT, result.message


def test_a_worker_that_imported_triton_before_still_interprets():
    """A CUDA C++ evaluation imports triton (through torch) before any Triton response: tl.sum, tl.max still run."""
    task = TASKS["level1/softmax"]
    with Evaluator(backend="cpu", workers=1, timeout_s=120) as single:
        assert single.evaluate(task, task.reference_solutions[0]).status == CORRECT
        result = single.evaluate(task, task.triton_solutions[0])
    assert result.status == CORRECT, result.message
