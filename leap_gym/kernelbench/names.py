"""How torch's C++ API and the CUDA runtime's host names read in Python (`leap_gym.kernelbench.host`).

`TorchApiNames` is the part of the host-code translator that maps names, calls and members
(``torch::empty``, ``x.data_ptr<float>()``, ``x.options().dtype(...)``, ``TORCH_CHECK``, casts); the
statements and operators are in `leap_gym.kernelbench.host`. Each mapping is exact, or it raises
`Untranslatable` naming the construct.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class Untranslatable(ValueError):
    """A host construct outside the exact subset; the message names it."""


class HostCompileError(Untranslatable):
    """Host code a real build rejects (an undeclared name, a launch with the wrong arguments...)."""


@dataclass
class Value:
    """A translated expression: its Python text, whether it stands for a C pointer (a tensor), and its
    C type where the translator knows it (``int``, ``long``, ``unsigned long``, ``double``...)."""

    text: str
    pointer: bool = False
    ctype: str | None = None


def strip_namespace(name: str) -> str:
    return re.sub(r"^(?:::)?(?:(?:torch|at|std|c10)::)+(?:ScalarType::)?", "", name)


#: The C type of an integer or floating type name, as the usual arithmetic conversions see it
#: (``int64_t`` is ``long`` on the 64-bit Linux a build runs on).
CTYPES = {"int": "int", "int32_t": "int", "short": "int", "char": "int", "int16_t": "int", "int8_t": "int",
          "uint8_t": "int", "bool": "int", "unsigned": "unsigned", "unsigned int": "unsigned",
          "uint32_t": "unsigned", "long": "long", "long int": "long", "int64_t": "long", "ssize_t": "long",
          "ptrdiff_t": "long", "index_t": "long", "long long": "long long", "long long int": "long long",
          "size_t": "unsigned long", "std::size_t": "unsigned long", "uint64_t": "unsigned long",
          "unsigned long": "unsigned long", "unsigned long long": "unsigned long long", "float": "float",
          "double": "double"}
_RANK = ["int", "unsigned", "long", "unsigned long", "long long", "unsigned long long", "float", "double"]


def arithmetic_type(left: str | None, right: str | None) -> str | None:
    """The C type of ``left op right`` (the usual arithmetic conversions, on LP64), or None if unknown."""
    if left is None or right is None:
        return None
    return max(left, right, key=_RANK.index)


#: Scalar types an AT_DISPATCH macro's ``scalar_t`` can be, by ScalarType name: (C type in the
#: kernel instantiation, suffix of its extern-C name, torch dtype).
DISPATCH_TYPES = {"Float": ("float", "float", "torch.float32"), "Double": ("double", "double", "torch.float64"),
                  "Half": ("__half", "half", "torch.float16"), "BFloat16": ("__nv_bfloat16", "bfloat16", "torch.bfloat16")}
#: The C++ spellings of those element types in ``data_ptr<T>()`` and template arguments.
ELEMENT_TYPES = {"float": "Float", "double": "Double", "Half": "Half", "__half": "Half", "half": "Half",
                 "BFloat16": "BFloat16", "__nv_bfloat16": "BFloat16", "int": "Int", "int32_t": "Int", "long": "Long",
                 "int64_t": "Long", "bool": "Bool", "uint8_t": "Byte", "int8_t": "Char", "short": "Short", "int16_t": "Short"}


INT_TYPES = {"int", "long", "short", "unsigned", "signed", "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t",
              "int16_t", "int8_t", "uint8_t", "char", "ssize_t", "ptrdiff_t", "long long", "unsigned int",
              "unsigned long", "unsigned long long", "long int", "std::size_t", "std::int64_t", "index_t"}
FLOAT_TYPES = {"float", "double"}
DTYPES = {"kFloat": "float32", "kFloat32": "float32", "kDouble": "float64", "kFloat64": "float64",
           "kHalf": "float16", "kFloat16": "float16", "kBFloat16": "bfloat16", "kInt": "int32", "kInt32": "int32",
           "kLong": "int64", "kInt64": "int64", "kShort": "int16", "kInt16": "int16", "kByte": "uint8",
           "kUInt8": "uint8", "kChar": "int8", "kInt8": "int8", "kBool": "bool"}
CONSTANTS = {"__FILE__": '"kernel.cu"', "__LINE__": "0", "__func__": '"host"',
             "INFINITY": "math.inf", "NAN": "math.nan", "FLT_MAX": "3.4028234663852886e+38",
              "FLT_MIN": "1.1754943508222875e-38", "INT_MAX": "2147483647", "INT_MIN": "(-2147483648)",
              "M_PI": "math.pi"}
#: What ``cudaDeviceGetAttribute`` answers for the attributes a launch configuration reads (the
#: static shared-memory limit, not an opt-in maximum).
DEVICE_ATTRIBUTES = {"cudaDevAttrMaxSharedMemoryPerBlock": 49152, "cudaDevAttrMaxThreadsPerBlock": 1024,
                      "cudaDevAttrWarpSize": 32}
#: Torch compute a host function may call (``x.mean()``, ``torch::sum(x, {1})``): translated to the same torch
#: call, so the evaluation's rule on torch compute outside kernels judges it as it judges a native answer.
TORCH_COMPUTE = {"mean", "sum", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "sqrt", "rsqrt", "exp", "log",
                 "abs", "neg", "pow", "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_", "clamp", "relu",
                 "sigmoid", "tanh", "softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "t", "transpose",
                 "permute", "clone", "copy_", "fill_", "zero_", "squeeze", "unsqueeze", "flatten", "cpu", "norm",
                 "cumsum", "masked_fill", "where", "cat", "stack", "gelu", "conv2d", "linear", "sign", "floor", "ceil",
                 "var", "std", "view_as", "expand_as", "reshape_as"}
#: C++ words that cannot start an expression: reaching one means a statement form the translator does not know.
_KEYWORDS = {"const", "auto", "static", "struct", "class", "template", "typename", "using", "namespace", "typedef",
             "constexpr", "volatile", "unsigned", "signed", "void", "int", "float", "double", "long", "short", "char",
             "switch", "case", "goto", "try", "catch", "new", "delete", "operator", "this"}
#: Device guards: declarations of these types are dropped (there is one device).
GUARD_TYPES = {"OptionalCUDAGuard", "CUDAGuard", "cuda::OptionalCUDAGuard", "cuda::CUDAGuard", "DeviceGuard",
               "OptionalDeviceGuard", "cuda::CUDAStreamGuard", "NoGradGuard", "AutoGradMode"}
NO_OPS = {"cudaSetDevice", "cudaDeviceSynchronize", "C10_CUDA_KERNEL_LAUNCH_CHECK", "cudaStreamSynchronize", "printf",
          "AT_CUDA_CHECK", "C10_CUDA_CHECK", "CUDA_CHECK", "cudaCheckErrors"}


class TorchApiNames:
    """Names, calls, members and casts of host code (a mixin of the translator: it provides `take`,
    `at`, `args`, `expr`, `kernels`, `helpers` and `pointers`)."""

    kernels: dict[str, Any]
    helpers: frozenset[str]
    pointers: set[str]
    declared: set[str]
    types: dict[str, str]
    sequences: set[str]

    def name(self, raw: str) -> Value:
        name = strip_namespace(raw)
        if raw in ("true", "false"):
            return Value("True" if raw == "true" else "False")
        if raw in ("nullptr", "NULL"):
            return Value("None")
        if name in ("static_cast", "reinterpret_cast") and self.at("<"):
            self.take("<")
            words = []
            while not self.at(">"):
                words.append(self.take().text)
            self.take(">")
            self.take("(")
            value = self.expr()
            self.take(")")
            return self.cast(words, value)
        if (name in INT_TYPES or name in FLOAT_TYPES or name == "bool") and self.at("("):  # float(n): a cast
            self.take("(")
            value = self.expr()
            self.take(")")
            return self.cast([name], value)
        if name in _KEYWORDS:
            raise Untranslatable(f"a statement starting at '{raw}' in host code")
        if name == "get" and raw.startswith(("std::", "::std::")) and self.at("<"):  # std::get<0>(tuple)
            self.take("<")
            index = self.take().text
            self.take(">")
            self.take("(")
            value = self.expr()
            self.take(")")
            return Value(f"{value.text}[{index}]")
        if name in DTYPES:
            return Value(f"torch.{DTYPES[name]}")
        if "ScalarType::" in raw and name in DISPATCH_TYPES:
            return Value(DISPATCH_TYPES[name][2])
        if name in ("kCUDA", "kCPU"):
            return Value("KB_DEVICE")
        if name == "sizeof":
            self.take("(")
            words = []
            while not self.at(")"):
                words.append(self.take().text)
            self.take(")")
            size = {"float": 4, "double": 8, "int": 4, "half": 2, "__half": 2, "long": 8, "int64_t": 8,
                    "char": 1, "bool": 1, "short": 2, "float4": 16, "float2": 8}.get(" ".join(words))
            if size is None:
                raise Untranslatable(f"sizeof({' '.join(words)}) in host code")
            return Value(str(size))
        if name in self.kernels and self.at("<<<"):
            raise Untranslatable(f"a launch of '{name}' inside an expression")
        if name in ("cudaGetLastError", "cudaPeekAtLastError", "cudaDeviceSynchronize", "getCurrentCUDAStream",
                    "cuda::getCurrentCUDAStream") or name in NO_OPS:
            self.take("(")
            self.args(")")
            return Value("0" if "Error" in name or "Synchronize" in name else "None")
        if name in ("runtime_error", "invalid_argument", "out_of_range", "logic_error", "domain_error") and \
                raw.startswith(("std::", "::std::")) and self.at("("):
            self.take("(")
            args = self.args(")")
            return Value(f"str({args[0].text})" if args else '""')
        if name == "cudaSuccess":
            return Value("0")
        if name in CONSTANTS:
            return Value(CONSTANTS[name])
        if name == "cudaGetErrorString":
            self.take("(")
            self.args(")")
            return Value('"CUDA error"')
        if name == "AT_ERROR" and self.at("("):  # raise, with the message
            self.take("(")
            args = self.args(")")
            return Value(f"kb_check(False, {', '.join(a.text for a in args)})")
        if name in ("TORCH_CHECK", "AT_ASSERTM", "TORCH_INTERNAL_ASSERT", "TORCH_CHECK_NOT_IMPLEMENTED"):
            self.take("(")
            args = self.args(")")
            return Value(f"kb_check({', '.join(a.text for a in args)})")
        if name in ("empty", "zeros", "ones"):
            self.take("(")
            args = self.args(")")
            return Value(f"kb_{name}({', '.join(a.text for a in args)})")
        if name == "full":
            self.take("(")
            args = self.args(")")
            return Value(f"kb_full({', '.join(a.text for a in args)})")
        if name in ("empty_like", "zeros_like", "ones_like"):
            self.take("(")
            args = self.args(")")
            return Value(f"kb_like({name.split('_')[0]!r}, {', '.join(a.text for a in args)})")
        if name in ("dtype", "TensorOptions", "device") and self.at("("):
            self.take("(")
            args = self.args(")")
            if name == "TensorOptions":
                return Value("KbOptions()")
            key = "dtype" if name == "dtype" else "device"
            return Value(f"KbOptions({key}={args[0].text})" if args else "KbOptions()")
        if name in ("Device",) and self.at("("):
            self.take("(")
            self.args(")")
            return Value("KB_DEVICE")
        if name in ("min", "max", "fmin", "fmax", "fminf", "fmaxf") and not raw.startswith(("torch::", "at::")):
            template: list[str] = []
            if self.at("<"):
                self.take("<")
                while not self.at(">"):
                    template.append(self.take().text)
                self.take(">")
            self.take("(")
            args = self.args(")")
            function = "min" if "min" in name else "max"
            if template:
                return self.cast(template, Value(f"{function}({', '.join(a.text for a in args)})"))
            types = [a.ctype for a in args]
            if raw.startswith(("std::", "::std::")) and len(args) == 2 and None not in types and types[0] != types[1]:
                raise HostCompileError(f"no matching function for call to 'std::{function}({types[0]}, {types[1]})': "
                                       f"its two arguments have different types (write std::{function}<int64_t>(...) "
                                       "or cast one)")
            ctype = types[0] if len(set(types)) == 1 else None
            return Value(f"{function}({', '.join(a.text for a in args)})", ctype=ctype)
        if name in ("ceil", "floor", "sqrt", "ceilf", "floorf", "sqrtf", "log2", "pow", "exp", "log", "abs", "fabs"):
            self.take("(")
            args = self.args(")")
            joined = ", ".join(a.text for a in args)
            base = name.rstrip("f") if name != "abs" else "abs"
            if base in ("ceil", "floor"):
                return Value(f"float(math.{base}({joined}))")
            if base in ("abs", "fabs"):
                return Value(f"abs({joined})")
            return Value(f"math.{base}({joined})")
        if name in ("make_tuple", "tuple", "vector") and self.at("("):
            self.take("(")
            args = self.args(")")
            return Value("(" + ", ".join(a.text for a in args) + ("," if len(args) == 1 else "") + ")")
        if name == "dim3" and self.at("("):
            self.take("(")
            args = self.args(")")
            return Value("(" + ", ".join(a.text for a in args) + ("," if len(args) == 1 else "") + ")")
        if raw in self.helpers and self.at("("):
            self.take("(")
            args = self.args(")")
            return Value(f"kb_host_{raw}({', '.join(a.text for a in args)})")
        if "::" in name:
            raise Untranslatable(f"'{raw}' in host code")
        if raw != name and name in TORCH_COMPUTE and self.at("("):  # torch::mean(x, ...)
            self.take("(")
            args = self.args(")")
            return Value(f"torch.{name}({', '.join(a.text for a in args)})")
        if name.startswith("cublas") and name not in self.declared:
            raise Untranslatable(f"the cuBLAS call '{raw}' (library compute in host code)")
        if self.at("(") and name not in self.kernels:
            raise Untranslatable(f"the call of '{raw}' in host code (only torch's allocation functions and the "
                                 "kernel launches are translated)")
        if name not in self.declared and name not in self.kernels:
            raise HostCompileError(f"identifier '{name}' is undefined in host code")
        return Value(name, name in self.pointers, self.types.get(name))


    def member(self, value: Value, member: str) -> Value:
        template: list[str] = []
        if self.at("<") and member in ("data_ptr", "data", "mutable_data_ptr", "const_data_ptr", "item"):
            self.take("<")
            while not self.at(">"):
                template.append(self.take().text)
            self.take(">")
        args = self.args(")") if self.at("(") and self.take("(") else None
        joined = ", ".join(a.text for a in args or [])
        if member in ("data_ptr", "data", "mutable_data_ptr", "const_data_ptr"):
            element = ELEMENT_TYPES.get(strip_namespace(" ".join(template)).replace("c10::", ""))
            if element is None:
                return Value(value.text, True)
            return Value(f"kb_data({value.text}, {element!r})", True)
        if member in ("type", "scalar_type") and args is not None:
            return Value(f"{value.text}.dtype")
        if member in ("push_back", "emplace_back") and args is not None:
            return Value(f"{value.text}.append({joined})")
        if member == "options":
            return Value(f"kb_options({value.text})")
        if member in ("dtype", "device") and args is not None:
            if value.text.startswith("kb_options(") or value.text.startswith("KbOptions("):
                return Value(f"{value.text}.{member}({joined})")
            return Value(f"{value.text}.{member}")
        if member == "scalar_type":
            return Value(f"{value.text}.dtype")
        if member == "sizes":
            return Value(f"tuple({value.text}.shape)")
        if member == "vec" and args == []:
            return Value(f"list({value.text})")
        if member == "size" and args == [] and (value.text.startswith(("tuple(", "list(")) or
                                                value.text in self.sequences):  # IntArrayRef/vector::size()
            return Value(f"len({value.text})", ctype="unsigned long")
        if member in ("begin", "end") and args == [] and value.text in self.sequences:  # iterators as indices
            return Value("0" if member == "begin" else f"len({value.text})", ctype="long")
        if member == "erase" and args is not None and len(args) == 1 and value.text in self.sequences:
            return Value(f"{value.text}.pop({args[0].text})")
        if member == "defined" and args == []:
            return Value(f"({value.text} is not None)")
        if member == "item" and args is not None:
            return Value(f"{value.text}.item()")
        if member in TORCH_COMPUTE and args is not None:
            return Value(f"{value.text}.{member}({joined})")
        if member == "strides":
            return Value(f"{value.text}.stride()")
        if member == "index" and args == [] and value.text.endswith(".device"):  # the one device
            return Value("0", ctype="int")
        if member == "is_cuda":
            return Value(f"kb_on_device({value.text})")
        if member == "to" and args is not None and len(args) == 1:
            return Value(f"{value.text}.to({joined})")
        if member in ("numel", "size", "stride", "dim", "contiguous", "is_contiguous", "element_size", "ndimension"):
            name = "dim" if member == "ndimension" else member
            ctype = "long" if member in ("numel", "size", "stride", "dim", "ndimension") else None
            return Value(f"{value.text}.{name}({joined})", ctype=ctype)
        if member in ("view", "reshape", "expand", "permute"):
            items = [a.text for a in args or []]
            if len(items) == 1 and items[0].startswith("["):
                return Value(f"{value.text}.{member}(tuple({items[0]}))")
            return Value(f"{value.text}.{member}({joined})")
        if member in ("x", "y", "z") and args is None:
            index = "xyz".index(member)
            return Value(f"{value.text}[{index}]")
        raise Untranslatable(f"the member '.{member}' in host code")

    def cast(self, words: list[str], value: Value) -> Value:
        if "*" in words:
            return Value(value.text, True)
        base = " ".join(w for w in words if w != "const")
        base = strip_namespace(base)
        if base in FLOAT_TYPES:
            return Value(f"float({value.text})", ctype=base)
        if base == "bool":
            return Value(f"bool({value.text})", ctype="int")
        if base in INT_TYPES or base.replace("unsigned ", "") in INT_TYPES:
            return Value(f"int({value.text})", ctype=CTYPES.get(base))
        raise Untranslatable(f"the cast to '{base}' in host code")

