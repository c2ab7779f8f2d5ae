"""The import graph of `leap_gym` and `leap_agents` has no circles, and no module imports another's underscore names.

Every module of both packages is parsed with `ast`; an edge goes from a module to each module of either
package it imports, at module level or inside a function (a lazy import is still a dependency: the
circles the restructuring removed were lazy ones). ``from package import module`` is an edge to the
module; an import of a package's ``__init__`` is an edge to the package. A package's parent
``__init__`` running first is not counted (Python's doing, not the module's).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"leap_gym": ROOT / "leap_gym", "leap_agents": ROOT / "agents"}


def module_files() -> dict[str, Path]:
    """Dotted module name to file, for every module of both packages (task files and runtime data aside)."""
    out: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder)
            if rel.parts[:2] == ("tasks", "builtin") or "cpu_runtime" in rel.parts:
                continue
            parts = [package, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> list[tuple[str, list[str]]]:
    """The intra-package modules `name` imports, each with the names taken from it (``[]`` for ``import x``)."""
    is_package = path.name == "__init__.py"
    found: list[tuple[str, list[str]]] = []
    tree = ast.parse(path.read_text(), str(path))
    for guard in [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING")]:
        guard.body = []  # imports for type checkers only never run, so they cannot close a circle
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target:
                    found.append((target, []))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            if source not in modules:
                continue
            taken = []
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    found.append((f"{source}.{alias.name}", []))
                else:
                    taken.append(alias.name)
            if taken:
                found.append((source, taken))
    return found


def private_attribute_uses(name: str, path: Path, modules: set[str]) -> list[str]:
    """``module._name`` where ``module`` is a name this module bound to another intra-package module."""
    tree = ast.parse(path.read_text(), str(path))
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
    return [f"{name} uses {bound[node.value.id]}.{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
            and node.attr.startswith("_") and not node.attr.startswith("__") and bound[node.value.id] != name]


def build_graph() -> tuple[dict[str, set[str]], list[str]]:
    """The graph (module to the modules it imports) and every cross-module import of an underscore name."""
    files = module_files()
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for name, path in files.items():
        for target, taken in imports_of(name, path, modules):
            if target != name:
                graph[name].add(target)
            private += [f"{name} imports {target}.{t}" for t in taken
                        if t.startswith("_") and not t.startswith("__") and target != name]
        private += private_attribute_uses(name, path, modules)
    return graph, private


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_detector_finds_a_circle_and_a_private_import(tmp_path, monkeypatch):
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"a"}}) == [["a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "one.py").write_text("from pkg.sub import two\n\n"
                                    "def f():\n    from pkg.sub.two import _hidden\n    return two._secret\n")
    (package / "sub" / "two.py").write_text("from pkg import one\n_hidden = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", {"pkg": package})
    graph, private = build_graph()
    assert graph["pkg.one"] == {"pkg.sub.two"} and graph["pkg.sub.two"] == {"pkg.one"}
    assert find_cycles(graph) == [["pkg.one", "pkg.sub.two"]]
    assert private == ["pkg.one imports pkg.sub.two._hidden", "pkg.one uses pkg.sub.two._secret"]


def test_the_packages_have_no_import_circles():
    graph, _ = build_graph()
    assert len(graph) > 60 and "leap_gym.evaluation.pipeline" in graph
    assert find_cycles(graph) == []


def test_no_module_imports_another_modules_underscore_names():
    _, private = build_graph()
    assert private == []


@pytest.mark.parametrize("old", ["leap_gym.parse", "leap_gym.sb3", "leap_gym.evaluate", "leap_agents.rollout",
                                 "leap_agents.mini"])
def test_module_paths_of_the_old_layout_are_gone_and_leap_gym_evaluate_is_the_function(old):
    import importlib

    import leap_agents  # noqa: F401
    import leap_gym
    from leap_gym.evaluation.evaluator import evaluate

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert leap_gym.evaluate is evaluate
