"""The worker sandbox: every kind of misbehaviour comes back as a `WorkerOutcome`, the pool survives.

The functions the workers run are defined at the top of this module, which imports only the
standard library at import time (workers import it by name, and stay fast to start without torch).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

HERE = __name__  # the workers import this module by the same name (pytest puts envs_tests on sys.path)


# ----------------------------------------------------------------------- functions run in workers
@dataclasses.dataclass
class Reply:
    value: int
    replace_worker: bool = False


def echo(payload):
    return payload


def make_reply(payload):
    return Reply(payload["value"], replace_worker=payload.get("replace", False))


def describe(_):
    import getpass

    return {"pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd(), "env": dict(os.environ),
            "listing": sorted(os.listdir(".")), "procs": sum(p.isdigit() for p in os.listdir("/proc")),
            "user": getpass.getuser(), "proc_read_only": bool(os.statvfs("/proc").f_flag & os.ST_RDONLY),
            "proc_sys_read_only": bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY)}


def raise_value_error(_):
    raise ValueError("boom from the worker")


def segfault(_):
    os.write(2, b"about to dereference NULL\n")
    ctypes.string_at(0)


def abort(_):
    os.abort()


def exit_hard(code):
    os._exit(code)


def exit_soft(_):
    sys.exit(4)


def spin(_):
    while True:
        pass


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def allocate(nbytes):
    return len(bytearray(nbytes))


def fork_bomb(n):
    made, errors = 0, []
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError as exc:
            errors.append(exc.errno)
            continue
        if pid == 0:
            os.setsid()  # try to leave the worker's process group too
            time.sleep(1000)
            os._exit(0)
        made += 1
    return {"made": made, "errors": len(errors)}


def flood(nbytes):
    chunk = "x" * (1 << 20) + "\n"
    for _ in range(nbytes >> 20):
        sys.stdout.write(chunk)
    sys.stdout.flush()
    return "survived"


def noisy(_):
    os.write(1, os.urandom(4096))
    print("garbage on stdout \x00\xff" * 100)
    return 42


def corrupt_protocol(_):
    # the reply pipe is one of the few open fds: write garbage to every fd but 0-2
    for fd in range(3, 64):
        try:
            os.write(fd, b"\xff" * 16 + b"not a pickle")
        except OSError:
            pass
    return "written"


def write_file(path):
    try:
        with open(path, "w") as f:
            f.write("escaped")
    except OSError as exc:
        return f"{type(exc).__name__}: errno {exc.errno}"
    return "written"


def connect(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return "connected"
    except OSError as exc:
        return f"{type(exc).__name__}: errno {exc.errno}"


def torch_op(n):
    import torch

    x = torch.arange(n, dtype=torch.float32)
    return float((x * 2).sum())


class Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def evil_result(path):
    return Evil(path)


def cpu_burn(_):
    end = time.time() + 30
    while time.time() < end:
        pass
    return "done"


# -------------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def sandbox():
    from leap_gym import sandbox

    return sandbox


@pytest.fixture(scope="module")
def pool(sandbox):
    limits = sandbox.SandboxLimits(wall_time_s=10, address_space_bytes=4 << 30, file_size_bytes=8 << 20,
                                   max_processes=64)
    with sandbox.WorkerPool(size=1, limits=limits, result_packages=("leap_gym", HERE)) as p:
        yield p


def fn(name: str) -> str:
    return f"{HERE}:{name}"


def test_returns_value_and_keeps_worker_warm(pool):
    first = pool.run(fn("echo"), {"a": [1, 2.5, "x"]})
    assert first.ok and first.failure == "" and first.value == {"a": [1, 2.5, "x"]}
    second = pool.run(fn("make_reply"), {"value": 7})
    assert second.ok and second.value == Reply(7)
    assert first.worker_pid == second.worker_pid and not second.replaced


def test_worker_is_confined(pool, sandbox):
    os.environ["LEAP_SANDBOX_TEST_SECRET"] = "hunter2"
    try:
        out = pool.run(fn("describe"), None).value
    finally:
        del os.environ["LEAP_SANDBOX_TEST_SECRET"]
    assert "LEAP_SANDBOX_TEST_SECRET" not in out["env"]
    assert out["env"]["HOME"] == out["cwd"] == out["env"]["TMPDIR"]
    assert set(out["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "USER", "LOGNAME",
                               *sandbox.DEFAULT_ENV_ALLOW}
    assert out["cwd"] != os.getcwd() and out["listing"] == []
    assert out["user"]  # getpass.getuser() works under a uid with no passwd entry
    if os.geteuid() == 0:
        assert out["uid"] != 0 and pool.isolation["uid"] == out["uid"]
        assert pool.isolation["netns"] and pool.isolation["mountns"] and pool.isolation["pidns"]
        assert out["procs"] <= 3  # a private /proc: the worker sees its own namespace only
        assert not out["proc_read_only"] and out["proc_sys_read_only"]  # cuInit fails under a read-only /proc


def test_workdir_is_emptied_between_calls(pool):
    assert pool.run(fn("write_file"), "left_behind.txt").value == "written"
    assert pool.run(fn("describe"), None).value["listing"] == []


def test_exception_comes_back_with_traceback(pool):
    out = pool.run(fn("raise_value_error"), None)
    assert not out.ok and out.failure == "exception" and out.exc_type == "ValueError"
    assert "boom from the worker" in out.message and "raise_value_error" in out.traceback
    assert not out.replaced and pool.run(fn("echo"), 1).worker_pid == out.worker_pid


def test_sys_exit_is_an_exception_and_os_exit_a_crash(pool):
    out = pool.run(fn("exit_soft"), None)
    assert out.failure == "exception" and out.exc_type == "SystemExit"
    out = pool.run(fn("exit_hard"), 3)
    assert out.failure == "crash" and out.exit_code == 3 and "status 3" in out.message
    assert pool.run(fn("echo"), 1).ok


def test_segfault_is_a_crash_and_the_worker_is_replaced(pool):
    before = pool.run(fn("echo"), 0).worker_pid
    out = pool.run(fn("segfault"), None)
    assert not out.ok and out.failure == "crash" and out.exit_signal == signal.SIGSEGV
    assert "SIGSEGV" in out.message and out.replaced
    assert "about to dereference NULL" in out.stderr_tail
    after = pool.run(fn("echo"), 5)
    assert after.ok and after.value == 5 and after.worker_pid != before


def test_abort(pool):
    out = pool.run(fn("abort"), None)
    assert out.failure == "crash" and out.exit_signal == signal.SIGABRT and "SIGABRT" in out.message
    assert pool.run(fn("echo"), 1).ok


def test_infinite_loop_times_out_and_pool_recovers(pool):
    start = time.monotonic()
    out = pool.run(fn("spin"), None, timeout=1.5)
    assert out.failure == "timeout" and "1.5 s" in out.message and out.replaced
    assert time.monotonic() - start < 8
    assert pool.run(fn("echo"), "next").value == "next"


def test_sleep_past_timeout(pool):
    out = pool.run(fn("sleep"), 30, timeout=1)
    assert out.failure == "timeout" and out.wall_time_s < 5
    assert pool.run(fn("sleep"), 0.1).value == 0.1


def test_allocation_beyond_address_space_is_clean(pool):
    out = pool.run(fn("allocate"), 8 << 30)
    assert not out.ok and out.failure == "oom" and "MemoryError" in out.message
    assert pool.run(fn("allocate"), 1 << 20).value == 1 << 20


def test_fork_bomb_is_bounded_and_children_die(pool):
    out = pool.run(fn("fork_bomb"), 1000, timeout=20)
    assert out.ok or out.failure in ("crash", "timeout")
    if os.geteuid() == 0:  # RLIMIT_NPROC binds the worker's own uid
        assert out.value["made"] < 64 and out.value["errors"] > 0
    assert out.replaced  # the forked children were left behind: they go with the worker
    uid = pool.isolation.get("uid")
    if os.geteuid() == 0 and uid:
        deadline = time.monotonic() + 5
        while _live_processes_of(uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _live_processes_of(uid) == []
    assert pool.run(fn("echo"), 1).ok


def _live_processes_of(uid: int) -> list[int]:
    """Processes of `uid` that are not zombies (killed ones wait for init to reap them)."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            alive.append(int(pid))
    return alive


def _uid_of(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def test_output_flood_is_bounded(pool):
    out = pool.run(fn("flood"), 100 << 20)
    assert not out.ok and out.failure == "output_flood" and len(out.stderr_tail) <= 17000
    assert "bytes cut" in out.stderr_tail
    assert pool.run(fn("echo"), 1).ok


def test_noise_on_stdout_does_not_break_the_protocol(pool):
    out = pool.run(fn("noisy"), None)
    assert out.ok and out.value == 42 and "garbage on stdout" in out.stderr_tail


def test_garbage_on_the_protocol_pipe_is_survived(pool):
    out = pool.run(fn("corrupt_protocol"), None)
    assert out.failure in ("crash", "output_flood", "") or out.ok
    assert pool.run(fn("echo"), "fine").value == "fine"


def test_no_file_written_outside_the_sandbox(pool):
    target = Path("/tmp") / f"leap_escape_{uuid.uuid4().hex}"
    repo_file = Path(__file__).with_name(f"leap_escape_{uuid.uuid4().hex}")
    try:
        for path in (target, repo_file):
            result = pool.run(fn("write_file"), str(path)).value
            if os.geteuid() == 0:
                assert result.startswith(("PermissionError", "OSError")), result
                assert not path.exists()
    finally:
        target.unlink(missing_ok=True)
        repo_file.unlink(missing_ok=True)


def test_network_connect_fails(pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        result = pool.run(fn("connect"), port).value
    finally:
        server.close()
    if pool.isolation.get("netns"):
        assert result.startswith("OSError") or "Error" in result, result
        assert result != "connected"


def test_reply_cannot_run_code_in_the_caller(pool):
    marker = Path("/tmp") / f"leap_pwned_{uuid.uuid4().hex}"
    out = pool.run(fn("evil_result"), str(marker))
    assert not out.ok and out.failure == "exception" and "not an allowed result type" in out.message
    assert not marker.exists()
    assert pool.run(fn("echo"), 1).ok


def test_result_flag_replaces_the_worker(pool):
    first = pool.run(fn("make_reply"), {"value": 1, "replace": True})
    assert first.ok and first.replaced
    assert pool.run(fn("echo"), 1).worker_pid != first.worker_pid


def test_cpu_time_limit(sandbox):
    limits = sandbox.SandboxLimits(wall_time_s=20, cpu_time_s=1)
    with sandbox.WorkerPool(limits=limits) as p:
        out = p.run(fn("cpu_burn"), None)
        assert out.failure == "timeout" and "CPU time" in out.message  # before the 20 s wall clock
        assert p.run(fn("echo"), 2).value == 2


def test_concurrent_submits_across_two_workers(sandbox):
    with sandbox.WorkerPool(size=2) as p:
        warm = [p.submit(fn("sleep"), 0.5) for _ in range(2)]  # start both workers
        assert len({f.result(timeout=60).worker_pid for f in warm}) == 2
        futures = []
        lock = threading.Lock()

        def submit():
            f = p.submit(fn("sleep"), 1.0)
            with lock:
                futures.append(f)

        threads = [threading.Thread(target=submit) for _ in range(4)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcomes = [f.result(timeout=30) for f in futures]
        elapsed = time.monotonic() - start
        assert all(o.ok and o.value == 1.0 for o in outcomes)
        assert len({o.worker_pid for o in outcomes}) == 2
        assert elapsed < 3.9  # two at a time (2 s), not four in a row (4 s)
        pids = p.pids
    assert all(not os.path.exists(f"/proc/{pid}") or _uid_of(str(pid)) is None for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        p.run(fn("echo"), 1)


def test_torch_works_in_a_preloaded_worker(sandbox, tmp_path):
    cache = tmp_path / "cache"
    with sandbox.WorkerPool(preload=["torch"], env={"LEAP_GYM_CACHE": str(cache)}) as p:
        out = p.run(fn("torch_op"), 10, timeout=60)
        assert out.ok, out.message + out.traceback + out.stderr_tail
        assert out.value == 90.0
        written = p.run(fn("write_file"), str(cache / "entry.bin"))
        assert written.value == "written" and (cache / "entry.bin").read_text() == "escaped"


def test_close_during_a_call_returns_it(sandbox):
    p = sandbox.WorkerPool()
    assert p.run(fn("echo"), 1).ok
    future = p.submit(fn("sleep"), 60)
    time.sleep(0.5)
    waiting: list = []

    def wait_for_slot():  # a second caller queued behind the first must not hang on close
        try:
            waiting.append(p.run(fn("echo"), 1))
        except RuntimeError as exc:
            waiting.append(exc)

    waiter = threading.Thread(target=wait_for_slot)
    waiter.start()
    start = time.monotonic()
    p.close()
    out = future.result(timeout=30)
    assert not out.ok and out.failure == "crash" and "closed" in out.message
    waiter.join(timeout=30)
    assert not waiter.is_alive() and isinstance(waiting[0], RuntimeError)
    assert time.monotonic() - start < 15


def test_worker_killed_while_idle_is_restarted(sandbox):
    with sandbox.WorkerPool() as p:
        pid = p.run(fn("echo"), 1).worker_pid
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        out = p.run(fn("echo"), 2)
        assert out.ok and out.value == 2 and out.worker_pid != pid


def test_failed_start_is_an_outcome(sandbox):
    with sandbox.WorkerPool(preload=["leap_gym_no_such_module"]) as p:
        out = p.run(fn("echo"), 1)
        assert not out.ok and out.failure == "crash" and "failed to start" in out.message
        assert "leap_gym_no_such_module" in out.message


NON_ROOT_SCRIPT = r"""
import ctypes, json, os, sys, importlib.util
uid = int(sys.argv[1]); home = sys.argv[2]
spec = importlib.util.spec_from_file_location("w", sys.argv[3])
w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)
libc = w._libc()
assert libc.unshare(w.CLONE_NEWNS) == 0
libc.mount(None, b"/", None, ctypes.c_ulong(w.MS_REC | w.MS_PRIVATE), None)
paths = {os.path.dirname(os.path.realpath(sys.executable)), os.path.realpath(sys.base_prefix)}
paths.update(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))
w._expose(libc, sorted(paths))   # the interpreter may live under a closed /root
os.setgroups([]); os.setgid(uid); os.setuid(uid)
os.environ["HOME"] = home
os.chdir(home)
def load(name, path):  # by path: importing the leap_gym package would import torch (slow)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec); sys.modules[name] = module; spec.loader.exec_module(module)
    return module
load("leap_gym.sandbox.host", sys.argv[4].replace("pool.py", "host.py"))
sandbox = load("leap_sandbox", sys.argv[4])
out = {}
with sandbox.WorkerPool(limits=sandbox.SandboxLimits(max_processes=64, address_space_bytes=4 << 30)) as p:
    out["echo"] = p.run("test_sandbox:echo", 5).value
    out["isolation"] = p.isolation
    out["connect"] = p.run("test_sandbox:connect", 1).value
    out["segv"] = p.run("test_sandbox:segfault", None).exit_signal
    bomb = p.run("test_sandbox:fork_bomb", 300)
    out["bomb_replaced"] = bomb.replaced
    out["spin"] = p.run("test_sandbox:spin", None, timeout=1).failure
    out["after"] = p.run("test_sandbox:echo", 6).value
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to set up a non-root caller")
def test_non_root_caller_gets_user_net_and_pid_namespaces(tmp_path):
    """Started by an ordinary user: no uid of its own, but (where the kernel allows unprivileged user
    namespaces) no network, and every forked process dies with the worker."""
    import json
    import subprocess

    uid = 1_999_999
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, uid, uid)
    tmp_path.chmod(0o755)
    here = Path(__file__).resolve().parent
    script = home / "run.py"
    script.write_text(NON_ROOT_SCRIPT)
    env = dict(os.environ, PYTHONPATH=f"{here.parent}{os.pathsep}{here}")
    worker_file = here.parent / "leap_gym" / "sandbox" / "worker.py"
    proc = subprocess.run([sys.executable, str(script), str(uid), str(home), str(worker_file),
                           str(worker_file.with_name("pool.py"))], env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["echo"] == 5 and out["after"] == 6 and out["isolation"]["uid"] == uid
    assert out["segv"] == signal.SIGSEGV and out["spin"] == "timeout" and out["bomb_replaced"]
    if out["isolation"]["netns"]:
        assert out["connect"] != "connected"
    if out["isolation"]["pidns"]:
        deadline = time.monotonic() + 5
        while _live_processes_of(uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _live_processes_of(uid) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_gpu_device_nodes_decide_the_groups(tmp_path):
    from leap_gym.sandbox.host import device_groups

    node = tmp_path / "nvidia0"
    os.mknod(node, 0o020666, os.makedev(1, 3))  # a character device like /dev/null
    node.chmod(0o666)
    assert device_groups((str(node),)) == ([], True)
    os.chown(node, 0, 4321)
    node.chmod(0o660)
    assert device_groups((str(node),)) == ([4321], True)
    node.chmod(0o600)
    assert device_groups((str(node),)) == ([], False)


def test_worker_outlives_the_thread_that_started_it(sandbox):
    with sandbox.WorkerPool(prestart=False) as p:
        first: list = []
        t = threading.Thread(target=lambda: first.append(p.run(fn("echo"), 1)))
        t.start()
        t.join()
        time.sleep(0.3)
        second = p.run(fn("echo"), 2)
        assert first[0].ok and second.ok and second.worker_pid == first[0].worker_pid


def test_replacement_starts_in_the_background(sandbox):
    with sandbox.WorkerPool(preload=[HERE]) as p:
        crashed = p.run(fn("segfault"), None)
        assert crashed.failure == "crash"
        time.sleep(2.5)  # the replacement starts (and imports this module) meanwhile
        start = time.monotonic()
        after = p.run(fn("echo"), 3)
        assert after.ok and after.worker_pid != crashed.worker_pid
        assert time.monotonic() - start < 1.0


PARENT_DIES_SCRIPT = r"""
import os, signal, sys, time
from leap_gym import sandbox
p = sandbox.WorkerPool(size=2)
idle = p.submit("test_sandbox:echo", 1)
busy = p.submit("test_sandbox:sleep", 1000, timeout=2000)
idle.result()
time.sleep(1)
print(p.pids, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_die_with_the_caller(tmp_path):
    """A caller killed outright leaves no worker behind, idle or busy."""
    import subprocess

    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=f"{here.parent}{os.pathsep}{here}")
    proc = subprocess.run([sys.executable, "-c", PARENT_DIES_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    pids = [int(p) for p in proc.stdout.strip().splitlines()[-1].strip("[]").split(",")]
    assert len(pids) == 2, proc.stderr[-2000:]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.1)
    assert not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
