"""Response parsing: the model's whole answer text to one ``cuda`` block and one ``python`` block.

The format (docs/environment/response-format.md): one fenced ```cuda block holding ``extern "C" __global__``
kernels and any ``__device__`` helpers, and one fenced ```python block defining
``class ModelNew(nn.Module)``. A task that ships a default wrapper accepts the ```cuda block alone
(the short form). Text outside the blocks is ignored.

The parser is tolerant of what LLMs really write, and strict about what is ambiguous:

- language tags ``cuda``/``cu``/``cuh``/``cpp``/``c++``/``cxx``/``cc``/``c`` (any case) mean CUDA,
  ``python``/``py``/``python3``/``py3`` mean Python; the tag's first word counts (```cuda title=k.cu``);
  a block without a tag is classified by its content (a line ``import torch``/``from torch``/
  ``class ModelNew`` means Python, else ``__global__`` means CUDA, else it is ignored, as are blocks
  tagged with any other language (bash, text, json, ...);
- backtick and tilde fences of three or more characters, indented fences (the fence's indentation
  is removed from the block's lines), trailing whitespace after tags, and an unterminated last fence
  (the block runs to the end of the text); a closing fence is a line of only the opening fence's
  character, at least as long as the opening fence, so a ```` ``` ```` inside a string is content; a
  line that would close the block but carries a cuda or python tag (a forgotten closing fence before
  the next block) closes it and opens the next;
- CRLF and CR line endings, a leading byte-order mark, leading and trailing prose;
- ``<think>``/``<thinking>`` sections are removed before blocks are looked for, so drafts inside
  them never count. A ``</think>`` with no opening tag (chat templates that put ``<think>`` in the
  prompt) makes everything before it thinking. An opening ``<think>`` that is never closed makes
  everything after it thinking: if no answer is left outside it, the error says so.

Every rejection is a `FormatError` whose text says what was wrong and shows the expected layout.
The scanner is line based with linear-time regular expressions only, and input longer than
`MAX_RESPONSE_CHARS` is refused before any scanning, so hostile input costs little.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leap_gym.pyparse import parse_python

MAX_RESPONSE_CHARS = 256 * 1024

CUDA_TAGS = frozenset({"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "cuda-c", "cuda-cpp",
                       "cuda-c++", "nvcc"})
PYTHON_TAGS = frozenset({"python", "py", "python3", "py3", "ipython", "pytorch", "torch"})

_THINK_TAG_RE = re.compile(r"<(/?)think(?:ing)?\s*>", re.IGNORECASE)
_PY_SNIFF_RE = re.compile(r"^[ \t]*(?:import[ \t]+torch\b|from[ \t]+torch\b|class[ \t]+ModelNew\b)", re.MULTILINE)
_CUDA_TOKEN_RE = re.compile(r'extern[ \t\n]*"C"|__global__|[{};]')

_LAYOUT = '''```cuda
extern "C" __global__ void my_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
```

```python
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        kernels.my_kernel(((n + 255) // 256,), (256,), x, y, n)
        return y
```'''


def expected_layout(has_wrapper: bool = False) -> str:
    """The response layout shown in every format error (and usable in prompts)."""
    text = ("Expected: one ```cuda block with your extern \"C\" __global__ kernels, then one ```python block "
            "defining class ModelNew(nn.Module) that launches them with kernels.<name>(grid, block, *args); "
            "text outside the blocks is ignored. For example:\n\n" + _LAYOUT)
    if has_wrapper:
        text += ("\n\nThis task ships a default wrapper, so the ```cuda block alone is also a complete answer "
                 "(its kernel must have the signature stated in the task).")
    return text


class FormatError(ValueError):
    """A response that does not have the expected layout; the text says what was expected.

    Attributes:
        reason: the problem in one sentence, e.g. "found 2 ```cuda blocks (response lines 3 and 20)".
        line: the response line (or Python block line, for the static check) it concerns, if any.
        message: the whole text shown to the model: `reason`, then the expected layout or rules.
    """

    def __init__(self, reason: str, *, line: int | None = None, expected: str | None = None):
        self.reason = reason
        self.line = line
        self.message = reason if expected == "" else f"{reason}\n\n{expected if expected else expected_layout()}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


@dataclass
class ParsedResponse:
    """The two blocks of an accepted response.

    Attributes:
        cuda: the ```cuda block's source (fence indentation removed, ``\\n`` line endings).
        python: the ```python block's source, or the task's default wrapper.
        used_default_wrapper: True when the response had no python block and the wrapper was used.
        cuda_first_line: the 1-based response line where the cuda block's code starts (line 1 of
            `cuda` is this line of the response), for mapping compiler diagnostics back.
        python_first_line: the same for the python block; 0 when the default wrapper was used.
    """

    cuda: str
    python: str
    used_default_wrapper: bool
    cuda_first_line: int
    python_first_line: int = 0


@dataclass
class _Block:
    tag: str          # normalised first word of the info string ("" when none)
    lang: str         # "cuda", "python" or "" (ignored)
    first_line: int   # 1-based response line of the first content line
    lines: list[str]
    closed: bool

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")


def normalise(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.startswith("\ufeff"):
        text = text[1:]
    # Lone surrogates (possible in a str, never in what a tokenizer decodes) would break every later stage.
    return text.encode("utf-8", "replace").decode("utf-8")


def strip_thinking(text: str) -> tuple[str, bool]:
    """Blank out think sections, keeping their newlines so line numbers hold.

    Returns the text and whether a ``<think>`` was left unclosed (everything after it is thinking).
    """
    out: list[str] = []
    pos = 0            # start of the text not yet copied or blanked
    open_at = -1       # where the current think section began, -1 when outside one
    seen_tag = False
    for match in _THINK_TAG_RE.finditer(text):
        closing = match.group(1) == "/"
        if not closing:
            if open_at < 0:
                out.append(text[pos:match.start()])
                open_at = match.start()
            seen_tag = True
            continue
        if open_at >= 0:
            out.append("\n" * text.count("\n", open_at, match.end()))
            pos, open_at = match.end(), -1
        elif not seen_tag:
            # "</think>" with no opening tag: the template opened the section, all before it is thinking.
            out = ["\n" * text.count("\n", 0, match.end())]
            pos = match.end()
        seen_tag = True
    if open_at >= 0:
        out.append("\n" * text.count("\n", open_at))
        return "".join(out), True
    out.append(text[pos:])
    return "".join(out), False


def _fence(stripped: str) -> tuple[str, int, str] | None:
    """(fence char, fence length, info string) when a left-stripped line opens or closes a fence."""
    if not stripped or stripped[0] not in "`~":
        return None
    char = stripped[0]
    n = len(stripped) - len(stripped.lstrip(char))
    if n < 3:
        return None
    info = stripped[n:].strip()
    if char == "`" and "`" in info:
        return None  # inline code such as ```cuda``` inside prose
    return char, n, info


def _normalise_tag(info: str) -> str:
    if not info:
        return ""
    word = info.split()[0].lower().strip("{}.")
    for sep in (":", ",", ";"):
        word = word.split(sep)[0]
    return word


def _classify(tag: str, text: str) -> str:
    if tag in CUDA_TAGS:
        return "cuda"
    if tag in PYTHON_TAGS:
        return "python"
    if tag:
        return ""
    if _PY_SNIFF_RE.search(text):
        return "python"
    if "__global__" in text:
        return "cuda"
    return ""


def scan_blocks(text: str) -> list[_Block]:
    """Fenced blocks of a normalised text, by a single pass over its lines."""
    blocks: list[_Block] = []
    current: _Block | None = None
    fence_char, fence_len, indent = "", 0, 0
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.lstrip(" \t")
        if current is None:
            fence = _fence(stripped)
            if fence is not None:
                fence_char, fence_len, info = fence
                indent = len(line) - len(stripped)
                current = _Block(tag=_normalise_tag(info), lang="", first_line=number + 1, lines=[], closed=False)
            continue
        if stripped.startswith(fence_char * fence_len):
            rest = stripped.rstrip().lstrip(fence_char)
            if not rest:
                current.closed = True
                blocks.append(current)
                current = None
                continue
            fence = _fence(stripped)
            tag = _normalise_tag(fence[2]) if fence else ""
            if fence and fence[0] == fence_char and (tag in CUDA_TAGS or tag in PYTHON_TAGS):
                # A fence that would close this block, but opens a cuda/python one: the closing line
                # was forgotten (never valid C++ or Python); close the block here and open the new one.
                blocks.append(current)
                indent = len(line) - len(stripped)
                fence_len = fence[1]
                current = _Block(tag=tag, lang="", first_line=number + 1, lines=[], closed=False)
                continue
        if indent:
            lead = len(line) - len(line.lstrip(" \t"))
            line = line[min(indent, lead):]
        current.lines.append(line)
    if current is not None:
        blocks.append(current)  # an unterminated last fence runs to the end of the text
    for block in blocks:
        block.lang = _classify(block.tag, block.text)
    return blocks


_NOT_NEWLINE_RE = re.compile(r"[^\n]")


def strip_comments(source: str, blank_strings: bool = False) -> str:
    """C/C++ source with its comments blanked to spaces (newlines kept, so offsets and line numbers stay
    valid), in one linear pass (an unterminated ``/*`` costs no more than a closed one).

    Args:
        blank_strings: also blank the contents of string and char literals (``"C"`` of ``extern "C"`` kept),
            so that code-looking text inside a literal is not taken for code.
    """
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_NOT_NEWLINE_RE.sub(" ", source[i:j]))
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            closed = j < n and source[j] == c
            j = j + 1 if closed else min(j, n)
            literal = source[i:j]
            if not blank_strings or literal == '"C"':
                out.append(literal)
            else:  # an unterminated literal is blanked to its line's end
                out.append(c + " " * (len(literal) - 2) + c if closed else c + " " * (len(literal) - 1))
        else:
            j = i + 1
            while j < n and source[j] not in "/\"'":
                j += 1
            out.append(source[i:j])
        i = j
    return "".join(out)


def has_extern_c_kernel(cuda: str) -> bool:
    """Whether a CUDA source declares at least one ``extern "C"`` ``__global__`` function.

    Finds ``extern "C" __global__ ...`` declarations and ``__global__`` functions inside an
    ``extern "C" { ... }`` block, ignoring comments, in one linear pass.
    """
    if "extern" not in cuda or "__global__" not in cuda:
        return False
    code = strip_comments(cuda, blank_strings=True)
    stack: list[bool] = []   # per open brace: does it open an `extern "C" {` block?
    open_extern_blocks = 0
    pending_extern = False   # an `extern "C"` whose declaration has not ended
    last_end, last_was_extern = -1, False
    for match in _CUDA_TOKEN_RE.finditer(code):
        token = match.group(0)
        if token.startswith("extern"):
            pending_extern, last_was_extern, last_end = True, True, match.end()
            continue
        if token == "__global__":
            if pending_extern or open_extern_blocks:
                return True
        elif token == "{":
            block_open = last_was_extern and not code[last_end:match.start()].strip()
            stack.append(block_open)
            open_extern_blocks += block_open
            pending_extern = False
        elif token == "}":
            if stack:
                open_extern_blocks -= stack.pop()
            pending_extern = False
        else:
            pending_extern = False
        last_was_extern = False
    return False


def _where(blocks: list[_Block]) -> str:
    lines = [str(b.first_line - 1) for b in blocks]
    return "response lines " + ", ".join(lines[:-1]) + " and " + lines[-1] if len(lines) > 1 else f"line {lines[0]}"


def check_python(block: _Block, expected: str) -> str:
    source = textwrap.dedent(block.text)
    if "\x00" in source:
        raise FormatError("the ```python block contains a NUL character", line=block.first_line, expected=expected)
    try:
        tree = parse_python(source, filename="python block")
    except SyntaxError as exc:
        line = exc.lineno or 1
        text = (exc.text or "").rstrip("\n")
        quoted = f"\n    {line} | {text.strip()}" if text.strip() else ""
        raise FormatError(f"the ```python block does not parse: SyntaxError: {exc.msg} at line {line} of the block "
                          f"(response line {block.first_line + line - 1}){quoted}",
                          line=block.first_line + line - 1, expected=expected) from None
    except (MemoryError, RecursionError) as exc:
        raise FormatError(f"the ```python block is nested too deeply to parse ({type(exc).__name__}); write plain "
                          "wrapper code", line=block.first_line, expected=expected) from None
    except (ValueError, OverflowError) as exc:
        raise FormatError(f"the ```python block cannot be parsed: {type(exc).__name__}: {str(exc)[:200]}",
                          line=block.first_line, expected=expected) from None
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        raise FormatError("the ```python block does not define `class ModelNew(nn.Module)` at its top level",
                          line=block.first_line, expected=expected)
    return source


def parse_response(text: str, wrapper: str = "") -> ParsedResponse:
    """Extract the cuda and python blocks of a response.

    Args:
        text: the model's whole response (markdown prose, fenced blocks, think sections).
        wrapper: the task's default ``ModelNew`` source for the short form; empty when it has none.

    Returns:
        The blocks, with where the cuda block starts in the response.

    Raises:
        FormatError: when the response does not hold exactly what the format asks for; its message
            says what was wrong and shows the expected layout. No other exception escapes.
    """
    has_wrapper = bool(wrapper and wrapper.strip())
    expected = expected_layout(has_wrapper)
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        raise FormatError(f"the response must be text (str), got {type(text).__name__}", expected=expected)
    if len(text) > MAX_RESPONSE_CHARS:
        raise FormatError(f"response too long: {len(text)} characters, at most {MAX_RESPONSE_CHARS} are read; "
                          "answer with just the code blocks", expected=expected)
    visible, unclosed_think = strip_thinking(normalise(text))
    blocks = scan_blocks(visible)
    cuda_blocks = [b for b in blocks if b.lang == "cuda"]
    python_blocks = [b for b in blocks if b.lang == "python"]
    if not blocks:
        if unclosed_think:
            raise FormatError("no answer outside the thinking: a <think> section is opened and never closed, so "
                              "everything after it counts as thinking; close it with </think> before the code "
                              "blocks", expected=expected)
        raise FormatError("no fenced code block found in the response", expected=expected)
    if len(cuda_blocks) > 1:
        raise FormatError(f"found {len(cuda_blocks)} ```cuda blocks ({_where(cuda_blocks)}); put all kernels and "
                          "__device__ helpers in ONE ```cuda block (no host code or bindings are needed)",
                          line=cuda_blocks[1].first_line - 1, expected=expected)
    if len(python_blocks) > 1:
        raise FormatError(f"found {len(python_blocks)} ```python blocks ({_where(python_blocks)}); write ONE "
                          "```python block that defines class ModelNew (leave out usage examples and tests)",
                          line=python_blocks[1].first_line - 1, expected=expected)
    if not cuda_blocks:
        hint = ""
        if python_blocks and "load_inline" in python_blocks[0].text:
            hint = ("; the kernels go in their own ```cuda block, not in a load_inline string (the environment "
                    "compiles them and injects `kernels`)")
        elif len(blocks) > len(python_blocks):
            tags = sorted({b.tag or "(no tag)" for b in blocks if not b.lang})
            hint = f"; blocks tagged {', '.join(tags)} were ignored (tag the kernel block ```cuda)"
        elif unclosed_think:
            hint = "; a <think> section is opened and never closed, so everything after it counts as thinking"
        raise FormatError(f"no ```cuda block found{hint}", expected=expected)
    cuda_block = cuda_blocks[0]
    cuda = cuda_block.text
    if "\x00" in cuda:
        raise FormatError("the ```cuda block contains a NUL character", line=cuda_block.first_line, expected=expected)
    if not has_extern_c_kernel(cuda):
        has_global = "__global__" in strip_comments(cuda, blank_strings=True)
        what = ("its __global__ kernels are not declared extern \"C\" (C linkage keeps the names that "
                "kernels.<name> uses)") if has_global else "it has no __global__ kernel"
        raise FormatError(f"the ```cuda block (response line {cuda_block.first_line}) has no `extern \"C\" "
                          f"__global__` kernel: {what}", line=cuda_block.first_line, expected=expected)
    if python_blocks:
        python = check_python(python_blocks[0], expected)
        return ParsedResponse(cuda=cuda, python=python, used_default_wrapper=False,
                              cuda_first_line=cuda_block.first_line, python_first_line=python_blocks[0].first_line)
    if not has_wrapper:
        raise FormatError("no ```python block found, and this task has no default wrapper: add a ```python block "
                          "defining class ModelNew(nn.Module) whose forward launches your kernels", expected=expected)
    return ParsedResponse(cuda=cuda, python=wrapper, used_default_wrapper=True, cuda_first_line=cuda_block.first_line)


def python_only_block(text: str) -> tuple[str, int] | None:
    """The python block of a response holding one ```python block and no ```cuda block, with its first line.

    That is the shape of a KernelBench-style answer (kernels inside a ``load_inline`` string); a whole
    response that is Python source defining ``ModelNew`` (no fences) counts as one block at line 1.
    None for any other response.
    """
    if not isinstance(text, str) or len(text) > MAX_RESPONSE_CHARS:
        return None
    visible, _ = strip_thinking(normalise(text))
    blocks = scan_blocks(visible)
    if not blocks:
        return (visible, 1) if _PY_SNIFF_RE.search(visible) and "class ModelNew" in visible else None
    cuda = [b for b in blocks if b.lang == "cuda"]
    python = [b for b in blocks if b.lang == "python"]
    if cuda or len(python) != 1:
        return None
    return textwrap.dedent(python[0].text), python[0].first_line


# -- kernel languages written as one python block (Numba, Triton) ------------------------------------


def response_blocks(text: str) -> list[_Block]:
    """The fenced blocks of a response's visible text (thinking sections dropped)."""
    visible, _ = strip_thinking(normalise(text))
    return scan_blocks(visible)


def is_kernel_module_response(response: Any, module: str, imports: Callable[[str], bool]) -> bool:
    """Whether a response is in a kernel language's form: no ```cuda block, a ```python block importing `module`
    (`imports` tells). Accepts the response text or a `ParsedResponse` (one with an empty ``cuda`` block)."""
    if isinstance(response, ParsedResponse):
        return not response.cuda.strip() and imports(response.python)
    if not isinstance(response, str) or len(response) > MAX_RESPONSE_CHARS or module not in response:
        return False
    blocks = response_blocks(response)
    return not any(b.lang == "cuda" for b in blocks) and any(b.lang == "python" and imports(b.text) for b in blocks)


def check_kernel_module(source: str, violations: Callable[[ast.Module], list[Any]], kernels: Callable[[str], list[str]],
                        language: str, decorator: str, layout: str, rules: str) -> None:
    """The static check of a python block holding a kernel language's kernels and `ModelNew`.

    Args:
        violations: the language's checker: the refused constructs of the parsed block, each with its ``line``.
        kernels: the names of the block's top-level kernels.
        language, decorator: e.g. ``"Triton"`` and ``"@triton.jit"``, for the messages.
        layout, rules: the expected layout (shown when the block does not parse or has no kernel) and the rules
            (shown under refused constructs).

    Raises:
        FormatError: naming each refused construct with its line, or the missing kernel.
    """
    try:
        tree = parse_python(source, filename="python block")
    except SyntaxError as exc:
        raise FormatError(f"the ```python block does not parse: SyntaxError: {exc.msg} at line {exc.lineno}",
                          line=exc.lineno, expected=layout) from None
    found = violations(tree)
    if found:
        shown = "\n".join(f"  {v}" for v in found[:5])
        more = f"\n  ... and {len(found) - 5} more" if len(found) > 5 else ""
        raise FormatError(f"the ```python block uses {len(found)} refused construct(s):\n{shown}{more}",
                          line=found[0].line, expected=rules)
    if not kernels(source):
        raise FormatError(f"the {language} ```python block defines no {decorator} kernel at its top level", expected=layout)


def parse_kernel_module(text: str, language: str, decorator: str, layout: str,
                        check: Callable[[str], None]) -> ParsedResponse:
    """The one python block of a kernel language's response, checked by `check`, with an empty ``cuda`` block.

    Raises:
        FormatError: two python blocks, a block that does not parse or lacks ModelNew, or what `check` refuses.
    """
    python_blocks = [b for b in response_blocks(text) if b.lang == "python"]
    if len(python_blocks) != 1:
        raise FormatError(f"found {len(python_blocks)} ```python blocks; a {language} response is ONE ```python block "
                          f"with the {decorator} kernels and class ModelNew", expected=layout)
    block = python_blocks[0]
    source = check_python(block, layout)
    check(source)
    return ParsedResponse(cuda="", python=source, used_default_wrapper=False, cuda_first_line=0,
                          python_first_line=block.first_line)
