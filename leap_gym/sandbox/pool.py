"""Sandboxed worker processes: untrusted code runs here, never in the caller.

A `WorkerPool` keeps long-lived worker processes (started lazily, kept warm so ``import torch`` is
paid once) and runs a named function, ``"package.module:function"``, on a picklable payload in one
of them. Whatever the function does (crash, hang, fork, flood its output, allocate without bound,
write files, open sockets) the caller gets a `WorkerOutcome` back; a worker that crashed, timed
out, or asked to be replaced (a poisoned CUDA context) is killed with everything it started and
replaced transparently.

Confinement of a worker (what each layer needs; `WorkerPool.isolation` reports what took effect):

- resource limits (`SandboxLimits`), set before any user code runs: address space, CPU time,
  file size, open files, no core dumps, process count (``RLIMIT_NPROC``, which binds only a
  non-root uid: see below);
- a private working directory (cwd, ``HOME`` and ``TMPDIR``), emptied before each call and
  removed with the worker; a scrubbed environment (``PATH``, ``HOME``, ``TMPDIR``, ``LANG``, the
  names in ``env_allow`` that the caller's environment has, and ``env``);
- a pid namespace (where allowed): the worker runs under a small init that reaps and, when the
  worker ends, takes every process the user code started with it (``setsid`` and double forks
  included); the worker is a child subreaper, so a call that leaves a process running gets its
  worker replaced;
- started as root: a fresh network namespace (no interface up: every connect fails), a fresh
  mount namespace in which the whole file system is read-only and nosuid except the working
  directory and ``writable_dirs``, with a private ``/proc`` and the interpreter made reachable
  where it lives under a closed directory (a tmpfs over e.g. ``/root`` with only the needed
  paths bound back, which also hides the rest), then a dedicated unprivileged uid per worker
  (which drops every capability, makes ``RLIMIT_NPROC`` bind and lets the pool kill every
  process of that uid) and ``PR_SET_NO_NEW_PRIVS``;
- started as another user: a user namespace with network and pid namespaces when the kernel
  allows unprivileged user namespaces (no read-only view, no uid of its own: files the user may
  write, the worker may write).

The parent never blocks on a worker: the protocol runs on two dedicated pipes with a deadline on
every read and write; the worker's stdout and stderr go to a file of bounded size
(``file_size_bytes``) whose tail comes back in `WorkerOutcome.stderr_tail`; replies are unpickled
with an allow list (plain containers, dataclasses and enums of ``leap_gym``, and ``result_types``)
so a compromised worker cannot run code in the caller through a crafted pickle.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from leap_gym.cache import default_cache_dir
from leap_gym.sandbox.host import (
    ReplyTooBig,
    ReplyUnpickler,
    TransportTimeout,
    UidLease,
    Worker,
    clear_dir,
    device_groups,
    exit_text,
    has_strays,
    needed_paths,
    recv,
    remove_stale_bases,
    send,
    share_with_group,
    split_code,
    unreachable_ancestor,
)

log = logging.getLogger(__name__)

GiB = 1 << 30
MiB = 1 << 20

#: Variables copied from the caller's environment into a worker's when set there.
DEFAULT_ENV_ALLOW: tuple[str, ...] = (
    "LEAP_GYM_CACHE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CC", "CXX", "TZ",
    "LEAP_GYM_BACKENDS",  # backends registered in the caller (leap_gym.backends.base.register_backend)
)

FAILURES = ("timeout", "crash", "exception", "oom", "output_flood")

_WORKER_FILE = Path(__file__).with_name("worker.py")
_BOOT = (
    "import importlib.util, json, sys\n"
    "cfg = json.loads(sys.argv[1])\n"
    "spec = importlib.util.spec_from_file_location('_leap_sandbox_worker', cfg['worker_file'])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules['_leap_sandbox_worker'] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "mod.main(cfg)\n"
)


@dataclass
class SandboxLimits:
    """Limits of one worker and of each call.

    Attributes:
        wall_time_s: wall-clock limit of a call (`WorkerPool.run`'s ``timeout`` overrides it).
        cpu_time_s: CPU seconds a call may use (all threads together); ``SIGXCPU`` past it.
        cpu_lifetime_s: hard CPU limit over a worker's life; the worker is replaced before it.
        address_space_bytes: ``RLIMIT_AS``; `None` disables it (a CUDA context reserves far more
            virtual address space than any limit worth setting, so the cuda backend passes `None`).
        file_size_bytes: largest file a worker may write, its captured stdout/stderr included.
        max_processes: ``RLIMIT_NPROC`` (tasks, threads included, of the worker's uid).
        open_files: ``RLIMIT_NOFILE``.
        startup_timeout_s: time allowed to start a worker and import the preloaded modules.
        max_result_bytes: largest reply a worker may send.
        stderr_tail_bytes: how much of the call's output `WorkerOutcome.stderr_tail` keeps.
    """

    wall_time_s: float = 30.0
    cpu_time_s: float | None = 120.0
    cpu_lifetime_s: float = 3600.0
    address_space_bytes: int | None = 16 * GiB
    file_size_bytes: int | None = 64 * MiB
    max_processes: int | None = 256
    open_files: int | None = 1024
    startup_timeout_s: float = 120.0
    max_result_bytes: int = 256 * MiB
    stderr_tail_bytes: int = 16384


@dataclass
class WorkerOutcome:
    """What came of one call in a worker.

    Attributes:
        ok: the function returned; its value is in `value`.
        value: the function's return value (`None` unless `ok`).
        failure: ``""`` when ok, else one of ``"timeout"``, ``"crash"``, ``"exception"``, ``"oom"``,
            ``"output_flood"``.
        message: what happened, for a human (``"worker killed by signal SIGSEGV (...)"``).
        exit_signal: the signal that ended the worker, if one did.
        exit_code: the worker's exit status when it exited on its own during the call.
        stderr_tail: what the worker wrote to stdout/stderr during the call (sanitizer reports,
            tracebacks of native crashes): all of it up to `SandboxLimits.stderr_tail_bytes`, else
            the first quarter and the last three quarters of that budget around a
            ``[... N bytes cut ...]`` line (a sanitizer names the fault at the start of its report).
        traceback: the Python traceback when the function raised.
        exc_type: the exception's class name when the function raised.
        wall_time_s: wall-clock time of the call as the caller saw it.
        worker_pid: the worker that served the call.
        replaced: the worker was (or will be) replaced after this call.
    """

    ok: bool
    value: Any = None
    failure: str = ""
    message: str = ""
    exit_signal: int | None = None
    exit_code: int | None = None
    stderr_tail: str = ""
    traceback: str = ""
    exc_type: str = ""
    wall_time_s: float = 0.0
    worker_pid: int | None = None
    replaced: bool = False


def request_replacement() -> None:
    """Inside a worker: ask the pool to replace this worker after the current call (poisoned state).

    A result object with a true ``replace_worker`` attribute asks the same. Outside a worker this
    does nothing.
    """
    worker = sys.modules.get("_leap_sandbox_worker")
    if worker is not None:
        worker.request_replacement()


# --------------------------------------------------------------------------------------------- pool
class WorkerPool:
    """A pool of sandboxed, long-lived worker processes.

    Args:
        size: worker processes, the bound on concurrent calls.
        limits: `SandboxLimits` of every worker and call.
        env: variables set in every worker (e.g. ``LD_PRELOAD`` for an AddressSanitizer build).
        preload: modules each worker imports at start, after its confinement (e.g. ``"torch"``).
        env_allow: names copied from the caller's environment when set there.
        writable_dirs: directories the workers may write besides their working directory (a shared
            compile cache). When workers run under their own uid these directories are given to the
            sandbox group (``chgrp -R``, group read/write, setgid directories). ``LEAP_GYM_CACHE``
            is added: the caller's when set, else a shared cache under the temp directory.
        isolate_network: a new network namespace per worker, where the platform allows it.
        read_only_fs: (root) a mount namespace in which all but the writable paths is read-only.
        isolate_processes: a pid namespace per worker (where allowed), so that every process the
            user code starts dies with the worker, and a private ``/proc`` (root).
        drop_privileges: run workers under uids of their own; `None` does so when started as root.
        uid_base: first of the uids (``uid_base + 1 ...``) and the sandbox group id.
        result_types: extra ``(module, name)`` globals a reply may contain (see the module doc).
        result_packages: packages whose dataclasses and enums a reply may contain.
        fresh_workdir: empty the working directory before each call.
        prestart: start a replacement as soon as a worker is lost (in the background, so its
            imports overlap with whatever the caller does before its next call).
    """

    def __init__(self, size: int = 1, limits: SandboxLimits | None = None, env: dict[str, str] | None = None,
                 preload: Iterable[str] = (), *, env_allow: Iterable[str] = DEFAULT_ENV_ALLOW,
                 writable_dirs: Iterable[str] = (), isolate_network: bool = True, read_only_fs: bool = True,
                 isolate_processes: bool = True,
                 drop_privileges: bool | None = None, uid_base: int = 1_200_000,
                 result_types: Iterable[tuple[str, str]] = (), result_packages: Iterable[str] = ("leap_gym",),
                 fresh_workdir: bool = True, prestart: bool = True):
        if size < 1:
            raise ValueError(f"WorkerPool(size={size}): the pool needs at least one worker")
        self.size = size
        self.limits = limits or SandboxLimits()
        self.preload = list(preload)
        self.isolate_network = isolate_network
        self.read_only_fs = read_only_fs
        self.isolate_processes = isolate_processes
        self.fresh_workdir = fresh_workdir
        root = os.geteuid() == 0
        self.drop_privileges = root if drop_privileges is None else bool(drop_privileges and root)
        self._expose = needed_paths()
        self._device_groups: list[int] = []
        if self.drop_privileges:
            groups, reachable = device_groups()
            if reachable:
                self._device_groups = groups
            else:
                log.warning("sandbox: the GPU device nodes are not open to an unprivileged uid; workers keep the "
                            "caller's uid (namespaces and the read-only file system still apply)")
                self.drop_privileges = False
        if self.drop_privileges and not read_only_fs and any(unreachable_ancestor(p) for p in self._expose):
            log.warning("sandbox: the Python installation is not reachable by an unprivileged uid and no "
                        "mount namespace is asked for; workers keep the caller's uid")
            self.drop_privileges = False
        self.uid_base = uid_base
        self._result_packages = tuple(result_packages)
        self._result_types = frozenset((m, n) for m, n in result_types)
        remove_stale_bases()
        self._base = tempfile.mkdtemp(prefix=f"leap_sandbox_{os.getpid()}_")
        os.chmod(self._base, 0o711)  # workers reach their own directory, list nothing
        self._env = self._worker_env(dict(env or {}), tuple(env_allow))
        self.writable_dirs = [os.path.realpath(d) for d in writable_dirs]
        cache = self._env.get("LEAP_GYM_CACHE")
        if cache and os.path.realpath(cache) not in self.writable_dirs:
            self.writable_dirs.append(os.path.realpath(cache))
        for d in list(self.writable_dirs):
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:
                log.warning("sandbox: writable directory %s cannot be created (%s); workers will not have it", d, exc)
                self.writable_dirs.remove(d)
                continue
            if self.drop_privileges:
                share_with_group(d, self.uid_base)
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(size):
            self._slots.put(i)
        self._workers: list[Worker | None] = [None] * size
        self._pending: dict[int, Future] = {}
        self.prestart = prestart
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self.isolation: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, WorkerPool._cleanup, self._workers, self._base)

    # ------------------------------------------------------------------------------------ public API
    def run(self, fn: str, payload: Any = None, timeout: float | None = None) -> WorkerOutcome:
        """Run ``fn(payload)`` in a worker and wait for its outcome (never raises for what fn does).

        Args:
            fn: ``"package.module:function"``, importable in the worker (it gets the caller's sys.path).
            payload: a picklable argument.
            timeout: wall-clock limit in seconds; `SandboxLimits.wall_time_s` when `None`.

        Raises:
            RuntimeError: the pool is closed.
            pickle.PicklingError, TypeError: the payload cannot be pickled.
        """
        if self._closed:
            raise RuntimeError("WorkerPool.run on a closed pool; create a new WorkerPool")
        request = pickle.dumps((fn, payload), protocol=pickle.HIGHEST_PROTOCOL)
        slot = self._slots.get()
        try:
            if self._closed:
                raise RuntimeError("WorkerPool.run on a closed pool; create a new WorkerPool")
            try:
                return self._run_in_slot(slot, request, self.limits.wall_time_s if timeout is None else timeout)
            except Exception as exc:  # noqa: BLE001 - the host failed (no fds, no uid left): still an outcome
                log.exception("sandbox: the call could not be run")
                worker = self._workers[slot]
                if worker is not None:
                    worker.kill()
                    self._workers[slot] = None
                return WorkerOutcome(False, failure="crash", message=f"the sandbox could not run the call: {exc}",
                                     replaced=True)
        finally:
            self._slots.put(slot)

    def submit(self, fn: str, payload: Any = None, timeout: float | None = None) -> Future:
        """`run` on one of the pool's threads; a `Future` of the `WorkerOutcome`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("WorkerPool.submit on a closed pool; create a new WorkerPool")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="leap-sandbox")
            return self._executor.submit(self.run, fn, payload, timeout)

    def close(self) -> None:
        """Stop every worker and remove the pool's directories; calls in flight end as crashes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        for worker in list(self._workers):
            if worker is not None and not worker.dead and worker.proc.returncode is None:
                worker.signal_kill()  # calls in flight see their worker die and return
        deadline = time.monotonic() + 30
        held = []
        for _ in range(self.size):  # wait for them, so no fd is closed under a reader
            try:
                held.append(self._slots.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                log.warning("WorkerPool.close: a call did not return within 30 s")
                break
        for future in list(self._pending.values()):  # replacements starting in the background
            try:
                worker, _ = future.result(timeout=self.limits.startup_timeout_s)
            except Exception:  # noqa: BLE001
                continue
            if worker is not None:
                worker.kill()
        self._pending.clear()
        self._finalizer()
        for slot in held:  # callers still waiting for a slot wake up and see the pool closed
            self._slots.put(slot)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in self._workers if w is not None and not w.dead]

    # ------------------------------------------------------------------------------------- internals
    @staticmethod
    def _cleanup(workers: list[Worker | None], base: str) -> None:
        for i, w in enumerate(workers):
            if w is not None:
                w.kill()
                workers[i] = None
        shutil.rmtree(base, ignore_errors=True)

    def _worker_env(self, env: dict[str, str], allow: tuple[str, ...]) -> dict[str, str]:
        out = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
               "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONDONTWRITEBYTECODE": "1"}
        if self.drop_privileges:  # a worker's uid has no passwd entry: getpass.getuser() (torch's caches) reads these
            out["USER"] = out["LOGNAME"] = "leap-sandbox"
        out.update({k: os.environ[k] for k in allow if k in os.environ})
        out.update(env)
        if "LEAP_GYM_CACHE" not in out:
            if self.drop_privileges:  # the caller's ~/.cache is usually out of an unprivileged uid's reach
                out["LEAP_GYM_CACHE"] = os.path.join(tempfile.gettempdir(), f"leap_gym_cache_{os.getuid()}")
            else:
                out["LEAP_GYM_CACHE"] = str(default_cache_dir())
        return out

    def _start(self, slot: int) -> tuple[Worker | None, WorkerOutcome | None]:
        lease = UidLease(self.uid_base) if self.drop_privileges else None
        workdir = tempfile.mkdtemp(prefix=f"w{slot}_", dir=self._base)
        if lease is not None:
            os.chown(workdir, lease.uid, self.uid_base)
        os.chmod(workdir, 0o700)
        log_path = os.path.join(self._base, f"w{slot}_{os.path.basename(workdir)}.log")
        log_w = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        log_r = os.open(log_path, os.O_RDWR | os.O_CLOEXEC)
        os.unlink(log_path)
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        lim = self.limits
        cfg = {
            "worker_file": str(_WORKER_FILE), "fd_in": to_r, "fd_out": from_w,
            "sys_path": [p or os.getcwd() for p in sys.path],
            "preload": self.preload, "workdir": workdir, "expose": self._expose, "writable_dirs": self.writable_dirs,
            "isolate_network": self.isolate_network, "read_only_fs": self.read_only_fs,
            "isolate_processes": self.isolate_processes,
            "uid": lease.uid if lease else None, "gid": self.uid_base if lease else None,
            "groups": self._device_groups,
            "limits": {"address_space_bytes": lim.address_space_bytes, "file_size_bytes": lim.file_size_bytes,
                       "open_files": lim.open_files, "cpu_time_s": lim.cpu_time_s,
                       "cpu_lifetime_s": lim.cpu_lifetime_s, "max_processes": lim.max_processes},
        }
        env = dict(self._env, HOME=workdir, TMPDIR=workdir)
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-c", _BOOT, json.dumps(cfg)], stdin=subprocess.DEVNULL,
                                    stdout=log_w, stderr=log_w, pass_fds=(to_r, from_w), env=env, cwd=workdir,
                                    start_new_session=True, close_fds=True)
        except BaseException:
            for fd in (to_w, from_r, log_r):
                os.close(fd)
            shutil.rmtree(workdir, ignore_errors=True)
            if lease is not None:
                lease.release()
            raise
        finally:
            for fd in (to_r, from_w, log_w):
                os.close(fd)
        for fd in (to_w, from_r):
            os.set_blocking(fd, False)
        worker = Worker(proc, to_w, from_r, log_r, workdir, lease)
        start = time.monotonic()
        try:
            hello = ReplyUnpickler(recv(from_r, start + lim.startup_timeout_s, 1 << 20), (), frozenset()).load()
            if not isinstance(hello, dict):
                raise pickle.UnpicklingError("the worker's greeting is not a dict")
        except (EOFError, OSError, TransportTimeout, ReplyTooBig, pickle.UnpicklingError) as exc:
            tail = worker.stderr_tail(self.limits.stderr_tail_bytes)
            code = worker.kill()
            why = "timed out" if isinstance(exc, TransportTimeout) else f"exited ({exit_text(code)})"
            return None, WorkerOutcome(False, failure="crash", message=f"the sandbox worker failed to start: {why}",
                                       stderr_tail=tail, exit_code=code if code and code > 0 else None,
                                       exit_signal=-code if code and code < 0 else None, replaced=True,
                                       wall_time_s=time.monotonic() - start)
        if not hello.get("ready"):
            tail = worker.stderr_tail(self.limits.stderr_tail_bytes)
            worker.kill()
            return None, WorkerOutcome(False, failure="crash",
                                       message=f"the sandbox worker failed to start: {hello.get('error')}",
                                       traceback=hello.get("traceback", ""), stderr_tail=tail, replaced=True,
                                       wall_time_s=time.monotonic() - start)
        worker.info = {**hello.get("applied", {}), "notes": hello.get("notes", [])}
        if worker.info["notes"] and not self.isolation:
            log.info("sandbox worker confinement is partial: %s", "; ".join(worker.info["notes"]))
        self.isolation = dict(worker.info)
        return worker, None

    def _run_in_slot(self, slot: int, request: bytes, timeout: float) -> WorkerOutcome:
        pending = self._pending.pop(slot, None)
        if pending is not None:  # a replacement started in the background after the last call
            try:
                started, failed = pending.result()
            except Exception as exc:  # noqa: BLE001 - try again in the foreground
                log.debug("sandbox: background start failed: %s", exc)
                started, failed = None, None
            if failed is not None:
                return failed
            if started is not None:
                self._workers[slot] = started
        worker = self._workers[slot]
        if worker is not None and not worker.dead and worker.proc.poll() is not None:
            log.info("sandbox worker %d died while idle (%s); starting another", worker.proc.pid,
                     exit_text(worker.proc.returncode))
            worker.kill()
            worker = None
        if worker is None or worker.dead:
            worker, failed = self._start(slot)
            if failed is not None:
                return failed
            self._workers[slot] = worker
        assert worker is not None
        if self.fresh_workdir:
            clear_dir(worker.workdir)
        try:
            os.ftruncate(worker.log_fd, 0)
        except OSError:
            pass
        start = time.monotonic()
        deadline = start + timeout
        outcome: WorkerOutcome
        try:
            send(worker.to_fd, request, deadline)
            reply_bytes = recv(worker.from_fd, deadline, self.limits.max_result_bytes)
        except TransportTimeout:
            outcome = WorkerOutcome(False, failure="timeout", message=f"timed out after {timeout:g} s")
        except ReplyTooBig as exc:
            outcome = WorkerOutcome(False, failure="output_flood",
                                    message=f"the function's result is {exc.args[0]} bytes, over the "
                                            f"{self.limits.max_result_bytes}-byte limit")
        except (EOFError, BrokenPipeError, OSError):
            outcome = self._died(worker)
        else:
            outcome = self._read_reply(worker, reply_bytes)
        outcome.wall_time_s = time.monotonic() - start
        outcome.worker_pid = worker.proc.pid
        limit = self.limits.file_size_bytes
        if limit is not None and outcome.failure in ("", "exception") and worker.log_size() >= limit:
            note = f"the output passed the {limit}-byte limit and was cut there"
            if outcome.ok:  # the function still returned: keep its value, say the output was cut
                outcome.message = note
            else:
                outcome.failure, outcome.message = "output_flood", f"{note} ({outcome.message})"
        if not outcome.stderr_tail:
            outcome.stderr_tail = worker.stderr_tail(self.limits.stderr_tail_bytes)
        if not outcome.replaced and has_strays(worker):
            outcome.replaced = True  # processes the call left behind (a fork, a daemon) go with the worker
            log.debug("sandbox worker %d left processes behind; replacing it", worker.proc.pid)
        if outcome.failure in ("timeout", "crash", "oom", "output_flood") or outcome.replaced:
            outcome.replaced = True
            code = worker.kill()
            if outcome.failure == "crash" and outcome.exit_signal is None and outcome.exit_code is None:
                outcome.exit_signal, outcome.exit_code = split_code(code)
            self._workers[slot] = None
            if self.prestart and not self._closed:
                self._pending[slot] = self._start_in_background(slot)
        return outcome

    def _start_in_background(self, slot: int) -> Future:
        future: Future = Future()

        def start() -> None:
            try:
                worker, failed = self._start(slot)
            except BaseException as exc:  # noqa: BLE001
                future.set_exception(exc)
                return
            if self._closed and worker is not None:
                worker.kill()
                worker = None
            future.set_result((worker, failed))

        threading.Thread(target=start, name="leap-sandbox-start", daemon=True).start()
        return future

    def _died(self, worker: Worker) -> WorkerOutcome:
        """The worker closed its pipe: wait briefly for it to exit and say how it ended."""
        end = time.monotonic() + 2.0
        exited = False
        while time.monotonic() < end:
            try:
                info = os.waitid(os.P_PID, worker.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                exited = True
            if info is not None:
                exited = True
                break
            time.sleep(0.01)
        tail = worker.stderr_tail(self.limits.stderr_tail_bytes)
        flooded = self.limits.file_size_bytes is not None and worker.log_size() >= self.limits.file_size_bytes
        code = worker.kill()
        sig, exit_code = split_code(code)
        if not exited:
            return WorkerOutcome(False, failure="crash", message="the worker closed its protocol pipe and was killed",
                                 stderr_tail=tail, replaced=True)
        if sig == signal.SIGXFSZ and flooded:
            return WorkerOutcome(False, failure="output_flood", exit_signal=sig, stderr_tail=tail, replaced=True,
                                 message=f"the output passed the {self.limits.file_size_bytes}-byte limit and "
                                         "the worker was stopped")
        if self._closed:
            return WorkerOutcome(False, failure="crash", message="the worker pool was closed during the call",
                                 exit_signal=sig, stderr_tail=tail, replaced=True)
        if sig == signal.SIGKILL:
            return WorkerOutcome(False, failure="oom", exit_signal=sig, stderr_tail=tail, replaced=True,
                                 message=f"{exit_text(code)}: most likely the kernel's out-of-memory killer")
        if sig == signal.SIGXCPU:
            return WorkerOutcome(False, failure="timeout", exit_signal=sig, stderr_tail=tail, replaced=True,
                                 message=f"CPU time limit ({self.limits.cpu_time_s:g} s) exceeded")
        return WorkerOutcome(False, failure="crash", message=exit_text(code), exit_signal=sig,
                             exit_code=exit_code, stderr_tail=tail, replaced=True)

    def _read_reply(self, worker: Worker, data: bytes) -> WorkerOutcome:
        try:
            reply = ReplyUnpickler(data, (), frozenset()).load()
            if not isinstance(reply, dict):
                raise pickle.UnpicklingError("the reply is not a dict")
        except Exception as exc:  # noqa: BLE001 - a compromised worker may send anything
            return WorkerOutcome(False, failure="crash", message=f"the worker sent an unreadable reply: {exc}",
                                 replaced=True)
        worker.cpu_used_s = float(reply.get("cpu_used_s") or 0.0)
        replace = bool(reply.get("replace")) or bool(reply.get("strays"))
        if self.limits.cpu_time_s is not None and \
                worker.cpu_used_s > self.limits.cpu_lifetime_s - self.limits.cpu_time_s - 1:
            replace = True
        if reply.get("ok"):
            try:
                value = ReplyUnpickler(reply["value"], self._result_packages, self._result_types).load()
            except Exception as exc:  # noqa: BLE001
                return WorkerOutcome(False, failure="exception", replaced=True,
                                     message=f"the function's result could not be read: {exc}")
            if getattr(value, "replace_worker", False) is True:
                replace = True
            return WorkerOutcome(True, value=value, replaced=replace)
        oom = bool(reply.get("memory_error"))
        return WorkerOutcome(False, failure="oom" if oom else "exception", message=str(reply.get("message", "")),
                             traceback=str(reply.get("traceback", "")), exc_type=str(reply.get("exc_type", "")),
                             replaced=replace or oom)
