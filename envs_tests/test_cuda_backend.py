"""The `cuda` backend's CPU-side parts: availability without a GPU, error mapping, parameter packing,
occupancy/bandwidth arithmetic, architecture choice, and the timing statistics and stopping rule.

What needs a GPU (module load, launch, timing with events) is in ``envs_tests/gpu/``.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import math
import random

import pytest
import torch

from leap_gym.backends import timing
from leap_gym.backends.base import BackendUnavailable, KernelRuntimeError, get_backend
from leap_gym.backends.cuda import (
    CudaBackend,
    achieved_bandwidth_gbps,
    driver_supports,
    error_info,
    error_name,
    error_name_from_torch,
    format_error,
    pack_kernel_params,
    peak_bandwidth_gbps,
    pick_arch,
    tensor_bytes,
    theoretical_occupancy,
)
from leap_gym.evaluation.kernels import marshal_args, parse_kernel_signatures

NO_GPU = not torch.cuda.is_available()
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="checks the behaviour on a machine without a GPU")


# -- availability on this machine -----------------------------------------------------------------------------------

def test_module_imports_and_declares_the_backend():
    module = importlib.import_module("leap_gym.backends.cuda")
    backend = module.CudaBackend()
    assert (backend.name, backend.device, backend.size_preset) == ("cuda", "cuda", "gpu")
    assert backend.reports_speedup and backend.runs_kernels and not backend.context_poisoned


@needs_no_gpu
def test_unavailable_without_a_gpu_with_a_clear_reason():
    available = CudaBackend().availability()
    assert not available.ok
    assert "GPU" in available.reason or "driver" in available.reason
    assert len(available.reason) > 20


@needs_no_gpu
def test_default_arch_falls_back_to_sm90_and_load_refuses():
    backend = CudaBackend()
    assert backend.default_arch() == "sm_90"
    with pytest.raises(BackendUnavailable, match="unavailable"):
        backend.load("", b"", {}, "sm_90")


@needs_no_gpu
def test_auto_resolves_to_cpu():
    pytest.importorskip("leap_gym.backends.cpu", reason="the cpu backend module is not in this tree yet")
    assert get_backend("auto").name == "cpu"


@needs_no_gpu
def test_evaluator_refuses_cuda_with_the_reason():
    from leap_gym.evaluation.evaluator import Evaluator

    with pytest.raises(BackendUnavailable, match="backend 'cuda' is unavailable"):
        Evaluator(backend="cuda")


# -- CUDA errors -----------------------------------------------------------------------------------------------------

def test_error_names_from_driver_codes_and_torch_messages():
    assert error_name(700) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name(701) == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
    torch_text = ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously "
                  "reported at some other API call, so the stacktrace below might be incorrect.")
    assert error_name_from_torch(RuntimeError(torch_text)) == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert error_name_from_torch(RuntimeError("CUDA error: misaligned address")) == "CUDA_ERROR_MISALIGNED_ADDRESS"
    assert error_name_from_torch(RuntimeError("CUDA error: device-side assert triggered")) == "CUDA_ERROR_ASSERT"
    assert error_name_from_torch(RuntimeError("shape mismatch")) is None


def test_sticky_errors_poison_the_context_and_refused_launches_do_not():
    backend = CudaBackend()
    refused = backend.fault("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "launch of 'k'", ["k"])
    assert isinstance(refused, KernelRuntimeError) and refused.detail == "launch"
    assert not backend.context_poisoned
    backend.pending_kernels.extend(["a", "b", "a"])
    fault = backend.fault("CUDA_ERROR_ILLEGAL_ADDRESS", "reported at synchronisation", list(backend.pending_kernels))
    assert fault.detail == "out_of_bounds"
    assert str(fault).startswith("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")
    assert "one of the kernels a, b" in str(fault) and "bound check" in str(fault)
    assert backend.context_poisoned and backend.poison_reason == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert backend.pending_kernels == [] and not backend.check_health()
    # A poisoned backend refuses further work before touching the driver.
    with pytest.raises(KernelRuntimeError, match="poisoned") as info:
        backend.synchronize()
    assert info.value.detail == "context_poisoned"


def test_every_listed_error_is_a_real_driver_error_name():
    from cuda.bindings import driver

    for name in ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED",
                 "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "CUDA_ERROR_ASSERT", "CUDA_ERROR_NO_BINARY_FOR_GPU"):
        assert hasattr(driver.CUresult, name)
        assert error_info(name).description
    assert not error_info("CUDA_ERROR_SOMETHING_NEW").sticky
    assert format_error("CUDA_ERROR_ASSERT", kernels=["k"]).startswith("CUDA_ERROR_ASSERT: device-side assert")


# -- kernel parameters ----------------------------------------------------------------------------------------------

def test_packed_params_point_at_each_marshalled_value():
    source = ('extern "C" __global__ void k(const float* x, float* y, int n, float alpha, long long m, '
              'unsigned char flag, double beta) {}')
    sig = parse_kernel_signatures(source)["k"]
    x, y = torch.randn(8), torch.empty(8)
    args = marshal_args(sig, (x, y, 8, 0.5, -(2**40), 255, 2.25), "cpu")
    address, keepalive = pack_kernel_params(args)
    pointers = (ctypes.c_void_p * len(args)).from_address(address)
    read = [ctypes.cast(pointers[i], ctypes.POINTER(type(a))).contents.value for i, a in enumerate(args)]
    assert read == [x.data_ptr(), y.data_ptr(), 8, 0.5, -(2**40), 255, 2.25]
    assert keepalive
    assert pack_kernel_params([]) == (0, ())
    with pytest.raises(TypeError, match="ctypes value"):
        pack_kernel_params([3])


# -- occupancy, bandwidth, architecture --------------------------------------------------------------------------------

def test_theoretical_occupancy():
    assert theoretical_occupancy(8, 256, 2048) == 1.0
    assert theoretical_occupancy(3, 256, 2048) == 0.375
    assert theoretical_occupancy(1, 48, 2048) == 2 / 64  # 48 threads are two warps
    assert theoretical_occupancy(0, 256, 2048) == 0.0


def test_bandwidth_arithmetic():
    # H100 SXM: HBM3 at 2619 MHz on a 5120-bit bus, about 3.35 TB/s.
    assert peak_bandwidth_gbps(2_619_000, 5120) == pytest.approx(3352.3, rel=1e-4)
    assert achieved_bandwidth_gbps(2 * 10**9, 1.0) == pytest.approx(2000.0)
    assert achieved_bandwidth_gbps(10, 0.0) == 0.0
    nested = [torch.zeros(4), (torch.zeros(2, dtype=torch.float64), 3)]
    assert tensor_bytes(nested, {"a": torch.zeros(1, dtype=torch.half)}) == 16 + 16 + 2


def test_arch_choice_and_driver_version():
    supported = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]
    assert pick_arch(9, 0, supported) == "sm_90"
    assert pick_arch(8, 9, supported) == "sm_89"
    assert pick_arch(8, 7, [80, 86, 89]) == "sm_86"
    assert pick_arch(12, 1, supported) == "sm_121"
    with pytest.raises(ValueError, match="newer nvidia-cuda-nvrtc"):
        pick_arch(7, 0, supported)
    assert driver_supports(13000, 13) and driver_supports(13020, 13)
    assert not driver_supports(12080, 13)


# -- timing statistics ------------------------------------------------------------------------------------------------

def test_median_and_half_iqr():
    assert timing.median([3.0, 1.0, 2.0]) == 2.0
    assert timing.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == 1.0  # Q1=2, Q3=4
    assert timing.spread([7.0]) == 0.0
    assert timing.relative_spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(1 / 3)
    # One wild outlier barely moves the spread.
    assert timing.spread([1.0] * 19 + [1000.0]) == 0.0
    with pytest.raises(ValueError, match="at least one"):
        timing.median([])


def test_stopping_rule():
    kw = dict(min_trials=10, max_trials=50, budget_s=1.0, target_spread=0.02)
    steady = [1.0] * 10
    assert timing.should_stop(steady[:9], 0.1, **kw) == ""            # converged but under min_trials
    assert timing.should_stop(steady, 0.1, **kw) == "converged"
    noisy = [1.0, 2.0] * 5
    assert timing.should_stop(noisy, 0.5, **kw) == ""
    assert timing.should_stop(noisy, 1.5, **kw) == "budget"
    assert timing.should_stop([1.0, 2.0], 5.0, **kw) == ""           # fewer than MIN_TRIALS_ON_BUDGET
    assert timing.should_stop([1.0, 2.0, 1.5], 5.0, **kw) == "budget"
    assert timing.should_stop([1.0, 2.0] * 25, 0.1, **kw) == "max_trials"


def _fake_clock(step_s: float):
    ticks = itertools.count()
    return lambda: next(ticks) * step_s


def test_collect_converges_on_steady_samples():
    rng = random.Random(0)
    stats = timing.collect(lambda: 2.0 * (1 + rng.uniform(-0.005, 0.005)), min_trials=10, max_trials=200,
                           budget_s=100.0, target_spread=0.02, clock=_fake_clock(0.001))
    assert stats.stop_reason == "converged" and stats.trials == 10
    assert stats.median_ms == pytest.approx(2.0, rel=0.01) and stats.spread_ms < 0.02 * stats.median_ms
    assert stats.as_tuple() == (stats.median_ms, stats.spread_ms, 10) and len(stats.samples) == 10


def test_collect_stops_on_budget_or_max_trials_when_noisy():
    rng = random.Random(1)
    noisy = lambda: rng.choice([1.0, 3.0])  # noqa: E731
    by_budget = timing.collect(noisy, min_trials=10, max_trials=1000, budget_s=0.05, target_spread=0.02,
                               clock=_fake_clock(0.001))
    assert by_budget.stop_reason == "budget" and 40 <= by_budget.trials <= 60
    by_count = timing.collect(noisy, min_trials=10, max_trials=30, budget_s=100.0, target_spread=0.02,
                              clock=_fake_clock(0.001))
    assert by_count.stop_reason == "max_trials" and by_count.trials == 30
    assert by_count.median_ms in (1.0, 2.0, 3.0) and by_count.spread_ms > 0


def test_collect_takes_a_few_trials_of_a_slow_kernel_despite_the_budget():
    stats = timing.collect(lambda: 500.0, min_trials=10, max_trials=200, budget_s=0.1, target_spread=0.0,
                           clock=_fake_clock(1.0))
    assert stats.trials == timing.MIN_TRIALS_ON_BUDGET and stats.stop_reason == "budget"


def test_collect_validates_its_arguments():
    with pytest.raises(ValueError, match="min_trials"):
        timing.collect(lambda: 1.0, min_trials=0)
    with pytest.raises(ValueError, match="budget_s"):
        timing.collect(lambda: 1.0, budget_s=0)


def test_collect_with_a_real_cpu_timer():
    """The loop is device-independent: drive it with a CPU measurement."""
    import time

    def trial() -> float:
        start = time.perf_counter()
        sum(range(2000))
        return (time.perf_counter() - start) * 1e3

    stats = timing.collect(trial, min_trials=5, max_trials=100, budget_s=0.5, target_spread=0.5)
    assert 5 <= stats.trials <= 100 and stats.median_ms > 0 and math.isfinite(stats.spread_ms)


@needs_no_gpu
def test_l2_flush_size_falls_back_without_a_driver():
    assert timing.l2_flush_bytes() == timing.DEFAULT_FLUSH_BYTES


# -- the GPU test script's own inputs, checked here so the GPU run does not fail on a typo ---------------------------

def _gpu_test_module(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "gpu" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_gpu_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_test_kernels_compile_for_sm90():
    from leap_gym.backends.nvrtc import compile_cuda

    for name in ("test_gpu_backend", "test_gpu_timing"):
        source = _gpu_test_module(name).SOURCE
        compiled = compile_cuda(source, "sm_90")
        assert compiled.ok, compiled.log
        assert set(compiled.resources) == set(parse_kernel_signatures(source))


def test_gpu_broken_variants_parse_and_compile_as_intended():
    from leap_gym.backends.nvrtc import compile_cuda
    from leap_gym.evaluation.languages import prepare
    from leap_gym.evaluation.parse import ParsedResponse
    from leap_gym.result import COMPILE_ERROR

    module = _gpu_test_module("test_gpu_evaluate")
    relu = module.BY_ID["level1/relu"]
    for name, response, status, _detail, _phrase in [*module.VARIANTS, ("hang", module.HANG, "", None, "")]:
        parsed = prepare(relu, response)
        assert isinstance(parsed, ParsedResponse), f"{name}: {parsed}"
        assert compile_cuda(parsed.cuda, "sm_90").ok == (status != COMPILE_ERROR), name
    assert len(module.SOLUTIONS) >= len(module.TASKS)


def test_gpu_runner_report_from_synthetic_records():
    runner = _gpu_test_module("run_gpu_checks")
    records = [
        {"kind": "reference", "task": "level1/relu", "solution": 0, "status": "CORRECT", "kernel_ms": 0.1,
         "kernel_spread_ms": 0.001, "reference_ms": 0.2, "reference_spread_ms": 0.002, "speedup": 2.0},
        {"kind": "reference", "task": "level1/add", "solution": 0, "status": "CORRECT", "kernel_ms": 0.2,
         "kernel_spread_ms": 0.001, "reference_ms": 0.1, "reference_spread_ms": 0.002, "speedup": 0.5},
        {"kind": "reference", "task": "level1/gelu", "solution": 1, "status": "WRONG_OUTPUT", "speedup": None,
         "message": "output 0: 3 of 10 values differ"},
        {"kind": "repeatability", "relative_half_range": 0.004, "medians_ms": [1.0, 1.004, 0.996]},
    ]
    summary = runner.summarize(records)
    assert summary["reference_solutions"] == 3 and summary["reference_correct"] == 2
    assert not summary["all_reference_correct"] and summary["not_correct"][0].startswith("level1/gelu#1")
    assert summary["geomean_speedup"] == pytest.approx(1.0) and summary["timing_spread_below_2_percent"]
    table = runner.speedup_table([r for r in records if r["kind"] == "reference"]).splitlines()
    assert "speedup" in table[0]
    assert [line.split()[0] for line in table[2:]] == ["level1/add", "level1/gelu", "level1/relu"]
    assert table[2].endswith("0.50") and table[4].endswith("2.00") and "WRONG_OUTPUT" in table[3]


def test_profile_goes_into_the_eval_result():
    from leap_gym.backends.cuda import KernelProfile, apply_profile
    from leap_gym.result import CORRECT, EvalResult, KernelResources, Timing

    result = EvalResult(CORRECT, resources={"a": KernelResources(registers=32)},
                        timing=Timing(kernel_ms=1.0, kernel_spread_ms=0.01, reference_ms=2.0, reference_spread_ms=0.02,
                                      trials=10))
    report = KernelProfile(per_kernel_ms={"a": 0.6, "b": 0.3}, launches={"a": 1, "b": 2},
                           occupancy={"a": 0.5, "b": 1.0}, total_ms=0.9, bandwidth_gbps=1500.0,
                           peak_bandwidth_gbps=3352.3)
    apply_profile(result, report)
    assert result.timing.per_kernel_ms == {"a": 0.6, "b": 0.3} and result.timing.bandwidth_gbps == 1500.0
    assert result.resources["a"].registers == 32 and result.resources["a"].theoretical_occupancy == 0.5
    assert result.resources["b"].theoretical_occupancy == 1.0
    assert EvalResult.from_dict(result.to_dict()) == result


def _driver_library_missing() -> bool:
    try:
        from cuda.bindings import driver

        driver.cuDriverGetVersion()
    except Exception as exc:
        return type(exc).__name__ == "DynamicLibNotFoundError"
    return False


@pytest.mark.skipif(not _driver_library_missing(), reason="needs a machine without libcuda.so (calls would run)")
def test_driver_calls_as_the_backend_makes_them_pass_the_bindings_argument_checks():
    """Without libcuda the bindings convert arguments first and fail on the library load after: a call
    shape the bindings would refuse raises TypeError here (negative controls), an accepted one raises
    DynamicLibNotFoundError. This checks the launch path's argument types without a GPU."""
    from cuda.bindings import driver

    sig = parse_kernel_signatures('extern "C" __global__ void k(const float* x, float* y, int n, float a) {}')["k"]
    params, _keep = pack_kernel_params(marshal_args(sig, (torch.zeros(4), torch.zeros(4), 4, 1.0), "cpu"))
    func, module, dev = driver.CUfunction(), driver.CUmodule(), driver.CUdevice(0)
    accepted = [
        lambda: driver.cuLaunchKernel(func, 2, 1, 1, 256, 1, 1, 65536, 0x7F00, params, 0),
        lambda: driver.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0),
        lambda: driver.cuModuleLoadData(b"\x7fELF" + bytes(60)),
        lambda: driver.cuModuleGetFunction(module, "relu_kernel".encode()),
        lambda: driver.cuFuncSetAttribute(
            func, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100_000),
        lambda: driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func),
        lambda: driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, 256, 0),
        lambda: driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
        lambda: driver.cuDevicePrimaryCtxRetain(dev),
        lambda: driver.cuCtxSetCurrent(driver.CUcontext()),
        lambda: driver.cuCtxSynchronize(),
        lambda: driver.cuModuleUnload(module),
    ]
    for i, call in enumerate(accepted):
        with pytest.raises(Exception) as info:
            call()
        assert type(info.value).__name__ == "DynamicLibNotFoundError", f"call {i}: {info.value!r}"
    refused = [
        lambda: driver.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, "stream", params, 0),
        lambda: driver.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, 0, "params", 0),
        lambda: driver.cuModuleGetFunction(module, "relu_kernel"),
        lambda: driver.cuCtxSetCurrent("context"),
    ]
    for call in refused:
        with pytest.raises(TypeError):
            call()


def test_gpu_broken_variants_get_the_same_statuses_on_the_cpu_backend():
    """The GPU script's variants that do not depend on GPU hardware behave as it expects on the cpu backend
    (misaligned access is GPU-only: a CPU reads unaligned floats without complaint)."""
    pytest.importorskip("leap_gym.backends.cpu", reason="the cpu backend module is not in this tree")
    from leap_gym import evaluate

    module = _gpu_test_module("test_gpu_evaluate")
    relu = module.BY_ID["level1/relu"].with_size("cpu")
    for name, response, status, detail, phrase in module.VARIANTS:
        if name == "misaligned_address":
            continue
        result = evaluate(relu, response, backend="cpu", timeout_s=60)
        assert result.status == status, f"{name}: {result.status} {result.message}"
        if name != "illegal_address":  # the GPU names the CUDA error; the CPU runtime its own fault
            assert result.detail == detail and phrase in result.message + "\n".join(result.errors), name
        else:
            assert result.detail == "out_of_bounds", result.message


def test_gpu_pool_drops_the_read_only_view_when_the_driver_does_not_start(caplog):
    """Here no worker reaches a GPU, so the probe fails under both views: the pool is rebuilt once,
    without the read-only view, and both failures are logged."""
    from leap_gym.evaluation.evaluator import _gpu_pool
    from leap_gym.sandbox import SandboxLimits, WorkerPool

    made = []

    def make(read_only_fs: bool = True) -> WorkerPool:
        made.append(WorkerPool(size=1, limits=SandboxLimits(address_space_bytes=None), preload=["torch"],
                               read_only_fs=read_only_fs))
        return made[-1]

    with caplog.at_level("WARNING", logger="leap_gym.evaluation.evaluator"):
        pool = _gpu_pool(make)
    try:
        assert [p.read_only_fs for p in made] == [True, False] and pool is made[1]
        assert "read-only file system view" in caplog.text and "unusable" in caplog.text
    finally:
        pool.close()
