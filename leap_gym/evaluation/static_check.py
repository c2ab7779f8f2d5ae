"""Static check of the ``python`` block: only what a kernel wrapper needs, checked on its AST.

A wrapper imports torch, defines ``class ModelNew(nn.Module)``, and in ``forward`` allocates outputs
and launches kernels through the injected ``kernels`` object. The check runs before any of the
block's code does, and refuses the constructs that serve only to escape the evaluation:

1. Imports: only the modules in `ALLOWED_IMPORTS` (``torch``, ``torch.nn``, ``torch.nn.functional``,
   ``math``, ``typing``, ``__future__``), never ``*``. (``torch.nn.functional`` may be imported; the
   run-time operator guard refuses its compute operators inside ``forward``.)
2. Builtins: the names in `FORBIDDEN_NAMES` (``eval``, ``exec``, ``compile``, ``open``, ``getattr``,
   ``globals``, ``type``, ``exit``, ``SystemExit``, ...) may not be used, unless a function binds
   the name itself (a parameter or local called ``input`` is fine).
3. Dunder names and attributes: none (``__class__``, ``__globals__``, ``__dict__``,
   ``__builtins__``, ``__subclasses__``, ...), except ``X.__init__(...)`` calls such as
   ``super().__init__()``, reading ``__name__``, and defining ``__init__`` methods. Private
   attributes (``obj._name``) are refused as well: they reach torch's internals.
4. Attributes in `FORBIDDEN_ATTRIBUTES`: ``torch.ops``, ``torch.library``, ``torch.compile``,
   ``torch.jit``, ``torch.utils`` (``cpp_extension.load_inline``, the dispatch internals), CUDA
   streams and graphs (``torch.cuda.Stream``, ``torch.cuda.stream``, ``current_stream``, ...),
   ``torch.backends`` and global precision or seed settings, ``numpy()``, ``torch.load``/``save``;
   and any attribute with ``hook`` in its name (module hooks could rewrite the reference).
5. Statements: no ``global``/``nonlocal``, no ``async`` code, no class keywords (``metaclass=``).
6. State: attributes may be assigned or deleted only on ``self`` (the first parameter of a method),
   never on a module, a class or another object; ``self`` is never rebound; module objects
   (``torch``, ``nn``, ``F``, ``math``, ``torch.cuda`` ...) are used only as ``module.name``, never
   passed or stored; methods are called on the instance, never through the class
   (``ModelNew.patch(obj)`` would make ``obj`` the ``self`` that may be assigned to); module-level
   variables are not mutated from functions (``CACHE[k] = v``).

``kernels.<name>`` takes any public kernel name (a kernel may be called ``load`` or ``stream``) as
long as the block never rebinds ``kernels``. The body of an ``if __name__ == "__main__":`` block
is not checked: the block runs as module ``model_new``, so that code never runs (LLMs often append
a test harness there).

Everything else (helper functions and classes, lambdas, comprehensions, ``try``, ``with
torch.no_grad()``, ``nn.Parameter``, ``register_buffer``) is allowed. Streams, module-level caches
and torch compute operators are also defended at run time; this check gives the early, explained
answer.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from leap_gym.evaluation.parse import FormatError
from leap_gym.pyparse import parse_python

ALLOWED_IMPORTS = frozenset({"torch", "torch.nn", "torch.nn.functional", "math", "typing", "__future__"})

FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "globals", "locals",
    "vars", "dir", "breakpoint", "input", "help", "memoryview", "type", "exit", "quit", "SystemExit",
    "KeyboardInterrupt", "GeneratorExit", "BaseException",
})

FORBIDDEN_ATTRIBUTES = frozenset({
    # compilation, dispatch and extension machinery that runs work outside the launched kernels
    "ops", "library", "compile", "jit", "utils", "cpp_extension", "load_inline", "fx", "overrides", "hub",
    "export", "package", "classes",
    # other streams, graphs, processes and threads
    "Stream", "stream", "ExternalStream", "StreamContext", "current_stream", "default_stream", "set_stream",
    "CUDAGraph", "graph", "graphs", "make_graphed_callables", "multiprocessing", "distributed", "futures",
    # global settings that change the reference's precision or the inputs' seeds
    "backends", "set_float32_matmul_precision", "set_flush_denormal", "set_default_dtype",
    "set_default_device", "set_default_tensor_type", "use_deterministic_algorithms", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "set_rng_state", "set_rng_state_all",
    # leaving torch (numpy compute) and files
    "numpy", "from_numpy", "load", "save", "from_file",
})

KERNELS_NAME = "kernels"  # the injected launch handle: kernels.<name>(grid, block, *args, shared_mem=0)
ALLOWED_DUNDER_ATTRIBUTE_CALLS = frozenset({"__init__"})
ALLOWED_DUNDER_NAMES = frozenset({"__name__"})
ALLOWED_DUNDER_METHODS = frozenset({"__init__"})

# Module-valued attributes of the allowed modules: `torch.nn` is a module object like `torch`.
MODULE_ATTRIBUTES = frozenset({"nn", "functional", "cuda", "linalg", "fft", "special", "init", "sparse", "random",
                               "autograd", "amp", "testing", "distributions", "nested", "masked", "optim",
                               "profiler", "quantization", "signal", "mps", "cpu", "xpu", "modules", "parameter"})

PYTHON_RULES = (
    "The python block may import only torch, torch.nn, torch.nn.functional, math, typing and __future__. It "
    "defines class ModelNew(nn.Module) whose forward allocates outputs (torch.empty, torch.zeros, views) and "
    "launches kernels through the injected `kernels` object: kernels.<name>(grid, block, *args, shared_mem=0). "
    "Not allowed: other imports; eval/exec/compile/open/getattr/setattr/globals/vars/type and similar builtins; "
    "dunder or private attributes (super().__init__() is fine); global/nonlocal; async code; torch.ops, "
    "torch.library, torch.compile, torch.jit, torch.utils, torch.backends; CUDA streams and graphs; hooks; "
    ".numpy(); torch.load/save; assigning attributes of anything but self; passing module objects around."
)


@dataclass
class Violation:
    """One refused construct: its line in the python block and what was wrong."""

    line: int
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what}"


@dataclass
class _Scope:
    kind: str                 # "module", "class" or "function"
    names: frozenset[str]     # names bound in a function scope (parameters, assignments, imports, defs)
    parent: _Scope | None
    self_name: str = ""       # the first parameter of a plain method


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_NEW_SCOPES = (*_FUNCTIONS, ast.ClassDef, *_COMPREHENSIONS)


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _arg_names(args: ast.arguments) -> list[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return [a.arg for a in every]


def _bound_names(node: ast.AST, imports: bool = False, params: bool = True) -> frozenset[str]:
    """Names a function (or comprehension) binds in its own scope; nested scopes are not entered.

    Names bound by imports are left out unless asked for: they hold modules, which never earn the
    exemptions that a local variable (a parameter called ``input``) does.
    """
    if isinstance(node, _COMPREHENSIONS):
        targets = [g.target for g in node.generators]
        return frozenset(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    names = set(_arg_names(node.args)) if params else set()
    body = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    stack: list[ast.AST] = list(body)
    while stack:
        item = stack.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
            continue
        if isinstance(item, (ast.Lambda, *_COMPREHENSIONS)):
            continue
        if isinstance(item, ast.Name) and isinstance(item.ctx, (ast.Store, ast.Del)):
            names.add(item.id)
        elif isinstance(item, ast.ExceptHandler) and item.name:
            names.add(item.name)
        elif imports and isinstance(item, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in item.names)
        stack.extend(ast.iter_child_nodes(item))
    return frozenset(names)


def _resolves_locally(name: str, scope: _Scope) -> bool:
    """Whether a name read in `scope` is a function local (or a closure over one), never a global/builtin."""
    current: _Scope | None = scope
    if scope.kind != "function":
        return False
    while current is not None:
        if current.kind == "function" and name in current.names:
            return True
        if current.kind == "module":
            return False
        current = current.parent
    return False


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


class PythonChecker:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.violations: list[Violation] = []
        self.module_names: set[str] = set()           # names bound to module objects by imports
        self.attribute_bases: set[int] = set()         # ids of nodes used as `node.attr` (or `node[...]`)
        self.init_calls: set[int] = set()              # ids of `X.__init__` attribute nodes that are called
        self.module_level: set[str] = set()           # names bound at module level
        self.kernels_rebound = False                   # whether `kernels` is bound to anything else
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == KERNELS_NAME and not isinstance(node.ctx, ast.Load) or \
                    isinstance(node, ast.arg) and node.arg == KERNELS_NAME or \
                    isinstance(node, ast.alias) and (node.asname or node.name).split(".")[0] == KERNELS_NAME or \
                    isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                    node.name == KERNELS_NAME or isinstance(node, ast.ExceptHandler) and node.name == KERNELS_NAME:
                self.kernels_rebound = True
            if isinstance(node, ast.Attribute):
                self.attribute_bases.add(id(node.value))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ALLOWED_DUNDER_ATTRIBUTE_CALLS:
                self.init_calls.add(id(node.func))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.module_names.update(_module_bindings(node))
        self.class_methods: dict[str, set[str]] = {}  # module-level classes: their plain methods
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.class_methods[node.name] = {
                    f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not any(isinstance(d, ast.Name) and d.id in {"staticmethod", "classmethod"}
                                for d in f.decorator_list)}
        for node in tree.body:
            for sub in ast.walk(node) if not isinstance(node, _NEW_SCOPES) else [node]:
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    self.module_level.add(sub.id)
                elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.module_level.add(sub.name)

    def flag(self, node: ast.AST, what: str) -> None:
        self.violations.append(Violation(getattr(node, "lineno", 0) or 0, what))

    def run(self) -> list[Violation]:
        module = _Scope("module", frozenset(), None)
        stack: list[tuple[ast.AST, _Scope]] = [(self.tree, module)]
        while stack:
            node, scope = stack.pop()
            children = self.visit(node, scope)
            stack.extend(reversed(children))
        self.violations.sort(key=lambda v: v.line)
        return self.violations

    # Each visit checks one node and returns its children with the scope they are evaluated in.
    def visit(self, node: ast.AST, scope: _Scope) -> list[tuple[ast.AST, _Scope]]:
        if isinstance(node, ast.If) and scope.kind == "module" and _is_main_guard(node.test):
            return [(n, scope) for n in node.orelse]  # `if __name__ == "__main__":` never runs here
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.check_import(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            kind = "global" if isinstance(node, ast.Global) else "nonlocal"
            self.flag(node, f"`{kind} {', '.join(node.names)}` is not allowed; keep state on self")
        elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            self.flag(node, "async code is not allowed; forward runs synchronously and launches kernels")
        elif isinstance(node, ast.Name):
            self.check_name(node, scope)
        elif isinstance(node, ast.Attribute):
            self.check_attribute(node, scope)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in self.module_level and scope.kind == "function" \
                    and not _resolves_locally(root.id, scope):
                self.flag(node, f"mutating the module-level variable `{root.id}` from a function is not allowed; "
                                "results must not be cached between calls")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return self.enter_function(node, scope)
        if isinstance(node, ast.ClassDef):
            if node.keywords:
                self.flag(node, f"class {node.name}: class keywords such as metaclass= are not allowed")
            outer = [*node.decorator_list, *node.bases, *node.keywords]
            inner = _Scope("class", frozenset(), scope)
            return [(n, scope) for n in outer] + [(n, inner) for n in node.body]
        if isinstance(node, _COMPREHENSIONS):
            inner = _Scope("function", _bound_names(node), scope)
            first, *rest = node.generators
            kids: list[tuple[ast.AST, _Scope]] = [(first.iter, scope), (first.target, inner)]
            kids += [(n, inner) for n in first.ifs]
            kids += [(n, inner) for g in rest for n in ast.iter_child_nodes(g)]
            elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            return kids + [(n, inner) for n in elts]
        return [(child, scope) for child in ast.iter_child_nodes(node)]

    def enter_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
                       scope: _Scope) -> list[tuple[ast.AST, _Scope]]:
        args = node.args
        self_name = ""
        if not isinstance(node, ast.Lambda):
            if _is_dunder(node.name) and node.name not in ALLOWED_DUNDER_METHODS:
                self.flag(node, f"defining `{node.name}` is not allowed; a wrapper defines __init__, forward and "
                                "plain helper methods")
            positional = [*args.posonlyargs, *args.args]
            special = any(isinstance(d, ast.Name) and d.id in {"staticmethod", "classmethod"}
                          for d in node.decorator_list)
            if scope.kind == "class" and not special and positional:
                self_name = positional[0].arg
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.arg == "self" and a.arg != self_name:
                self.flag(a, "a parameter named `self` is only allowed as the first parameter of a method")
            if a is not None and _is_dunder(a.arg):
                self.flag(a, f"the dunder parameter name `{a.arg}` is not allowed")
        if self_name and (args.defaults and len(args.defaults) == len([*args.posonlyargs, *args.args])):
            self.flag(node, f"the first parameter `{self_name}` of a method may not have a default value")
        if self_name and self_name in _bound_names(node, imports=True, params=False):
            self.flag(node, f"method {node.name} rebinds its first parameter `{self_name}`; that is not allowed")
        inner = _Scope("function", _bound_names(node), scope, self_name)
        outer: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        if not isinstance(node, ast.Lambda):
            outer += list(node.decorator_list)
            outer += [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                      if a is not None and a.annotation is not None]
            if node.returns is not None:
                outer.append(node.returns)
            body: list[ast.AST] = list(node.body)
        else:
            body = [node.body]
        return [(n, scope) for n in outer] + [(n, inner) for n in body]

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        allowed = ", ".join(sorted(ALLOWED_IMPORTS))
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    self.flag(node, f"`import {alias.name}` is not allowed; the python block may import only {allowed}")
            return
        module = "." * node.level + (node.module or "")
        if module not in ALLOWED_IMPORTS:
            self.flag(node, f"`from {module} import ...` is not allowed; the python block may import only {allowed}")
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"`from {module} import *` is not allowed; import the module (import torch) instead")
            elif alias.name in FORBIDDEN_ATTRIBUTES or alias.name.startswith("_") and module != "__future__":
                self.flag(node, f"`from {module} import {alias.name}` is not allowed ({alias.name} is off limits)")

    def check_name(self, node: ast.Name, scope: _Scope) -> None:
        name = node.id
        if _is_dunder(name):
            if not (name in ALLOWED_DUNDER_NAMES and isinstance(node.ctx, ast.Load)):
                self.flag(node, f"the name `{name}` is not allowed (no dunder names; only __name__ may be read)")
            return
        if name in FORBIDDEN_NAMES and not _resolves_locally(name, scope):
            self.flag(node, f"`{name}` is not allowed in the python block (no eval/exec/open/introspection builtins; "
                            "use isinstance() for type checks)")
        if name == "self" and isinstance(node.ctx, (ast.Store, ast.Del)):
            self.flag(node, "rebinding `self` is not allowed")
        if isinstance(node.ctx, ast.Load) and name in self.module_names and id(node) not in self.attribute_bases \
                and not _resolves_locally(name, scope):
            self.flag(node, f"the module `{name}` may only be used as `{name}.<name>`, not passed or stored")

    def check_attribute(self, node: ast.Attribute, scope: _Scope) -> None:
        attr = node.attr
        if _is_dunder(attr):
            if not (attr in ALLOWED_DUNDER_ATTRIBUTE_CALLS and id(node) in self.init_calls):
                self.flag(node, f"the dunder attribute `.{attr}` is not allowed (only calls such as "
                                "super().__init__() are)")
            return
        if attr.startswith("_"):
            self.flag(node, f"the private attribute `.{attr}` is not allowed; use public torch APIs")
            return
        if isinstance(node.value, ast.Name) and attr in self.class_methods.get(node.value.id, ()) \
                and not _resolves_locally(node.value.id, scope):
            self.flag(node, f"`{node.value.id}.{attr}` reaches a method through its class; call it on the instance "
                            f"(self.{attr}(...))")
        if isinstance(node.value, ast.Name) and node.value.id == KERNELS_NAME and not self.kernels_rebound:
            pass  # kernels.<kernel name>: any public name is a kernel of the cuda block
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.flag(node, f"`.{attr}` is not allowed in the python block: {_attribute_reason(attr)}")
        elif "hook" in attr.lower():
            self.flag(node, f"`.{attr}` is not allowed: hooks could change how other modules run")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if not (isinstance(root, ast.Name) and _is_method_self(root.id, scope)):
                what = "assigning" if isinstance(node.ctx, ast.Store) else "deleting"
                self.flag(node, f"{what} the attribute `.{attr}` of anything but `self` is not allowed (monkey-"
                                "patching modules or classes is refused)")
        elif attr in MODULE_ATTRIBUTES and id(node) not in self.attribute_bases:
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in self.module_names and not _resolves_locally(root.id, scope):
                self.flag(node, f"the module `{_dotted(node)}` may only be used as `{_dotted(node)}.<name>`, "
                                "not passed or stored")


def _module_bindings(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The names an import binds to module objects (``import torch.nn as nn``, ``from torch import nn``)."""
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    module = node.module or ""
    return {a.asname or a.name for a in node.names if f"{module}.{a.name}" in ALLOWED_IMPORTS}


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either order): the block runs as module ``model_new``, so it never holds."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(a, ast.Name) and a.id == "__name__" for a in sides) and \
        any(isinstance(a, ast.Constant) and a.value == "__main__" for a in sides)


def _is_method_self(name: str, scope: _Scope) -> bool:
    """Whether `name` is, in `scope`, the first parameter of the enclosing method (or a closure over it)."""
    current: _Scope | None = scope
    while current is not None and current.kind == "function":
        if current.self_name:
            return current.self_name == name
        if name in current.names:
            return False  # a nested function's own binding of the name
        current = current.parent
    return False


def _dotted(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(node.id if isinstance(node, ast.Name) else "...")
    return ".".join(reversed(parts))


def _attribute_reason(attr: str) -> str:
    if attr in {"Stream", "stream", "ExternalStream", "StreamContext", "current_stream", "default_stream",
                "set_stream", "CUDAGraph", "graph", "graphs", "make_graphed_callables"}:
        return "kernels run on the evaluation's stream; CUDA streams and graphs are refused"
    if attr in {"numpy", "from_numpy"}:
        return "the computation must stay in your CUDA kernels, not numpy"
    if attr in {"load", "save", "from_file"}:
        return "no file access"
    if attr in {"ops", "library", "compile", "jit", "utils", "cpp_extension", "load_inline", "fx", "overrides",
                "export", "package", "classes", "hub"}:
        return "kernels come from the ```cuda block through `kernels`, not torch's compilers, extensions or operators"
    if attr in {"multiprocessing", "distributed", "futures"}:
        return "no processes or threads"
    return "global torch settings (precision, seeds, defaults) may not be changed"


def find_violations(source: str) -> list[Violation]:
    """Every refused construct of a python block (sorted by line); empty when it passes.

    Raises:
        FormatError: when the source does not parse at all.
    """
    try:
        tree = parse_python(source, filename="python block")
    except SyntaxError as exc:
        raise FormatError(f"the ```python block does not parse: SyntaxError: {exc.msg} at line {exc.lineno}",
                          line=exc.lineno) from None
    except (ValueError, MemoryError, RecursionError, OverflowError) as exc:
        raise FormatError(f"the ```python block cannot be parsed: {type(exc).__name__}") from None
    return PythonChecker(tree).run()


def check_python_block(source: str) -> None:
    """Refuse a python block that uses anything beyond what a kernel wrapper needs.

    Args:
        source: the python block (or a task's default wrapper).

    Raises:
        FormatError: naming each refused construct with its line in the block (the first five), then
            the rules (`PYTHON_RULES`). `FormatError.line` is the first violation's line.
    """
    violations = find_violations(source)
    if not violations:
        return
    shown = "\n".join(f"  {v}" for v in violations[:5])
    more = f"\n  ... and {len(violations) - 5} more" if len(violations) > 5 else ""
    plural = "s" if len(violations) > 1 else ""
    raise FormatError(f"the ```python block uses {len(violations)} construct{plural} that wrappers may not use:\n"
                      f"{shown}{more}", line=violations[0].line, expected=PYTHON_RULES)
