"""Parsing Python text into an AST from several threads at once.

CPython 3.11 (seen on 3.11.7) keeps the AST converter's recursion depth in state that every thread shares: two
evaluator threads parsing responses at the same moment can fail with "SystemError: AST constructor recursion depth
mismatch". Every parse of a response's or a task's Python goes through here, one at a time (a parse takes about a
millisecond).
"""

from __future__ import annotations

import ast
import threading
from types import CodeType

_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def compile_tree(tree: ast.AST, filename: str) -> CodeType:
    """`compile` of an AST (which converts it back, the same shared state), one thread at a time."""
    with _LOCK:
        return compile(tree, filename, "exec")
