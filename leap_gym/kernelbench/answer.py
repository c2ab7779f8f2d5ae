"""KernelBench's answer format: a ``ModelNew`` that builds its kernels with ``load_inline``.

Most published kernel models answer KernelBench-style: one Python block whose ``cuda_sources``
string holds ``__global__`` kernels plus ``torch::Tensor`` host functions that launch them with
``<<<grid, block>>>``, built by ``torch.utils.cpp_extension.load_inline(..., functions=[...])``.

Such an answer is judged like a native one:

- `convert_answer` reads the ``load_inline`` calls statically (their sources are string constants
  of the block, never run) and converts the answer to the native format, exactly: the kernels
  become ``extern "C"`` kernels of a ``cuda`` block, each host function is translated to Python
  (`leap_gym.kernelbench.host`) launching them through ``kernels.<name>``, and the ``load_inline``
  call becomes an instance of a class holding the translated functions. The converted answer then
  goes through everything a native answer does (the include rule, NVRTC, the static check of the
  Python block, every run-time defence). This is how the ``cpu`` backend judges it.
- On the ``cuda`` backend the extension is really built (`build_extensions`, nvcc through torch's
  ``load_inline``) in the sandboxed worker; its build time is reported in the result and the feedback.

Host code outside the exact subset is a FORMAT_ERROR that names the construct and says that the
native format (kernels in a ```cuda block, launched with ``kernels.<name>``) avoids it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from leap_gym.evaluation.kernels import parse_kernel_signatures
from leap_gym.evaluation.parse import ParsedResponse, python_only_block, strip_comments
from leap_gym.kernelbench.host import (
    Declarations,
    Untranslatable,
    function_header,
    translate_declarations,
    translate_function,
)
from leap_gym.kernelbench.names import HostCompileError
from leap_gym.kernelbench.runtime import C_HELPERS
from leap_gym.kernelbench.templates import instantiate_template
from leap_gym.pyparse import parse_python

#: Said once in the feedback of an answer in this format.
NATIVE_IS_CHEAPER = ("answered in KernelBench's load_inline format; the native format (a ```cuda block of extern "
                     "\"C\" kernels and a ```python block launching them with kernels.<name>) skips the {what}")

#: Headers of torch, pybind and the C++ library that a load_inline source includes for its host code;
#: the converted ```cuda block drops them (any other include stays and meets the include rule).
HOST_HEADER_RE = re.compile(r"^(?:torch|ATen|c10|pybind11|THC)/[\w./]+$|^(?:c?math(?:\.h)?|stdio\.h|cstdio|stdlib\.h|"
                            r"cstdlib|cstdint|stdint\.h|cfloat|float\.h|climits|limits\.h?|limits|vector|iostream|"
                            r"algorithm|utility|tuple|string|cstring|string\.h|cassert|assert\.h|type_traits|"
                            r"numeric|functional|memory|array|sstream|stdexcept|cuda\.h)$")
#: cuBLAS headers: a converted answer drops them (a real build compiles an unused include), and a call into
#: cuBLAS from host code is reported as unsupported by name. The real build keeps refusing them.
LIBRARY_HEADER_RE = re.compile(r"^cublas(?:_v2|_api|Lt)?\.h$")
_INCLUDE_LINE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]*)[>"][ \t]*$')
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\(([^)]*)\))?[ \t]*(.*)$")


@dataclass
class Extension:
    """One ``load_inline`` call: its arguments, read from the block's constants."""

    name: str
    cpp_sources: str
    cuda_sources: str
    functions: list[str]


@dataclass
class Conversion:
    """A load_inline answer converted to the native format.

    Attributes:
        cuda: the native ```cuda block (extern "C" kernels, device helpers, constants).
        python: the native ```python block (the answer's, with the host functions translated).
        extensions: the load_inline calls, as read.
        real_python: the python block for a real build (``cuda`` backend): the calls replaced by
            the names ``kb_extension_<name>``, bound to the built modules at run time.
        error: why the answer could not be converted ("" when it was).
        error_kind: ``"format"`` (the block cannot be read), ``"compile"`` (host code a real build
            rejects) or ``"unsupported"`` (a host construct the translation does not cover).
    """

    cuda: str = ""
    python: str = ""
    extensions: list[Extension] = field(default_factory=list)
    real_python: str = ""
    error: str = ""
    error_kind: str = "format"


def is_load_inline_answer(python: str) -> bool:
    """Whether a python block builds its kernels with ``load_inline``."""
    return "load_inline" in python


# ------------------------------------------------------------------------------------------------
# Reading the load_inline calls
# ------------------------------------------------------------------------------------------------

def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    return found


def _static_value(node: ast.expr, constants: dict[str, ast.expr], depth: int = 0) -> Any:
    """A string, a list of strings or a bool built from literals and module constants only."""
    if depth > 20:
        raise ValueError("too deeply nested")
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool)) or \
            isinstance(node, ast.Constant) and node.value is None:
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return _static_value(constants[node.id], constants, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_static_value(e, constants, depth + 1) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _static_value(node.left, constants, depth + 1) + _static_value(node.right, constants, depth + 1)
    raise ValueError(f"`{ast.unparse(node)[:60]}` is not a string constant of the block")


def _is_load_inline(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return isinstance(func, ast.Name) and func.id == "load_inline" or \
        isinstance(func, ast.Attribute) and func.attr == "load_inline"


def read_extensions(tree: ast.Module) -> list[tuple[ast.Call, Extension]]:
    """Every ``load_inline(...)`` call of the block with its arguments resolved statically.

    Raises:
        ValueError: an argument that is not built from string literals and module constants.
    """
    constants = _module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if not _is_load_inline(node):
            continue
        args = {k.arg: k.value for k in node.keywords if k.arg}
        for index, key in enumerate(("name", "cpp_sources", "cuda_sources", "functions")):
            if index < len(node.args):
                args.setdefault(key, node.args[index])
        values: dict[str, Any] = {}
        for key in ("name", "cpp_sources", "cuda_sources", "functions"):
            if key not in args:
                values[key] = [] if key == "functions" else ""
                continue
            try:
                values[key] = _static_value(args[key], constants)
            except ValueError as exc:
                raise ValueError(f"load_inline's {key}= must be written as string constants of the block: {exc}") \
                    from None
        joined = {k: "\n".join(v) if isinstance(v, list) and k != "functions" else v for k, v in values.items()}
        functions = joined["functions"] if isinstance(joined["functions"], list) else [joined["functions"]]
        if not all(isinstance(x, str) for x in [joined["name"], joined["cpp_sources"], joined["cuda_sources"],
                                                 *functions]):
            raise ValueError("load_inline's name, sources and functions must be strings")
        name = re.sub(r"\W", "_", joined["name"] or f"extension_{len(found)}")
        found.append((node, Extension(name, joined["cpp_sources"], joined["cuda_sources"], functions)))
    return found


# ------------------------------------------------------------------------------------------------
# The C++ source: kernels to the cuda block, host functions to Python
# ------------------------------------------------------------------------------------------------

@dataclass
class _Item:
    kind: str          # "pp" (preprocessor line), "decl" (ends with ;), "func" (a body in braces)
    text: str          # the original text of the item
    header: str = ""   # for "func": the text before the body
    body: str = ""     # for "func": the body, braces included


def split_top_level(source: str) -> list[_Item]:
    """The top-level items of a C++ source: preprocessor lines, declarations and definitions."""
    code = strip_comments(source)  # same length: positions match `source`
    items: list[_Item] = []
    i, n, start = 0, len(code), 0
    while i < n:
        c = code[i]
        if c == "#" and not code[start:i].strip():
            end = i
            while True:
                end = code.find("\n", end)
                if end < 0 or code[end - 1] != "\\":
                    break
                end += 1
            end = n if end < 0 else end
            items.append(_Item("pp", source[i:end]))
            i = start = end
            continue
        if c == ";":
            items.append(_Item("decl", source[start:i + 1]))
            i = start = i + 1
            continue
        if c == "{":
            depth, j = 0, i
            while j < n:
                depth += (code[j] == "{") - (code[j] == "}")
                if depth == 0:
                    break
                j += 1
            header = code[start:i]
            if re.search(r"\b(struct|class|union|enum|namespace)\b|=\s*$", header) or header.strip().startswith("extern"):
                end = code.find(";", j) if not re.search(r"\bnamespace\b|^\s*extern", header) else j
                end = n - 1 if end < 0 else end
                items.append(_Item("decl", source[start:end + 1]))
                i = start = end + 1
                continue
            items.append(_Item("func", source[start:j + 1], header=source[start:i], body=source[i:j + 1]))
            i = start = j + 1
            continue
        i += 1
    if code[start:].strip():
        items.append(_Item("decl", source[start:]))
    return items


def _macros(items: list[_Item]) -> dict[str, tuple[list[str] | None, str]]:
    found: dict[str, tuple[list[str] | None, str]] = {}
    for item in items:
        match = _DEFINE_RE.match(item.text.replace("\\\n", " "))
        if item.kind == "pp" and match:
            params = [p.strip() for p in match.group(3).split(",")] if match.group(2) is not None else None
            found[match.group(1)] = (params, match.group(4).strip())
    return found


MAX_EXPANDED_CHARS = 100_000


def expand_macros(text: str, macros: dict[str, tuple[list[str] | None, str]]) -> str:
    """Expand the source's own ``#define`` macros in host code (``#x`` stringifies)."""
    for _ in range(8):
        if len(text) > MAX_EXPANDED_CHARS:
            raise Untranslatable(f"the macros expand host code past {MAX_EXPANDED_CHARS} characters")
        changed = False
        for name, (params, body) in macros.items():
            pattern = re.compile(rf"\b{re.escape(name)}\b")
            pos = 0
            while (match := pattern.search(text, pos)) is not None:
                if params is None:
                    text = text[:match.start()] + body + text[match.end():]
                    pos, changed = match.start() + len(body), True
                    if len(text) > MAX_EXPANDED_CHARS:
                        raise Untranslatable(f"the macros expand host code past {MAX_EXPANDED_CHARS} characters")
                    continue
                j = match.end()
                while j < len(text) and text[j] in " \t":
                    j += 1
                if j >= len(text) or text[j] != "(":
                    pos = match.end()
                    continue
                depth, k, args, arg_start = 0, j, [], j + 1
                while k < len(text):
                    if text[k] == "(":
                        depth += 1
                    elif text[k] == ")":
                        depth -= 1
                        if depth == 0:
                            break
                    elif text[k] == "," and depth == 1:
                        args.append(text[arg_start:k].strip())
                        arg_start = k + 1
                    k += 1
                args.append(text[arg_start:k].strip())
                expansion = body
                for param, arg in zip(params, args):
                    expansion = re.sub(rf"#\s*{re.escape(param)}\b", '"' + arg.replace('"', '\\"') + '"', expansion)
                    expansion = re.sub(rf"\b{re.escape(param)}\b", arg, expansion)
                text = text[:match.start()] + expansion + text[k + 1:]
                pos, changed = match.start() + len(expansion), True
                if len(text) > MAX_EXPANDED_CHARS:
                    raise Untranslatable(f"the macros expand host code past {MAX_EXPANDED_CHARS} characters")
        if not changed:
            break
    return text


#: The limits macros device code takes from <cfloat>/<climits>/<cmath>, which NVRTC lacks.
_LIMIT_MACROS = {"FLT_MAX": "3.402823466e+38F", "FLT_MIN": "1.175494351e-38F", "INT_MAX": "2147483647",
                 "INT_MIN": "(-2147483647 - 1)", "INFINITY": "__int_as_float(0x7f800000)", "M_PI": "3.14159265358979323846"}
_LIMITS_PRELUDE = "".join(f"#ifndef {k}\n#define {k} {v}\n#endif\n" for k, v in _LIMIT_MACROS.items())

_HOST_ONLY_RE = re.compile(r"\b(?:torch|at|c10|std|pybind11|py)::|\bPYBIND11_MODULE\b|\busing\s+namespace\b|\bTensor\b")


_NUMERIC_LIMITS_RE = re.compile(r"(?:\b|::)std::numeric_limits\b")


def _limits(ctype: str, values: dict[str, str]) -> str:
    body = " ".join(f"__device__ static {ctype} {k}() {{ return {v}; }}" for k, v in values.items())
    return f"template <> struct kb_numeric_limits<{ctype}> {{ {body} }};\n"


_NUMERIC_LIMITS_PRELUDE = "template <class T> struct kb_numeric_limits;\n" + \
    _limits("float", {"max": "3.402823466e+38F", "min": "1.175494351e-38F", "lowest": "-3.402823466e+38F",
                      "epsilon": "1.192092896e-07F", "infinity": "__int_as_float(0x7f800000)",
                      "quiet_NaN": "__int_as_float(0x7fffffff)"}) + \
    _limits("double", {"max": "1.7976931348623157e+308", "min": "2.2250738585072014e-308",
                       "lowest": "-1.7976931348623157e+308", "epsilon": "2.220446049250313e-16",
                       "infinity": "__longlong_as_double(0x7ff0000000000000LL)",
                       "quiet_NaN": "__longlong_as_double(0x7ff8000000000000LL)"}) + \
    _limits("int", {"max": "2147483647", "min": "(-2147483647 - 1)", "lowest": "(-2147483647 - 1)"}) + \
    _limits("long long", {"max": "9223372036854775807LL", "min": "(-9223372036854775807LL - 1)",
                          "lowest": "(-9223372036854775807LL - 1)"})
_FIXED_INT_RE = re.compile(r"\bu?int(?:8|16|32|64)_t\b")
_FIXED_INT_PRELUDE = ("typedef signed char int8_t;\ntypedef short int16_t;\ntypedef int int32_t;\ntypedef long int64_t;\n"
                      "typedef unsigned char uint8_t;\ntypedef unsigned short uint16_t;\ntypedef unsigned int uint32_t;\n"
                      "typedef unsigned long uint64_t;\n")
def convert_sources(cuda_sources: str, cpp_sources: str, functions: list[str]) -> tuple[str, str, list[str]]:
    """(native cuda block, Python of the host functions, names of the functions) for one extension.

    Raises:
        Untranslatable: host code outside the exact subset, or a function of `functions` not found.
    """
    items = split_top_level(cuda_sources) + [i for i in split_top_level(cpp_sources) if i.kind == "func"]
    macros = _macros(items)
    cuda_parts: list[str] = []
    host: list[_Item] = []
    constants: list[str] = []
    for item in items:
        if item.kind == "pp":
            include = _INCLUDE_LINE_RE.match(item.text)
            if include and (HOST_HEADER_RE.match(include.group(1).strip()) or
                            LIBRARY_HEADER_RE.match(include.group(1).strip())):
                continue
            cuda_parts.append(item.text)
        elif item.kind == "func":
            header = strip_comments(item.header)
            if "__global__" in header:
                if "template" in header:
                    cuda_parts.append(instantiate_template(item, cuda_sources + cpp_sources))
                elif 'extern "C"' not in header:
                    cuda_parts.append(re.sub(r"((?:__launch_bounds__\s*\([^)]*\)\s*)?__global__)",
                                             r'extern "C" \1', item.text, count=1))
                else:
                    cuda_parts.append(item.text)
            elif "__device__" in header or "__host__" in header:
                cuda_parts.append(item.text)
            else:
                host.append(item)
        else:
            text = strip_comments(item.text).strip()
            if not text or _HOST_ONLY_RE.search(text) or re.match(r"^[\w:<>\s,&*]+\([^)]*\)\s*;$", text) \
                    and "__" not in text:
                continue  # prototypes of host functions, using-declarations, bindings
            cuda_parts.append(item.text)
            if re.match(r"^(?:static\s+)?(?:const|constexpr)\s", text) and "__" not in text:
                constants.append(text)
    cuda = "\n".join(part.strip("\n") for part in cuda_parts if part.strip()) + "\n"
    if any(re.search(rf"\b{name}\b", cuda) for name in _LIMIT_MACROS):
        cuda = _LIMITS_PRELUDE + cuda
    if _NUMERIC_LIMITS_RE.search(cuda):  # <limits>, likewise (NVRTC has neither)
        cuda = _NUMERIC_LIMITS_PRELUDE + _NUMERIC_LIMITS_RE.sub("kb_numeric_limits", cuda)
    if _FIXED_INT_RE.search(cuda):  # <cstdint>, which torch's headers bring to a real build and NVRTC lacks
        cuda = _FIXED_INT_PRELUDE + cuda
    try:
        kernels = parse_kernel_signatures(cuda)
    except ValueError as exc:
        raise Untranslatable(str(exc)) from None
    names = [function_header(strip_comments(h.header)) for h in host]
    helpers = frozenset(m.group(1) for m in names if m)
    missing = [f for f in functions if f not in helpers]
    if missing:
        raise HostCompileError(f"load_inline's functions {missing} have no definition in the sources (the "
                               "generated binding names an undeclared function)")
    globals_ = translate_declarations(" ".join(expand_macros(strip_comments(c), macros) for c in constants), kernels) \
        if constants else Declarations([])
    python: list[str] = []
    for item in host:
        function = translate_function(expand_macros(strip_comments(item.header), macros),
                                      expand_macros(strip_comments(item.body), macros), kernels, helpers, globals_)
        body = [*globals_.lines, *function.body]
        python.append(f"def kb_host_{function.name}({', '.join(function.params)}):")
        python += ["    " + line for line in body]
        python.append("")
    return cuda, "\n".join(python), [f for f in functions]


# ------------------------------------------------------------------------------------------------
# The python block
# ------------------------------------------------------------------------------------------------

def _is_extension_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return module.startswith("torch.utils.cpp_extension") or \
            module == "torch.utils" and any(a.name == "cpp_extension" for a in node.names)
    if isinstance(node, ast.Import):
        return any(a.name.startswith("torch.utils.cpp_extension") for a in node.names)
    return False


def _segment(lines: list[bytes], node: ast.AST) -> str:
    """A node's source text (`ast.get_source_segment` without its quadratic scan of long lines)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    start, end = node.col_offset, node.end_col_offset
    if first == last:
        return lines[first][start:end].decode("utf-8", "replace")
    parts = [lines[first][start:], *lines[first + 1:last], lines[last][:end]]
    return b"\n".join(parts).decode("utf-8", "replace")


def _rewrite_python(source: str, tree: ast.Module, calls: list[tuple[ast.Call, Extension]],
                    replacement: str) -> tuple[str, list[str]]:
    """The block with extension imports blanked and each load_inline statement moved to the end.

    Statements holding a call are blanked in place (line numbers of the rest stay) and re-added after
    the generated code with the call replaced by ``replacement.format(name=...)``.
    """
    lines = source.split("\n")
    encoded = [line.encode("utf-8") for line in lines]
    moved: list[str] = []
    call_ids = {id(call): ext for call, ext in calls}
    for node in tree.body:
        holds = [n for n in ast.walk(node) if id(n) in call_ids]
        if not holds and not _is_extension_import(node):
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if holds:
            segment = _segment(encoded, node)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                raise ValueError("call load_inline at the top level of the block (name = load_inline(...))")
            text = segment
            for call in sorted(holds, key=lambda c: (c.lineno, c.col_offset), reverse=True):
                call_text = _segment(encoded, call)
                text = text.replace(call_text, replacement.format(name=call_ids[id(call)].name), 1)
            moved.append(text)
        for index in range(first, last + 1):
            lines[index] = ""
    return "\n".join(lines), moved


_CUDA_CALL_RE = re.compile(r"\.cuda\(\s*\)|\.to\(\s*(['\"])cuda(?::0)?\1\s*\)")
_DEVICE_ARG_RE = re.compile(r"\bdevice\s*=\s*(['\"])cuda(?::0)?\1")


def convert_answer(python: str) -> Conversion:
    """Convert a load_inline answer's python block to the native format (`Conversion.error` says why not).

    Never raises: whatever the block holds, the reason it cannot be converted is in `Conversion.error`.
    """
    try:
        return _convert(python)
    except RecursionError:
        return Conversion(error="the load_inline sources are nested too deeply to translate")
    except Exception as exc:  # a construct the reader did not foresee: reported, never fatal
        return Conversion(error=f"cannot convert the load_inline answer: {type(exc).__name__}: {exc}"[:400])


def _convert(python: str) -> Conversion:
    try:
        tree = parse_python(python)
    except SyntaxError as exc:
        return Conversion(error=f"the ```python block does not parse: SyntaxError: {exc.msg} at line {exc.lineno}")
    try:
        calls = read_extensions(tree)
    except ValueError as exc:
        return Conversion(error=str(exc))
    if not calls:
        return Conversion(error="the ```python block mentions load_inline but never calls it")
    extensions = [ext for _, ext in calls]
    try:
        real_python, real_moved = _rewrite_python(python, tree, calls, "kb_extension_{name}")
        native_python, moved = _rewrite_python(python, tree, calls, "LoadInline_{name}()")
    except ValueError as exc:
        return Conversion(extensions=extensions, error=str(exc))
    real = real_python.rstrip("\n") + "\n\n\n" + "\n".join(real_moved) + "\n"
    cuda_blocks, generated = [], ["", "", "# Generated from the load_inline sources (C++ host code translated).",
                                  "import math", "import torch", C_HELPERS]
    try:
        for ext in extensions:
            cuda, host_python, functions = convert_sources(ext.cuda_sources, ext.cpp_sources, ext.functions)
            cuda_blocks.append(cuda)
            generated.append(host_python)
            generated.append(f"class LoadInline_{ext.name}:")
            generated += [f"    def {f}(self, *args):\n        return kb_host_{f}(*args)\n" for f in functions]
            if not functions:
                generated.append("    pass")
            generated.append("")
    except HostCompileError as exc:
        return Conversion(extensions=extensions, real_python=real, error=str(exc), error_kind="compile")
    except Untranslatable as exc:
        return Conversion(extensions=extensions, real_python=real, error=str(exc), error_kind="unsupported")
    # x.cuda(), device="cuda": the GPU a build runs on is the device kernels run on here
    native_python = _DEVICE_ARG_RE.sub("device=KB_DEVICE", _CUDA_CALL_RE.sub(".to(KB_DEVICE)", native_python))
    native = native_python.rstrip("\n") + "\n" + "\n".join(generated) + "\n" + "\n".join(moved) + "\n"
    return Conversion(cuda="\n".join(cuda_blocks), python=native, extensions=extensions, real_python=real)


# ------------------------------------------------------------------------------------------------
# Judging: preparation (before the worker) and the real build (cuda backend, in the worker)
# ------------------------------------------------------------------------------------------------

#: Seconds a real extension build may take, on top of the evaluation's own limit.
BUILD_TIMEOUT_S = 600.0


def _refused_includes(ext: Extension, converted: bool) -> list[str]:
    """Includes of an extension's sources that a real build must not see (the include rule, plus torch's headers)."""
    from leap_gym.backends.includes import find_include_violations
    from leap_gym.backends.nvrtc import include_dirs

    problems = []
    for label, source in (("cuda_sources", ext.cuda_sources), ("cpp_sources", ext.cpp_sources)):
        kept = []
        for line in source.split("\n"):
            match = _INCLUDE_LINE_RE.match(line)
            name = match.group(1).strip() if match else ""
            dropped = HOST_HEADER_RE.match(name) or converted and LIBRARY_HEADER_RE.match(name)
            kept.append("" if match and dropped and ".." not in name else line)
        problems += [f"{label} line {v.line}: {v.text}: {v.message}"
                     for v in find_include_violations("\n".join(kept), include_dirs())]
    return problems


def prepare_answer(task_id: str, response: str, backend: str) -> Any:
    """A KernelBench-style answer made ready for the pipeline, or None when `response` is not one.

    Returns:
        None (not a load_inline answer), an `EvalResult` (FORMAT_ERROR or COMPILE_ERROR: why it cannot
        be judged), or a `LoadInlineResponse` for `leap_gym.evaluation.languages` to check like a native response.
    """
    from leap_gym.result import COMPILE_ERROR, FORMAT_ERROR, RUNTIME_ERROR, EvalResult

    found = python_only_block(response)
    if found is None or not is_load_inline_answer(found[0]):
        return None
    python, first_line = found
    conversion = convert_answer(python)
    real = backend == "cuda"
    for ext in conversion.extensions:
        refused = _refused_includes(ext, converted=not real)
        if refused:
            return EvalResult(COMPILE_ERROR, task_id=task_id, backend=backend, detail="include_rule",
                              message=f"refused #include: {refused[0]}", errors=refused,
                              answer_format="load_inline")
    if conversion.error and not (real and conversion.real_python):
        if conversion.error_kind == "compile":
            return EvalResult(COMPILE_ERROR, task_id=task_id, backend=backend, detail="host_code",
                              message=f"the host code does not compile: {conversion.error}",
                              errors=[conversion.error], answer_format="load_inline")
        if conversion.error_kind == "unsupported":
            return EvalResult(RUNTIME_ERROR, task_id=task_id, backend=backend, detail="unsupported",
                              message=f"the {backend} backend cannot judge this load_inline answer: {conversion.error} "
                                      "is outside the exact host-code translation (a GPU build compiles it: the cuda "
                                      "backend judges it); "
                                      + NATIVE_IS_CHEAPER.format(what="host-code translation"),
                              errors=[conversion.error], answer_format="load_inline")
        return EvalResult(FORMAT_ERROR, task_id=task_id, backend=backend, detail="load_inline",
                          message=conversion.error, answer_format="load_inline")
    if real:
        return LoadInlineResponse(cuda="", python=conversion.real_python, used_default_wrapper=False,
                                  cuda_first_line=0, python_first_line=first_line,
                                  extensions=conversion.extensions, real_build=True)
    return LoadInlineResponse(cuda=conversion.cuda, python=conversion.python, used_default_wrapper=False,
                              cuda_first_line=0, python_first_line=first_line, extensions=conversion.extensions)


@dataclass
class LoadInlineResponse(ParsedResponse):
    """A load_inline answer ready to judge: converted (`cuda`, `python` native) or, with `real_build`,
    the python block that binds ``kb_extension_<name>`` to really built modules."""

    extensions: list[Extension] = field(default_factory=list)
    real_build: bool = False
