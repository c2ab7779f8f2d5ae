"""Locating memory errors of CPU-runtime kernels with AddressSanitizer.

Two ways in:

- `describe_memory_error(stderr_text, cuda_source)`: read an ASan report (from a process that ran a
  ``checked=True`` build, see `leap_gym.backends.cpu.checked_worker_env`) back into one message that
  names the kernel, the line of the cuda block, the access and the element index.
- `locate_memory_error(cuda_source, arch, kernel, grid, block, shared_mem, args)`: replay one
  launch in a fresh subprocess with libasan preloaded and a checked build, on exact-size copies of
  the argument buffers, and describe what ASan reports (empty string when nothing is found). The
  child imports neither torch nor leap_gym, so a replay costs the ASan build (about a second, cached)
  and a bare interpreter start.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from leap_gym.backends.cpu_build import build_module, find_compiler, parse_kernel_names

_ERROR_RE = re.compile(r"ERROR: AddressSanitizer: ([\w-]+)(?: on (?:unknown )?address (0x[0-9a-f]+))?")
_ACCESS_RE = re.compile(r"\b(READ|WRITE) of size (\d+)")
_SEGV_ACCESS_RE = re.compile(r"caused by a (READ|WRITE) memory access")
_FRAME_RE = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ in (\S+)(?: [^\n]*?)?\s(\S*?kernel\.cu):(\d+)", re.M)
_REGION_RE = re.compile(r"is located (\d+) bytes (?:to the )?(right|left|inside) of (\d+)-byte region")

_KIND_TEXT = {
    "heap-buffer-overflow": "out-of-bounds",
    "stack-buffer-overflow": "out-of-bounds (local array)",
    "global-buffer-overflow": "out-of-bounds (__device__/__constant__ array)",
    "dynamic-stack-buffer-overflow": "out-of-bounds (local array)",
    "SEGV": "invalid",
    "heap-use-after-free": "use-after-free",
    "stack-overflow": "stack overflow (deep recursion or huge local arrays) in",
}


def describe_memory_error(stderr_text: str, cuda_source: str) -> str:
    """One explanation of the ASan report in `stderr_text`, mapped to the cuda block; "" if none.

    The first line is the headline (kernel, line, access); later lines quote the source line and the
    faulting frames.
    """
    if not stderr_text:
        return ""
    error = _ERROR_RE.search(stderr_text)
    if not error:
        return ""
    kind = error.group(1)
    report = stderr_text[error.start():]
    access = _ACCESS_RE.search(report)
    rw, size = (access.group(1).lower(), int(access.group(2))) if access else (None, None)
    if rw is None and (segv := _SEGV_ACCESS_RE.search(report)):
        rw = segv.group(1).lower()
    frames = [(m.group(2), int(m.group(4))) for m in _FRAME_RE.finditer(report.split("allocated by")[0])]
    lines = cuda_source.splitlines()
    what = _KIND_TEXT.get(kind, kind)
    access_text = f"{what} {rw or 'memory access'}" + (f" of {size} bytes" if size else "")
    if kind == "SEGV":
        addr = error.group(2)
        at = f" at address {addr}" if addr else ""
        access_text = f"invalid {rw or 'memory access'}{at} (segmentation fault)"
    if kind == "stack-overflow":
        access_text = "stack overflow (deep recursion or very large local arrays)"
    if frames:
        func, line = frames[0]
        kernel = frames[-1][0]
        where = f"in kernel '{kernel}' at line {line}" + (f" (in {func})" if func != kernel else "")
    else:
        line, where = None, "in the kernel (the faulting line is outside the cuda block)"
    headline = f"{access_text} {where}"
    region = _REGION_RE.search(report)
    if region and size:
        offset, side, total = int(region.group(1)), region.group(2), int(region.group(3))
        if side == "right":
            index = (total + offset) // size
            headline += (f": element {index} of a buffer of {total // size} elements of {size} bytes "
                         f"({offset} bytes past its end)")
        elif side == "left":
            index = -((offset + size - 1) // size)
            headline += f": element {index} ({offset} bytes before the start of a {total}-byte buffer)"
    out = [headline]
    if line and 0 < line <= len(lines):
        out.append(f"  line {line}: {lines[line - 1].strip()}")
    for func, fline in frames[1:4]:
        if 0 < fline <= len(lines):
            out.append(f"  called from {func}, line {fline}: {lines[fline - 1].strip()}")
    if kind in ("heap-buffer-overflow", "SEGV", "stack-buffer-overflow", "global-buffer-overflow"):
        out.append("  check the index against the bound (e.g. `if (i < n)`, not `i <= n`) and the grid size")
    return "\n".join(out)


@dataclass
class ReplayArg:
    """One argument of a replayed launch: a buffer's bytes, or a scalar's raw bytes."""

    pointer: bool
    data: bytes


_CHILD = r'''
import ctypes, json, sys
spec = json.load(open(sys.argv[1]))
lib = ctypes.CDLL(spec["module"])
class LeapLaunch(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shmem", ctypes.c_ulonglong),
                ("workers", ctypes.c_int), ("shuffle", ctypes.c_int), ("seed", ctypes.c_ulonglong),
                ("status", ctypes.c_int), ("message", ctypes.c_char * 2048)]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
keep = []
slots = []
for arg in spec["args"]:
    data = open(arg["file"], "rb").read()
    if arg["pointer"]:
        p = libc.malloc(max(1, len(data)))
        ctypes.memmove(p, data, len(data))
        cell = ctypes.c_void_p(p)
    else:
        cell = ctypes.create_string_buffer(data, max(8, len(data)))
    keep.append(cell)
    slots.append(ctypes.addressof(cell))
argv = (ctypes.c_void_p * max(1, len(slots)))(*slots)
cfg = LeapLaunch()
cfg.grid[:] = spec["grid"]; cfg.block[:] = spec["block"]; cfg.shmem = spec["shmem"]; cfg.workers = 1
fn = getattr(lib, "__leap_launch_" + spec["kernel"])
fn.argtypes = [ctypes.POINTER(LeapLaunch), ctypes.c_void_p]
status = fn(ctypes.byref(cfg), argv)
print("LEAP_REPLAY_STATUS", status, cfg.message.decode(errors="replace"))
'''


ASAN_OPTIONS = ("detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:symbolize=1:"
                "allocator_may_return_null=1:detect_odr_violation=0:verify_asan_link_order=0:print_summary=1:"
                "handle_segv=1:handle_abort=1:fast_unwind_on_fatal=0:malloc_context_size=4")


@lru_cache(maxsize=1)
def libasan_path() -> str | None:
    cxx = find_compiler()
    if cxx is None:
        return None
    out = subprocess.run([cxx, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=30)
    path = out.stdout.strip()
    return path if path and os.path.isabs(path) and os.path.exists(path) else None


def checked_worker_env() -> dict[str, str]:
    """Environment variables for a worker process that runs checked (ASan) builds."""
    lib = libasan_path()
    if lib is None:
        return {}
    return {"LD_PRELOAD": lib, "ASAN_OPTIONS": ASAN_OPTIONS}


def locate_memory_error(cuda_source: str, arch: str, kernel: str, grid: tuple[int, int, int],
                        block: tuple[int, int, int], shared_mem: int, args: list[ReplayArg],
                        timeout_s: float = 60.0) -> str:
    """Replay one launch under AddressSanitizer in a subprocess; describe the first bad access found."""
    import resource

    env_extra = checked_worker_env()
    if not env_extra or resource.getrlimit(resource.RLIMIT_AS)[1] != resource.RLIM_INFINITY:
        return ""  # ASan reserves terabytes of shadow address space: impossible under an RLIMIT_AS (the sandbox)
    module = build_module(cuda_source, parse_kernel_names(cuda_source), arch, checked=True)
    with tempfile.TemporaryDirectory(prefix="leap_replay_") as tmp:
        files = []
        for i, arg in enumerate(args):
            path = Path(tmp) / f"arg{i}.bin"
            path.write_bytes(arg.data)
            files.append({"pointer": arg.pointer, "file": str(path)})
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps({"module": str(module), "kernel": kernel, "grid": list(grid),
                                         "block": list(block), "shmem": int(shared_mem), "args": files}))
        child = Path(tmp) / "replay.py"
        child.write_text(_CHILD)
        env = dict(os.environ, **env_extra)
        try:
            proc = subprocess.run([sys.executable, "-I", str(child), str(spec_path)], env=env, capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return ""
    return describe_memory_error(proc.stderr, cuda_source)
