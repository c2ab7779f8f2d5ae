"""The `cuda` backend: load NVRTC's CUBIN with the driver API and launch on torch CUDA tensors.

The CUBIN is loaded with ``cuModuleLoadData`` into the device's **primary context**, the one torch's
runtime uses, so kernels read and write torch's allocations directly and run on torch's current
stream. Arguments come from `leap_gym.evaluation.kernels.marshal_args` (``c_void_p`` of a tensor's
``data_ptr()``, ctypes scalars); the launcher passes ``cuLaunchKernel`` an array of pointers to
them. Dynamic shared memory above 48 KB is granted through
``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``, up to the device's opt-in limit.

Faults: a CUDA error becomes `KernelRuntimeError` whose message starts with the CUDA error name
(``CUDA_ERROR_ILLEGAL_ADDRESS: ...``) and whose `detail` is ``"out_of_bounds"`` for an illegal
address, ``"cuda_error"`` otherwise. Errors that poison the context (every later call in the
process would fail) set `CudaBackend.context_poisoned`; the worker pool must then replace the
process. `CudaBackend.check_health` synchronises and reports whether the context is still usable.

**Status: written without a GPU.** Everything here that touches a device (module load, launch,
synchronise, occupancy, device attributes, timing) has not been run; the pure parts (error
classification, parameter packing, occupancy and bandwidth arithmetic, architecture choice,
availability on a machine without a GPU) are tested in ``envs_tests/test_cuda_backend.py``. The
GPU checks are ``python envs_tests/gpu/run_gpu_checks.py OUTDIR``.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from leap_gym.backends.base import Availability, Backend, KernelRuntimeError, request_worker_replacement
from leap_gym.backends.cuda_driver import CudaCallError as _CudaCallError
from leap_gym.backends.cuda_driver import call as _call
from leap_gym.backends.cuda_driver import device_attribute
from leap_gym.backends.cuda_driver import driver as _driver
from leap_gym.backends.cuda_errors import error_info, error_name, error_name_from_torch, format_error
from leap_gym.backends.timing import TimingStats, time_gpu
from leap_gym.evaluation.kernels import KernelSignature, LaunchError

log = logging.getLogger(__name__)

FALLBACK_ARCH = "sm_90"
#: Dynamic shared memory a kernel gets without opting in (bytes).
DEFAULT_DYNAMIC_SMEM = 48 * 1024


def pack_kernel_params(args: list[Any]) -> tuple[int, Any]:
    """The ``void**`` `cuLaunchKernel` takes: an array of pointers to each ctypes argument.

    Returns:
        ``(address, keepalive)``: the array's address (0 for no arguments) and the objects that must
        stay alive until the launch call has returned (the driver copies the values at launch).
    """
    if not args:
        return 0, ()
    for i, arg in enumerate(args):
        if not isinstance(arg, ctypes._SimpleCData):
            raise TypeError(f"kernel argument {i} must be a ctypes value (from marshal_args), got {type(arg).__name__}")
    array = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    return ctypes.addressof(array), (array, args)


def theoretical_occupancy(active_blocks_per_sm: int, threads_per_block: int, max_threads_per_sm: int,
                          warp_size: int = 32) -> float:
    """Resident warps over the SM's maximum, as the CUDA occupancy calculator defines it (0 to 1)."""
    if active_blocks_per_sm <= 0 or threads_per_block <= 0 or max_threads_per_sm <= 0:
        return 0.0
    warps_per_block = -(-threads_per_block // warp_size)
    return min(1.0, active_blocks_per_sm * warps_per_block / (max_threads_per_sm // warp_size))


def peak_bandwidth_gbps(memory_clock_khz: int, bus_width_bits: int) -> float:
    """Peak DRAM bandwidth in GB/s (1e9 bytes) from the memory clock and bus width, two transfers a clock."""
    return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8) / 1e9


def achieved_bandwidth_gbps(bytes_moved: int, ms: float) -> float:
    """Bytes moved over time, in GB/s (1e9 bytes); 0 for a non-positive time."""
    return bytes_moved / (ms * 1e-3) / 1e9 if ms > 0 else 0.0


def tensor_bytes(*objects: Any) -> int:
    """Total bytes of the tensors in nested lists/tuples/dicts (the compulsory traffic of inputs and outputs)."""
    import torch

    total = 0
    stack = list(objects)
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            total += obj.numel() * obj.element_size()
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
    return total


def pick_arch(major: int, minor: int, supported: list[int] | tuple[int, ...]) -> str:
    """The NVRTC target for a device of compute capability `major.minor`.

    A CUBIN for ``sm_XY`` runs on devices ``X.Z`` with ``Z >= Y``; so the newest supported target of the
    same major version not above the device is taken. Raises `ValueError` when there is none.
    """
    device = major * 10 + minor
    same_major = [a for a in supported if a // 10 == major and a <= device]
    if not same_major:
        raise ValueError(f"NVRTC supports no architecture that runs on this sm_{device} GPU (it supports "
                         f"{', '.join(f'sm_{a}' for a in sorted(supported))}); install a newer nvidia-cuda-nvrtc")
    return f"sm_{max(same_major)}"


def driver_supports(driver_version: int, nvrtc_major: int) -> bool:
    """Whether a driver reporting `driver_version` (1000*major + 10*minor) loads CUBINs of NVRTC `nvrtc_major`."""
    return driver_version // 1000 >= nvrtc_major


@lru_cache(maxsize=1)
def device_peak_bandwidth_gbps(device_index: int | None = None) -> float | None:
    """The device's peak DRAM bandwidth (GB/s) from its memory clock and bus width; None if unknown."""
    try:
        clock = device_attribute("MEMORY_CLOCK_RATE", device_index)
        width = device_attribute("GLOBAL_MEMORY_BUS_WIDTH", device_index)
    except Exception as exc:
        log.debug("peak bandwidth unknown: %s", exc)
        return None
    return peak_bandwidth_gbps(clock, width) if clock > 0 and width > 0 else None


@dataclass
class KernelProfile:
    """Per-kernel facts of one profiled run of a correct `ModelNew.forward`.

    Attributes:
        per_kernel_ms: GPU time of each kernel (summed over its launches), from events around launches.
        launches: launches of each kernel in the run.
        occupancy: theoretical occupancy of each kernel at its last launch configuration (0 to 1).
        total_ms: sum of `per_kernel_ms`.
        bandwidth_gbps: `bytes_moved` over `total_ms`, when bytes were given.
        peak_bandwidth_gbps: the device's DRAM peak.
    """

    per_kernel_ms: dict[str, float] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)
    occupancy: dict[str, float] = field(default_factory=dict)
    total_ms: float = 0.0
    bandwidth_gbps: float | None = None
    peak_bandwidth_gbps: float | None = None


def apply_profile(result: Any, report: KernelProfile) -> None:
    """Copy a `KernelProfile` into an `EvalResult`: per-kernel time and bandwidth into its `timing`
    (when it has one), theoretical occupancy into each kernel's `resources` entry."""
    from leap_gym.result import KernelResources

    if result.timing is not None:
        result.timing.per_kernel_ms = dict(report.per_kernel_ms)
        result.timing.bandwidth_gbps = report.bandwidth_gbps
        result.timing.peak_bandwidth_gbps = report.peak_bandwidth_gbps
    for name, occupancy in report.occupancy.items():
        result.resources.setdefault(name, KernelResources()).theoretical_occupancy = occupancy


class CudaLauncher:
    """Launches one loaded module's kernels on torch's current stream (the `KernelLauncher` protocol).

    Attributes:
        device: ``"cuda"``.
        max_shared_mem: dynamic shared memory a block may opt in to on this device (bytes).
        profile: when True, each launch is bracketed by CUDA events (see `kernel_times_ms`).
        sync_each_launch: synchronise after every launch so a fault names the exact kernel.
        launch_configs: each kernel's last ``(grid, block, shared_mem)``.
    """

    device = "cuda"

    def __init__(self, backend: CudaBackend, module: Any, signatures: dict[str, KernelSignature],
                 max_shared_mem: int, sync_each_launch: bool = False):
        self._backend = backend
        self._module = module
        self._signatures = signatures
        self._functions: dict[str, Any] = {}
        self._dynamic_smem_set: dict[str, int] = {}
        self._events: list[tuple[str, Any, Any]] = []
        self.max_shared_mem = max_shared_mem
        self.profile = False
        self.sync_each_launch = sync_each_launch
        self.launch_configs: dict[str, tuple[tuple[int, int, int], tuple[int, int, int], int]] = {}

    def function(self, name: str) -> Any:
        """The `CUfunction` of kernel `name`, looked up once."""
        if name not in self._functions:
            driver = self._backend.ensure_context()
            try:
                (func,) = _call("cuModuleGetFunction", driver.cuModuleGetFunction(self._module, name.encode()))
            except _CudaCallError as exc:
                if exc.name == "CUDA_ERROR_NOT_FOUND":
                    raise LaunchError(f"kernel '{name}' is declared but not in the compiled module (is it inside an "
                                      "#if, or not extern \"C\"?)") from None
                raise self._backend.fault(exc.name, exc.what, [name]) from None
            self._functions[name] = func
        return self._functions[name]

    def function_attribute(self, name: str, attribute: str) -> int:
        """A `CUfunction_attribute` of a kernel by short name (``"NUM_REGS"``, ``"SHARED_SIZE_BYTES"``)."""
        driver = self._backend.ensure_context()
        attr = getattr(driver.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attribute}")
        (value,) = _call(f"cuFuncGetAttribute({attribute})", driver.cuFuncGetAttribute(attr, self.function(name)))
        return int(value)

    def _grant_dynamic_smem(self, name: str, func: Any, shared_mem: int) -> None:
        if shared_mem <= self._dynamic_smem_set.get(name, 0):
            return
        driver = self._backend.ensure_context()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        try:
            _call("cuFuncSetAttribute", driver.cuFuncSetAttribute(func, attr, shared_mem))
        except _CudaCallError as exc:
            if exc.name == "CUDA_ERROR_INVALID_VALUE":
                static = self.function_attribute(name, "SHARED_SIZE_BYTES")
                raise LaunchError(
                    f"CUDA error: invalid argument (kernel '{name}': {shared_mem} bytes of dynamic shared memory "
                    f"plus {static} static; at most {self.max_shared_mem} per block on this GPU)") from None
            raise self._backend.fault(exc.name, exc.what, [name]) from None
        self._dynamic_smem_set[name] = shared_mem

    def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
               args: list[Any], tensors: list[Any] | None = None) -> None:
        """Launch kernel `name` with marshalled ctypes `args` on torch's current stream."""
        import torch

        backend = self._backend
        driver = backend.ensure_context()
        func = self.function(name)
        if shared_mem > 0:
            self._grant_dynamic_smem(name, func, shared_mem)
        stream = torch.cuda.current_stream()
        params, keepalive = pack_kernel_params(args)
        start = end = None
        if self.profile:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
        result = driver.cuLaunchKernel(func, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem,
                                       stream.cuda_stream, params, 0)
        del keepalive
        self.launch_configs[name] = (grid, block, shared_mem)
        backend.pending_kernels.append(name)
        if len(backend.pending_kernels) > 256:  # a long run without synchronising: keep the latest names
            del backend.pending_kernels[:-64]
        err = result[0] if isinstance(result, tuple) else result
        if err != 0:
            raise backend.fault(error_name(err), f"launch of '{name}' with grid={grid}, block={block}, "
                                                 f"shared_mem={shared_mem}", list(backend.pending_kernels))
        if end is not None:
            end.record(stream)
            self._events.append((name, start, end))
        if self.sync_each_launch:
            backend.synchronize()

    def kernel_times_ms(self) -> tuple[dict[str, float], dict[str, int]]:
        """GPU time and launch count of each kernel launched since the last call (needs `profile`)."""
        self._backend.synchronize()
        times: dict[str, float] = {}
        counts: dict[str, int] = {}
        for name, start, end in self._events:
            times[name] = times.get(name, 0.0) + float(start.elapsed_time(end))
            counts[name] = counts.get(name, 0) + 1
        self._events.clear()
        return times, counts

    def close(self) -> None:
        """Unload the module (skipped in a poisoned context, where the driver refuses everything)."""
        module, self._module = self._module, None
        self._functions.clear()
        if module is None or self._backend.context_poisoned:
            return
        try:
            driver = self._backend.ensure_context()
            driver.cuModuleUnload(module)
        except Exception as exc:  # at interpreter exit, or the driver is gone
            log.debug("cuModuleUnload failed: %s", exc)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class CudaBackend(Backend):
    """Runs kernels on the GPU that torch uses (its current device and stream).

    Attributes:
        context_poisoned: set once a fault has made this process's CUDA context unusable; the
            worker must then be replaced (every later CUDA call in it would fail).
        poison_reason: the error that poisoned it.
        pending_kernels: kernels launched since the last synchronisation (named in fault messages).
    """

    name = "cuda"
    device = "cuda"
    runs_kernels = True
    reports_speedup = True
    size_preset = "gpu"

    def __init__(self) -> None:
        self.context_poisoned = False
        self.poison_reason = ""
        self.pending_kernels: list[str] = []
        self._availability: Availability | None = None
        self._ctx: Any = None
        self._ctx_device: int | None = None
        self._thread = threading.local()
        self._lock = threading.Lock()

    # -- availability and device facts -------------------------------------------------------------

    def availability(self) -> Availability:
        """Whether kernels can run here; never raises. The reason names what is missing."""
        if self._availability is None:
            self._availability = self._probe()
        return self._availability

    def _probe(self) -> Availability:
        try:
            driver = _driver()
            (count,) = _call("cuDeviceGetCount", driver.cuDeviceGetCount())
            if count == 0:
                return Availability(False, "the NVIDIA driver reports no CUDA device")
            (version,) = _call("cuDriverGetVersion", driver.cuDriverGetVersion())
        except Exception as exc:
            return Availability(False, f"no usable GPU: {exc}")
        try:
            from leap_gym.backends.nvrtc import nvrtc_version

            nvrtc_major = int(nvrtc_version().split(".")[0])
        except Exception as exc:
            return Availability(False, f"NVRTC is unavailable: {exc}")
        if not driver_supports(int(version), nvrtc_major):
            cuda_version = f"{int(version) // 1000}.{int(version) % 1000 // 10}"
            return Availability(False, f"the NVIDIA driver supports CUDA {cuda_version}"
                                       f" but NVRTC {nvrtc_major} makes CUBINs that need a {nvrtc_major}.x driver: "
                                       f"update the driver or install nvidia-cuda-nvrtc matching it")
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            return Availability(False, f"torch {torch.__version__} ({build}) cannot use the GPU "
                                       "(torch.cuda.is_available() is False); install a CUDA build of torch")
        return Availability(True, "")

    def default_arch(self) -> str:
        """``sm_XY`` of the current device (the newest NVRTC target it runs); ``sm_90`` without a GPU."""
        try:
            major = device_attribute("COMPUTE_CAPABILITY_MAJOR")
            minor = device_attribute("COMPUTE_CAPABILITY_MINOR")
        except Exception:
            return FALLBACK_ARCH
        try:
            from cuda.bindings import nvrtc

            err, supported = nvrtc.nvrtcGetSupportedArchs()
            if err != 0:
                return f"sm_{major}{minor}"
            return pick_arch(major, minor, list(supported))
        except Exception as exc:
            log.warning("cannot match NVRTC targets to sm_%d%d: %s", major, minor, exc)
            return f"sm_{major}{minor}"

    # -- context -------------------------------------------------------------------------------------

    def ensure_context(self) -> Any:
        """Make torch's primary context current on this thread; return the driver module."""
        import torch

        driver = _driver()
        index = torch.cuda.current_device()
        with self._lock:
            if self._ctx is None or self._ctx_device != index:
                torch.cuda.init()
                (dev,) = _call("cuDeviceGet", driver.cuDeviceGet(index))
                (ctx,) = _call("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(dev))
                self._ctx, self._ctx_device = ctx, index
                self._thread.ctx = None
        if getattr(self._thread, "ctx", None) is not self._ctx:
            _call("cuCtxSetCurrent", driver.cuCtxSetCurrent(self._ctx))
            self._thread.ctx = self._ctx
        return driver

    def fault(self, name: str, where: str = "", kernels: list[str] | None = None) -> KernelRuntimeError:
        """The `KernelRuntimeError` for CUDA error `name`; marks the context poisoned when it is."""
        info = error_info(name)
        if info.sticky and not self.context_poisoned:
            self.context_poisoned, self.poison_reason = True, name
            log.warning("CUDA context poisoned by %s; this worker must be replaced", name)
            request_worker_replacement()
        self.pending_kernels.clear()
        return KernelRuntimeError(format_error(name, where, kernels or []), detail=info.detail)

    def _refuse_if_poisoned(self) -> None:
        if self.context_poisoned:
            raise KernelRuntimeError(
                f"{self.poison_reason}: the CUDA context of this worker was poisoned by an earlier fault; the "
                "worker must be replaced before it can run kernels", detail="context_poisoned")

    # -- the Backend protocol ----------------------------------------------------------------------

    def load(self, cuda_source: str, cubin: bytes, signatures: dict[str, KernelSignature], arch: str,
             checked: bool = False) -> CudaLauncher:
        """Load `cubin` into torch's context. `checked` synchronises after every launch, naming the faulting kernel."""
        available = self.availability()
        if not available.ok:
            from leap_gym.backends.base import BackendUnavailable

            raise BackendUnavailable(f"backend 'cuda' is unavailable: {available.reason}")
        self._refuse_if_poisoned()
        driver = self.ensure_context()
        result = driver.cuCtxSynchronize()  # a fault left behind by earlier work must not be blamed on this module
        err = result[0] if isinstance(result, tuple) else result
        if err != 0 and error_info(error_name(err)).sticky:
            self.fault(error_name(err))
            raise KernelRuntimeError(
                f"{error_name(err)}: an earlier evaluation in this worker left its CUDA context faulted, so this one "
                "could not run; the worker is being replaced (evaluate again)", detail="context_poisoned")
        try:
            (module,) = _call("cuModuleLoadData", driver.cuModuleLoadData(cubin))
        except _CudaCallError as exc:
            raise self.fault(exc.name, f"loading the CUBIN compiled for {arch} on a {self.default_arch()} GPU",
                             []) from None
        return CudaLauncher(self, module, signatures, self.max_shared_mem(), sync_each_launch=checked)

    def max_shared_mem(self) -> int:
        """Dynamic shared memory one block may opt in to (``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``)."""
        try:
            return device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        except Exception:
            return DEFAULT_DYNAMIC_SMEM

    def synchronize(self) -> None:
        """Wait for every stream of torch's context (``cuCtxSynchronize``); a fault raises `KernelRuntimeError`."""
        self._refuse_if_poisoned()
        driver = self.ensure_context()
        result = driver.cuCtxSynchronize()
        err = result[0] if isinstance(result, tuple) else result
        if err != 0:
            raise self.fault(error_name(err), "reported at synchronisation", list(self.pending_kernels))
        self.pending_kernels.clear()

    def check_health(self) -> bool:
        """Synchronise and say whether the context is still usable (False: replace the worker)."""
        if self.context_poisoned:
            return False
        try:
            self.synchronize()
        except KernelRuntimeError:
            return not self.context_poisoned
        return True

    def time_stats(self, fn: Callable[[], Any], budget_s: float, **options: Any) -> TimingStats:
        """`leap_gym.backends.timing.time_gpu` on `fn`, with CUDA faults raised as `KernelRuntimeError`."""
        self._refuse_if_poisoned()
        self.ensure_context()
        try:
            return time_gpu(fn, budget_s=budget_s, **options)
        except (KernelRuntimeError, LaunchError):
            raise
        except RuntimeError as exc:
            name = error_name_from_torch(exc)
            if name is None:
                raise
            raise self.fault(name, "while timing", list(self.pending_kernels)) from None
        finally:
            self.pending_kernels.clear()

    def time_ms(self, fn: Callable[[], Any], budget_s: float) -> tuple[float, float, int]:
        """Median and spread (half IQR) in ms, and the trial count (see `leap_gym.backends.timing`)."""
        return self.time_stats(fn, budget_s).as_tuple()

    # -- profiling ----------------------------------------------------------------------------------

    def occupancy(self, launcher: CudaLauncher, name: str, block_size: int, shared_mem: int = 0) -> float:
        """Theoretical occupancy (0 to 1) of kernel `name` at `block_size` threads and `shared_mem` dynamic bytes."""
        driver = self.ensure_context()
        func = launcher.function(name)
        (blocks,) = _call("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                          driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, block_size, shared_mem))
        return theoretical_occupancy(int(blocks), block_size, device_attribute("MAX_THREADS_PER_MULTIPROCESSOR"),
                                     device_attribute("WARP_SIZE"))

    def profile(self, launcher: CudaLauncher, fn: Callable[[], Any], bytes_moved: int | None = None) -> KernelProfile:
        """Run `fn` once with events around each launch: per-kernel time, occupancy, achieved bandwidth.

        Args:
            launcher: the launcher `fn` launches through (its `Kernels` handle's).
            fn: one call of the correct ``ModelNew.forward`` (e.g. ``lambda: model_new(*inputs)``).
            bytes_moved: compulsory DRAM traffic (e.g. `tensor_bytes` of inputs and outputs) for bandwidth.
        """
        self.synchronize()
        launcher.profile = True
        try:
            fn()
            per_kernel, launches = launcher.kernel_times_ms()
        finally:
            launcher.profile = False
        report = KernelProfile(per_kernel_ms=per_kernel, launches=launches, total_ms=sum(per_kernel.values()),
                               peak_bandwidth_gbps=device_peak_bandwidth_gbps())
        for name, (_, block, shared_mem) in launcher.launch_configs.items():
            try:
                report.occupancy[name] = self.occupancy(launcher, name, block[0] * block[1] * block[2], shared_mem)
            except _CudaCallError as exc:
                log.debug("occupancy of %s unknown: %s", name, exc)
        if bytes_moved is not None and report.total_ms > 0:
            report.bandwidth_gbps = achieved_bandwidth_gbps(bytes_moved, report.total_ms)
        return report
