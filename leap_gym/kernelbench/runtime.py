"""The Python side of translated KernelBench host code: helpers it calls, and the C/CUDA names it maps.

`C_HELPERS` is appended to a converted answer's python block (`leap_gym.kernelbench`); everything
in it is static-checked with the rest of the block. ``kb_div``/``kb_mod`` give C's truncating integer
division and remainder; the ``kb_empty``... helpers are torch's allocation functions with
``TensorOptions``; ``KB_DEVICE`` is the device kernels run on (the GPU, or the CPU runtime's CPU).
"""

from __future__ import annotations

#: Python helpers the translated host functions call (prefixed ``kb_`` to stay out of the answer's names).
C_HELPERS = '''
def kb_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def kb_mod(a, b):
    return a - kb_div(a, b) * b


def kb_check(condition, *message):
    if not condition:
        raise RuntimeError("TORCH_CHECK failed: " + "".join(str(m) for m in message))


KB_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class KbOptions:
    def __init__(self, dtype=None, device=None):
        self.dtype_value = dtype
        self.device_value = device

    def dtype(self, dtype):
        return KbOptions(dtype, self.device_value)

    def device(self, device):
        return KbOptions(self.dtype_value, device)


def kb_options(x):
    return KbOptions(x.dtype, x.device)


def kb_kwargs(options):
    if options is None:
        return {"device": KB_DEVICE}
    if isinstance(options, KbOptions):
        return {"dtype": options.dtype_value, "device": options.device_value or KB_DEVICE}
    if isinstance(options, (torch.device, str)):
        return {"device": options}
    return {"dtype": options, "device": KB_DEVICE}


def kb_shape(sizes):
    return tuple(sizes) if isinstance(sizes, (list, tuple, torch.Size)) else (sizes,)


def kb_empty(sizes, options=None):
    return torch.empty(kb_shape(sizes), **kb_kwargs(options))


def kb_zeros(sizes, options=None):
    return torch.zeros(kb_shape(sizes), **kb_kwargs(options))


def kb_ones(sizes, options=None):
    return torch.ones(kb_shape(sizes), **kb_kwargs(options))


def kb_full(sizes, value, options=None):
    return torch.full(kb_shape(sizes), value, **kb_kwargs(options))


def kb_like(kind, x, options=None):
    kwargs = {} if options is None else {k: v for k, v in kb_kwargs(options).items() if v is not None}
    if kind == "empty":
        return torch.empty_like(x, **kwargs)
    if kind == "zeros":
        return torch.zeros_like(x, **kwargs)
    return torch.ones_like(x, **kwargs)


def kb_on_device(value):
    device = value if isinstance(value, torch.device) else value.device
    return device.type == KB_DEVICE


def kb_data(tensor, scalar):
    expected = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
                "Int": torch.int32, "Long": torch.int64, "Bool": torch.bool, "Byte": torch.uint8, "Char": torch.int8,
                "Short": torch.int16}[scalar]
    if tensor.dtype != expected:
        names = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                 torch.int32: "Int", torch.int64: "Long"}
        raise RuntimeError("expected scalar type " + scalar + " but found " + names.get(tensor.dtype, str(tensor.dtype)))
    return tensor


def kb_offset(tensor, offset):
    return tensor.view(-1)[offset:]
'''
