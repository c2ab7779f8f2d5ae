"""CUDA driver errors as a kernel author should read them: name, meaning, hint, and whether the
error poisons the context (every later call in the process fails, so the worker must be replaced).

Pure Python (no driver needed); used by `leap_gym.backends.cuda`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CudaErrorInfo:
    """What a CUDA error means to the author of a kernel."""

    description: str
    hint: str = ""
    detail: str = "cuda_error"
    sticky: bool = False


# Errors after which the context is unusable ("the process must be terminated and relaunched").
CUDA_ERRORS: dict[str, CudaErrorInfo] = {
    "CUDA_ERROR_ILLEGAL_ADDRESS": CudaErrorInfo(
        "an illegal memory access was encountered",
        "a kernel read or wrote outside its buffers: an index past the end, a missing or off-by-one bound "
        "check, or a wrong stride", "out_of_bounds", True),
    "CUDA_ERROR_MISALIGNED_ADDRESS": CudaErrorInfo(
        "misaligned address", "a load or store at an address not aligned to its size (e.g. a float4 access "
        "through a pointer offset by one float)", "cuda_error", True),
    "CUDA_ERROR_LAUNCH_FAILED": CudaErrorInfo(
        "unspecified launch failure", "often a bad pointer or a stack overflow in the kernel", "cuda_error", True),
    "CUDA_ERROR_ASSERT": CudaErrorInfo("device-side assert triggered", "an assert() in a kernel failed",
                                       "cuda_error", True),
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": CudaErrorInfo(
        "an illegal instruction was encountered", "an instruction this GPU lacks, or a trap", "cuda_error", True),
    "CUDA_ERROR_HARDWARE_STACK_ERROR": CudaErrorInfo(
        "hardware stack error", "call stack overflow: deep recursion or large local arrays", "cuda_error", True),
    "CUDA_ERROR_INVALID_ADDRESS_SPACE": CudaErrorInfo(
        "invalid address space", "a generic-address instruction on memory of the wrong space", "cuda_error", True),
    "CUDA_ERROR_INVALID_PC": CudaErrorInfo("invalid program counter", "", "cuda_error", True),
    "CUDA_ERROR_LAUNCH_TIMEOUT": CudaErrorInfo(
        "the launch timed out and was terminated", "the kernel ran too long: an infinite loop?", "timeout", True),
    "CUDA_ERROR_ECC_UNCORRECTABLE": CudaErrorInfo("uncorrectable ECC error encountered", "a hardware fault",
                                                  "cuda_error", True),
    "CUDA_ERROR_TENSOR_MEMORY_LEAK": CudaErrorInfo("tensor memory not released", "", "cuda_error", True),
    "CUDA_ERROR_UNKNOWN": CudaErrorInfo("unknown error", "", "cuda_error", True),
    # Refused launches: the context stays usable.
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": CudaErrorInfo(
        "too many resources requested for launch", "registers per thread times threads per block exceeds the "
        "register file: use a smaller block or __launch_bounds__", "launch"),
    "CUDA_ERROR_INVALID_VALUE": CudaErrorInfo("invalid argument", "", "launch"),
    "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE": CudaErrorInfo(
        "too many blocks in cooperative launch", "", "launch"),
    "CUDA_ERROR_OUT_OF_MEMORY": CudaErrorInfo("out of memory", "the kernel or its buffers need more device memory",
                                              "cuda_error"),
    "CUDA_ERROR_NO_BINARY_FOR_GPU": CudaErrorInfo(
        "no kernel image is available for execution on the device",
        "the CUBIN was compiled for another architecture; leave EvalConfig.arch unset so the device's is used",
        "load"),
    "CUDA_ERROR_INVALID_IMAGE": CudaErrorInfo("device kernel image is invalid", "", "load"),
}

# torch reports CUDA errors as RuntimeError("CUDA error: <description>"); map descriptions back to names.
_TORCH_DESCRIPTIONS = {info.description: name for name, info in CUDA_ERRORS.items()}


def error_info(name: str) -> CudaErrorInfo:
    """What `name` (``"CUDA_ERROR_..."``) means; unknown errors are assumed not to poison the context."""
    return CUDA_ERRORS.get(name, CudaErrorInfo(name.removeprefix("CUDA_ERROR_").lower().replace("_", " ")))


def error_name(err: Any) -> str:
    """``"CUDA_ERROR_ILLEGAL_ADDRESS"`` for a `CUresult` (or its int value)."""
    try:
        from cuda.bindings import driver

        return driver.CUresult(int(err)).name
    except Exception:  # an int the bindings do not know
        return f"CUDA_ERROR_{int(err)}"


def error_name_from_torch(exc: BaseException) -> str | None:
    """The CUDA error name behind a torch ``RuntimeError("CUDA error: ...")``, or None if it is not one."""
    text = str(exc)
    if "CUDA error" not in text and "CUDA_ERROR" not in text:
        return None
    if match := re.search(r"CUDA_ERROR_[A-Z_]+", text):
        return match.group(0)
    lowered = text.lower()
    for description, name in _TORCH_DESCRIPTIONS.items():
        if description in lowered:
            return name
    return "CUDA_ERROR_UNKNOWN"


def format_error(name: str, where: str = "", kernels: list[str] | tuple[str, ...] = ()) -> str:
    """The message of a `KernelRuntimeError`: the error name first, then where and why."""
    info = error_info(name)
    parts = [f"{name}: {info.description}"]
    if where:
        parts.append(f" ({where})")
    if kernels:
        names = ", ".join(dict.fromkeys(kernels))
        parts.append(f" in kernel {names}" if len(set(kernels)) == 1 else f" in one of the kernels {names}")
    if info.hint:
        parts.append(f"; {info.hint}")
    return "".join(parts)
