"""Property-based fuzzing of the parser and the static check: no exception but FormatError escapes."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leap_gym.evaluation.parse import MAX_RESPONSE_CHARS, FormatError, ParsedResponse, parse_response
from leap_gym.evaluation.static_check import check_python_block

WRAPPER = ("import torch\nimport torch.nn as nn\n\n"
           "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FRAGMENTS = [
    "```", "```cuda", "```cu", "```cpp", "```python", "```py", "````", "~~~", "~~~cuda", "  ```python  ", "    ```",
    "```bash", "```cuda``` inline", "`", "``", "<think>", "</think>", "<thinking>", "</THINK>", "\r\n", "\r", "\n",
    "\t", " ", "\x00", "\ufeff", "\ud800", "é", "𝔘",
    'extern "C" __global__ void k(float* x, int n) { if (n) x[0] = 1.0f; }', 'extern "C" {', "}", "{", ";",
    "__global__ void g() {}", "/*", "*/", "//", '"', "'", "\\", "#include <cuda_fp16.h>",
    "import torch", "import torch.nn as nn", "import os", "class ModelNew(nn.Module):", "    def forward(self, x):",
    "        return x", "        kernels.k((1,), (1,), x, 1)", "eval('1')", "x.__class__", "global g", "(", ")",
    "lambda: 0", "def f(:", "if 1:", "        ", "torch.cuda.Stream()", "self = 1", "input()",
]

CUDA_BODY = 'extern "C" __global__ void k(float* x, int n) {\n    if (n) x[0] = 1.0f;\n}'
BLOCKS = [  # whole blocks, so that the soup also reaches the accepting paths
    f"```cuda\n{CUDA_BODY}\n```", f"~~~cu\n{CUDA_BODY}\n~~~", f"```\n{CUDA_BODY}\n```",
    f"  ```c++\n  {CUDA_BODY}\n  ```",
    f"```python\n{WRAPPER}```", f"```py\n{WRAPPER}\n```", f"```\n{WRAPPER}```",
    f"<think>```cuda\n{CUDA_BODY}\n```</think>",
]

fence_soup = st.lists(st.sampled_from(FRAGMENTS) | st.sampled_from(BLOCKS) | st.text(max_size=20), max_size=40).flatmap(
    lambda parts: st.lists(st.sampled_from(["", "\n", " ", "\n\n"]), min_size=len(parts), max_size=len(parts))
    .map(lambda seps: "".join(p + s for p, s in zip(parts, seps))))

wrappers = st.sampled_from(["", WRAPPER])


def outcome(text, wrapper: str = "") -> ParsedResponse | FormatError:
    """Parse (and statically check what parsed); any exception but FormatError fails the test."""
    try:
        parsed = parse_response(text, wrapper=wrapper)
    except FormatError as exc:
        assert exc.reason and str(exc)
        return exc
    assert isinstance(parsed, ParsedResponse)
    assert "__global__" in parsed.cuda and "ModelNew" in parsed.python
    assert parsed.cuda_first_line >= 1 and parsed.used_default_wrapper == (parsed.python is wrapper and bool(wrapper))
    try:
        check_python_block(parsed.python)
    except FormatError:
        pass
    return parsed


@FUZZ
@given(st.text(max_size=2000), wrappers)
def test_arbitrary_text(text: str, wrapper: str):
    outcome(text, wrapper)


@FUZZ
@given(st.binary(max_size=4000), wrappers)
def test_arbitrary_bytes_decoded(data: bytes, wrapper: str):
    outcome(data.decode("utf-8", errors="replace"), wrapper)
    outcome(data.decode("latin-1"), wrapper)
    outcome(data, wrapper)  # bytes given directly are decoded by the parser


@FUZZ
@given(fence_soup, wrappers)
def test_fence_soup(text: str, wrapper: str):
    outcome(text, wrapper)


@FUZZ
@given(fence_soup)
def test_fence_soup_around_a_valid_answer(noise: str):
    answer = ('```cuda\nextern "C" __global__ void k(float* x, int n) {}\n```\n```python\n' + WRAPPER + "```\n")
    result = outcome(noise + "\n" + answer + "\n" + noise)
    if not noise.strip():
        assert isinstance(result, ParsedResponse)


@FUZZ
@given(st.text(max_size=1000) | fence_soup)
def test_static_check_on_arbitrary_source(source: str):
    try:
        check_python_block(source)
    except FormatError:
        pass


@settings(max_examples=6, deadline=None)
@given(st.integers(min_value=1 << 20, max_value=2 << 20), st.integers(0, 2**32 - 1))
def test_huge_random_inputs(size: int, seed: int):
    data = random.Random(seed).randbytes(size)
    assert isinstance(outcome(data.decode("utf-8", errors="replace")), FormatError)


@pytest.mark.parametrize("text", [
    "```cuda\n" * (MAX_RESPONSE_CHARS // 8),
    "<think>" * (MAX_RESPONSE_CHARS // 7),
    "`" * MAX_RESPONSE_CHARS,
    "```\n" + "x\n" * (MAX_RESPONSE_CHARS // 2 - 4),
    "```cuda\n" + 'extern "C" {' * (MAX_RESPONSE_CHARS // 13) + "\n```",
    "```cuda\n" + "{" * (MAX_RESPONSE_CHARS // 2) + "__global__" * (MAX_RESPONSE_CHARS // 40) + "\n```",
    "```cuda\n" + '"' * (MAX_RESPONSE_CHARS - 20) + "\n```",
    "```cuda\nextern \"C\" __global__ void k() {}\n```\n```python\nclass ModelNew: pass\nx = "
    + "-" * (MAX_RESPONSE_CHARS - 100) + "1\n```",
    "```cuda\nextern \"C\" __global__ void k() {}\n```\n```python\nclass ModelNew: pass\nx = a"
    + ".b" * (MAX_RESPONSE_CHARS // 2 - 60) + "\n```",
], ids=["fence lines", "think tags", "one backtick line", "long block", "extern blocks", "braces",
        "quotes", "unary nesting", "attribute chain"])
def test_adversarial_inputs_under_the_cap_are_fast(text: str):
    assert len(text) <= MAX_RESPONSE_CHARS
    start = time.perf_counter()
    outcome(text, WRAPPER)
    assert time.perf_counter() - start < 2.0


def test_one_megabyte_of_random_bytes_is_a_quick_format_error():
    data = random.Random(0).randbytes(1 << 20).decode("utf-8", errors="replace")
    start = time.perf_counter()
    with pytest.raises(FormatError, match="too long"):
        parse_response(data)
    assert time.perf_counter() - start < 1.0
    # the same amount of random text just under the cap is read in full, and is still quick
    start = time.perf_counter()
    with pytest.raises(FormatError):
        parse_response(data[:MAX_RESPONSE_CHARS])
    assert time.perf_counter() - start < 1.0
