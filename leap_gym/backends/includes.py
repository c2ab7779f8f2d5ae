"""The ``#include`` rule: kernel source may include only the CUDA runtime's headers.

NVRTC opens whatever path an ``#include`` names (``#include "/etc/passwd"`` is read and its syntax
errors come back), and a relative name is looked up in the worker's current directory too. So
before NVRTC runs, every ``#include`` (and ``__has_include``) of a source must name a header found
under the CUDA include folders NVRTC is given (`nvrtc.include_dirs`), by a relative name that stays
inside that folder: no absolute paths, no ``..``, no computed (macro) includes. Anything else is a
COMPILE_ERROR that states the rule.

The scan sees what the preprocessor sees: backslash-newline continuations are joined, comments
removed, and the ``%:`` digraph read as ``#``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

RULE = ("kernel source may #include only the CUDA runtime's headers (cuda_fp16.h, cuda_bf16.h, cuda_runtime.h, "
        "cooperative_groups.h, ...), by their relative names; host files, absolute paths, '..' and computed "
        "includes are refused")

_DIRECTIVE_RE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(include_next|include|import)\b(.*)$")
_HAS_INCLUDE_RE = re.compile(r"__has_include(?:_next)?\b\s*(\(?)\s*(<[^>\n]*>|\"[^\"\n]*\")?")
_HEADER_RE = re.compile(r"^\s*(<[^>\n]*>|\"[^\"\n]*\")\s*$")


@dataclass
class IncludeViolation:
    """An include the rule refuses: the source line (1-based), the directive's text and why."""

    line: int
    text: str
    why: str

    @property
    def message(self) -> str:
        return f"{self.why}: {RULE}"


def _logical_lines(source: str) -> list[tuple[int, str]]:
    """(first physical line, text) of each logical line: continuations joined, comments blanked."""
    from leap_gym.evaluation.parse import strip_comments

    physical = strip_comments(source.replace("\r\n", "\n")).split("\n")
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, text in enumerate(physical, start=1):
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1]
            continue
        lines.append((start, pending + text))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def _allowed(name: str, dirs: tuple[str, ...]) -> str:
    """"" when `name` is a header of `dirs` reached by a plain relative path, else why not."""
    if not name:
        return "an empty header name"
    if name.startswith(("/", "~", "\\")) or re.match(r"^[A-Za-z]:", name):
        return f"'{name}' is an absolute path"
    parts = re.split(r"[\\/]", name)
    if ".." in parts:
        return f"'{name}' climbs out of the include folder with '..'"
    for folder in dirs:
        root = os.path.realpath(folder)
        candidate = os.path.realpath(os.path.join(root, name))
        if candidate.startswith(root + os.sep) and Path(candidate).is_file():
            return ""
    return f"'{name}' is not one of the CUDA runtime's headers"


def find_include_violations(source: str, dirs: tuple[str, ...]) -> list[IncludeViolation]:
    """Every ``#include``/``__has_include`` of `source` that the rule refuses, in source order.

    Args:
        source: CUDA C++ text.
        dirs: the folders whose headers may be included (`leap_gym.backends.nvrtc.include_dirs()`).
    """
    if "include" not in source and "import" not in source:
        return []
    found: list[IncludeViolation] = []
    for line, text in _logical_lines(source):
        directive = _DIRECTIVE_RE.match(text)
        if directive:
            kind, rest = directive.group(1), directive.group(2)
            shown = f"#{kind}{rest}".strip()
            if kind != "include":
                found.append(IncludeViolation(line, shown, f"#{kind} is not allowed"))
                continue
            header = _HEADER_RE.match(rest)
            if header is None:
                found.append(IncludeViolation(line, shown, "a computed #include (a macro or other text instead "
                                                           "of <name> or \"name\")"))
                continue
            why = _allowed(header.group(1)[1:-1].strip(), dirs)
            if why:
                found.append(IncludeViolation(line, shown, why))
            continue
        for probe in _HAS_INCLUDE_RE.finditer(text):
            if not probe.group(1):
                continue  # the name alone (#ifdef __has_include) includes nothing
            if probe.group(2) is None:
                found.append(IncludeViolation(line, probe.group(0).strip(), "a computed __has_include"))
                continue
            why = _allowed(probe.group(2)[1:-1].strip(), dirs)
            if why:
                found.append(IncludeViolation(line, probe.group(0).strip(), why))
    return found
