"""Triton responses: their form, detection and static check (no user code runs here).

A Triton response holds no ```cuda block and one ```python block that imports ``triton`` and
``triton.language as tl``, defines its kernels as ``@triton.jit`` functions and a
``class ModelNew(nn.Module)`` whose ``forward`` allocates outputs and launches them as
``kernel[grid](*args)`` with the torch tensors themselves (see `TRITON_LAYOUT`). The python-block
rules of CUDA responses hold for the wrapper (no torch compute in ``forward``, no files, processes,
eval or introspection, no module-level state); Triton's API is admitted: ``triton.jit``,
``triton.cdiv``, ``triton.next_power_of_2``, ``triton.autotune``/``Config``/``heuristics``, every
public name of ``triton.language`` (``tl.load`` included) and ``triton.language.extra.libdevice``.
The body of a ``@triton.jit`` function may use only its parameters and locals, ``tl``/``triton``,
other ``@triton.jit`` functions, module-level constants and a few builtins (``range``, ``min``...):
never ``torch`` or a Python helper, which Triton's compiler would refuse and its interpreter would
run as plain Python. A kernel is used only as ``kernel[grid](...)`` (or called from another kernel),
never through its attributes (``kernel.run``, ``kernel.fn``).
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Any

from leap_gym.evaluation import parse
from leap_gym.evaluation.parse import FormatError, ParsedResponse
from leap_gym.evaluation.static_check import ALLOWED_IMPORTS, PythonChecker
from leap_gym.pyparse import parse_python
from leap_gym.result import FORMAT_ERROR, EvalResult

TRITON_MODULES = frozenset({"triton", "triton.language", "triton.language.extra", "triton.language.extra.libdevice"})
#: Names a block may take from the ``triton`` package itself.
TRITON_API = frozenset({"jit", "cdiv", "next_power_of_2", "autotune", "Config", "heuristics", "language"})
#: Builtins a ``@triton.jit`` body may use (Triton's compiler knows them).
KERNEL_BUILTINS = frozenset({"range", "min", "max", "int", "float", "bool", "len", "print", "isinstance", "tuple",
                             "zip", "enumerate", "abs", "True", "False", "None"})
_IMPORTS_TRITON_RE = re.compile(r"^[ \t]*(?:from[ \t]+triton\b|import[ \t]+triton\b)", re.MULTILINE)
_DECORATOR_WRAPPERS = frozenset({"jit", "autotune", "heuristics"})
#: Keywords of triton.autotune / triton.Config that run the block's Python around a launch, outside the guards.
HOOK_KEYWORDS = frozenset({"pre_hook", "post_hook", "prune_configs_by", "early_config_prune", "perf_model",
                           "do_bench"})

TRITON_LAYOUT = '''```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n                       # every load and store masked to the tensor
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, alpha * x, mask=mask)

class ModelNew(nn.Module):
    def __init__(self, alpha):               # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)              # allocate outputs; no torch compute operators here
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, y, self.alpha, n, BLOCK=1024)
        return y
```'''

TRITON_RESPONSE_FORMAT = (
    "Answer with one ```python block that imports triton and triton.language as tl, defines your kernels as "
    "@triton.jit functions and class ModelNew(nn.Module) with the same constructor arguments as Model:\n\n"
    + TRITON_LAYOUT + "\n\n"
    "Launch a kernel as kernel[grid](*args) with the torch tensors themselves (they arrive as pointers to their "
    "first element); Python ints and floats pass as scalars, tl.constexpr parameters as keywords. Mask every "
    "load and store. forward may only allocate, view and launch: the computation happens in your kernels.")

TRITON_RULES = (
    "A Triton response is one ```python block. It may import torch, torch.nn, torch.nn.functional, math, typing, "
    "triton, triton.language (as tl) and triton.language.extra.libdevice; it defines @triton.jit kernels and class "
    "ModelNew(nn.Module) whose forward allocates outputs and launches kernel[grid](*tensors). From triton itself "
    "only jit, cdiv, next_power_of_2, autotune, Config and heuristics. A kernel body uses only tl, its parameters, "
    "other @triton.jit functions and module-level constants (not torch); kernels are launched as kernel[grid](...), "
    "never through their attributes. The other rules of CUDA responses' python blocks hold (no eval/exec/open, no "
    "dunder or private attributes, no torch.ops/torch.utils/.numpy(), no global state).")


def imports_triton(source: str) -> bool:
    """Whether Python source has an ``import triton`` or ``from triton ...`` line."""
    return bool(_IMPORTS_TRITON_RE.search(source))


def is_triton_response(response: Any) -> bool:
    """Whether a response is in the Triton form: no ```cuda block, a ```python block importing triton.

    Accepts the response text or a `ParsedResponse` (one with an empty ``cuda`` block).
    """
    return parse.is_kernel_module_response(response, "triton", imports_triton)


def is_triton_job(job: Any) -> bool:
    """Whether an `EvalJob` carries a Triton response (an empty cuda block, a python block importing triton)."""
    return not (job.cuda or "").strip() and imports_triton(job.python or "") and not job.extensions


def triton_layout() -> str:
    return "Expected (Triton form):\n\n" + TRITON_LAYOUT


def _dotted_root(node: ast.expr) -> tuple[str, list[str]]:
    """``a.b.c`` -> ("a", ["b", "c"]); ("", []) when the root is not a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id, list(reversed(parts))) if isinstance(node, ast.Name) else ("", [])


def _is_kernel_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr in _DECORATOR_WRAPPERS or \
        isinstance(target, ast.Name) and target.id in _DECORATOR_WRAPPERS


def _is_jit_function(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "jit" or isinstance(target, ast.Name) and \
                target.id == "jit":
            return True
    return False


def kernel_names(source: str) -> list[str]:
    """Names of the top-level ``@triton.jit`` functions of a Triton python block."""
    return [node.name for node in parse_python(source).body if _is_jit_function(node)]


def _constant_names(tree: ast.Module) -> set[str]:
    """Module-level names bound to literals (``BLOCK = 256``, ``EPS = tl.constexpr(1e-5)``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value.args[0] if isinstance(node.value, ast.Call) and len(node.value.args) == 1 and \
                isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "constexpr" else node.value
            if isinstance(value, ast.Constant) or isinstance(value, ast.UnaryOp) and isinstance(value.operand,
                                                                                                ast.Constant):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


#: Modules inside triton.language that reach its implementation (``tl.core``) or Python's import machinery
#: (``tl.extra.pkgutil``); a kernel names tl's functions and types, ``tl.math.<f>``, ``tl.random.<f>``, libdevice.
_LANGUAGE_MODULES = frozenset({"core", "standard", "target_info", "extra", "math", "random", "semantic"})


def _language_path_allowed(path: list[str]) -> bool:
    """Whether ``tl.<path>`` is a name of the kernel language: ``tl.load``, ``tl.math.exp``,
    ``tl.extra.libdevice.tanh``, ``tl.extra.cuda.libdevice.tanh`` (and ``libdevice.<f>`` as ["libdevice", f])."""
    if not path or any(p.startswith("_") for p in path):
        return False
    if path[0] == "extra":
        path = path[2:] if path[1:2] == ["cuda"] else path[1:]
        return len(path) == 2 and path[0] == "libdevice" and path[1] not in _LANGUAGE_MODULES
    if path[0] == "libdevice":
        return len(path) == 2 and path[1] not in _LANGUAGE_MODULES
    if path[0] in {"math", "random"}:
        return len(path) == 2 and path[1] not in _LANGUAGE_MODULES
    return len(path) == 1 and path[0] not in _LANGUAGE_MODULES


class _TritonChecker(PythonChecker):
    """The python-block static check, with Triton's API admitted and the kernel bodies confined."""

    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.triton_names: set[str] = set()     # bound to the triton package
        self.language_names: set[str] = set()   # bound to triton.language or libdevice
        self.kernels = {n.name for n in tree.body if _is_jit_function(n)}
        self.constants = _constant_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "triton" or alias.name.startswith("triton.") and not alias.asname:
                        self.triton_names.add("triton")
                    elif alias.name in TRITON_MODULES:
                        self.language_names.add(alias.asname or alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module in TRITON_MODULES and not node.level:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in TRITON_MODULES:
                        self.language_names.add(alias.asname or alias.name)
        self.module_names |= self.triton_names | self.language_names
        self.language_aliases = {n for n in self.language_names if n not in self.libdevice_names()}

    def libdevice_names(self) -> set[str]:
        """Names bound to libdevice itself (``from triton.language.extra import libdevice``)."""
        names = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module in TRITON_MODULES:
                names.update(a.asname or a.name for a in node.names if a.name == "libdevice")
            elif isinstance(node, ast.Import):
                names.update(a.asname for a in node.names if a.asname and a.name.endswith(".libdevice"))
        return names

    def language_root(self, name: str) -> bool:
        """Whether `name` is bound to triton.language (``tl``), not to libdevice."""
        return name in self.language_aliases

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import) and all(a.name in TRITON_MODULES for a in node.names):
            return
        if isinstance(node, ast.ImportFrom) and not node.level and node.module in TRITON_MODULES:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if alias.name == "*":
                    self.flag(node, f"`from {node.module} import *` is not allowed; write "
                                    "`import triton.language as tl`")
                elif not (name in TRITON_MODULES or node.module == "triton" and alias.name in TRITON_API):
                    self.flag(node, f"`from {node.module} import {alias.name}` is not allowed; from triton a block "
                                    f"may take only {', '.join(sorted(TRITON_API))}")
            return
        module = node.names[0].name if isinstance(node, ast.Import) else "." * node.level + (node.module or "")
        if module.split(".")[0] == "triton":
            self.flag(node, f"importing `{module}` is not allowed; a Triton block may import only "
                            f"{', '.join(sorted(TRITON_MODULES))}")
            return
        allowed = ", ".join(sorted(ALLOWED_IMPORTS | TRITON_MODULES))
        if isinstance(node, ast.Import) and any(a.name not in ALLOWED_IMPORTS for a in node.names) or \
                isinstance(node, ast.ImportFrom) and module not in ALLOWED_IMPORTS:
            self.flag(node, f"importing `{module}` is not allowed; a Triton block may import only {allowed}")
            return
        super().check_import(node)

    def check_attribute(self, node: ast.Attribute, scope: Any) -> None:
        root, parts = _dotted_root(node)
        writing = isinstance(node.ctx, (ast.Store, ast.Del))
        if id(node) in self.attribute_bases and (root in self.language_names or root in self.triton_names):
            return  # a prefix of a longer chain: the whole chain is judged at its outermost attribute
        if not writing and root in self.language_names:
            path = parts if self.language_root(root) else ["libdevice", *parts]
            if not _language_path_allowed(path):
                self.flag(node, f"`{root}.{'.'.join(parts)}` is not allowed; a kernel uses the names of "
                                "triton.language (tl.load, tl.math.exp...) and libdevice, not its modules")
            return
        if not writing and root in self.triton_names and parts:
            if parts[0] == "language":
                if not _language_path_allowed(parts[1:]):
                    self.flag(node, f"`{root}.{'.'.join(parts)}` is not allowed; a kernel uses the names of "
                                    "triton.language, not its modules")
                return  # triton.language.<name>
            if len(parts) == 1 and parts[0] in TRITON_API:
                return
            if parts[0] not in TRITON_API:
                self.flag(node, f"`triton.{parts[0]}` is not allowed; from triton a block may use only "
                                f"{', '.join(sorted(TRITON_API))}")
                return
        if root in self.kernels and len(parts) == 1 and node.value.__class__ is ast.Name:
            self.flag(node, f"`{root}.{node.attr}`: a Triton kernel is launched only as {root}[grid](...), never "
                            "through its attributes")
            return
        super().check_attribute(node, scope)

    def visit(self, node: ast.AST, scope: Any) -> list[tuple[ast.AST, Any]]:
        if isinstance(node, ast.keyword) and node.arg in HOOK_KEYWORDS:
            self.flag(node.value, f"`{node.arg}=` is not allowed: autotuning hooks would run Python around a launch; "
                                  "give triton.autotune its configs and key only")
        return super().visit(node, scope)

    def enter_function(self, node: Any, scope: Any) -> list[tuple[ast.AST, Any]]:
        if _is_jit_function(node):
            self.check_kernel_body(node)
        return super().enter_function(node, scope)

    def check_kernel_body(self, node: ast.FunctionDef) -> None:
        """A kernel reads only its own names, tl/triton, other kernels, module-level constants and a few builtins."""
        body = [sub for stmt in node.body for sub in ast.walk(stmt)]  # not the decorators (heuristics' lambdas)
        local = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        local |= {sub.id for sub in body if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)}
        allowed = local | self.triton_names | self.language_names | self.kernels | self.constants | KERNEL_BUILTINS
        for sub in body:
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in allowed:
                known = hasattr(builtins, sub.id)
                what = "this builtin" if known else "a module, helper or variable of the block"
                self.flag(sub, f"`{sub.id}` is used inside @triton.jit kernel `{node.name}` ({what}); a kernel may "
                               "use only tl, its parameters, other @triton.jit functions and module-level constants")
            elif isinstance(sub, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
                self.flag(sub, f"nested functions and classes are not allowed inside @triton.jit kernel `{node.name}`")


def check_triton_block(source: str) -> None:
    """The static check of a Triton python block (the CUDA python-block rules plus Triton's API).

    Raises:
        FormatError: naming each refused construct with its line, then `TRITON_RULES`.
    """
    parse.check_kernel_module(source, lambda tree: _TritonChecker(tree).run(), kernel_names, "Triton", "@triton.jit",
                              triton_layout(), TRITON_RULES)


def parse_triton_response(text: str) -> ParsedResponse:
    """The python block of a Triton response, checked, as a `ParsedResponse` with an empty ``cuda`` block.

    Raises:
        FormatError: two python blocks, a block that does not parse or lacks ModelNew, a refused
            construct, or no ``@triton.jit`` kernel; the message shows the Triton layout.
    """
    return parse.parse_kernel_module(text, "Triton", "@triton.jit", triton_layout(), check_triton_block)


def prepare_triton(task: Any, response: str) -> ParsedResponse | EvalResult:
    """`prepare_cuda`, for a Triton response: the parsed block, or a FORMAT_ERROR result."""
    try:
        parsed = parse_triton_response(response)
    except FormatError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="format", answer_format="triton")
    return parsed


__all__ = ["TRITON_API", "TRITON_LAYOUT", "TRITON_MODULES", "TRITON_RESPONSE_FORMAT", "TRITON_RULES",
           "check_triton_block", "imports_triton", "is_triton_job", "is_triton_response", "kernel_names",
           "parse_triton_response", "prepare_triton"]
