"""KernelBench-style answers (a ModelNew built with load_inline) judged like native ones, and the
#include rule. The answers and task files are written here in KernelBench's format."""

import pytest
import torch

import leap_gym
from leap_gym.backends.includes import RULE, find_include_violations
from leap_gym.backends.nvrtc import compile_cuda, include_dirs
from leap_gym.kernelbench import convert_answer
from leap_gym.kernelbench.runtime import C_HELPERS
from leap_gym.tasks import load_tasks

ADD_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b

size = 1000

def get_inputs():
    return [torch.randn(4, size).cuda(), torch.randn(4, size).cuda()]

def get_init_inputs():
    return []
'''

ROW_SUM_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)

rows = 48
cols = 300

def get_inputs():
    return [torch.randn(rows, cols)]

def get_init_inputs():
    return []
'''

ADD_ANSWER = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void vector_add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}

torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
    auto n = a.numel();
    auto out = torch::empty_like(a);
    const int threads = 128;
    const int blocks = (n + threads - 1) / threads;
    vector_add_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

add_cpp = "torch::Tensor vector_add(torch::Tensor a, torch::Tensor b);"

vector_add = load_inline(
    name="vector_add",
    cpp_sources=add_cpp,
    cuda_sources=add_source,
    functions=["vector_add"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.vector_add = vector_add

    def forward(self, a, b):
        return self.vector_add.vector_add(a, b)
'''

ROW_SUM_ANSWER = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)
constexpr int THREADS = 128;

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    extern __shared__ float partial[];
    int row = blockIdx.x;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += x[row * cols + c];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = partial[0];
}

torch::Tensor row_sum(torch::Tensor x) {
    CHECK_INPUT(x);
    const int rows = x.size(0);
    const int cols = x.size(1);
    auto out = torch::empty({rows}, x.options());
    dim3 grid(rows);
    dim3 block(THREADS);
    size_t shared = THREADS * sizeof(float);
    row_sum_kernel<<<grid, block, shared>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

row_sum = load_inline(name="row_sum", cpp_sources="torch::Tensor row_sum(torch::Tensor x);",
                      cuda_sources=source, functions=["row_sum"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = row_sum

    def forward(self, x):
        return self.ext.row_sum(x)
'''

TEMPLATED_HOST = '''
template <typename scalar_t>
__global__ void vector_add_kernel(const scalar_t* a, const scalar_t* b, scalar_t* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "vector_add", ([&] {
        vector_add_kernel<scalar_t><<<(n + 255) / 256, 256>>>(
            a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    }));
    return out;
}
'''


def fenced(python: str) -> str:
    return f"Here is the optimized model.\n\n```python\n{python}\n```\n"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kb") / "level1"
    folder.mkdir()
    (folder / "1_add.py").write_text(ADD_TASK)
    (folder / "2_row_sum.py").write_text(ROW_SUM_TASK)
    return {t.name: t for t in load_tasks(folder)}


def judge(task, response):
    return leap_gym.evaluate(task, response, backend="cpu", timeout_s=120)


def test_load_inline_answer_is_correct_on_cpu(tasks):
    result = judge(tasks["add"], fenced(ADD_ANSWER))
    assert result.status == "CORRECT", result.message
    assert result.answer_format == "load_inline"
    assert result.launches == {"vector_add_kernel": 4}  # counted like native launches
    assert result.message.count("load_inline") == 1  # the format note, once
    assert "vector_add_kernel" in result.resources  # NVRTC's figures, as for a native answer


def test_broken_load_inline_answer_gets_a_useful_message(tasks):
    wrong = judge(tasks["add"], fenced(ADD_ANSWER.replace("a[i] + b[i]", "a[i] * b[i]")))
    assert wrong.status == "WRONG_OUTPUT" and wrong.mismatch is not None
    assert "values differ" in wrong.message and wrong.mismatch.samples
    past_end = judge(tasks["add"], fenced(ADD_ANSWER.replace("if (i < n)", "if (i <= n)")))
    assert past_end.status == "RUNTIME_ERROR" and past_end.detail == "out_of_bounds"
    assert "vector_add_kernel" in past_end.message and "out[i] = a[i] + b[i];" in past_end.message
    syntax = judge(tasks["add"], fenced(ADD_ANSWER.replace("a[i] + b[i];", "a[i] + b[i]")))
    assert syntax.status == "COMPILE_ERROR" and syntax.diagnostics[0].message


def test_host_code_macros_dim3_options_and_shared_memory(tasks):
    result = judge(tasks["row_sum"], fenced(ROW_SUM_ANSWER))
    assert result.status == "CORRECT", result.message + "\n" + "\n".join(result.errors)
    converted = convert_answer(ROW_SUM_ANSWER)
    assert 'extern "C" __global__ void row_sum_kernel' in converted.cuda
    assert "torch/extension.h" not in converted.cuda
    assert "shared_mem=int(shared)" in converted.python and "kb_check(" in converted.python


def test_templated_kernel_in_a_dispatch_macro_is_judged(tasks):
    answer = ADD_ANSWER.split('add_source = """')[0] + 'add_source = """\n#include <torch/extension.h>\n' + \
        TEMPLATED_HOST + '"""' + ADD_ANSWER.split('"""', 2)[2]
    result = judge(tasks["add"], fenced(answer))
    assert result.status == "CORRECT", result.message
    assert result.launches == {"vector_add_kernel__float": 4}


def test_unsupported_host_code_names_the_construct_not_the_format(tasks):
    answer = ADD_ANSWER.replace("return out;", "cudaMemcpy(out.data_ptr<float>(), a.data_ptr<float>(), 4, "
                                                 "cudaMemcpyDeviceToDevice);\n    return out;")
    result = judge(tasks["add"], fenced(answer))
    assert result.status == "RUNTIME_ERROR" and result.detail == "unsupported", result.message
    assert "cudaMemcpy" in result.message and "format" not in result.message.split(";")[0]


def test_torch_compute_in_host_code_meets_the_torch_compute_rule(tasks):
    result = judge(tasks["add"], fenced(ADD_ANSWER.replace("return out;", "return torch::relu(out);")))
    assert result.status == "RUNTIME_ERROR" and result.detail == "torch_op_in_forward", result.message
    assert "'relu'" in result.message


@pytest.mark.parametrize("change, status, fragment", [
    (("import torch\n", "import torch\nimport os\n"), "FORMAT_ERROR", "`import os` is not allowed"),
    (("cuda_sources=add_source", "cuda_sources=open('/etc/hostname').read()"), "FORMAT_ERROR",
     "string constants of the block"),
    (("auto n = a.numel();", "auto n = a.numel(); auto probe = eval;"), "COMPILE_ERROR",
     "identifier 'eval' is undefined"),
    (("return self.vector_add.vector_add(a, b)", "return self.vector_add.vector_add(a, b) * 2"), "RUNTIME_ERROR",
     "torch operator"),
    (("#include <cuda_runtime.h>", '#include "/etc/passwd"'), "COMPILE_ERROR", "absolute path"),
    (("#include <cuda_runtime.h>", "#include <torch/../../../../etc/passwd>"), "COMPILE_ERROR", "'..'"),
])
def test_every_defence_applies_to_load_inline_answers(tasks, change, status, fragment):
    result = judge(tasks["add"], fenced(ADD_ANSWER.replace(*change)))
    assert result.status == status, result.message
    assert fragment in result.message


def test_c_arithmetic_helpers_truncate_like_c():
    namespace = {}
    exec("import torch\n" + C_HELPERS, namespace)
    kb_div, kb_mod = namespace["kb_div"], namespace["kb_mod"]
    assert (kb_div(-7, 2), kb_mod(-7, 2), kb_div(7, -2), kb_div(7, 2)) == (-3, -1, -3, 3)
    assert kb_div(7.0, 2) == 3.5


def test_include_rule_finds_every_spelling():
    source = "\n".join([
        "#include <cuda_fp16.h>",
        '#include "/etc/passwd"',
        "# /* comment */ include <../../etc/passwd>",
        "%:include <stdio.h>",
        '#define HOSTFILE "/etc/hosts"',
        "#include HOSTFILE",
        "#inc\\",
        'lude "/etc/shadow"',
        '#if __has_include("/etc/passwd")',
        "#endif",
        "#import <cuda_fp16.h>",
        '#include "cuda_bf16.h"',
    ])
    lines = [(v.line, v.why) for v in find_include_violations(source, include_dirs())]
    assert [line for line, _ in lines] == [2, 3, 4, 6, 7, 9, 11]
    assert "absolute path" in lines[0][1] and "'..'" in lines[1][1] and "not one of the CUDA" in lines[2][1]
    assert "computed" in lines[3][1]


def test_host_include_is_a_compile_error_naming_the_rule(tasks):
    assert include_dirs(), "the CUDA headers are needed for the include rule"
    kernel = 'extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'
    refused = compile_cuda('#include "/etc/passwd"\n' + kernel, use_disk_cache=False)
    assert not refused.ok and refused.include_refused
    assert refused.errors[0].line == 1 and RULE in refused.errors[0].message
    assert compile_cuda("#include <cuda_fp16.h>\n" + kernel, use_disk_cache=False).ok
    response = ('```cuda\n#include "/etc/passwd"\nextern "C" __global__ void add(const float* a, const float* b, '
                'float* c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }'
                '\n```\n```python\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n'
                '    def forward(self, a, b):\n        c = torch.empty_like(a)\n        n = a.numel()\n'
                '        kernels.add(((n + 255) // 256,), (256,), a, b, c, n)\n        return c\n```')
    result = judge(tasks["add"], response)
    assert result.status == "COMPILE_ERROR" and result.detail == "include_rule"
    assert "#include only the CUDA runtime's headers" in result.message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and nvcc for a real load_inline build")
def test_load_inline_answer_really_built_on_cuda(tasks):
    result = leap_gym.evaluate(tasks["add"], fenced(ADD_ANSWER), backend="cuda", timeout_s=120)
    assert result.status == "CORRECT", result.message
    assert result.build_time_s > 0 and "extension build" in result.message


@pytest.mark.parametrize("name, change", [
    ("whitespace run", ("__global__ void", " " * 200_000 + "__global__ void")),
    ("huge host header", ("torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {", "a" * 200_000 + " {")),
    ("macro bomb", ("#include <cuda_runtime.h>", "#define A B B B B\n#define B A A A A")),
    ("deep parentheses", ("auto n = a.numel();", "auto n = " + "(" * 5000 + "1" + ")" * 5000 + ";")),
    ("unclosed template", ("auto n = a.numel();", "std::vector<int n = 5;")),
    ("unterminated for", ("auto n = a.numel();", "for (int i = 0; i < 3; i++")),
])
def test_hostile_host_code_is_refused_quickly(name, change):
    import time

    answer = ADD_ANSWER.replace(*change)
    if name == "macro bomb":
        answer = answer.replace("auto n = a.numel();", "auto n = A;")
    start = time.perf_counter()
    converted = convert_answer(answer)
    assert time.perf_counter() - start < 5, name
    if name != "whitespace run":
        assert converted.error, name


def test_cli_converts_an_answer_to_the_native_format(tmp_path, capsys):
    from leap_gym.cli import main
    from leap_gym.evaluation.parse import parse_response

    path = tmp_path / "answer.py"
    path.write_text(ADD_ANSWER)
    assert main(["convert", str(path)]) == 0
    parsed = parse_response(capsys.readouterr().out)
    assert 'extern "C" __global__ void vector_add_kernel' in parsed.cuda
    assert "kernels.vector_add_kernel(" in parsed.python
    path.write_text(ADD_ANSWER.replace("cuda_sources=add_source", "cuda_sources=add_source.upper()"))
    assert main(["convert", str(path)]) == 1
    assert "string constants of the block" in capsys.readouterr().err
