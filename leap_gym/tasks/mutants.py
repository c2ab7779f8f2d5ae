"""Mutants of a correct kernel: the bugs a kernel writer makes, for the warm-up's repair examples.

Each operator takes CUDA source and returns the mutated source, or `None` where it does not apply.
Whether a mutant is really broken (and how) is not guessed here: the warm-up evaluates every mutant
in the environment and keeps the real feedback (a missing bound check is harmless when the size is a
multiple of the block, and such a mutant is dropped).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

Mutator = Callable[[str, random.Random], "str | None"]

_GLOBAL_INDEX_RE = re.compile(r"blockIdx\.x\s*\*\s*blockDim\.x\s*\+\s*threadIdx\.x")
_BOUND_IF_RE = re.compile(r"if\s*\(\s*(\w+)\s*<\s*(\w+)\s*\)\s*")
_BOUND_RETURN_RE = re.compile(r"[^\n]*if\s*\([^()\n]*>=[^()\n]*\)\s*return;[^\n]*\n")
_SYNC_RE = re.compile(r"[ \t]*__syncthreads\(\);[^\n]*\n")
_IDENT_RE = re.compile(r"\b(idx|i|row|col|tid|c|r|n|rows|cols|sum|acc|m|s)\b")
_SWAPS = [("fmaxf", "fminf"), ("expf", "logf"), (" + ", " - "), (" * ", " + "), ("0.0f", "1.0f"), ("< ", "<= "),
          ("+=", "-="), ("threadIdx.x", "blockIdx.x"), ("blockDim.x", "gridDim.x")]
_TYPO = [("float", "flaot"), ("return", "retrun"), ("__shared__", "__share__"), ("int ", "itn ")]


def wrong_index(src: str, rng: random.Random) -> str | None:
    """The global thread index computed wrongly (a block's offset or the thread's dropped)."""
    matches = list(_GLOBAL_INDEX_RE.finditer(src))
    if not matches:
        return None
    m = rng.choice(matches)
    repl = rng.choice(["blockIdx.x * blockDim.x", "threadIdx.x", "blockIdx.x + threadIdx.x",
                       "blockIdx.x * blockDim.x + threadIdx.x + 1"])
    return src[: m.start()] + repl + src[m.end():]


def missing_bound_check(src: str, rng: random.Random) -> str | None:
    """The ``if (i < n)`` guard (or an early ``return`` on ``>=``) removed."""
    ifs = list(_BOUND_IF_RE.finditer(src))
    rets = list(_BOUND_RETURN_RE.finditer(src))
    if not ifs and not rets:
        return None
    if ifs and (not rets or rng.random() < 0.5):
        m = rng.choice(ifs)
        return src[: m.start()] + src[m.end():]
    m = rng.choice(rets)
    return src[: m.start()] + src[m.end():]


def off_by_one_bound(src: str, rng: random.Random) -> str | None:
    """``i < n`` turned into ``i <= n`` (reads and writes one element past the end)."""
    ifs = list(_BOUND_IF_RE.finditer(src))
    if not ifs:
        return None
    m = rng.choice(ifs)
    return src[: m.start()] + f"if ({m.group(1)} <= {m.group(2)}) " + src[m.end():]


def missing_sync(src: str, rng: random.Random) -> str | None:
    """One ``__syncthreads()`` removed (a race on shared memory)."""
    matches = list(_SYNC_RE.finditer(src))
    if not matches:
        return None
    m = rng.choice(matches)
    return src[: m.start()] + src[m.end():]


def missing_semicolon(src: str, rng: random.Random) -> str | None:
    """A statement's ``;`` dropped."""
    positions = [m.start() for m in re.finditer(r";\s*\n", src)]
    if not positions:
        return None
    p = rng.choice(positions)
    return src[:p] + src[p + 1:]


def undeclared_name(src: str, rng: random.Random) -> str | None:
    """One use of a variable misspelt (an undeclared identifier)."""
    matches = [m for m in _IDENT_RE.finditer(src) if m.start() > src.find("{")]
    if not matches:
        return None
    m = rng.choice(matches)
    return src[: m.start()] + m.group(1) + "x" + src[m.end():]


def typo(src: str, rng: random.Random) -> str | None:
    """A keyword or type misspelt."""
    options = [(a, b) for a, b in _TYPO if a in src]
    if not options:
        return None
    a, b = rng.choice(options)
    starts = [m.start() for m in re.finditer(re.escape(a), src)]
    p = rng.choice(starts)
    return src[:p] + b + src[p + len(a):]


def missing_brace(src: str, rng: random.Random) -> str | None:
    """The last closing brace dropped."""
    p = src.rfind("}")
    return None if p < 0 else src[:p] + src[p + 1:]


def wrong_operator(src: str, rng: random.Random) -> str | None:
    """An operator, intrinsic or constant swapped for a plausible wrong one (a wrong output)."""
    body = src.find("{")
    options = [(a, b) for a, b in _SWAPS if a in src[body:]]
    if body < 0 or not options:
        return None
    a, b = rng.choice(options)
    starts = [m.start() for m in re.finditer(re.escape(a), src) if m.start() > body]
    p = rng.choice(starts)
    return src[:p] + b + src[p + len(a):]


@dataclass(frozen=True)
class MutationOp:
    name: str
    kind: str  # what it usually yields: "compile", "runtime", "wrong_output"
    fn: Mutator


OPERATORS: list[MutationOp] = [
    MutationOp("wrong_index", "wrong_output", wrong_index),
    MutationOp("missing_bound_check", "runtime", missing_bound_check),
    MutationOp("off_by_one_bound", "runtime", off_by_one_bound),
    MutationOp("missing_sync", "wrong_output", missing_sync),
    MutationOp("missing_semicolon", "compile", missing_semicolon),
    MutationOp("undeclared_name", "compile", undeclared_name),
    MutationOp("typo", "compile", typo),
    MutationOp("missing_brace", "compile", missing_brace),
    MutationOp("wrong_operator", "wrong_output", wrong_operator),
]


#: The structured bugs a programmer's first draft carries (the warm-up's buggy first drafts): they
#: compile, and fail at run time or give a wrong output.
DRAFT_OPERATORS = ("missing_bound_check", "wrong_index", "missing_sync", "off_by_one_bound", "wrong_operator")


def mutants(src: str, count: int, seed: int = 0, only: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """Up to `count` distinct mutants of `src` as ``(operator name, mutated source)``, seeded.

    Operators are cycled in a seeded order so each applicable kind of bug appears before any repeats.

    Args:
        only: operator names to draw from (e.g. `DRAFT_OPERATORS`); all when `None`.
    """
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    seen = {src}
    ops = [op for op in OPERATORS if only is None or op.name in only]
    if not ops:
        raise ValueError(f"no mutation operator among {only}; choose from {[op.name for op in OPERATORS]}")
    rng.shuffle(ops)
    attempts = 0
    while len(out) < count and attempts < count * 8:
        op = ops[attempts % len(ops)]
        attempts += 1
        mutated = op.fn(src, rng)
        if mutated is None or mutated in seen:
            continue
        seen.add(mutated)
        out.append((op.name, mutated))
    return out
