"""The CUDA driver API as the cuda backend and GPU timing both need it: the initialised driver module,
call unpacking, and device attributes. No torch, no launching: see `leap_gym.backends.cuda`."""

from __future__ import annotations

from typing import Any

from leap_gym.backends.cuda_errors import error_name


def driver() -> Any:
    """`cuda.bindings.driver` after ``cuInit``; raises with the reason when the driver cannot be used."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise RuntimeError("cuda-python is not installed: pip install 'cuda-python>=13'") from exc
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder's DynamicLibNotFoundError when libcuda.so is absent
        raise RuntimeError(f"the NVIDIA driver library (libcuda.so) could not be loaded: {exc}") from exc
    if err != 0:
        name = error_name(err)
        if name == "CUDA_ERROR_NO_DEVICE":
            raise RuntimeError("the NVIDIA driver sees no CUDA device (CUDA_ERROR_NO_DEVICE); check "
                               "CUDA_VISIBLE_DEVICES and nvidia-smi")
        raise RuntimeError(f"cuInit failed with {name}")
    return driver


def call(what: str, result: Any) -> tuple:
    """Unpack a driver call's ``(CUresult, *values)``; raise `CudaCallError` on failure."""
    if not isinstance(result, tuple):
        result = (result,)
    if result[0] != 0:
        raise CudaCallError(error_name(result[0]), what)
    return result[1:]


class CudaCallError(RuntimeError):
    def __init__(self, name: str, what: str):
        super().__init__(f"{what} failed with {name}")
        self.name = name
        self.what = what


def resolve_device_index(device_index: int | None) -> int:
    if device_index is not None:
        return device_index
    import torch

    # Only ask torch when it has set up CUDA already: a parent process that merely checks the device
    # (before starting sandboxed workers) should not create a CUDA context.
    return torch.cuda.current_device() if torch.cuda.is_initialized() else 0


def device_attribute(name: str, device_index: int | None = None) -> int:
    """A `CUdevice_attribute` of a device, by its short name (``"L2_CACHE_SIZE"``)."""
    drv = driver()
    attr = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    (dev,) = call("cuDeviceGet", drv.cuDeviceGet(resolve_device_index(device_index)))
    (value,) = call(f"cuDeviceGetAttribute({name})", drv.cuDeviceGetAttribute(attr, dev))
    return int(value)
