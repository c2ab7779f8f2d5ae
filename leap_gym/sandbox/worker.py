"""The worker side of `leap_gym.sandbox`: confine this process, then serve calls until told to stop.

This file is loaded by path (not as part of the `leap_gym` package) by a ``python -I -c`` bootstrap
that `leap_gym.sandbox.WorkerPool` starts, so nothing of the package runs before the confinement
is in place. It imports only the standard library until the configuration's ``sys_path`` is set.

Order at start: namespaces (network, mount: the whole file system read-only but the working
directory and the writable directories), resource limits, privileges dropped (a dedicated uid when
started as root), ``PR_SET_NO_NEW_PRIVS``, then the preloaded modules, then the handshake.

Protocol on two dedicated pipe fds (never stdout, which may hold anything the user code prints):
each message is an 8-byte big-endian length and a pickle.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import importlib
import os
import pickle
import resource
import signal
import struct
import sys
import time
import traceback
from typing import Any

_HEADER = struct.Struct(">Q")

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
MS_REC = 0x4000
MS_BIND = 0x1000
MS_PRIVATE = 1 << 18
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
SYS_OPEN_TREE = 428  # new syscalls (424 on) have the same number on every architecture
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = 0o2000000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MS_NOSUID = 0x2
MS_NODEV = 0x4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWPID = 0x20000000
MS_NOEXEC = 0x8

#: Parts of /proc that tune the whole machine: read-only in the worker's view even for root.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")

_replace_requested = False


def request_replacement() -> None:
    """Called by the running function (through `leap_gym.sandbox.request_replacement`)."""
    global _replace_requested
    _replace_requested = True


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount_setattr(libc: ctypes.CDLL, path: str, flags: int, set_: int, clr: int) -> None:
    attr = _MountAttr(set_, clr, 0, 0)
    ret = libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                       ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(ret, f"mount_setattr({path})")


def _unreachable_ancestor(path: str) -> str | None:
    """The first ancestor of `path` that others (a fresh uid) cannot traverse, if any."""
    cur = "/"
    for part in path.split("/")[1:]:
        if not part:
            continue
        try:
            if not os.stat(cur).st_mode & 0o001:
                return cur
        except OSError:
            return None
        cur = os.path.join(cur, part)
    return None


def _expose(libc: ctypes.CDLL, paths: list[str]) -> None:
    """Make `paths` reachable by any uid: a tmpfs (mode 755) over each closed ancestor, the paths bound back.

    With the interpreter under ``/root`` (pyenv) a dropped uid could not read the standard library;
    this also hides the rest of such directories from the worker.
    """
    groups: dict[str, list[str]] = {}
    for path in paths:
        top = _unreachable_ancestor(path)
        if top is not None and top != "/":
            groups.setdefault(top, []).append(path)
    for top, group in groups.items():
        keep = sorted({p for p in group if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in group)})
        trees = []
        for path in keep:
            fd = libc.syscall(ctypes.c_long(SYS_OPEN_TREE), ctypes.c_int(AT_FDCWD), path.encode(),
                              ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE))
            if fd < 0:
                raise OSError(ctypes.get_errno(), f"open_tree({path}): {os.strerror(ctypes.get_errno())}")
            trees.append((path, fd))
        _check(libc.mount(b"tmpfs", top.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), b"mode=755,size=1m"),
               f"tmpfs over {top}")
        for path, fd in trees:
            os.makedirs(path, mode=0o755, exist_ok=True)
            ret = libc.syscall(ctypes.c_long(SYS_MOVE_MOUNT), ctypes.c_int(fd), b"", ctypes.c_int(AT_FDCWD),
                               path.encode(), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))
            os.close(fd)
            _check(ret, f"move_mount({path})")


def _read_only_filesystem(libc: ctypes.CDLL, writable: list[str], expose: list[str]) -> None:
    """In a fresh mount namespace: everything read-only and nosuid except `writable` (bind mounts)
    and ``/proc``, whose files' own permissions decide (the CUDA driver's ``cuInit`` fails with 304,
    operating-system call failed, under a read-only ``/proc``); the kernel's knobs in it
    (`PROC_READ_ONLY`) stay read-only."""
    _check(libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount private /")
    _expose(libc, [*expose, *writable])
    knobs = [p for p in PROC_READ_ONLY if os.path.exists(p)]
    for path in [*writable, *knobs]:
        _check(libc.mount(path.encode(), path.encode(), None, ctypes.c_ulong(MS_BIND | MS_REC), None),
               f"bind {path}")
    _mount_setattr(libc, "/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0)
    for path in writable:
        _mount_setattr(libc, path, 0, 0, MOUNT_ATTR_RDONLY)
    if os.path.ismount("/proc"):
        _mount_setattr(libc, "/proc", 0, 0, MOUNT_ATTR_RDONLY)


def _confine(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Namespaces, limits, privileges; returns what was put in place (reported to the parent)."""
    libc = _libc()
    applied: dict[str, Any] = {"netns": False, "mountns": False, "pidns": False, "uid": os.getuid(),
                               "no_new_privs": False, "global_pid": os.getpid()}
    # No PR_SET_PDEATHSIG here: it fires when the *thread* that started us ends, and pools start
    # workers from short-lived threads. The worker ends on EOF of its request pipe instead, which
    # comes when the caller's process dies; inside, init and worker die with their parents.
    root = os.geteuid() == 0
    flags = 0
    if cfg["isolate_network"]:
        flags |= CLONE_NEWNET
    if cfg["read_only_fs"] and root:
        flags |= CLONE_NEWNS
    if cfg["isolate_processes"]:
        flags |= CLONE_NEWPID | (CLONE_NEWNS if root else 0)  # a fresh /proc needs a mount namespace
    if flags:
        flags |= CLONE_NEWIPC | CLONE_NEWUTS | (0 if root else CLONE_NEWUSER)
        uid, gid = os.getuid(), os.getgid()
        ok = libc.unshare(ctypes.c_int(flags)) == 0
        if not ok and flags & CLONE_NEWPID:
            flags &= ~CLONE_NEWPID
            ok = libc.unshare(ctypes.c_int(flags)) == 0
        if ok:
            applied["netns"] = bool(flags & CLONE_NEWNET)
            if not root:  # keep our identity inside the new user namespace
                try:
                    with open("/proc/self/setgroups", "w") as f:
                        f.write("deny")
                    with open("/proc/self/uid_map", "w") as f:
                        f.write(f"{uid} {uid} 1")
                    with open("/proc/self/gid_map", "w") as f:
                        f.write(f"{gid} {gid} 1")
                except OSError as exc:
                    notes.append(f"user namespace id maps not written: {exc}")
            if flags & CLONE_NEWPID:
                _enter_pid_namespace(cfg, libc)
                applied["pidns"] = True
            if applied["pidns"]:
                try:  # /proc still shows the outer namespace: our pid there, for the pool
                    applied["global_pid"] = int(os.readlink("/proc/self"))
                except (OSError, ValueError):
                    applied["global_pid"] = None
            if flags & CLONE_NEWNS:
                if applied["pidns"]:
                    try:
                        _check(libc.mount(b"proc", b"/proc", b"proc",
                                          ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None), "mount /proc")
                    except OSError as exc:
                        notes.append(f"no private /proc: {exc}")
                if cfg["read_only_fs"]:
                    try:
                        _read_only_filesystem(libc, [cfg["workdir"], *cfg["writable_dirs"]], cfg["expose"])
                        applied["mountns"] = True
                    except OSError as exc:
                        notes.append(f"read-only file system view not available: {exc}")
        else:
            notes.append(f"namespaces not available (unshare: {os.strerror(ctypes.get_errno())}); "
                         "network, processes and file system not isolated")
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        notes.append("not a child subreaper: processes left behind may go unnoticed by the worker")
    os.chdir(cfg["workdir"])
    _set_limits(cfg, notes)
    drop = root and cfg["uid"] is not None
    if drop and not applied["mountns"]:
        closed = [p for p in cfg["expose"] if _unreachable_ancestor(p)]
        if closed:
            drop = False
            notes.append(f"uid not dropped: {closed[0]} is out of an unprivileged uid's reach without a mount "
                         "namespace")
    if drop:
        os.setgroups(cfg.get("groups") or [])  # only the groups that own the GPU device nodes, if any
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])  # all capabilities go with uid 0
        applied["uid"] = os.getuid()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        applied["no_new_privs"] = True
    os.umask(0o007)
    return applied


def _enter_pid_namespace(cfg: dict[str, Any], libc: ctypes.CDLL) -> None:
    """Fork into the new pid namespace: this process stays outside as a proxy, the first child is the
    namespace's init (a reaper), and its child, which returns from here, is the worker.

    When the init dies, the kernel kills everything in the namespace, so no process the user code
    starts (even with ``setsid`` and a double fork) outlives the worker. The worker is not the init
    itself because an init ignores the signals it sends itself (``abort()`` would become SIGSEGV).
    The proxy keeps the pid the pool knows and ends the way the worker ended (status or signal).
    """
    r, w = os.pipe()
    init = os.fork()
    if init:  # the proxy, outside the namespace
        os.close(w)
        for fd in (cfg["fd_in"], cfg["fd_out"]):
            os.close(fd)
        status = _wait_for_or_orphaned(init)
        data = os.read(r, 4)
        if len(data) == 4:
            (status,) = struct.unpack("i", data)
        _end_like(status)
    os.close(r)
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    worker = os.fork()
    if worker == 0:
        os.close(w)
        libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
        return
    for fd in (cfg["fd_in"], cfg["fd_out"]):
        os.close(fd)
    while True:  # the init: reap everything, end when the worker ends
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(3)
        if pid == worker:
            os.write(w, struct.pack("i", status))
            os._exit(0)


def _wait_for_or_orphaned(pid: int) -> int:
    """Wait for `pid`; kill it (and with it the whole pid namespace) if our parent, the pool, dies."""
    parent = os.getppid()
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(3)
        if done:
            return status
        if os.getppid() != parent:  # the pool's process is gone
            os.kill(pid, signal.SIGKILL)
            return _wait_for(pid)
        time.sleep(0.2)


def _wait_for(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(3)


def _end_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 3)


def _reap_children() -> bool:
    """Reap finished children; whether any (including adopted orphans) are still running."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        except InterruptedError:
            continue
        if pid == 0:
            return True


def _set_limits(cfg: dict[str, Any], notes: list[str]) -> None:
    lim = cfg["limits"]

    def setl(which: int, value: int | None, hard: int | None = None) -> None:
        if value is None:
            return
        hard = value if hard is None else hard
        try:
            resource.setrlimit(which, (value, hard))
        except (ValueError, OSError) as exc:
            notes.append(f"rlimit {which} not set: {exc}")

    setl(resource.RLIMIT_CORE, 0)
    setl(resource.RLIMIT_AS, lim["address_space_bytes"])
    setl(resource.RLIMIT_FSIZE, lim["file_size_bytes"])
    setl(resource.RLIMIT_NOFILE, lim["open_files"])
    if lim["cpu_time_s"] is not None:
        used = _cpu_used()
        setl(resource.RLIMIT_CPU, int(used + lim["cpu_time_s"]) + 1, int(used + lim["cpu_lifetime_s"]) + 1)
    if lim["max_processes"] is not None:
        # RLIMIT_NPROC counts every task (thread) of the real uid; as root it does not bind until the
        # uid is dropped, and for a non-root user it must leave room for the user's other processes.
        extra = 0 if cfg["uid"] is not None and os.geteuid() == 0 else _tasks_of_uid(os.getuid())
        setl(resource.RLIMIT_NPROC, lim["max_processes"] + extra)


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _tasks_of_uid(uid: int) -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{pid}")
            if st.st_uid == uid:
                count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return count


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        try:
            chunk = os.read(fd, min(n, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            raise EOFError("parent closed the pipe")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(fd: int) -> Any:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    return pickle.loads(_read_exact(fd, size))


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def _resolve(fn: str) -> Any:
    module, _, name = fn.partition(":")
    if not module or not name:
        raise ValueError(f"function name {fn!r} must look like 'package.module:function'")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - user code may have replaced or closed them
            pass


def _serve(fd_in: int, fd_out: int, cfg: dict[str, Any]) -> None:
    global _replace_requested
    lim = cfg["limits"]
    while True:
        try:
            request = _recv(fd_in)
        except EOFError:
            return
        if request is None:
            return
        fn_name, payload = request
        _replace_requested = False
        if lim["cpu_time_s"] is not None:
            soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            try:
                resource.setrlimit(resource.RLIMIT_CPU, (min(int(_cpu_used() + lim["cpu_time_s"]) + 1, hard), hard))
            except (ValueError, OSError):
                pass
        start = time.perf_counter()
        reply: dict[str, Any] = {"ok": False}
        try:
            value = _resolve(fn_name)(payload)
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            reply = {"ok": True, "value": data}
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from user code too
            try:
                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            except BaseException:  # noqa: BLE001
                text = ""
            try:
                message = f"{type(exc).__name__}: {exc}"
            except BaseException:  # noqa: BLE001
                message = type(exc).__name__
            reply = {"ok": False, "exc_type": type(exc).__name__, "message": message[:4000],
                     "traceback": text[-20000:], "memory_error": isinstance(exc, MemoryError)}
        _flush_std()
        reply["wall_time_s"] = time.perf_counter() - start
        reply["cpu_used_s"] = _cpu_used()
        reply["replace"] = _replace_requested
        reply["strays"] = _reap_children()
        _send(fd_out, reply)


def main(cfg: dict[str, Any]) -> None:
    fd_in, fd_out = cfg["fd_in"], cfg["fd_out"]
    notes: list[str] = []
    try:
        applied = _confine(cfg, notes)
        sys.path[:] = cfg["sys_path"]
        for module in cfg["preload"]:
            importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            _send(fd_out, {"ready": False, "error": f"{type(exc).__name__}: {exc}", "traceback": text})
        except OSError as send_exc:
            if send_exc.errno != errno.EPIPE:
                raise
        os._exit(3)
    _send(fd_out, {"ready": True, "pid": os.getpid(), "applied": applied, "notes": notes})
    _serve(fd_in, fd_out, cfg)
    _flush_std()
    os._exit(0)
