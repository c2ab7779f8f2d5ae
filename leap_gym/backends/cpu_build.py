"""Building kernels for the CPU runtime: compiler discovery, the cached runtime object and precompiled
header, the source rewrite (dynamic shared memory, line mapping), the per-module build cache, and what
a CUBIN says about static shared memory. Used by `leap_gym.backends.cpu`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from leap_gym.backends.base import KernelRuntimeError
from leap_gym.cache import cache_dir
from leap_gym.evaluation.parse import strip_comments

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
    final = cache_dir("cpu") / f"runtime-{'asan-' if checked else ''}{key}"

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
    from leap_gym.evaluation.kernels import parse_kernel_signatures

    return sorted(parse_kernel_signatures(cuda_source))


def build_module(cuda_source: str, kernel_names: list[str], arch: str, checked: bool = False) -> Path:
    """Compile (or fetch from the cache) the shared object of one cuda block; returns its path."""
    cxx = find_compiler()
    runtime = runtime_build(checked)
    tu = translation_unit(cuda_source, kernel_names, arch)
    key = hashlib.sha256(f"{runtime.name}|{checked}|{tu}".encode()).hexdigest()[:24]
    target = cache_dir("cpu", "modules") / f"{key}.so"
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
