"""Tasks: a PyTorch reference program in KernelBench's file format, plus metadata.

A built-in task is one Python file ``tasks/builtin/level<N>/<name>.py`` with ``class Model``,
``get_inputs()``, ``get_init_inputs()``, module-level size constants, and a ``LEAP_TASK`` dict of
metadata (see `Task`). Its reference solutions are the sibling files ``<name>.solution*.md``, each
a whole response in the response format. A KernelBench folder (``level1/19_ReLU.py``) loads
unchanged with defaults for the metadata.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from leap_gym.tasks.sizes import LITERAL_PREFIX, ShrinkError, compile_with_overrides, shrink_to_numel  # noqa: F401

BUILTIN_DIR = Path(__file__).parent / "builtin"

_DTYPE_TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2), "float64": (1e-8, 1e-8)}


@dataclass
class Task:
    """One problem: a reference `Model` to rewrite as `ModelNew` with CUDA kernels.

    Attributes:
        id: ``level<N>/<name>``.
        source: the task file's Python text (KernelBench format), run with `sizes` applied.
        sizes: size presets, e.g. ``{"cpu": {"N": 4096}, "gpu": {"N": 1 << 24}}``: module-level
            constants set after the file runs. `size` names the preset in use (``""``: the file's own).
        wrapper: the default `ModelNew` for the short form (a response holding only the `cuda` block),
            with `wrapper_signature` the kernel it launches; empty when the task has none.
        reference_solutions: whole responses that are CORRECT (CUDA C++, from ``<name>.solution*.md``).
        triton_solutions: whole Triton responses that are CORRECT (from ``<name>.triton*.md``; see
            `leap_gym.integrations.triton_check`).
        allowed_torch_ops: torch operators `ModelNew.forward` may call besides allocation and views.
    """

    id: str
    source: str
    level: int = 1
    name: str = ""
    description: str = ""
    tags: list[str] = field(default_factory=list)
    dtype: str = "float32"
    atol: float = 1e-4
    rtol: float = 1e-4
    target_speedup: float = 1.0
    sizes: dict[str, dict[str, int]] = field(default_factory=dict)
    size: str = ""
    overrides: dict[str, int | tuple[int, ...]] = field(default_factory=dict)
    wrapper: str = ""
    wrapper_signature: str = ""
    reference_solutions: list[str] = field(default_factory=list)
    triton_solutions: list[str] = field(default_factory=list)
    allowed_torch_ops: list[str] = field(default_factory=list)
    path: str = ""

    def with_size(self, preset: str) -> Task:
        """This task at a size preset (``"cpu"`` or ``"gpu"``); a preset it lacks keeps the current sizes."""
        if preset not in self.sizes:
            return replace(self, size=preset)
        return replace(self, size=preset, overrides=dict(self.sizes[preset]))

    def module(self) -> dict[str, Any]:
        """Run the task file (trusted code) with the size overrides applied; return its namespace.

        An override replaces the constant where the file assigns it, so sizes derived from it follow
        (`leap_gym.tasks.sizes`); one the file does not assign at top level is set after it runs.
        """
        namespace: dict[str, Any] = {"__name__": "leap_task_" + re.sub(r"\W", "_", self.id)}
        exec(compile_with_overrides(self.source, self.path or self.id, self.overrides), namespace)
        namespace.update({k: v for k, v in self.overrides.items() if not k.startswith(LITERAL_PREFIX)})
        return namespace

    def size_constants(self) -> dict[str, int]:
        """The module-level int constants that `sizes` presets may set (names in any preset, or all ints)."""
        names = {n for preset in self.sizes.values() for n in preset}
        namespace = self.module()
        if not names:
            names = {n for n, v in namespace.items() if isinstance(v, int) and not isinstance(v, bool)
                     and not n.startswith("_") and n.upper() != "LEAP_TASK"}
        return {n: namespace[n] for n in sorted(names) if n in namespace}

    @property
    def has_wrapper(self) -> bool:
        return bool(self.wrapper)


def _task_from_file(path: Path, task_id: str, level: int) -> Task:
    source = path.read_text()
    namespace: dict[str, Any] = {"__name__": "leap_task_probe"}
    exec(compile(source, str(path), "exec"), namespace)
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if required not in namespace:
            raise ValueError(f"task file {path} lacks `{required}`; KernelBench format needs Model, get_inputs, "
                             "get_init_inputs")
    meta: dict[str, Any] = dict(namespace.get("LEAP_TASK", {}))
    dtype = meta.get("dtype", "float32")
    atol, rtol = _DTYPE_TOLERANCE.get(dtype, (1e-4, 1e-4))
    doc = (namespace.get("__doc__") or "").strip()
    solutions = [p.read_text() for p in sorted(path.parent.glob(f"{path.stem}.solution*.md"))]
    if "LEAP_TASK" not in namespace:  # a KernelBench file: a default wrapper where one derives exactly
        from leap_gym.tasks.derived import derive_wrapper

        derived = derive_wrapper(namespace, task_id.split("/", 1)[1])
        if derived is not None:
            meta["wrapper"], meta["wrapper_signature"] = derived.wrapper, derived.signature
    return Task(
        id=task_id,
        source=source,
        level=int(meta.get("level", level)),
        name=task_id.split("/", 1)[1],
        description=meta.get("description", doc.splitlines()[0] if doc else ""),
        tags=list(meta.get("tags", [])),
        dtype=dtype,
        atol=float(meta.get("atol", atol)),
        rtol=float(meta.get("rtol", rtol)),
        target_speedup=float(meta.get("target_speedup", 1.0)),
        sizes={k: dict(v) for k, v in meta.get("sizes", {}).items()},
        wrapper=meta.get("wrapper", ""),
        wrapper_signature=meta.get("wrapper_signature", ""),
        reference_solutions=solutions,
        triton_solutions=[p.read_text() for p in sorted(path.parent.glob(f"{path.stem}.triton*.md"))],
        allowed_torch_ops=list(meta.get("allowed_torch_ops", [])),
        path=str(path),
    )


def _level_of(folder: Path) -> int:
    match = re.search(r"(\d+)$", folder.name)
    return int(match.group(1)) if match else 1


def _kernelbench_name(stem: str) -> str:
    return re.sub(r"^\d+_", "", stem).lower()


@dataclass
class SkippedFile:
    """A task file a folder load left out, and why (the exception's type and message)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{Path(self.path).name}: {self.reason}"


class TaskList(list):
    """A `list` of `Task` that also names the files a folder load skipped (`skipped`)."""

    def __init__(self, tasks: Any = (), skipped: list[SkippedFile] | None = None):
        super().__init__(tasks)
        self.skipped: list[SkippedFile] = list(skipped or [])


OnError = Literal["skip", "raise"]


def _load_file(path: Path, level: int, max_numel: int | None) -> Task:
    task = _task_from_file(path, f"level{level}/{_kernelbench_name(path.stem)}", level)
    if max_numel is not None:
        task = scale_to_numel(task, max_numel)
    return task


def load_folder(folder: str | Path, max_numel: int | None = None, on_error: OnError = "skip") -> TaskList:
    """Load every task file of a folder (or of its ``level<N>`` subfolders), sorted by id.

    A file that cannot be loaded or shrunk to `max_numel` is skipped with a warning naming the file
    and the reason (``on_error="skip"``, the default; the result's `TaskList.skipped` lists them),
    or raises (``on_error="raise"``).
    """
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no task folder at {folder}; pass 'builtin', a folder of KernelBench files, "
                                "or a list of Task objects")
    level_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"level\d+", p.name))
    groups = [(d, _level_of(d)) for d in level_dirs] or [(folder, _level_of(folder))]
    tasks: list[Task] = []
    skipped: list[SkippedFile] = []
    for directory, level in groups:
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            try:
                tasks.append(_load_file(path, level, max_numel))
            except Exception as exc:  # a task file is foreign code: any failure skips that file only
                if on_error == "raise":
                    raise
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
                skipped.append(SkippedFile(str(path), reason))
                warnings.warn(f"skipped task file {path}: {reason}", stacklevel=3)
    return TaskList(sorted(_unique_ids(tasks), key=lambda t: (t.level, t.id)), skipped)


def _unique_ids(tasks: list[Task]) -> list[Task]:
    """KernelBench repeats some names (two ``conv_standard_2D__square_input__square_kernel``): those
    ids get the file's problem number (``..._kernel_50``)."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.id] = counts.get(task.id, 0) + 1
    unique = []
    for task in tasks:
        number = re.match(r"\d+", Path(task.path).name)
        if counts[task.id] > 1 and number:
            task = replace(task, id=f"{task.id}_{number.group(0)}", name=f"{task.name}_{number.group(0)}")
        unique.append(task)
    return unique


def load_tasks(source: str | Path | list[Task] | list[str] = "builtin", max_numel: int | None = None,
               on_error: OnError = "skip") -> list[Task]:
    """Load a task suite.

    Args:
        source: ``"builtin"``, a folder of task files (KernelBench's ``level1/*.py`` loads unchanged),
            a list of `Task`, or a list of built-in task ids.
        max_numel: shrink size constants until the inputs hold at most this many elements in all (for
            the CPU runtime); `None` keeps the file's sizes.
        on_error: for a folder, ``"skip"`` (default) leaves out a file that cannot be loaded or shrunk,
            with a warning, and lists it in the result's ``skipped`` (the result is a `TaskList`, a
            `list`); ``"raise"`` raises instead.
    """
    if isinstance(source, list):
        if all(isinstance(t, Task) for t in source):
            return list(source)
        builtin = {t.id: t for t in load_tasks("builtin", max_numel)}
        missing = [t for t in source if t not in builtin]
        if missing:
            raise KeyError(f"unknown task ids {missing}; `leap-gym tasks` lists the built-in ones")
        return [builtin[t] for t in source]
    if str(source) == "builtin":
        return list(load_folder(BUILTIN_DIR, max_numel, on_error="raise"))
    return load_folder(source, max_numel, on_error)


def input_numel(task: Task) -> int:
    """Total elements of the task's inputs at its current sizes, computed without allocating."""
    namespace = task.module()
    with torch.device("meta"):
        inputs = namespace["get_inputs"]()
    return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))


def scale_to_numel(task: Task, max_numel: int) -> Task:
    """Halve the task's sizes until its inputs fit in `max_numel` elements (`leap_gym.tasks.sizes.shrink_to_numel`).

    Raises:
        ShrinkError: (a `ValueError`) when no valid halving gets there.
    """
    return shrink_to_numel(task, max_numel)


def instantiate(task: Task, seed: int) -> tuple[dict[str, Any], torch.nn.Module, list[Any], list[Any]]:
    """The task namespace, its `Model` built under `seed`, inputs drawn under `seed + 1`, and init inputs."""
    namespace = task.module()
    init_inputs = list(namespace["get_init_inputs"]())
    torch.manual_seed(seed)
    model = namespace["Model"](*init_inputs)
    torch.manual_seed(seed + 1)
    inputs = list(namespace["get_inputs"]())
    return namespace, model, inputs, init_inputs
