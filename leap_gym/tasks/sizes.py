"""Size overrides of a task file, and shrinking a KernelBench problem to a CPU-sized one.

An override replaces a size where the file states it, before the file runs, so every size derived
from it follows (``bias_shape = (out_channels, 1, 1)`` shrinks with ``out_channels``). Keys:

- ``name``: a module-level constant, an int or a tuple of ints (``input_shape = (32768,)``);
- ``get_inputs:<literal>``: every occurrence of an int literal in ``get_inputs``'s body
  (``torch.rand(batch_size, 3, 224, 224)``), for files that write sizes there.

`shrink_to_numel` halves the largest size that still reduces the inputs' element count, one at a
time, and keeps a halving only when the reference still builds and runs on the ``meta`` device at
the new sizes, so the sizes a kernel depends on (kernel sizes larger than the input, channels that
groups must divide, reduce dimensions, sizes tied to literals in the model) stay valid.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

import torch

from leap_gym.pyparse import compile_tree, parse_python

if TYPE_CHECKING:
    from leap_gym.tasks import Task

Size = int | tuple[int, ...]

#: Sizes below this are never halved (channels of 3, kernel sizes, dims); halving stops at `FLOOR`.
SHRINKABLE_FROM = 16
FLOOR = 8
#: The last resort, for problems with many input dimensions: (halve from, down to).
SMALL_SIZES = (4, 2)
LITERAL_PREFIX = "get_inputs:"
_MAX_STEPS = 400


class ShrinkError(ValueError):
    """A task that cannot be brought to the requested size; the message says why."""


def _is_size(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool)
                                                             for v in value)


def _constant_node(value: Size) -> ast.expr:
    return parse_python(repr(value), mode="eval").body


class _Override(ast.NodeTransformer):
    def __init__(self, overrides: dict[str, Size]):
        self.constants = {k: v for k, v in overrides.items() if not k.startswith(LITERAL_PREFIX)}
        self.literals = {int(k[len(LITERAL_PREFIX):]): v for k, v in overrides.items() if k.startswith(LITERAL_PREFIX)}

    def rewrite(self, tree: ast.Module) -> ast.Module:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id in self.constants:
                node.value = ast.copy_location(_constant_node(self.constants[node.targets[0].id]), node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None \
                    and node.target.id in self.constants:
                node.value = ast.copy_location(_constant_node(self.constants[node.target.id]), node.value)
            elif isinstance(node, ast.FunctionDef) and node.name == "get_inputs" and self.literals:
                node.body = [self.visit(statement) for statement in node.body]
        return ast.fix_missing_locations(tree)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is int and node.value in self.literals:
            return ast.copy_location(ast.Constant(self.literals[node.value]), node)
        return node


class _DropCuda(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "cuda" and not node.args and not node.keywords:
            return node.func.value  # x.cuda(): the harness puts inputs on the backend's device
        return node


@lru_cache(maxsize=256)
def _compiled(source: str, filename: str, items: tuple[tuple[str, Size], ...]) -> Any:
    if not items and ".cuda(" not in source:
        return compile(source, filename, "exec")
    tree = _Override(dict(items)).rewrite(parse_python(source, filename))
    if ".cuda(" in source:
        tree = ast.fix_missing_locations(_DropCuda().visit(tree))
    return compile_tree(tree, filename)


def compile_with_overrides(source: str, filename: str, overrides: dict[str, Size]) -> Any:
    """The task file's code object with `overrides` substituted where the sizes are stated.

    Argument-less ``.cuda()`` calls (KernelBench's examples write ``torch.randn(...).cuda()``) are
    dropped: the harness puts inputs and models on the backend's device itself.
    """
    return _compiled(source, filename, tuple(sorted(overrides.items())))


def inputs_literals(source: str) -> dict[str, int]:
    """The int literals of at least `SHRINKABLE_FROM` in ``get_inputs``'s body, as override keys."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return {}
    found: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            for statement in node.body:
                for sub in ast.walk(statement):
                    if isinstance(sub, ast.Constant) and type(sub.value) is int and sub.value >= SHRINKABLE_FROM:
                        found[f"{LITERAL_PREFIX}{sub.value}"] = sub.value
    return found


def module_sizes(namespace: dict[str, Any]) -> dict[str, Size]:
    """Module-level int and int-tuple constants of a task namespace (public names only)."""
    return {n: v for n, v in namespace.items() if _is_size(v) and not n.startswith("_") and n != "LEAP_TASK"}


def _inputs(namespace: dict[str, Any]) -> list[Any]:
    with torch.device("meta"):
        return list(namespace["get_inputs"]())


def _numel(inputs: list[Any]) -> int:
    return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))


def _reference_runs(task: Task, device: str) -> str:
    """Build the reference and run it on `device` tensors at the task's sizes: "" if it runs, else why not."""
    try:
        namespace = task.module()
        torch.manual_seed(0)
        with torch.device(device):
            model = namespace["Model"](*list(namespace["get_init_inputs"]()))
            inputs = list(namespace["get_inputs"]())
            with torch.no_grad():
                model(*inputs)
    except Exception as exc:  # any failure of the reference at these sizes
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return ""


def meta_check(task: Task) -> str:
    """Build the reference and run it on ``meta`` tensors at the task's sizes (shapes only, no compute)."""
    return _reference_runs(task, "meta")


def run_check(task: Task) -> str:
    """Build the reference and run it on real CPU tensors at the task's sizes."""
    return _reference_runs(task, "cpu")


Spot = tuple[str, int | None]  # a size: its override key, and its index when the value is a tuple


def _halved(sizes: dict[str, Size], spots: tuple[Spot, ...], floor: int) -> dict[str, Size]:
    """The new values of the keys of `spots`, each spot halved (not below `floor`)."""
    changed: dict[str, Size] = {}
    for key, index in spots:
        value = changed.get(key, sizes[key])
        if index is None:
            changed[key] = max(floor, int(value) // 2)
        else:
            items = list(value)  # type: ignore[arg-type]
            items[index] = max(floor, items[index] // 2)
            changed[key] = tuple(items)
    return changed


def _candidates(sizes: dict[str, Size], start: int) -> list[tuple[Spot, ...]]:
    """Every size of at least `start` alone, largest first; then each group of equal sizes together.

    Equal sizes are often one size written twice (a hinge loss's ``batch_size`` and
    ``input_shape[0]`` must match for its broadcast), so they are also tried halved at once.
    """
    found: list[tuple[int, Spot]] = []
    for key, value in sizes.items():
        if isinstance(value, tuple):
            found += [(v, (key, i)) for i, v in enumerate(value) if v >= start]
        elif value >= start:
            found.append((value, (key, None)))
    # At equal values a plain constant goes before a tuple's element: ``input_shape = (num_classes,)``
    # then shrinks through ``num_classes``, and so do the sizes derived from it (a target's class range).
    found.sort(key=lambda c: (-c[0], c[1][1] is not None, c[1][0], c[1][1] or 0))
    singles = [(spot,) for _, spot in found]
    groups = []
    for value in sorted({v for v, _ in found}, reverse=True):
        group = tuple(spot for v, spot in found if v == value)
        if len(group) > 1:
            groups.append(group)
    return singles + groups


def shrink_to_numel(task: Task, max_numel: int, validate: Callable[[Task], str] = meta_check) -> Task:
    """The task with sizes halved until its inputs hold at most `max_numel` elements in all.

    Module-level size constants are tried first; the int literals of ``get_inputs`` join them only
    when the constants alone cannot get there. A halving is kept only when `validate` accepts the
    task at the new sizes (by default the reference builds and runs on ``meta`` tensors; where it cannot
    run on ``meta`` at all, it is run on CPU tensors at each trial size instead).

    Raises:
        ShrinkError: when no sequence of valid halvings reaches `max_numel`, naming the sizes reached.
    """
    from dataclasses import replace

    if max_numel < 1:
        raise ShrinkError(f"max_numel must be at least 1, got {max_numel}")
    overrides: dict[str, Size] = dict(task.overrides)
    current = replace(task, overrides=overrides)
    numel = _numel(_inputs(current.module()))
    if numel <= max_numel:
        return current
    checked = not validate(current)
    if not checked and validate is meta_check:
        # Some references do not run on meta tensors (data-dependent shapes, unsupported operators): their
        # halvings are checked by running them on CPU tensors instead, at each (smaller) trial size.
        validate, checked = run_check, True
    phases = ((False, SHRINKABLE_FROM, FLOOR), (True, SHRINKABLE_FROM, FLOOR), (True, *SMALL_SIZES))
    for with_literals, start, floor in phases:
        sizes = dict(module_sizes(current.module()))
        if with_literals:
            sizes.update({k: overrides.get(k, v) for k, v in inputs_literals(task.source).items()})
        frozen: set[tuple[Spot, ...]] = set()
        for _ in range(_MAX_STEPS):
            progressed = False
            for spots in _candidates(sizes, start):
                if spots in frozen:
                    continue
                changed = _halved(sizes, spots, floor)
                trial = replace(task, overrides={**overrides, **changed})
                try:
                    trial_numel = _numel(_inputs(trial.module()))
                except Exception:  # these sizes break get_inputs itself
                    frozen.add(spots)
                    continue
                if trial_numel >= numel or (checked and validate(trial)):
                    frozen.add(spots)  # not an input size (a class count), or one the reference needs
                    continue
                overrides.update(changed)
                sizes.update(changed)
                numel, current, progressed = trial_numel, trial, True
                break
            if numel <= max_numel:
                return current
            if not progressed:
                break
    reached = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "the file's sizes"
    how = "" if checked else " (halvings were not validated)"
    raise ShrinkError(f"cannot shrink {task.id} to {max_numel} input elements: at {reached} its inputs hold {numel}; "
                      f"halving any further size leaves the count unchanged or breaks the reference{how}")


def describe(overrides: dict[str, Size]) -> str:
    """``name=value`` pairs of overrides, for messages and reports."""
    return ", ".join(f"{re.sub(r'^get_inputs:', 'literal ', k)}={v}" for k, v in sorted(overrides.items()))
