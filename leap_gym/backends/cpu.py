"""The `cpu` backend: CUDA kernels compiled as C++ and run on the CPU by this project's runtime.

The kernel source (already accepted by NVRTC) is compiled by the host C++ compiler with the
runtime header `cpu_runtime/leap_cuda_cpu.h` force-included (precompiled) and `__CUDA_ARCH__`
defined; the threads of a block run as fibers, blocks on worker threads (see
`cpu_runtime/leap_runtime.cpp`). Kernels launch through ctypes on CPU torch tensors.

API (stable; `leap_gym.evaluate` relies on it):

- ``CpuBackend(workers=None, shuffle=False, seed=0)``: ``name="cpu"``, ``device="cpu"``,
  ``size_preset="cpu"``, ``reports_speedup=False``.
  ``load(cuda_source, cubin, signatures, arch, checked=False) -> CpuLauncher``;
  ``availability() -> Availability`` (needs g++ or clang++; ``$CXX`` wins).
- ``CpuLauncher``: ``device="cpu"``, ``max_shared_mem`` (48 KiB: the default limit of dynamic
  shared memory without the opt-in attribute, which responses cannot set),
  ``launch(name, grid, block, shared_mem, args, tensors=None)``, ``drain_output() -> str`` (device
  printf, plus a runtime note where the source relies on warp lockstep), ``shuffle: bool`` and
  ``seed: int`` (run a block's threads in a random order, reshuffled at every barrier, so a missing
  ``__syncthreads`` shows up), ``guards: bool`` (default on, off in checked builds: tensor arguments
  are copied into buffers with canaries on both sides, so an out-of-bounds write is reported with
  its argument and element), ``locate: bool`` (default on: on an out-of-bounds error, replay the
  launch under AddressSanitizer in a subprocess to name the line). ``tensors`` are the launch's
  original arguments; when omitted they are read from the calling `Kernels` handle.
- Errors are `KernelRuntimeError` with ``detail`` in ``{"deadlock", "out_of_bounds", "unsupported",
  "kernel_error", "launch"}``, naming the kernel and, where known, the line of the cuda block. A wild
  access (SIGSEGV inside a kernel) is caught by the runtime and is an ``out_of_bounds`` error too, so
  the process survives; only a fault outside kernel code still crashes.
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
import hashlib
import logging
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from leap_gym.backends.base import Availability, Backend, KernelRuntimeError
from leap_gym.kernels import KernelSignature, strip_comments

log = logging.getLogger(__name__)

RUNTIME_DIR = Path(__file__).parent / "cpu_runtime"
SHIM_INCLUDE = RUNTIME_DIR / "include"
RUNTIME_FILES = ("leap_cuda_cpu.h", "leap_cuda_math.h", "leap_cuda_half.h", "leap_runtime.cpp")
SOURCE_NAME = "kernel.cu"
DEFAULT_SHARED_MEM = 48 * 1024
# -fno-finite-loops: an infinite loop stays one (a TIMEOUT, as on a GPU) instead of being deleted
COMMON_FLAGS = ("-std=c++17", "-fPIC", "-fno-strict-aliasing", "-fno-math-errno", "-fno-finite-loops", "-pthread", "-w")
FAST_FLAGS = ("-O2", "-g1")  # -g1: line tables, so a faulting instruction maps back to its line
CHECKED_FLAGS = ("-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer")
ERROR_KINDS = {1: "kernel_error", 2: "deadlock", 3: "unsupported", 4: "launch", 5: "out_of_bounds"}

# Features that cannot run on a CPU: (pattern on comment-stripped source, what to call it).
UNSUPPORTED = (
    (re.compile(r"\b(?:asm|__asm__|__asm)\s*(?:volatile\s*|__volatile__\s*)?\("), "inline PTX assembly (asm(...))"),
    (re.compile(r"\bnvcuda\s*::|\bwmma\s*::"), "tensor-core WMMA (nvcuda::wmma)"),
    (re.compile(r"#\s*include\s*<mma\.h>"), "tensor-core WMMA (<mma.h>)"),
    (re.compile(r"\b__(?:hmma|imma|bmma)_\w+|\b__wgmma\w*|\bmma_sync\b"), "tensor-core MMA intrinsics"),
    (re.compile(r"\btex[123]D\w*\s*(?:<|\()|\btex1Dfetch\b|\bsurf[123]D\w*\s*\(|\bcudaTextureObject_t\b"),
     "texture and surface objects"),
    (re.compile(r"\b(?:__pipeline_memcpy_async|__pipeline_commit|__pipeline_wait_prior|memcpy_async)\b|\bcp\.async"),
     "asynchronous copies (cp.async / memcpy_async)"),
    (re.compile(r"\bcooperative_groups\s*::\s*(?:this_grid|this_multi_grid)\b|\bgrid\.sync\s*\("),
     "grid-wide synchronisation (cooperative launch)"),
    (re.compile(r"#\s*include\s*<(?:cub/|thrust/|cuda/(?:pipeline|barrier)|cuda_pipeline|cuda_awbarrier)"),
     "CUB / Thrust / libcu++ device headers"),
    (re.compile(r"\bcudaMalloc\s*\(|<<<"), "dynamic parallelism (launching or allocating from a kernel)"),
)


_WARP_SYNC_RE = re.compile(r"\bvolatile\b[^;]*\*")
_WARP_GUARD_RE = re.compile(r"<\s*(?:32|warpSize)\b|<=\s*31\b")


def runtime_notes(cuda_source: str) -> list[str]:
    """Advice on constructs that behave differently on this runtime than on a GPU in practice."""
    clean = strip_comments(cuda_source)
    notes = []
    if _WARP_SYNC_RE.search(clean) and _WARP_GUARD_RE.search(clean) and "__syncwarp" not in clean:
        notes.append("[cpu runtime] note: the threads of a warp do not run in lockstep here (nor, officially, on "
                     "Volta and later GPUs): warp-synchronous code through volatile shared memory needs "
                     "__syncwarp() between its steps, or use __shfl_down_sync\n")
    return notes


class CpuRuntimeUnavailable(RuntimeError):
    """No usable host C++ compiler."""


def cache_root() -> Path:
    base = os.environ.get("LEAP_GYM_CACHE")
    return Path(base) / "cpu" if base else Path.home() / ".cache" / "leap_gym" / "cpu"


@lru_cache(maxsize=1)
def find_compiler() -> str | None:
    """The host C++ compiler: ``$CXX``, else g++, else clang++."""
    for cand in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


@lru_cache(maxsize=4)
def _compiler_id(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _runtime_hash() -> str:
    h = hashlib.sha256()
    for name in RUNTIME_FILES:
        h.update((RUNTIME_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def _shared_dir(path: Path) -> Path:
    """Create `path` (and parents) usable by every sandbox worker uid of the cache's group."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(path, 0o2775)
        except OSError:
            pass
    return path


def _atomic_write_dir(final: Path, build) -> Path:
    """Build into a temporary folder next to `final`, then rename it into place (process-safe)."""
    if final.exists():
        return final
    _shared_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".tmp", dir=final.parent))
    try:
        os.chmod(tmp, 0o2775)
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


_runtime_lock = threading.Lock()


def runtime_build(checked: bool = False) -> Path:
    """The folder holding the runtime object and the precompiled header for one flag set."""
    cxx = find_compiler()
    if cxx is None:
        raise CpuRuntimeUnavailable("no C++ compiler found: install g++ (apt-get install g++) or set $CXX")
    flags = COMMON_FLAGS + (CHECKED_FLAGS if checked else FAST_FLAGS)
    key = hashlib.sha256(f"{_runtime_hash()}|{_compiler_id(cxx)}|{flags}".encode()).hexdigest()[:20]
    final = cache_root() / f"runtime-{'asan-' if checked else ''}{key}"

    def build(tmp: Path) -> None:
        for name in RUNTIME_FILES:
            shutil.copy(RUNTIME_DIR / name, tmp / name)
        _run([cxx, *flags, "-x", "c++-header", str(tmp / "leap_cuda_cpu.h"), "-o", str(tmp / "leap_cuda_cpu.h.gch")])
        _run([cxx, *flags, "-U_FORTIFY_SOURCE", "-fvisibility=hidden", "-c", str(tmp / "leap_runtime.cpp"), "-o",
              str(tmp / "leap_runtime.o")])

    with _runtime_lock:
        return _atomic_write_dir(final, build)


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"building the CPU runtime failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")


# ------------------------------------------------------------------------------------------------
# Source preparation
# ------------------------------------------------------------------------------------------------
_EXTERN_SHARED_RE = re.compile(
    r"extern\s+__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*)*)"
    r"([A-Za-z_][\w:<>,\s]*?)\s*([A-Za-z_]\w*)\s*\[\s*\]\s*;"
)


def unsupported_features(cuda_source: str) -> list[tuple[str, int, str]]:
    """(feature, line, source line) for each construct the CPU runtime cannot run."""
    clean = strip_comments(cuda_source)
    lines = cuda_source.splitlines()
    found = []
    for pattern, what in UNSUPPORTED:
        match = pattern.search(clean)
        if match:
            line = clean.count("\n", 0, match.start()) + 1
            found.append((what, line, lines[line - 1].strip() if line <= len(lines) else ""))
    return found


def _scope_is_file(clean: str, pos: int) -> bool:
    """Whether `pos` lies outside every function body (namespaces and extern "C" blocks are file scope)."""
    stack: list[bool] = []  # True for a file-scope brace
    for m in re.finditer(r"[{}]", clean[:pos]):
        if m.group() == "{":
            before = clean[max(0, m.start() - 80):m.start()]
            stack.append(bool(re.search(r'(?:extern\s+"C"|namespace(?:\s+[\w:]+)?)\s*$', before)))
        elif stack:
            stack.pop()
    return all(stack)


def prepare_source(cuda_source: str) -> str:
    """Rewrite what host C++ cannot take as written, keeping every line where it was.

    ``extern __shared__ T name[];`` becomes a pointer to the block's dynamic shared memory (a local
    in a function, a macro at file scope); ``static __shared__`` drops the duplicate ``static``.
    """
    clean = strip_comments(cuda_source)
    out: list[str] = []
    last = 0
    for match in _EXTERN_SHARED_RE.finditer(clean):
        out.append(cuda_source[last:match.start()])
        ctype, name = " ".join(match.group(2).split()), match.group(3)
        if _scope_is_file(clean, match.start()):
            line = clean.count("\n", 0, match.end()) + 1
            out.append(f"\n#define {name} (reinterpret_cast<{ctype}*>(__leap_dyn_smem()))\n#line {line}\n")
        else:
            out.append(f"{ctype}* const {name} = reinterpret_cast<{ctype}*>(__leap_dyn_smem());")
        last = match.end()
    out.append(cuda_source[last:])
    text = "".join(out)
    return re.sub(r"\bstatic\s+__shared__\b", "__shared__", text)


def _arch_number(arch: str) -> int:
    match = re.search(r"(\d+)", arch or "")
    return int(match.group(1)) * 10 if match else 900


def translation_unit(cuda_source: str, kernel_names: list[str], arch: str) -> str:
    launchers = []
    for name in kernel_names:
        launchers.append(
            f"static void __leap_thunk_{name}(void** a) {{ __leap_invoke(&{name}, a); }}\n"
            f'extern "C" __attribute__((visibility("default"))) int __leap_launch_{name}(LeapLaunch* L, void** a) '
            f"{{ return __leap_run_grid(L, &__leap_thunk_{name}, a); }}\n"
        )
    return (f"#define __CUDA_ARCH__ {_arch_number(arch)}\n#line 1 \"{SOURCE_NAME}\"\n"
            f"{prepare_source(cuda_source)}\n#line 1 \"leap_launchers.cpp\"\n{''.join(launchers)}")


_DIAG_RE = re.compile(rf"^{re.escape(SOURCE_NAME)}:(\d+):(?:\d+:)?\s*(?:fatal )?error:\s*(.*)$", re.M)


def _compile_error_message(stderr: str, cuda_source: str) -> str:
    unsupported = re.search(r'LEAP_UNSUPPORTED: ([^"\n]*)', stderr)
    if unsupported:
        return f"{unsupported.group(1)}; rewrite the kernel without it"
    lines = cuda_source.splitlines()
    parts = []
    for match in list(_DIAG_RE.finditer(stderr))[:3]:
        line = int(match.group(1))
        quoted = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        parts.append(f"line {line}: {match.group(2)}" + (f"  [`{quoted}`]" if quoted else ""))
    detail = "; ".join(parts) if parts else stderr.strip().splitlines()[-1] if stderr.strip() else "unknown error"
    return ("the CPU runtime could not build this kernel as C++ (it uses a CUDA feature this runtime does not "
            f"emulate): {detail}")


def asan_loaded() -> bool:
    """Whether AddressSanitizer's runtime is in this process (preloaded, as `checked_worker_env` does)."""
    try:
        return "libasan" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def parse_kernel_names(cuda_source: str) -> list[str]:
    from leap_gym.kernels import parse_kernel_signatures

    return sorted(parse_kernel_signatures(cuda_source))


def build_module(cuda_source: str, kernel_names: list[str], arch: str, checked: bool = False) -> Path:
    """Compile (or fetch from the cache) the shared object of one cuda block; returns its path."""
    cxx = find_compiler()
    runtime = runtime_build(checked)
    tu = translation_unit(cuda_source, kernel_names, arch)
    key = hashlib.sha256(f"{runtime.name}|{checked}|{tu}".encode()).hexdigest()[:24]
    target = cache_root() / "modules" / f"{key}.so"
    if target.exists():
        return target
    _shared_dir(target.parent)
    flags = COMMON_FLAGS + (CHECKED_FLAGS if checked else FAST_FLAGS)
    with tempfile.TemporaryDirectory(prefix="leap_cpu_") as tmp:
        src = Path(tmp) / "kernel.cpp"
        src.write_text(tu)
        out = target.with_name(f"{target.stem}.{os.getpid()}.{threading.get_ident()}.tmp")  # same filesystem
        cmd = [cxx, *flags, "-shared", "-fvisibility=hidden", f"-I{SHIM_INCLUDE}", "-include",
               str(runtime / "leap_cuda_cpu.h"), str(src), str(runtime / "leap_runtime.o"), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp)
        if proc.returncode != 0:
            raise KernelRuntimeError(_compile_error_message(proc.stderr, cuda_source), "unsupported")
        os.chmod(out, 0o775)
        os.replace(out, target)
    return target


def static_shared_bytes(cubin: bytes) -> dict[str, int]:
    """Per-kernel static shared memory from a CUBIN's ``.nv.shared.<kernel>`` sections.

    The sections of sm_80 and later include the 1 KiB the system reserves per block, which does not
    count against the launch limit and is taken off here. Returns {} for anything but an ELF64 image.
    """
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return {}
    try:
        shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
        names_at = sections[shstrndx][4]
        out: dict[str, int] = {}
        reserved = 0
        for sec in sections:
            start = names_at + sec[0]
            name = cubin[start:cubin.index(b"\0", start)].decode(errors="replace")
            if name.startswith(".nv.shared.reserved"):
                reserved = max(reserved, 1024)
            elif name.startswith(".nv.shared."):
                out[name[len(".nv.shared."):]] = sec[5]
        if reserved:
            out = {k: max(0, v - reserved) for k, v in out.items()}
        return out
    except (struct.error, ValueError, IndexError):
        return {}


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
        buffers; when not given they are taken from the calling `Kernels` handle where possible.
        """
        if name not in self._entries:
            raise KernelRuntimeError(f"no kernel named '{name}' in this module", "launch")
        static = self.static_shared.get(name, 0)
        if static + shared_mem > self.max_shared_mem:
            raise KernelRuntimeError(
                f"CUDA error: too many resources requested for launch (kernel '{name}': {static} bytes of static "
                f"__shared__ memory + {shared_mem} bytes of dynamic shared memory > {self.max_shared_mem} bytes per "
                "block); use less shared memory per block", "launch")
        if tensors is None:
            tensors = _caller_tensors(args)
        if tensors is not None and not any(t is not None for t in tensors):
            tensors = None
        guarded = GuardedArgs(tensors, args) if self.guards and tensors is not None else None
        try:
            try:
                self._launch(name, grid, block, shared_mem, guarded.args if guarded else args)
            except KernelRuntimeError as exc:
                if exc.detail == "out_of_bounds":  # a bad access caught by the runtime's SIGSEGV handler
                    raise KernelRuntimeError(self._describe_fault(name, str(exc), guarded, grid, block, shared_mem,
                                                                  args, tensors), "out_of_bounds") from None
                raise
            fault = guarded.check() if guarded else None
            if fault is not None:
                self._report_guard_fault(name, grid, block, shared_mem, args, tensors, fault)
        finally:
            if guarded:
                guarded.copy_back()

    def _describe_fault(self, name: str, raw: str, guarded: GuardedArgs | None, grid: tuple[int, int, int],
                        block: tuple[int, int, int], shared_mem: int, args: list[Any],
                        tensors: list[Any] | None) -> str:
        """A fault reported by the runtime, with the argument/element (guard page) and the line (debug info)."""
        addr = re.search(r"at address (0x[0-9a-f]+|\(nil\))", raw)
        pc = re.search(r"\[pc \+0x([0-9a-f]+)\]", raw)
        thread = re.search(r"in thread (\([^)]*\)).*?\[block (\([^)]*\))\]", raw)
        frames = addr2line(self.path, int(pc.group(1), 16)) if pc else []
        fault = guarded.locate_address(int(addr.group(1), 16)) if guarded and addr and "nil" not in addr.group(1) else None
        rw = ""
        if not frames:
            located = self._locate(name, grid, block, shared_mem, args, tensors)
            if located:
                return f"{located}\n  ({raw})"
        lines = self.cuda_source.splitlines()
        head = f"out-of-bounds access in kernel '{name}'" if fault else f"invalid memory access in kernel '{name}'"
        if frames:
            func, line = frames[0]
            head += f" at line {line}" + (f" (in {func})" if func not in (name, "??") and not func.startswith("__leap") else "")
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
        return "\n".join(out)

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


def _caller_tensors(args: list[Any]) -> list[Any] | None:
    """The original arguments of the `Kernels` launch that called us, when they match `args`."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return None
    original = frame.f_locals.get("args") if frame.f_code.co_name == "_launch" else None
    if not isinstance(original, tuple) or len(original) != len(args):
        return None
    import torch

    out = []
    for orig, packed in zip(original, args):
        if isinstance(orig, torch.Tensor):
            if not isinstance(packed, ctypes.c_void_p) or (packed.value or 0) != orig.data_ptr():
                return None
            out.append(orig)
        else:
            out.append(None)
    return out


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
        for lo, hi, members, (_, start, base, body) in self.clusters:
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
    from leap_gym.backends.cpu_checked import ReplayArg

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
            return Availability(False, "no host C++ compiler: install g++ (apt-get install g++) or clang++, or set $CXX")
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


# ------------------------------------------------------------------------------------------------
# Checked (AddressSanitizer) runs
# ------------------------------------------------------------------------------------------------
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


from leap_gym.backends.cpu_checked import describe_memory_error, locate_memory_error  # noqa: E402,F401
