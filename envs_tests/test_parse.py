"""Response parsing: a table of real-world response variants and their expected outcome."""

from __future__ import annotations

import pytest

from leap_gym.evaluation.parse import (
    MAX_RESPONSE_CHARS,
    FormatError,
    ParsedResponse,
    expected_layout,
    has_extern_c_kernel,
    parse_response,
)

KERNEL = '''extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}'''

MODEL = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        kernels.relu_kernel(((n + 255) // 256,), (256,), x, y, n)
        return y'''

WRAPPER = MODEL.replace("class ModelNew", "# the task's default wrapper\nclass ModelNew")

DRAFT_KERNEL = 'extern "C" __global__ void draft(float* y) { y[0] = 1.0f; }'
NO_EXTERN = KERNEL.replace('extern "C" ', "")
EXTERN_BLOCK = 'extern "C" {\n' + NO_EXTERN + "\n}"


def cu(tag: str = "cuda", body: str = KERNEL, fence: str = "```") -> str:
    return f"{fence}{tag}\n{body}\n{fence}"


def py(tag: str = "python", body: str = MODEL, fence: str = "```") -> str:
    return f"{fence}{tag}\n{body}\n{fence}"


BOTH = f"{cu()}\n\n{py()}\n"
INDENTED = "\n".join("    " + line if line else "" for line in f"{cu()}\n\n{py()}".splitlines())

OK = "ok"
WRAP = "wrapper"  # accepted in the short form: the task's wrapper is the python block

# (id, response, task wrapper, expected): expected is OK, WRAP, or a fragment of the FormatError reason.
CASES = [
    ("canonical", BOTH, "", OK),
    ("tag cu", f"{cu('cu')}\n{py()}", "", OK),
    ("tag cpp", f"{cu('cpp')}\n{py()}", "", OK),
    ("tag c++", f"{cu('c++')}\n{py()}", "", OK),
    ("tag c", f"{cu('c')}\n{py()}", "", OK),
    ("tag CUDA uppercase, trailing spaces", cu("CUDA   ") + "\n" + py("Python \t"), "", OK),
    ("tag py", f"{cu()}\n{py('py')}", "", OK),
    ("tag python3", f"{cu()}\n{py('python3')}", "", OK),
    ("tag with title", cu('cuda title="relu.cu"') + "\n" + py("python {.numberLines}"), "", OK),
    ("space before tag", f"{cu(' cuda')}\n{py(' python')}", "", OK),
    ("untagged, sniffed", f"{cu('')}\n\n{py('')}", "", OK),
    ("untagged python with only import torch", f"{cu()}\n{py('', MODEL)}", "", OK),
    ("CRLF line endings", BOTH.replace("\n", "\r\n"), "", OK),
    ("old Mac CR line endings", BOTH.replace("\n", "\r"), "", OK),
    ("byte-order mark", "\ufeff" + BOTH, "", OK),
    ("leading and trailing prose with inline code",
     f"Here is my plan: use `fmaxf` and a ```cuda``` block.\n\n{BOTH}\nThe kernel uses `n` threads. Done!", "", OK),
    ("nested backticks in prose", f"Use ``a`b`` or ```` ``` ```` fences.\n{BOTH}", "", OK),
    ("python block before cuda block", f"{py()}\n\nand the kernel:\n\n{cu()}", "", OK),
    ("tilde fences", f"{cu(fence='~~~')}\n{py(fence='~~~')}", "", OK),
    ("indented fences in a list", "1. Kernel:\n\n" + INDENTED, "", OK),
    ("unterminated final fence", f"{cu()}\n{py()[:-3]}", "", OK),
    ("unterminated cuda fence only, wrapper", f"Answer:\n```cuda\n{KERNEL}\n", WRAPPER, WRAP),
    ("forgotten closing fence before the python block", "```cuda\n" + KERNEL + "\n" + py(), "", OK),
    ("forgotten closing fence, python first", "```python\n" + MODEL + "\n" + cu(), "", OK),
    ("backticks inside a cuda string", cu(body=KERNEL + '\n__device__ const char* fence = "```";') + "\n" + py(),
     "", OK),
    ("four-backtick fence holding a ``` line", cu(body=KERNEL + "\n```\n// still cuda", fence="````") + "\n" + py(),
     "", OK),
    ("other languages ignored", f"```bash\npython run.py\n```\n{BOTH}\n```text\noutput: 1.0\n```", "", OK),
    ("untagged output block ignored", f"{BOTH}\n```\nrelu took 0.1 ms\n```", "", OK),
    ("think section with drafts ignored",
     f"<think>\nMaybe:\n{cu(body=DRAFT_KERNEL)}\nor\n{cu(body=DRAFT_KERNEL)}\n{py()}\n</think>\n\n{BOTH}", "", OK),
    ("thinking tag variant", f"<thinking>{cu(body=DRAFT_KERNEL)}</thinking>\n{BOTH}", "", OK),
    ("think tags inline and upper case", f"<THINK>draft {cu(body=DRAFT_KERNEL)}</Think> {BOTH}", "", OK),
    ("stray </think> from a template-opened section",
     f"Let me draft:\n{cu(body=DRAFT_KERNEL)}\n</think>\n\n{BOTH}", "", OK),
    ("extern C block", cu(body=EXTERN_BLOCK) + "\n" + py(), "", OK),
    ("launch bounds", f"{cu(body=KERNEL.replace('__global__', '__global__ __launch_bounds__(256)'))}\n{py()}", "", OK),
    ("short form: cuda only, task with wrapper", f"Here you go.\n{cu()}", WRAPPER, WRAP),
    ("short form: own python block wins", BOTH, WRAPPER, OK),
    ("cuda only, task without wrapper", cu(), "", "no ```python block found, and this task has no default wrapper"),
    ("no code block at all", "I think the answer is to use a for loop.", "", "no fenced code block"),
    ("empty response", "", WRAPPER, "no fenced code block"),
    ("only a python block", py(), WRAPPER, "no ```cuda block"),
    ("load_inline program", py(body=MODEL + '\nsrc = "__global__ void k() {}"\nmod = load_inline(name="x")'), "",
     "not in a load_inline string"),
    ("kernel in a bash block", f"```bash\n{KERNEL}\n```", WRAPPER, "blocks tagged bash were ignored"),
    ("two cuda blocks", f"{cu()}\n{cu('cpp', DRAFT_KERNEL)}\n{py()}", "", "found 2 ```cuda blocks"),
    ("two python blocks", f"{BOTH}\nUsage:\n{py(body='import torch' + chr(10) + 'm = ModelNew()')}", "",
     "found 2 ```python blocks"),
    ("python without ModelNew", f"{cu()}\n{py(body=MODEL.replace('ModelNew', 'Model'))}", "",
     "does not define `class ModelNew"),
    ("python syntax error", f"{cu()}\n{py(body=MODEL.replace('return y', 'return y)'))}", "",
     "does not parse: SyntaxError"),
    ("python indentation error", f"{cu()}\n{py(body=MODEL + chr(10) + '  x = 1')}", "", "does not parse"),
    ("cuda without __global__", f"{cu(body='__device__ float f(float x) { return x; }')}\n{py()}", "",
     "it has no __global__ kernel"),
    ("cuda __global__ without extern C", cu(body=NO_EXTERN) + "\n" + py(), "",
     "not declared extern \"C\""),
    ("extern C kernel only inside a comment",
     f"{cu(body='// ' + KERNEL.splitlines()[0] + chr(10) + '__global__ void k() {}')}\n{py()}", "",
     "not declared extern \"C\""),
    ("unclosed think holding the answer", f"<think>\nI will write\n{BOTH}", "", "never closed"),
    ("closed think, no answer after it", f"<think>\n{BOTH}\n</think>\nSee above.", "", "no fenced code block"),
    ("response too long", BOTH + "x" * MAX_RESPONSE_CHARS, "", "response too long"),
    ("NUL in the cuda block", f"{cu(body=KERNEL + chr(0))}\n{py()}", "", "NUL character"),
]


@pytest.mark.parametrize("response,wrapper,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_response_variants(response: str, wrapper: str, expected: str):
    if expected in (OK, WRAP):
        parsed = parse_response(response, wrapper=wrapper)
        assert isinstance(parsed, ParsedResponse)
        assert "relu_kernel" in parsed.cuda and "draft" not in parsed.cuda
        assert parsed.used_default_wrapper == (expected == WRAP)
        assert parsed.python == (wrapper if expected == WRAP else parsed.python)
        assert "class ModelNew" in parsed.python and "\r" not in parsed.cuda + parsed.python
        compile(parsed.python, "python block", "exec")
        if expected == OK:
            assert parsed.python_first_line > 0
    else:
        with pytest.raises(FormatError) as info:
            parse_response(response, wrapper=wrapper)
        assert expected in info.value.reason
        assert "```cuda" in str(info.value) and "```python" in str(info.value)  # the layout is shown


def test_at_least_25_variants():
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)


def test_cuda_first_line_maps_back_to_the_response():
    response = "Intro line\n\n```cuda\n" + KERNEL + "\n```\n" + py()
    parsed = parse_response(response)
    lines = response.splitlines()
    assert lines[parsed.cuda_first_line - 1] == parsed.cuda.splitlines()[0]
    assert lines[parsed.python_first_line - 1] == parsed.python.splitlines()[0]
    # the same with CRLF, a think section spanning lines before it, and an indented fence
    response2 = "<think>\na\nb\n</think>\r\n  ```cuda\r\n  " + KERNEL.replace("\n", "\r\n  ") + "\r\n  ```\r\n" + py()
    parsed2 = parse_response(response2)
    assert parsed2.cuda_first_line == 6 and parsed2.cuda == KERNEL + "\n"


def test_indented_python_block_is_dedented():
    parsed = parse_response(INDENTED)
    assert parsed.python.startswith("import torch") and parsed.cuda.startswith('extern "C"')


def test_syntax_error_names_block_and_response_lines():
    response = f"{cu()}\n{py(body=MODEL.replace('return y', 'return y)'))}"
    with pytest.raises(FormatError) as info:
        parse_response(response)
    bad = response.splitlines().index("        return y)") + 1
    assert info.value.line == bad and f"response line {bad}" in info.value.reason
    assert "return y)" in info.value.reason


def test_format_error_fields():
    with pytest.raises(FormatError) as info:
        parse_response("no code here", wrapper=WRAPPER)
    err = info.value
    assert isinstance(err, ValueError) and err.message == str(err) and err.reason in err.message
    assert "default wrapper" in err.message  # the short form is mentioned when the task has a wrapper
    assert "default wrapper" not in expected_layout(False) and "default wrapper" in expected_layout(True)
    assert FormatError("x", expected="").message == "x"


def test_two_blocks_error_names_their_lines():
    response = f"{cu()}\n\n{cu('cu', DRAFT_KERNEL)}\n{py()}"
    with pytest.raises(FormatError, match=r"response lines 1 and 8"):
        parse_response(response)


def test_bytes_and_non_text_input():
    assert parse_response(BOTH.encode()).cuda.startswith('extern "C"')
    with pytest.raises(FormatError, match="must be text"):
        parse_response(None)  # type: ignore[arg-type]


def test_lone_surrogates_do_not_escape():
    parsed = parse_response(BOTH.replace("int n) {", "int n) { // \ud800"))
    assert "?" in parsed.cuda
    with pytest.raises(FormatError):
        parse_response(f"{cu()}\n{py(body=MODEL + chr(10) + 'x = 1 # ' + chr(0xDC80))}" + "\x00")


@pytest.mark.parametrize("source,expected", [
    (KERNEL, True),
    ('extern "C" {\n__global__ void k(int* x) {}\n}', True),
    ('extern "C" __global__ void __launch_bounds__(128) k(int* x) {}', True),
    ('extern"C"\n__global__ void k() {}', True),
    ('__global__ void k() {}', False),
    ('extern "C" __device__ int f() { return 1; }\n__global__ void k() {}', False),
    ('extern "C" { __device__ int f(); }\n__global__ void k() {}', False),
    ('/* extern "C" */ __global__ void k() {}', False),
    ('const char* s = "extern \\"C\\" __global__";', False),
    ('namespace { extern "C" { struct S { int a; }; __global__ void k() {} } }', True),
], ids=lambda v: v if isinstance(v, bool) else None)
def test_extern_c_kernel_detection(source: str, expected: bool):
    assert has_extern_c_kernel(source) is expected
