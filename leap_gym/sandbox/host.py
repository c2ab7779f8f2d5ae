"""Host-side machinery of `leap_gym.sandbox`: the pipe transport, the safe reply unpickler, worker
processes, their uids and their clean-up. Internal: use `leap_gym.sandbox.WorkerPool`."""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import io
import logging
import os
import pickle
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("leap_gym.sandbox")

HEADER = struct.Struct(">Q")
UID_LOCK_DIR = Path(tempfile.gettempdir()) / "leap_gym_sandbox_uids"
UID_RANGE = 4096


class TransportTimeout(Exception):
    pass


class ReplyTooBig(Exception):
    pass


# --------------------------------------------------------------------------------------- transport
def wait_fd(fd: int, events: int, deadline: float) -> None:
    poller = select.poll()
    poller.register(fd, events)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TransportTimeout()
        if poller.poll(min(left, 1.0) * 1000):
            return


def send(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        wait_fd(fd, select.POLLOUT, deadline)
        try:
            n = os.write(fd, view[:1 << 16])
        except BlockingIOError:
            continue
        view = view[n:]


def read_exact(fd: int, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        wait_fd(fd, select.POLLIN, deadline)
        try:
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            raise EOFError()
        buf += chunk
    return bytes(buf)


def recv(fd: int, deadline: float, max_bytes: int) -> bytes:
    (size,) = HEADER.unpack(read_exact(fd, HEADER.size, deadline))
    if size > max_bytes:
        raise ReplyTooBig(size)
    return read_exact(fd, size, deadline)


_SAFE_BUILTINS = frozenset({"dict", "list", "tuple", "set", "frozenset", "bytearray", "bytes", "str", "int",
                            "float", "complex", "bool", "slice", "range"})
_SAFE_GLOBALS = frozenset({("collections", "OrderedDict"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                           ("numpy._core.multiarray", "scalar"), ("datetime", "datetime"), ("datetime", "timedelta")})


class ReplyUnpickler(pickle.Unpickler):
    """Unpickles only plain data and the dataclasses/enums of allowed packages (no code can run)."""

    def __init__(self, data: bytes, prefixes: tuple[str, ...], extra: frozenset[tuple[str, str]]):
        super().__init__(io.BytesIO(data))
        self._prefixes = prefixes
        self._extra = extra

    def find_class(self, module: str, name: str) -> Any:
        if (module == "builtins" and name in _SAFE_BUILTINS) or (module, name) in _SAFE_GLOBALS | self._extra:
            return super().find_class(module, name)
        if "." not in name and any(module == p or module.startswith(p + ".") for p in self._prefixes):
            obj = super().find_class(module, name)
            if isinstance(obj, type) and obj.__module__ == module and (
                    dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                return obj
        raise pickle.UnpicklingError(
            f"the worker's reply refers to {module}.{name}, which is not an allowed result type "
            "(pass it in WorkerPool(result_types=...))")


# ------------------------------------------------------------------------------------------ workers
def signal_text(sig: int) -> str:
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    desc = signal.strsignal(sig) or ""
    return f"{name} ({desc.lower()})" if desc else name


def clear_dir(path: str) -> None:
    try:
        entries = os.listdir(path)
    except OSError:
        return
    for entry in entries:
        full = os.path.join(path, entry)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.unlink(full)
        except OSError:
            pass


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` (as that uid: ``kill(-1)`` reaches exactly its processes)."""
    for _ in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            except BaseException:  # noqa: BLE001
                os._exit(1)
            os._exit(0)
        os.waitpid(pid, 0)


class UidLease:
    """A uid of its own for one worker, held with a file lock (released if this process dies)."""

    def __init__(self, base: int):
        UID_LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        for offset in range(1, UID_RANGE):
            uid = base + offset
            fd = os.open(UID_LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise RuntimeError(f"no free sandbox uid in {base + 1}..{base + UID_RANGE - 1}")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class Worker:
    proc: subprocess.Popen
    to_fd: int
    from_fd: int
    log_fd: int
    workdir: str
    lease: UidLease | None
    info: dict[str, Any] = field(default_factory=dict)
    cpu_used_s: float = 0.0
    dead: bool = False

    @property
    def uid(self) -> int | None:
        return self.lease.uid if self.lease is not None else None

    def stderr_tail(self, limit: int = 16384) -> str:
        try:
            size = os.fstat(self.log_fd).st_size
            if size <= limit:
                return os.pread(self.log_fd, size, 0).decode("utf-8", "replace")
            head = os.pread(self.log_fd, limit // 4, 0).decode("utf-8", "replace")
            tail = os.pread(self.log_fd, limit - limit // 4, size - (limit - limit // 4)).decode("utf-8", "replace")
        except OSError:
            return ""
        return f"{head}\n[... {size - limit} bytes cut ...]\n{tail}"

    def log_size(self) -> int:
        try:
            return os.fstat(self.log_fd).st_size
        except OSError:
            return 0

    def signal_kill(self) -> None:
        """SIGKILL the worker's process group and every process of its uid (no reaping, no cleanup)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:
            kill_uid(self.uid)

    def kill(self) -> int | None:
        """Kill the worker's whole process group (and uid), reap it, free its resources; its return code."""
        if not self.dead:
            self.dead = True
            self.signal_kill()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process in uninterruptible sleep
            code = None
        for fd in (self.to_fd, self.from_fd, self.log_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.to_fd = self.from_fd = self.log_fd = -1
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.lease is not None:
            self.lease.release()
        return code


def has_strays(worker: Worker) -> bool:
    """Whether processes other than the worker run under its uid (or, without one, in its process group)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    me = worker.proc.pid
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if worker.uid is not None:
                if os.stat(f"/proc/{name}").st_uid == worker.uid and int(name) != worker.info.get("global_pid"):
                    return True
            else:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                fields = stat[stat.rfind(b")") + 2:].split()
                if int(fields[2]) == me:  # pgrp (the worker leads its own session and group)
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def split_code(code: int | None) -> tuple[int | None, int | None]:
    if code is None:
        return None, None
    return (-code, None) if code < 0 else (None, code)


def exit_text(code: int | None) -> str:
    if code is None:
        return "the worker did not exit"
    if code < 0:
        return f"worker killed by signal {signal_text(-code)}"
    return f"worker exited with status {code}"


def needed_paths() -> list[str]:
    """Directories a worker must read: the interpreter, its prefix and the caller's sys.path."""
    paths = {os.path.dirname(os.path.realpath(sys.executable)), os.path.realpath(sys.base_prefix),
             os.path.realpath(sys.prefix)}
    paths.update(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))
    return sorted(paths)


def unreachable_ancestor(path: str) -> str | None:
    """The first ancestor of `path` that others (a fresh uid) cannot traverse, if any."""
    cur = "/"
    for part in Path(path).parts[1:]:
        try:
            if not os.stat(cur).st_mode & 0o001:
                return cur
        except OSError:
            return None
        cur = os.path.join(cur, part)
    return None


def share_with_group(path: str, gid: int) -> None:
    """Give a directory tree to the sandbox group: group read/write, setgid directories.

    Works on file descriptors opened without following links, and leaves multiply-linked files
    alone, so a worker cannot steer the caller (root) into changing a file outside the tree.
    """
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [dirpath, *(os.path.join(dirpath, f) for f in filenames + dirnames)]:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue  # a symbolic link, a socket, gone
            try:
                st = os.fstat(fd)
                is_dir = stat.S_ISDIR(st.st_mode)
                if not (is_dir or stat.S_ISREG(st.st_mode)) or (not is_dir and st.st_nlink > 1):
                    continue
                extra = 0o2070 if is_dir else 0o060
                if st.st_gid != gid:
                    os.fchown(fd, -1, gid)
                if (st.st_mode & extra) != extra:
                    os.fchmod(fd, (st.st_mode & 0o7777) | extra)
            except OSError as exc:
                log.debug("could not share %s with the sandbox group: %s", name, exc)
            finally:
                os.close(fd)


def device_groups(patterns: tuple[str, ...] = ("/dev/nvidia*", "/dev/dri/*", "/dev/kfd")) -> tuple[list[int], bool]:
    """Supplementary groups a dropped uid needs for the GPU device nodes, and whether that suffices.

    A node open to others needs nothing; one open to its group needs that group; one open only to
    its owner cannot be used by another uid (then the pool keeps the caller's uid).
    """
    import glob

    groups: set[int] = set()
    for pattern in patterns:
        for node in glob.glob(pattern):
            try:
                st = os.stat(node)
            except OSError:
                continue
            if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
                continue
            if st.st_mode & 0o006 == 0o006:
                continue
            if st.st_mode & 0o060 == 0o060:
                groups.add(st.st_gid)
                continue
            return [], False
    return sorted(groups), True


def remove_stale_bases() -> None:
    """Remove the directories of pools whose process died without closing them (``leap_sandbox_<pid>_*``)."""
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        parts = name.split("_")
        if len(parts) < 4 or parts[0] != "leap" or parts[1] != "sandbox" or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(tmp, name)
        try:
            if os.stat(path).st_uid == os.geteuid():
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
