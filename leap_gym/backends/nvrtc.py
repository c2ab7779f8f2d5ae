"""CUDA C++ to CUBIN with NVRTC (`cuda.bindings.nvrtc`), shared by every backend.

Works without a GPU: the `nvidia-cuda-nvrtc` wheel provides the library and `nvidia-cuda-runtime`
the headers (`cuda_fp16.h`, ...). ``-Xptxas -v`` yields each kernel's registers, shared memory and
spills. Results are cached in memory and on disk by a hash of source, options and architecture.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from leap_gym.cache import cache_dir
from leap_gym.result import Diagnostic, KernelResources

log = logging.getLogger(__name__)

SOURCE_NAME = "kernel.cu"
DEFAULT_ARCH = "sm_90"
BASE_OPTIONS = ("-std=c++17", "-default-device", "-Xptxas", "-v", "-lineinfo")
_MEMORY_CACHE_SIZE = 512


@dataclass
class CompileResult:
    """What NVRTC made of a source.

    Attributes:
        ok: whether a CUBIN was produced.
        cubin: the module image for `arch` (empty when not `ok`).
        log: NVRTC's whole log (ptxas lines included).
        diagnostics: errors and warnings mapped to lines of the source, with the line quoted.
        resources: per-kernel registers, shared memory and spills from ptxas.
    """

    ok: bool
    arch: str
    cubin: bytes = b""
    log: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    resources: dict[str, KernelResources] = field(default_factory=dict)
    compile_time_s: float = 0.0
    cached: bool = False
    include_refused: bool = False

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity in ("error", "catastrophic error", "fatal")]


class NvrtcUnavailable(RuntimeError):
    """NVRTC could not be loaded; the message says what to install."""


@lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Folders holding the CUDA headers NVRTC may include (`cuda_fp16.h`, `cuda_bf16.h`, ...)."""
    dirs: list[str] = []
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13/include", "cuda_runtime/include", "cuda_nvrtc/include"):
                path = Path(root) / sub
                if (path / "cuda_fp16.h").exists():
                    dirs.append(str(path))
    except ImportError:
        pass
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda_fp16.h").exists():
            dirs.append(str(Path(home) / "include"))
    return tuple(dict.fromkeys(dirs))


@lru_cache(maxsize=1)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise NvrtcUnavailable("cuda-python is missing: pip install 'cuda-python>=13' 'nvidia-cuda-nvrtc>=13,<14'") from exc
    try:
        nvrtc.nvrtcVersion()
    except Exception as exc:  # the bindings raise their own loader errors when libnvrtc is absent
        raise NvrtcUnavailable(f"NVRTC library not found ({exc}); pip install 'nvidia-cuda-nvrtc>=13,<14'") from exc
    return nvrtc


def nvrtc_version() -> str:
    _, major, minor = _nvrtc().nvrtcVersion()
    return f"{major}.{minor}"


def _check(result: tuple, what: str) -> tuple:
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"NVRTC {what} failed: {err}")
    return result[1:]


_DIAG_RE = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
                      r"\s*(?:#\w+-\w+)?\s*:?\s*(?P<msg>.*)$")
_PTXAS_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_PROPS_RE = re.compile(r"Function properties for (\S+)")
_PTXAS_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED_RE = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM_RE = re.compile(r"(\d+) bytes smem")


def parse_diagnostics(log_text: str, source: str) -> list[Diagnostic]:
    """Read NVRTC's ``file(line): error: message`` lines, quoting the source line each names."""
    lines = source.splitlines()
    out = []
    for raw in log_text.splitlines():
        match = _DIAG_RE.match(raw.strip())
        if not match:
            continue
        line = int(match.group("line"))
        quoted = lines[line - 1].rstrip() if match.group("file") == SOURCE_NAME and 0 < line <= len(lines) else None
        severity = "error" if "error" in match.group("sev") else match.group("sev")
        out.append(Diagnostic(severity=severity, message=match.group("msg").strip(), line=line, source_line=quoted))
    return out


def parse_ptxas(log_text: str) -> dict[str, KernelResources]:
    """Per-kernel resources from ptxas's verbose output (entry functions only)."""
    resources: dict[str, KernelResources] = {}
    current: str | None = None
    for line in log_text.splitlines():
        if match := _PTXAS_ENTRY_RE.search(line):
            current = match.group(1)
            resources[current] = KernelResources()
        elif match := _PTXAS_PROPS_RE.search(line):
            current = match.group(1) if match.group(1) in resources else current
        elif current is not None and (match := _PTXAS_STACK_RE.search(line)):
            res = resources[current]
            res.stack_frame_bytes, res.spill_stores_bytes, res.spill_loads_bytes = map(int, match.groups())
        elif current is not None and (match := _PTXAS_USED_RE.search(line)):
            resources[current].registers = int(match.group(1))
            if smem := _PTXAS_SMEM_RE.search(line):
                resources[current].shared_mem_bytes = int(smem.group(1))
    return resources


_memory_cache: OrderedDict[str, CompileResult] = OrderedDict()
_cache_lock = threading.Lock()


def _cache_key(source: str, arch: str, options: tuple[str, ...]) -> str:
    payload = "\0".join([source, arch, *options, nvrtc_version(), *include_dirs()])
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def compile_cuda(source: str, arch: str = DEFAULT_ARCH, options: tuple[str, ...] = (),
                 use_disk_cache: bool = True) -> CompileResult:
    """Compile a `cuda` block to CUBIN for `arch` (``"sm_90"``); never raises for bad source.

    Args:
        source: CUDA C++ text; diagnostics' line numbers refer to its lines.
        arch: target architecture, ``sm_<major><minor>``.
        options: extra NVRTC options (e.g. ``("-DTILE=32",)``).
        use_disk_cache: also keep results under ``$LEAP_GYM_CACHE/nvrtc`` (shared by workers).
    """
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"arch must look like 'sm_90', got {arch!r}")
    refused = _include_rule(source, arch)
    if refused is not None:
        return refused
    key = _cache_key(source, arch, tuple(options))
    with _cache_lock:
        if key in _memory_cache:
            _memory_cache.move_to_end(key)
            return replace(_memory_cache[key], cached=True)
    disk_path = cache_dir() / "nvrtc" / f"{key}.pkl"
    if use_disk_cache and disk_path.exists():
        try:
            result = replace(pickle.loads(disk_path.read_bytes()), cached=True)
            _remember(key, result)
            return result
        except Exception:  # a torn or foreign file: compile again
            log.debug("ignoring unreadable cache entry %s", disk_path)
    result = _compile_uncached(source, arch, tuple(options))
    if not result.ok and not any(d.line for d in result.errors):
        return result  # a failure of the installation, not of the source: never cached
    _remember(key, result)
    if use_disk_cache:
        try:
            disk_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = disk_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(result))
            os.replace(tmp, disk_path)
        except OSError as exc:
            log.debug("cannot write NVRTC cache %s: %s", disk_path, exc)
    return result


def _include_rule(source: str, arch: str) -> CompileResult | None:
    """A failed result naming the rule when the source includes anything but the CUDA headers (`includes`)."""
    from leap_gym.backends.includes import find_include_violations

    violations = find_include_violations(source, include_dirs())
    if not violations:
        return None
    lines = source.splitlines()
    diagnostics = [Diagnostic(severity="error", message=v.message, line=v.line,
                              source_line=lines[v.line - 1].rstrip() if 0 < v.line <= len(lines) else None)
                   for v in violations]
    log_text = "\n".join(f"{SOURCE_NAME}({v.line}): error: {v.message}" for v in violations)
    return CompileResult(False, arch, log=log_text, diagnostics=diagnostics, include_refused=True)


def _remember(key: str, result: CompileResult) -> None:
    with _cache_lock:
        _memory_cache[key] = result
        while len(_memory_cache) > _MEMORY_CACHE_SIZE:
            _memory_cache.popitem(last=False)


def _compile_uncached(source: str, arch: str, options: tuple[str, ...]) -> CompileResult:
    nvrtc = _nvrtc()
    start = time.perf_counter()
    (prog,) = _check(nvrtc.nvrtcCreateProgram(source.encode("utf-8", "replace"), SOURCE_NAME.encode(), 0, [], []),
                     "create program")
    try:
        opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, *(f"-I{d}" for d in include_dirs()), *options]
        encoded = [o.encode() for o in opts]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        buffer = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buffer), "log")
        log_text = buffer.rstrip(b"\0 ").decode("utf-8", "replace")
        diagnostics = parse_diagnostics(log_text, source)
        if int(status) != 0:
            if not any(d.severity == "error" for d in diagnostics):
                diagnostics.append(Diagnostic(severity="error", message=log_text.strip() or str(status)))
            return CompileResult(False, arch, log=log_text, diagnostics=diagnostics,
                                 compile_time_s=time.perf_counter() - start)
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(prog), "CUBIN size")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "CUBIN")
        return CompileResult(True, arch, cubin=bytes(cubin), log=log_text, diagnostics=diagnostics,
                             resources=parse_ptxas(log_text), compile_time_s=time.perf_counter() - start)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
