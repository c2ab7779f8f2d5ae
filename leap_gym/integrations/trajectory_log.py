"""Append-only JSONL trajectory log: one record a line, flushed per write, so a crash loses one turn at most.

Usage::

    with TrajectoryLog("runs/rollouts.jsonl") as log:
        log.write({"task_id": task.id, "turn": 1, "response": text, "result": result})
    records = read_trajectory_log("runs/rollouts.jsonl")

Records are dicts or dataclasses (an `EvalResult` among them, through its ``to_dict``); nested
values are converted the same way, and anything JSON cannot hold (a tensor, a path, bytes) is
written as its text. Each record is written with a single ``write`` of a whole line to a file
opened for appending, so concurrent writers (threads, or processes appending to the same file)
do not interleave within a line, and a crash mid-write leaves at most a truncated last line,
which `read_trajectory_log` skips.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)


def to_jsonable(value: Any) -> Any:
    """`value` as plain JSON data: dataclasses (``to_dict`` when they have one), enums, paths, sets..."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN/Infinity
    if hasattr(value, "to_dict") and callable(value.to_dict) and not isinstance(value, type):
        return to_jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, Path):
        return str(value)
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return to_jsonable(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


class TrajectoryLog:
    """Appends records to a JSONL file, flushed after every write.

    Args:
        path: the file; created with its parent directories, appended to when it exists.
        fsync: also ``os.fsync`` after every write (survives a machine crash, not only a process
            crash; costs a disk round trip per record).
    """

    def __init__(self, path: str | os.PathLike[str], fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        self._repair_tail()
        self.count = 0

    def _repair_tail(self) -> None:
        """After a crash mid-write the file may end without a newline: end it, so the next record parses."""
        size = self._file.seek(0, os.SEEK_END)
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                self._file.write(b"\n")

    def write(self, record: Any) -> None:
        """Append one record (a dict or a dataclass) as one JSON line and flush it.

        Raises:
            ValueError: the log is closed, or the record is not a dict or dataclass.
        """
        data = to_jsonable(record)
        if not isinstance(data, dict):
            raise ValueError(f"TrajectoryLog.write takes a dict or a dataclass, not {type(record).__name__}")
        line = (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            if self._file.closed:
                raise ValueError(f"TrajectoryLog({str(self.path)!r}) is closed; open a new one to append")
            view = memoryview(line)
            while view:  # one write(2) for a regular file; the loop only covers a short write
                view = view[self._file.write(view):]
            if self.fsync:
                os.fsync(self._file.fileno())
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self) -> TrajectoryLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def iter_trajectory_log(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The records of a log, in order; a line that does not parse (a write cut by a crash) is skipped."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                log.warning("%s: line %d is not a whole record (a write cut short?); skipped", path, number)
                continue
            if isinstance(record, dict):
                yield record


def read_trajectory_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a log (see `iter_trajectory_log`); an empty list for a missing file."""
    if not os.path.exists(path):
        return []
    return list(iter_trajectory_log(path))
