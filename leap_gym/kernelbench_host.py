"""C++ host functions of a KernelBench answer (``load_inline``'s ``torch::Tensor`` functions) to Python.

KernelBench answers launch their ``__global__`` kernels from host functions written against torch's
C++ API. This module translates the subset such functions use into the native format's Python, where
the translation is exact:

- declarations (``auto``, ``int``/``int64_t``/``size_t``..., ``float``/``double``, pointers,
  ``torch::Tensor``, ``dim3``), assignments, ``if``/``else``, ``for``, ``while``, ``return``;
- C arithmetic: ``/`` and ``%`` on two integers truncate toward zero (`C_HELPERS`), casts
  (``(int)``, ``static_cast<float>``) truncate or convert as C does, ``?:``, ``&&``, ``||``, ``!``;
- tensors: ``data_ptr<T>()`` (pointer arithmetic ``p + k`` becomes a view from element ``k``),
  ``numel``, ``size``, ``sizes``, ``stride``, ``dim``, ``options()`` (and ``.dtype(...)``/``.device(...)``),
  ``torch::empty``/``zeros``/``ones``/``full`` and their ``_like`` forms, ``contiguous``, ``view``,
  ``reshape``, ``is_cuda``, ``TORCH_CHECK``;
- launches ``k<<<grid, block[, shared[, stream]]>>>(args)`` become ``kernels.k(grid, block, *args,
  shared_mem=shared)``, scalar arguments converted to the kernel parameter's type as C converts them;
- ``cudaDeviceSynchronize``/``cudaGetLastError`` and stream getters (launches are synchronous here).

Anything else raises `Untranslatable` naming the construct; the caller reports it, and the native
format (or the ``cuda`` backend's real build) remains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from leap_gym.kernels import KernelSignature


class Untranslatable(ValueError):
    """A host construct outside the exact subset; the message names it."""


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


def kb_offset(tensor, offset):
    return tensor.view(-1)[offset:]
'''

_INT_TYPES = {"int", "long", "short", "unsigned", "signed", "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t",
              "int16_t", "int8_t", "uint8_t", "char", "ssize_t", "ptrdiff_t", "long long", "unsigned int",
              "unsigned long", "unsigned long long", "long int", "std::size_t", "std::int64_t", "index_t"}
_FLOAT_TYPES = {"float", "double"}
_DTYPES = {"kFloat": "float32", "kFloat32": "float32", "kDouble": "float64", "kFloat64": "float64",
           "kHalf": "float16", "kFloat16": "float16", "kBFloat16": "bfloat16", "kInt": "int32", "kInt32": "int32",
           "kLong": "int64", "kInt64": "int64", "kShort": "int16", "kInt16": "int16", "kByte": "uint8",
           "kUInt8": "uint8", "kChar": "int8", "kInt8": "int8", "kBool": "bool"}
_CONSTANTS = {"INFINITY": "math.inf", "NAN": "math.nan", "FLT_MAX": "3.4028234663852886e+38",
              "FLT_MIN": "1.1754943508222875e-38", "INT_MAX": "2147483647", "INT_MIN": "(-2147483648)",
              "M_PI": "math.pi"}
#: What ``cudaDeviceGetAttribute`` answers for the attributes a launch configuration reads (the
#: static shared-memory limit, not an opt-in maximum).
_DEVICE_ATTRIBUTES = {"cudaDevAttrMaxSharedMemoryPerBlock": 49152, "cudaDevAttrMaxThreadsPerBlock": 1024,
                      "cudaDevAttrWarpSize": 32}
_TYPE_WORDS = {"const", "constexpr", "static", "volatile", "unsigned", "signed", "__restrict__", "register"}
_NO_OPS = {"cudaDeviceSynchronize", "C10_CUDA_KERNEL_LAUNCH_CHECK", "cudaStreamSynchronize", "printf",
           "AT_CUDA_CHECK", "C10_CUDA_CHECK", "CUDA_CHECK", "cudaCheckErrors"}
_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:0[xX][0-9a-fA-F]+|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[fFuUlL]*)
  | (?P<str>"(?:\\.|[^"\\\n])*")
  | (?P<chr>'(?:\\.|[^'\\\n])*')
  | (?P<id>(?:::)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)
  | (?P<op><<<|>>>|<<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|[-+*/%&|^!~<>=?:;,.(){}\[\]\#])
""", re.VERBOSE)


@dataclass
class _Tok:
    kind: str
    text: str


def tokenize(code: str) -> list[_Tok]:
    tokens, pos = [], 0
    while pos < len(code):
        match = _TOKEN_RE.match(code, pos)
        if match is None:
            raise Untranslatable(f"unexpected character {code[pos]!r} in host code")
        pos = match.end()
        if match.lastgroup != "ws":
            text = re.sub(r"\s+", "", match.group()) if match.lastgroup == "id" else match.group()
            tokens.append(_Tok(match.lastgroup or "", text))
    return tokens


@dataclass
class _Value:
    text: str
    pointer: bool = False


@dataclass
class HostFunction:
    """One translated host function: its name, parameter names and Python body lines."""

    name: str
    params: list[str]
    body: list[str] = field(default_factory=list)


_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
           ("+", "-"), ("*", "/", "%")]


def _strip_namespace(name: str) -> str:
    return re.sub(r"^(?:::)?(?:torch|at|std|c10)::", "", name)


class _Translator:
    def __init__(self, tokens: list[_Tok], kernels: dict[str, KernelSignature], pointers: set[str],
                 helpers: frozenset[str] = frozenset()):
        self.toks = tokens
        self.i = 0
        self.helpers = helpers
        self.kernels = kernels
        self.pointers = set(pointers)
        self.lines: list[str] = []
        self.counter = 0

    # -- token helpers
    def peek(self, k: int = 0) -> _Tok:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else _Tok("eof", "")

    def take(self, text: str | None = None) -> _Tok:
        tok = self.peek()
        if text is not None and tok.text != text:
            raise Untranslatable(f"expected '{text}' in host code, found '{tok.text or 'end of function'}'")
        self.i += 1
        return tok

    def at(self, *texts: str) -> bool:
        return self.peek().text in texts

    # -- statements
    def block(self, indent: int) -> None:
        self.take("{")
        start = len(self.lines)
        while not self.at("}"):
            if self.peek().kind == "eof":
                raise Untranslatable("unbalanced braces in a host function")
            self.statement(indent)
        self.take("}")
        if len(self.lines) == start:
            self.emit(indent, "pass")

    def body_of(self, indent: int) -> None:
        start = len(self.lines)
        if self.at("{"):
            self.block(indent)
        else:
            self.statement(indent)
        if len(self.lines) == start:
            self.emit(indent, "pass")

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def statement(self, indent: int) -> None:
        tok = self.peek()
        if tok.text == ";":
            self.take()
        elif tok.text == "{":
            self.block(indent)
        elif tok.text == "if":
            self.take()
            self.take("(")
            cond = self.expr().text
            self.take(")")
            self.emit(indent, f"if {cond}:")
            self.body_of(indent + 1)
            if self.at("else"):
                self.take()
                self.emit(indent, "else:")
                self.body_of(indent + 1)
        elif tok.text == "for":
            self.for_loop(indent)
        elif tok.text == "while":
            self.take()
            self.take("(")
            cond = self.expr().text
            self.take(")")
            self.emit(indent, f"while {cond}:")
            self.body_of(indent + 1)
        elif tok.text == "return":
            self.take()
            if self.at(";"):
                self.emit(indent, "return None")
            else:
                self.emit(indent, f"return {self.expr().text}")
            self.take(";")
        elif tok.text in ("break", "continue"):
            self.take()
            self.take(";")
            self.emit(indent, tok.text)
        elif tok.text == "throw":
            self.take()
            value = self.expr().text
            self.take(";")
            self.emit(indent, f"raise RuntimeError(str({value}))")
        elif self.is_declaration():
            self.declaration(indent)
            self.take(";")
        else:
            self.simple(indent)
            self.take(";")

    def for_loop(self, indent: int) -> None:
        self.take("for")
        self.take("(")
        if self.is_declaration():
            self.declaration(indent)
        elif not self.at(";"):
            self.simple(indent)
        self.take(";")
        cond = "True" if self.at(";") else self.expr().text
        self.take(";")
        step_start = self.i
        depth = 0
        while not (self.at(")") and depth == 0):
            depth += self.at("(") - self.at(")")
            self.take()
        step_tokens = self.toks[step_start:self.i]
        self.take(")")
        if any(t.text == "continue" for t in self.toks[self.i:self._block_end()]):
            raise Untranslatable("'continue' inside a host for loop")
        self.emit(indent, f"while {cond}:")
        self.body_of(indent + 1)
        if step_tokens:
            inner = _Translator(step_tokens + [_Tok("op", ";")], self.kernels, self.pointers, self.helpers)
            inner.simple(indent + 1)
            self.lines += inner.lines

    def _block_end(self) -> int:
        depth, j = 0, self.i
        while j < len(self.toks):
            depth += (self.toks[j].text == "{") - (self.toks[j].text == "}")
            j += 1
            if depth == 0 and self.toks[j - 1].text in ("}", ";"):
                break
        return j

    def is_declaration(self) -> bool:
        j = self.i
        while self._tok(j).text in _TYPE_WORDS:
            j += 1
        if self._tok(j).kind != "id" or self._tok(j).text in ("return", "if", "for", "while", "sizeof"):
            return False
        j += 1
        if self._tok(j).text == "<":  # template arguments: std::vector<int64_t>
            depth = 0
            while j < len(self.toks):
                depth += (self._tok(j).text == "<") - (self._tok(j).text == ">") - 2 * (self._tok(j).text == ">>")
                j += 1
                if depth <= 0:
                    break
        while self._tok(j).text in ("*", "&", "&&", "const"):
            j += 1
        return self._tok(j).kind == "id" and self._tok(j + 1).text in ("=", ";", "(", "{", ",", "[")

    def _tok(self, j: int) -> _Tok:
        return self.toks[j] if j < len(self.toks) else _Tok("eof", "")

    def declaration(self, indent: int) -> None:
        words = []
        while self.at(*_TYPE_WORDS):
            words.append(self.take().text)
        words.append(self.take().text)  # the type's name
        while self.peek().kind == "id" and self.peek(1).kind == "id":  # long long, unsigned int
            words.append(self.take().text)
        if self.at("<"):
            depth = 0
            while True:
                text = self.take().text
                depth += (text == "<") - (text == ">") - 2 * (text == ">>")
                if depth <= 0:
                    break
        while self.at("*", "&", "&&", "const"):
            words.append(self.take().text)
        base = _strip_namespace(" ".join(w for w in words if w not in _TYPE_WORDS - {"unsigned", "signed"}
                                         and w not in ("*", "&", "&&")))
        pointer = "*" in words
        while True:
            name = self.take().text
            if self.at("["):
                raise Untranslatable(f"the host array '{name}'")
            if self.at("=", "(", "{"):
                opener = self.take().text
                if opener == "=":
                    value = self.expr()
                else:
                    closer = ")" if opener == "(" else "}"
                    args = self.args(closer)
                    value = _Value("(" + ", ".join(a.text for a in args) + ("," if len(args) == 1 else "") + ")")
                    if base != "dim3":
                        value = args[0] if len(args) == 1 else value
                self.emit(indent, f"{name} = {self.convert(base, pointer, value, name)}")
            elif base == "dim3":
                self.emit(indent, f"{name} = (1, 1, 1)")
            else:
                self.emit(indent, f"{name} = None")
            if not self.at(","):
                break
            self.take(",")

    def convert(self, base: str, pointer: bool, value: _Value, name: str) -> str:
        if pointer or value.pointer:
            self.pointers.add(name)
            return value.text
        self.pointers.discard(name)
        if base in _INT_TYPES or base.replace("unsigned ", "") in _INT_TYPES:
            return f"int({value.text})"
        if base in _FLOAT_TYPES:
            return f"float({value.text})"
        if base == "bool":
            return f"bool({value.text})"
        return value.text

    def simple(self, indent: int) -> None:
        """An expression statement: a launch, an assignment, ++/--, or a call."""
        if self.peek().kind == "id" and self.peek(1).text == "<<<":
            self.emit(indent, self.launch())
            return
        if self.peek().kind == "id" and self.peek(1).text == "<" and self.peek().text in self.kernels:
            raise Untranslatable(f"the templated launch of '{self.peek().text}'")
        if self.at("++", "--"):
            op = self.take().text
            target = self.expr().text
            self.emit(indent, f"{target} {op[0]}= 1")
            return
        if self.at("cudaDeviceGetAttribute"):
            self.take()
            self.take("(")
            self.take("&")
            target = self.take().text
            self.take(",")
            attribute = _strip_namespace(self.take().text)
            if self.at(","):
                self.take(",")
            self.args(")")
            if attribute not in _DEVICE_ATTRIBUTES:
                raise Untranslatable(f"cudaDeviceGetAttribute({attribute})")
            self.emit(indent, f"{target} = {_DEVICE_ATTRIBUTES[attribute]}")
            return
        target = self.expr()
        if self.at("++", "--"):
            self.emit(indent, f"{target.text} {self.take().text[0]}= 1")
        elif self.at("="):
            self.take()
            value = self.expr()
            if value.pointer:
                self.pointers.add(target.text)
            self.emit(indent, f"{target.text} = {value.text}")
        elif self.peek().text.endswith("=") and self.peek().text in ("+=", "-=", "*=", "/=", "%=", "<<=", ">>=",
                                                                        "&=", "|=", "^="):
            op = self.take().text[:-1]
            value = self.expr().text
            combined = self.binary(op, target, _Value(f"({value})"))
            self.emit(indent, f"{target.text} = {combined.text}")
        elif target.text:
            self.emit(indent, target.text)

    def launch(self) -> str:
        name = self.take().text
        if name not in self.kernels:
            raise Untranslatable(f"the launch of '{name}', which is not an extern-C-able __global__ kernel of the "
                                 "source (templated kernels are not translated)")
        self.take("<<<")
        config = []
        while True:
            config.append(self.expr(no_shift=True).text)
            if self.at(">>>"):
                break
            self.take(",")
        self.take(">>>")
        self.take("(")
        args = self.args(")")
        params = self.kernels[name].params
        if len(args) != len(params):
            raise Untranslatable(f"the launch of '{name}' passes {len(args)} arguments to {len(params)} parameters")
        texts = []
        for arg, param in zip(args, params):
            if param.pointer:
                texts.append(arg.text)
            elif param.type in ("float", "double"):
                texts.append(f"float({arg.text})")
            elif param.type == "bool":
                texts.append(f"bool({arg.text})")
            else:
                texts.append(f"int({arg.text})")
        shared = f", shared_mem=int({config[2]})" if len(config) > 2 else ""
        return f"kernels.{name}({config[0]}, {config[1]}, {', '.join(texts)}{shared})".replace(", , ", ", ")

    def args(self, closer: str) -> list[_Value]:
        out = []
        while not self.at(closer):
            out.append(self.expr())
            if not self.at(closer):
                self.take(",")
        self.take(closer)
        return out

    # -- expressions (precedence climbing)
    def expr(self, no_shift: bool = False) -> _Value:
        cond = self.binary_level(0, no_shift)
        if self.at("?"):
            self.take()
            yes = self.expr(no_shift)
            self.take(":")
            no = self.expr(no_shift)
            return _Value(f"({yes.text} if {cond.text} else {no.text})", yes.pointer or no.pointer)
        return cond

    def binary_level(self, level: int, no_shift: bool) -> _Value:
        if level == len(_BINARY):
            return self.unary()
        left = self.binary_level(level + 1, no_shift)
        while self.peek().text in _BINARY[level] and not (no_shift and self.peek().text == ">>"):
            op = self.take().text
            right = self.binary_level(level + 1, no_shift)
            left = self.binary(op, left, right)
        return left

    def binary(self, op: str, left: _Value, right: _Value) -> _Value:
        if op in ("+", "-") and (left.pointer or right.pointer):
            if op == "-" or right.pointer:
                raise Untranslatable("pointer arithmetic other than pointer + offset")
            return _Value(f"kb_offset({left.text}, {right.text})", True)
        if op == "/":
            return _Value(f"kb_div({left.text}, {right.text})")
        if op == "%":
            return _Value(f"kb_mod({left.text}, {right.text})")
        python = {"&&": "and", "||": "or"}.get(op, op)
        return _Value(f"({left.text} {python} {right.text})")

    def unary(self) -> _Value:
        tok = self.peek()
        if tok.text in ("-", "+", "~"):
            self.take()
            return _Value(f"({tok.text}{self.unary().text})")
        if tok.text == "!":
            self.take()
            return _Value(f"(not {self.unary().text})")
        if tok.text in ("*", "&"):
            raise Untranslatable(f"the unary '{tok.text}' (dereference or address-of) in host code")
        if tok.text == "(" and self._is_cast():
            self.take()
            words = []
            while not self.at(")"):
                words.append(self.take().text)
            self.take(")")
            return self.cast(words, self.unary())
        return self.postfix(self.primary())

    def _is_cast(self) -> bool:
        j = self.i + 1
        words = []
        while self._tok(j).text not in (")", "eof"):
            words.append(self._tok(j).text)
            j += 1
        if not words:
            return False
        names = [w for w in words if w not in ("*", "const", "unsigned", "signed")]
        return bool(names) and all(_strip_namespace(w) in _INT_TYPES | _FLOAT_TYPES | {"bool", "void", "half",
                                                                                      "__half", "scalar_t"}
                                   or w == "long" for w in names) or "*" in words and len(names) == 1

    def cast(self, words: list[str], value: _Value) -> _Value:
        if "*" in words:
            return _Value(value.text, True)
        base = " ".join(w for w in words if w != "const")
        base = _strip_namespace(base)
        if base in _FLOAT_TYPES:
            return _Value(f"float({value.text})")
        if base == "bool":
            return _Value(f"bool({value.text})")
        if base in _INT_TYPES or base.replace("unsigned ", "") in _INT_TYPES:
            return _Value(f"int({value.text})")
        raise Untranslatable(f"the cast to '{base}' in host code")

    def primary(self) -> _Value:
        tok = self.take()
        if tok.kind == "num":
            text = tok.text.rstrip("fFuUlL") if not tok.text.lower().startswith("0x") else tok.text.rstrip("uUlL")
            return _Value(text)
        if tok.kind == "str":
            parts = [tok.text]
            while self.peek().kind == "str":  # adjacent literals concatenate, in C as in Python
                parts.append(self.take().text)
            return _Value(" ".join(parts))
        if tok.text == "(":
            inner = self.expr()
            self.take(")")
            return _Value(f"({inner.text})", inner.pointer)
        if tok.text == "{":
            items = self.args("}")
            return _Value("[" + ", ".join(i.text for i in items) + "]")
        if tok.kind != "id":
            raise Untranslatable(f"'{tok.text or 'end of function'}' where a value was expected in host code")
        return self.name(tok.text)

    def name(self, raw: str) -> _Value:
        name = _strip_namespace(raw)
        if raw in ("true", "false"):
            return _Value("True" if raw == "true" else "False")
        if raw in ("nullptr", "NULL"):
            return _Value("None")
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
        if name in _DTYPES:
            return _Value(f"torch.{_DTYPES[name]}")
        if name in ("kCUDA", "kCPU"):
            return _Value("KB_DEVICE")
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
            return _Value(str(size))
        if name in self.kernels and self.at("<<<"):
            raise Untranslatable(f"a launch of '{name}' inside an expression")
        if name in ("cudaGetLastError", "cudaPeekAtLastError", "cudaDeviceSynchronize", "getCurrentCUDAStream",
                    "cuda::getCurrentCUDAStream") or name in _NO_OPS:
            self.take("(")
            self.args(")")
            return _Value("0" if "Error" in name or "Synchronize" in name else "None")
        if name == "cudaSuccess":
            return _Value("0")
        if name in _CONSTANTS:
            return _Value(_CONSTANTS[name])
        if name == "cudaGetErrorString":
            self.take("(")
            self.args(")")
            return _Value('"CUDA error"')
        if name in ("TORCH_CHECK", "AT_ASSERTM", "TORCH_INTERNAL_ASSERT"):
            self.take("(")
            args = self.args(")")
            return _Value(f"kb_check({', '.join(a.text for a in args)})")
        if name in ("empty", "zeros", "ones"):
            self.take("(")
            args = self.args(")")
            return _Value(f"kb_{name}({', '.join(a.text for a in args)})")
        if name == "full":
            self.take("(")
            args = self.args(")")
            return _Value(f"kb_full({', '.join(a.text for a in args)})")
        if name in ("empty_like", "zeros_like", "ones_like"):
            self.take("(")
            args = self.args(")")
            return _Value(f"kb_like({name.split('_')[0]!r}, {', '.join(a.text for a in args)})")
        if name in ("dtype", "TensorOptions", "device") and self.at("("):
            self.take("(")
            args = self.args(")")
            if name == "TensorOptions":
                return _Value("KbOptions()")
            key = "dtype" if name == "dtype" else "device"
            return _Value(f"KbOptions({key}={args[0].text})" if args else "KbOptions()")
        if name in ("Device",) and self.at("("):
            self.take("(")
            self.args(")")
            return _Value("KB_DEVICE")
        if name in ("min", "max", "fmin", "fmax", "fminf", "fmaxf"):
            self.take("(")
            args = self.args(")")
            return _Value(f"{'min' if 'min' in name else 'max'}({', '.join(a.text for a in args)})")
        if name in ("ceil", "floor", "sqrt", "ceilf", "floorf", "sqrtf", "log2", "pow", "exp", "log", "abs", "fabs"):
            self.take("(")
            args = self.args(")")
            joined = ", ".join(a.text for a in args)
            base = name.rstrip("f") if name != "abs" else "abs"
            if base in ("ceil", "floor"):
                return _Value(f"float(math.{base}({joined}))")
            if base in ("abs", "fabs"):
                return _Value(f"abs({joined})")
            return _Value(f"math.{base}({joined})")
        if name in ("make_tuple", "tuple", "vector") and self.at("("):
            self.take("(")
            args = self.args(")")
            return _Value("(" + ", ".join(a.text for a in args) + ("," if len(args) == 1 else "") + ")")
        if name == "dim3" and self.at("("):
            self.take("(")
            args = self.args(")")
            return _Value("(" + ", ".join(a.text for a in args) + ("," if len(args) == 1 else "") + ")")
        if raw in self.helpers and self.at("("):
            self.take("(")
            args = self.args(")")
            return _Value(f"kb_host_{raw}({', '.join(a.text for a in args)})")
        if "::" in name:
            raise Untranslatable(f"'{raw}' in host code")
        if self.at("(") and name not in self.kernels:
            raise Untranslatable(f"the call of '{raw}' in host code (only torch's allocation functions and the "
                                 "kernel launches are translated)")
        return _Value(name, name in self.pointers)

    def postfix(self, value: _Value) -> _Value:
        while True:
            if self.at(".", "->"):
                self.take()
                member = self.take().text
                value = self.member(value, member)
            elif self.at("["):
                self.take()
                index = self.expr()
                self.take("]")
                if value.pointer:
                    raise Untranslatable("indexing a pointer in host code")
                value = _Value(f"{value.text}[{index.text}]")
            else:
                return value

    def member(self, value: _Value, member: str) -> _Value:
        template: list[str] = []
        if self.at("<") and member in ("data_ptr", "data", "mutable_data_ptr", "const_data_ptr", "item"):
            self.take("<")
            while not self.at(">"):
                template.append(self.take().text)
            self.take(">")
        args = self.args(")") if self.at("(") and self.take("(") else None
        joined = ", ".join(a.text for a in args or [])
        if member in ("data_ptr", "data", "mutable_data_ptr", "const_data_ptr"):
            return _Value(value.text, True)
        if member == "options":
            return _Value(f"kb_options({value.text})")
        if member in ("dtype", "device") and args is not None:
            if value.text.startswith("kb_options(") or value.text.startswith("KbOptions("):
                return _Value(f"{value.text}.{member}({joined})")
            return _Value(f"{value.text}.{member}")
        if member == "scalar_type":
            return _Value(f"{value.text}.dtype")
        if member == "sizes":
            return _Value(f"tuple({value.text}.shape)")
        if member == "strides":
            return _Value(f"{value.text}.stride()")
        if member == "is_cuda":
            return _Value(f"kb_on_device({value.text})")
        if member == "to" and args is not None and len(args) == 1:
            return _Value(f"{value.text}.to({joined})")
        if member in ("numel", "size", "stride", "dim", "contiguous", "is_contiguous", "element_size", "ndimension"):
            name = "dim" if member == "ndimension" else member
            return _Value(f"{value.text}.{name}({joined})")
        if member in ("view", "reshape", "expand", "permute"):
            items = [a.text for a in args or []]
            if len(items) == 1 and items[0].startswith("["):
                return _Value(f"{value.text}.{member}(tuple({items[0]}))")
            return _Value(f"{value.text}.{member}({joined})")
        if member in ("x", "y", "z") and args is None:
            index = "xyz".index(member)
            return _Value(f"{value.text}[{index}]")
        raise Untranslatable(f"the member '.{member}' in host code")


def translate_declarations(text: str, kernels: dict[str, KernelSignature]) -> list[str]:
    """Top-level declarations (``const int BLOCK = 256;``) as Python lines."""
    translator = _Translator(tokenize("{" + text + "}"), kernels, set())
    translator.block(0)
    return [line for line in translator.lines if line != "pass"]


def translate_function(header: str, body: str, kernels: dict[str, KernelSignature],
                       helpers: frozenset[str] = frozenset()) -> HostFunction:
    """Translate one host function (its header text and ``{...}`` body text) to Python lines.

    Args:
        header: the text before the body (``torch::Tensor add(torch::Tensor a, torch::Tensor b)``).
        body: the ``{...}`` body.
        kernels: the kernels it may launch, by name.
        helpers: names of other host functions it may call (translated as ``kb_host_<name>``).
    """
    match = re.search(r"([A-Za-z_]\w*)\s*\(([^()]*)\)\s*$", header.strip())
    if match is None:
        raise Untranslatable(f"cannot read the host function header '{header.strip()[:80]}'")
    params, pointers = [], set()
    for raw in [p for p in match.group(2).split(",") if p.strip() and p.strip() != "void"]:
        raw = raw.split("=")[0]
        words = re.findall(r"[A-Za-z_][\w:]*|\*", raw)
        if not words:
            raise Untranslatable(f"cannot read the parameter '{raw.strip()}'")
        params.append(words[-1])
        if "*" in words:
            pointers.add(words[-1])
    translator = _Translator(tokenize(body), kernels, pointers, helpers)
    translator.block(0)
    return HostFunction(match.group(1), params, translator.lines)
