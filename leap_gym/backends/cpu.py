"""The `cpu` backend: CUDA kernels compiled as C++ and run on the CPU by this project's runtime.

The kernel source (already accepted by NVRTC) is compiled by the host C++ compiler with the
runtime header `cpu_runtime/leap_cuda_cpu.h` force-included (precompiled) and `__CUDA_ARCH__`
defined; the threads of a block run as fibers, blocks on worker threads (see
`cpu_runtime/leap_runtime.cpp`). Kernels launch through ctypes on CPU torch tensors.

API (stable; `leap_gym.evaluation.pipeline` relies on it):

- ``CpuBackend(workers=None, shuffle=False, seed=0)``: ``name="cpu"``, ``device="cpu"``,
  ``size_preset="cpu"``, ``reports_speedup=False``.
  ``load(cuda_source, cubin, signatures, arch, checked=False) -> CpuLauncher``;
  ``availability() -> Availability`` (needs g++ or clang++; ``$CXX`` wins).
- ``CpuLauncher``: ``device="cpu"``, ``max_shared_mem`` (48 KiB: the default limit of dynamic
  shared memory without the opt-in attribute, which responses cannot set),
  ``launch(name, grid, block, shared_mem, args, tensors=None)``, ``drain_output() -> str`` (device
  printf, plus a runtime note where the source relies on warp lockstep), ``shuffle: bool`` and
  ``seed: int`` (run a block's threads in a random order, reshuffled at every barrier, so a missing
  ``__syncthreads`` shows up), ``guards: bool`` (default on, off in checked builds: each tensor argument
  is copied into a buffer that ends at a PROT_NONE page, with canary bytes before it, so an access
  past the end faults at once and is reported with the argument, the element, the thread and the
  line (from the module's ``-g1`` line tables through ``addr2line``); a write before the start is
  found in the canaries), ``locate: bool`` (default on: when no line is known, replay the launch under
  AddressSanitizer in a subprocess; this needs no RLIMIT_AS, so it does not work inside the sandbox).
  ``tensors`` are the launch's original arguments; when omitted they are read from the calling `Kernels` handle.
- Errors are `KernelRuntimeError` with ``detail`` in ``{"deadlock", "out_of_bounds", "unsupported",
  "kernel_error", "launch"}``, naming the kernel and, where known, the line of the cuda block. A wild
  access (SIGSEGV inside a kernel) is caught by the runtime and is an ``out_of_bounds`` error too, so
  the process survives; only a fault outside kernel code still crashes. Such a fault outside every guarded
  buffer calls `request_worker_replacement`: the kernel's stray writes before it may have landed in the process.
- ``checked_worker_env() -> dict[str, str]``: environment for a process that runs ``checked=True``
  loads (libasan preloaded, ASan options). In such a process ``load(..., checked=True)`` builds with
  AddressSanitizer (ASan aborts the process at the first bad access, with a report on stderr);
  elsewhere it falls back to the normal build.
- ``describe_memory_error(stderr_text, cuda_source) -> str``: an ASan report read back as
  "out-of-bounds read of 4 bytes in kernel 'k' at line 12: element 300 of a buffer of 300 elements
  ..." plus the quoted line (empty when the text holds no report).
- ``locate_memory_error(cuda_source, arch, kernel, grid, block, shared_mem, args: list[ReplayArg])
  -> str`` (`leap_gym.backends.cpu_checked`): replay one launch in an ASan subprocess.
- ``runtime_build(checked=False) -> Path``: the cached runtime object and precompiled header.

The build cache lives in ``$LEAP_GYM_CACHE/cpu`` (default ``~/.cache/leap_gym/cpu``).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from leap_gym.backends.base import Availability, Backend, KernelRuntimeError, request_worker_replacement
from leap_gym.backends.cpu_build import (
    DEFAULT_SHARED_MEM,
    ERROR_KINDS,
    SOURCE_NAME,
    asan_loaded,
    build_module,
    find_compiler,
    runtime_build,
    runtime_notes,
    static_shared_bytes,
    unsupported_features,
)
from leap_gym.backends.cpu_checked import ReplayArg, locate_memory_error
from leap_gym.evaluation.kernels import KernelSignature

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------
# Launching
# ------------------------------------------------------------------------------------------------
class LeapLaunch(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shmem", ctypes.c_ulonglong),
                ("workers", ctypes.c_int), ("shuffle", ctypes.c_int), ("seed", ctypes.c_ulonglong),
                ("status", ctypes.c_int), ("message", ctypes.c_char * 2048)]


def default_workers() -> int:
    env = os.environ.get("LEAP_CPU_WORKERS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


class CpuLauncher:
    """Runs one compiled cuda block's kernels on CPU tensors (a `KernelLauncher`)."""

    device = "cpu"

    def __init__(self, path: Path, cuda_source: str, signatures: dict[str, KernelSignature], arch: str,
                 checked: bool, workers: int, shuffle: bool, seed: int, cubin: bytes = b""):
        self.path = path
        self.cuda_source = cuda_source
        self.signatures = signatures
        self.arch = arch
        self.checked = checked
        self.workers = workers
        self.shuffle = shuffle
        self.seed = seed
        self.max_shared_mem = DEFAULT_SHARED_MEM
        self.static_shared = static_shared_bytes(cubin)
        self._lib = ctypes.CDLL(str(path))
        self._entries: dict[str, Any] = {}
        for name in signatures:
            fn = getattr(self._lib, f"__leap_launch_{name}")
            fn.argtypes = [ctypes.POINTER(LeapLaunch), ctypes.c_void_p]
            fn.restype = ctypes.c_int
            self._entries[name] = fn
        self._take = self._lib.leap_output_take
        self._take.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self._take.restype = ctypes.c_size_t
        self._output: list[str] = runtime_notes(cuda_source)
        self._launch_count = 0
        self.guards = not checked
        self.locate = True

    def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
               args: list[Any], tensors: list[Any] | None = None) -> None:
        """Run kernel `name`; `args` as `marshal_args` packs them.

        `tensors` (the launch's original arguments, tensors where pointers go) enables the guard
        buffers; without it the kernel runs on the tensors' own memory.
        """
        if name not in self._entries:
            raise KernelRuntimeError(f"no kernel named '{name}' in this module", "launch")
        static = self.static_shared.get(name, 0)
        if static + shared_mem > self.max_shared_mem:
            raise KernelRuntimeError(
                f"CUDA error: too many resources requested for launch (kernel '{name}': {static} bytes of static "
                f"__shared__ memory + {shared_mem} bytes of dynamic shared memory > {self.max_shared_mem} bytes per "
                "block); use less shared memory per block", "launch")
        if tensors is not None and not any(t is not None for t in tensors):
            tensors = None
        guarded = GuardedArgs(tensors, args) if self.guards and tensors is not None else None
        try:
            try:
                self._launch(name, grid, block, shared_mem, guarded.args if guarded else args)
            except KernelRuntimeError as exc:
                if exc.detail == "out_of_bounds":  # a bad access caught by the runtime's SIGSEGV handler
                    message, wild = self._describe_fault(name, str(exc), guarded, grid, block, shared_mem, args,
                                                         tensors)
                    if wild:  # the kernel's earlier stray writes may have landed in this process's memory
                        request_worker_replacement()
                    raise KernelRuntimeError(message, "out_of_bounds") from None
                pc = re.search(r" ?\[pc \+0x([0-9a-f]+)\]", str(exc))
                if pc:  # a stack overflow: name the line it happened at
                    frames = addr2line(self.path, int(pc.group(1), 16))
                    where = f" at line {frames[0][1]}" if frames else ""
                    raise KernelRuntimeError(str(exc).replace(pc.group(0), where), exc.detail) from None
                raise
            fault = guarded.check() if guarded else None
            if fault is not None:
                self._report_guard_fault(name, grid, block, shared_mem, args, tensors, fault)
        finally:
            if guarded:
                guarded.copy_back()

    def _describe_fault(self, name: str, raw: str, guarded: GuardedArgs | None, grid: tuple[int, int, int],
                        block: tuple[int, int, int], shared_mem: int, args: list[Any],
                        tensors: list[Any] | None) -> tuple[str, bool]:
        """A fault reported by the runtime, with the argument/element (guard page) and the line (debug info),
        and whether it was wild: outside every argument's guarded buffer."""
        addr = re.search(r"at address (0x[0-9a-f]+|\(nil\))", raw)
        pc = re.search(r"\[pc \+0x([0-9a-f]+)\]", raw)
        thread = re.search(r"in thread (\([^)]*\)).*?\[block (\([^)]*\))\]", raw)
        frames = addr2line(self.path, int(pc.group(1), 16)) if pc else []
        known = guarded and addr and "nil" not in addr.group(1)
        fault = guarded.locate_address(int(addr.group(1), 16)) if known else None
        rw = ""
        if not frames:
            located = self._locate(name, grid, block, shared_mem, args, tensors)
            if located:
                return f"{located}\n  ({raw})", fault is None
        lines = self.cuda_source.splitlines()
        head = f"out-of-bounds access in kernel '{name}'" if fault else f"invalid memory access in kernel '{name}'"
        if frames:
            func, line = frames[0]
            helper = func not in (name, "??") and not func.startswith("__leap")
            head += f" at line {line}" + (f" (in {func})" if helper else "")
        if fault:
            params = self.signatures[name].params
            arg = params[fault["arg"]].name if fault["arg"] < len(params) else str(fault["arg"])
            head += (f": argument '{arg}' ({fault['numel']} elements of {fault['dtype']}) at element {fault['index']} "
                     f"({fault['bytes']} bytes {fault['side']})")
        elif addr:
            head += f": address {addr.group(1)} is in no argument's buffer (a wild or null pointer)"
        if thread:
            head += f", thread {thread.group(1)} of block {thread.group(2)}"
        out = [head + rw]
        if frames and 0 < frames[0][1] <= len(lines):
            out.append(f"  line {frames[0][1]}: {lines[frames[0][1] - 1].strip()}")
        for func, fline in frames[1:3]:
            if 0 < fline <= len(lines) and fline != frames[0][1]:
                out.append(f"  called from {func}, line {fline}: {lines[fline - 1].strip()}")
        out.append("  check the index against the bound (e.g. `if (i < n)`, not `i <= n`) and the grid size")
        return "\n".join(out), fault is None

    def _locate(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                args: list[Any], tensors: list[Any] | None) -> str:
        """The faulting line, from a replay of this launch under AddressSanitizer ("" if unknown)."""
        if not self.locate or tensors is None:
            return ""
        try:
            return locate_memory_error(self.cuda_source, self.arch, name, grid, block, shared_mem,
                                       replay_args(args, tensors))
        except Exception as exc:  # locating is best effort
            log.debug("replay under ASan failed: %s", exc)
            return ""

    def _report_guard_fault(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int],
                            shared_mem: int, args: list[Any], tensors: list[Any], fault: dict[str, Any]) -> None:
        params = self.signatures[name].params
        arg = f"argument '{params[fault['arg']].name}'" if fault["arg"] < len(params) else f"argument {fault['arg']}"
        message = (f"out-of-bounds write in kernel '{name}': {arg} ({fault['numel']} elements of {fault['dtype']}) "
                   f"written at element {fault['index']} ({fault['bytes']} bytes {fault['side']}); check the index "
                   "against the bound (e.g. `if (i < n)`, not `i <= n`) and the grid size")
        located = self._locate(name, grid, block, shared_mem, args, tensors)
        if located:
            first, *rest = located.splitlines()
            if " write " in first:
                first += f" ({arg})"
            else:  # ASan stopped at an earlier bad read; the guards saw the write
                rest.append(f"  it also writes out of bounds: {arg} at element {fault['index']}")
            message = "\n".join([first, *rest])
        raise KernelRuntimeError(message.rstrip(), "out_of_bounds")

    def _launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                args: list[Any]) -> None:
        cfg = LeapLaunch()
        cfg.grid[:] = list(grid)
        cfg.block[:] = list(block)
        cfg.shmem = int(shared_mem)
        cfg.workers = self.workers
        cfg.shuffle = 1 if self.shuffle else 0
        cfg.seed = (self.seed * 1_000_003 + self._launch_count) & (2**64 - 1)
        self._launch_count += 1
        argv = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
        status = self._entries[name](ctypes.byref(cfg), argv)
        self._collect_output()
        if status != 0:
            message = cfg.message.decode(errors="replace")
            raise KernelRuntimeError(f"kernel '{name}': {message}", ERROR_KINDS.get(status, "kernel_error"))

    def _collect_output(self) -> None:
        size = self._take(None, 0)
        if size:
            buf = ctypes.create_string_buffer(size)
            n = self._take(buf, size)
            self._output.append(buf.raw[:n].decode(errors="replace"))

    def drain_output(self) -> str:
        """Device printf output since the last call."""
        self._collect_output()
        text = "".join(self._output)
        self._output.clear()
        return text


GUARD_BYTES = 4096
GUARD_FILL = 0xFF  # NaN for floating types, -1 for integers: an out-of-bounds read shows in the output


class GuardedArgs:
    """Copies of the tensor arguments inside buffers with canary bytes before and after each.

    Arguments whose bytes overlap share one copy, so aliasing (in-place kernels, views of one
    tensor) behaves as with the originals.
    """

    def __init__(self, tensors: list[Any], args: list[Any]):
        spans = []  # (start, end, arg index)
        for i, t in enumerate(tensors):
            if t is not None and t.numel() > 0:
                start = t.data_ptr()
                spans.append((start, start + t.numel() * t.element_size(), i))
        spans.sort()
        self.clusters: list[tuple[int, int, list[int], Any]] = []
        for start, end, i in spans:
            if self.clusters and start < self.clusters[-1][1]:
                lo, hi, members, _ = self.clusters[-1]
                self.clusters[-1] = (lo, max(hi, end), members + [i], None)
            else:
                self.clusters.append((start, end, [i], None))
        self.tensors = tensors
        self.args = list(args)
        done = []
        page = mmap.PAGESIZE
        for lo, hi, members, _ in self.clusters:
            # [canaries][data][< 16 canary bytes][PROT_NONE page]: a read or write past the end faults at
            # once (the runtime names the instruction); one before the start lands in the canaries
            size = hi - lo
            body = -(-(GUARD_BYTES + size + 15) // page) * page
            region = mmap.mmap(-1, body + page)
            start = ctypes.addressof(ctypes.c_char.from_buffer(region))
            base = start + body - ((size + 15) & ~15)
            ctypes.memset(start, GUARD_FILL, body)
            _libc().mprotect(ctypes.c_void_p(start + body), page, 0)
            ctypes.memmove(base, lo, size)
            for i in members:
                self.args[i] = ctypes.c_void_p(base + (tensors[i].data_ptr() - lo))
            done.append((lo, hi, members, (region, start, base, body)))
        self.clusters = done

    def locate_address(self, address: int) -> dict[str, Any] | None:
        """The argument and element an address of a faulting access falls in or next to."""
        for lo, _hi, members, (_, start, base, body) in self.clusters:
            if start <= address < start + body + mmap.PAGESIZE:
                offset = address - base  # byte offset from lo
                return self._fault_at(lo, members, offset)
        return None

    def _fault_at(self, lo: int, members: list[int], offset: int) -> dict[str, Any]:
        best = min(members, key=lambda i: abs(self.tensors[i].data_ptr() - lo - offset))
        t = self.tensors[best]
        rel = lo + offset - t.data_ptr()
        nbytes = t.numel() * t.element_size()
        side = "past the end" if rel >= nbytes else "before the start" if rel < 0 else "inside"
        dist = rel - nbytes if rel >= nbytes else -rel if rel < 0 else 0
        return {"arg": best, "index": rel // t.element_size(), "numel": t.numel(),
                "dtype": str(t.dtype).replace("torch.", ""), "bytes": dist, "side": side}

    def check(self) -> dict[str, Any] | None:
        """The first canary byte a kernel overwrote, as `locate_address` describes it, or None."""
        for lo, hi, members, (_, start, base, body) in self.clusters:
            size = hi - lo
            head = ctypes.string_at(start, base - start)
            tail = ctypes.string_at(base + size, start + body - base - size)
            if tail != bytes([GUARD_FILL]) * len(tail):
                offset = size + next(k for k, b in enumerate(tail) if b != GUARD_FILL)
            elif head != bytes([GUARD_FILL]) * len(head):
                offset = next(k for k, b in enumerate(head) if b != GUARD_FILL) - len(head)
            else:
                continue
            return self._fault_at(lo, members, offset)
        return None

    def copy_back(self) -> None:
        for lo, hi, _, (region, start, base, body) in self.clusters:
            ctypes.memmove(lo, base, hi - lo)
            _libc().mprotect(ctypes.c_void_p(start + body), mmap.PAGESIZE, 3)
            region.close()


@lru_cache(maxsize=1)
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def addr2line(module: Path, offset: int) -> list[tuple[str, int]]:
    """(function, line) frames of the cuda block at `offset` in `module`, innermost first."""
    tool = shutil.which("addr2line")
    if not tool:
        return []
    try:
        proc = subprocess.run([tool, "-e", str(module), "-f", "-C", "-i", hex(offset)], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = proc.stdout.splitlines()
    frames = []
    for func, where in zip(lines[::2], lines[1::2]):
        match = re.search(rf"{re.escape(SOURCE_NAME)}:(\d+)", where)
        if match:
            frames.append((func.split("(")[0], int(match.group(1))))
    return frames


def replay_args(args: list[Any], tensors: list[Any]) -> list[Any]:
    """The launch's arguments as `ReplayArg`s (buffer contents as they were before the launch)."""
    out = []
    for packed, t in zip(args, tensors):
        if t is not None:
            out.append(ReplayArg(True, ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())))
        elif isinstance(packed, ctypes.c_void_p):
            out.append(ReplayArg(True, b""))
        else:
            out.append(ReplayArg(False, ctypes.string_at(ctypes.addressof(packed), ctypes.sizeof(packed))))
    return out


class CpuBackend(Backend):
    """CUDA-on-CPU: kernels compiled by the host C++ compiler against this project's runtime.

    Args:
        workers: OS threads running blocks (default: the CPUs this process may use, or
            ``$LEAP_CPU_WORKERS``).
        shuffle: run the threads of each block in a random order (reshuffled at every barrier).
        seed: seed of that order.
    """

    name = "cpu"
    device = "cpu"
    reports_speedup = False
    size_preset = "cpu"

    def __init__(self, workers: int | None = None, shuffle: bool = False, seed: int = 0):
        self.workers = workers or default_workers()
        self.shuffle = shuffle
        self.seed = seed

    def availability(self) -> Availability:
        cxx = find_compiler()
        if cxx is None:
            return Availability(False, "no host C++ compiler: install g++ (apt-get install g++) or clang++, "
                                       "or set $CXX")
        try:
            runtime_build(False)
        except Exception as exc:  # a broken toolchain
            return Availability(False, f"the C++ compiler {cxx} cannot build the CPU runtime: {exc}")
        return Availability(True, "")

    def load(self, cuda_source: str, cubin: bytes, signatures: dict[str, KernelSignature], arch: str,
             checked: bool = False) -> CpuLauncher:
        found = unsupported_features(cuda_source)
        if found:
            what, line, text = found[0]
            raise KernelRuntimeError(
                f"{what} at line {line} (`{text}`) cannot run on the CPU runtime (no GPU here); write the kernel in "
                "plain CUDA C++ (shared memory, warp shuffles and atomics are supported)", "unsupported")
        if checked and not asan_loaded():
            log.warning("checked CPU build requested but libasan is not preloaded; using the normal build")
            checked = False
        path = build_module(cuda_source, sorted(signatures), arch, checked)
        return CpuLauncher(path, cuda_source, signatures, arch, checked, self.workers, self.shuffle, self.seed,
                           cubin or b"")
