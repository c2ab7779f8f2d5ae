"""C++ host functions of a KernelBench answer (``load_inline``'s ``torch::Tensor`` functions) to Python.

KernelBench answers launch their ``__global__`` kernels from host functions written against torch's
C++ API. This module translates the subset such functions use into the native format's Python, where
the translation is exact:

- declarations (``auto``, ``int``/``long long``/``int64_t``/``size_t``..., ``float``/``double``, pointers,
  ``torch::Tensor``, ``dim3``, ``std::vector``), assignments, ``if``/``else``, ``for`` (and range-for),
  ``while``, ``do``/``while``, ``return``; device guards are dropped;
- C arithmetic: ``/`` and ``%`` on two integers truncate toward zero (`C_HELPERS`), casts
  (``(int)``, ``static_cast<float>``) truncate or convert as C does, ``?:``, ``&&``, ``||``, ``!``;
- tensors: ``data_ptr<T>()`` (pointer arithmetic ``p + k`` becomes a view from element ``k``),
  ``numel``, ``size``, ``sizes``, ``stride``, ``dim``, ``options()`` (and ``.dtype(...)``/``.device(...)``),
  ``torch::empty``/``zeros``/``ones``/``full`` and their ``_like`` forms, ``contiguous``, ``view``,
  ``reshape``, ``is_cuda``, ``TORCH_CHECK``;
- launches ``k<<<grid, block[, shared[, stream]]>>>(args)`` become ``kernels.k(grid, block, *args,
  shared_mem=shared)``, scalar arguments converted to the kernel parameter's type as C converts them;
- ``cudaDeviceSynchronize``/``cudaGetLastError`` and stream getters (launches are synchronous here);
- ``AT_DISPATCH_FLOATING_TYPES*`` and templated launches (`leap_gym.kernelbench.templates`).

Host code a real build rejects raises `HostCompileError` (an undeclared name, a launch with the wrong
number of arguments or a tensor for a pointer, ``std::min`` of two types: C types are tracked where
known). Anything else outside the subset raises `Untranslatable` naming the construct.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from leap_gym.evaluation.kernels import KernelSignature
from leap_gym.kernelbench.names import (
    CONSTANTS,
    CTYPES,
    DEVICE_ATTRIBUTES,
    DTYPES,
    FLOAT_TYPES,
    GUARD_TYPES,
    INT_TYPES,
    HostCompileError,
    TorchApiNames,
    Untranslatable,
    Value,
    arithmetic_type,
    strip_namespace,
)
from leap_gym.kernelbench.templates import TemplateStatements, split_params

_TYPE_WORDS = {"const", "constexpr", "static", "volatile", "unsigned", "signed", "__restrict__", "register"}
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
class HostFunction:
    """One translated host function: its name, parameter names and Python body lines."""

    name: str
    params: list[str]
    body: list[str] = field(default_factory=list)


_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
           ("+", "-"), ("*", "/", "%")]


class _Translator(TemplateStatements, TorchApiNames):
    def __init__(self, tokens: list[_Tok], kernels: dict[str, KernelSignature], pointers: set[str],
                 helpers: frozenset[str] = frozenset(), declared: set[str] | None = None,
                 types: dict[str, str] | None = None):
        self.toks = tokens
        self.i = 0
        self.helpers = helpers
        self.kernels = kernels
        self.pointers = set(pointers)
        self.declared = set(declared or ()) | set(helpers) | set(CONSTANTS) | set(DTYPES) | {
            "true", "false", "nullptr", "NULL", "cudaSuccess", "kCUDA", "kCPU"}
        self.types = dict(types or {})
        self.sequences: set[str] = set()  # names holding a std::vector or an IntArrayRef (a Python list/tuple)
        self.lines: list[str] = []
        self.counter = 0

    def child(self, tokens: list[_Tok]) -> "_Translator":
        """A translator of `tokens` that sees this one's names (for loop steps and dispatch bodies)."""
        inner = _Translator(tokens, self.kernels, self.pointers, self.helpers, self.declared, self.types)
        inner.sequences = self.sequences
        return inner

    # -- token helpers
    def peek(self, k: int = 0) -> _Tok:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else _Tok("eof", "")

    def take(self, text: str | None = None) -> _Tok:
        tok = self.peek()
        if tok.kind == "eof":
            raise Untranslatable(f"host code ends where '{text or 'more code'}' was expected")
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
        elif tok.text == "do":
            self.do_while(indent)
        elif tok.text.startswith("AT_DISPATCH_"):
            self.dispatch(indent)
            self.take(";")
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

    def do_while(self, indent: int) -> None:
        self.take("do")
        if any(t.text == "continue" for t in self.toks[self.i:self._block_end()]):
            raise Untranslatable("'continue' inside a host do-while loop")
        self.emit(indent, "while True:")
        self.body_of(indent + 1)
        self.take("while")
        self.take("(")
        cond = self.expr().text
        self.take(")")
        self.take(";")
        self.emit(indent + 1, f"if not ({cond}):")
        self.emit(indent + 2, "break")

    def for_loop(self, indent: int) -> None:
        self.take("for")
        self.take("(")
        colon = self._range_colon()
        if colon is not None:
            name = self.toks[colon - 1].text
            self.i = colon + 1
            iterable = self.expr().text
            self.take(")")
            self.declared.add(name)
            self.types.pop(name, None)
            self.emit(indent, f"for {name} in {iterable}:")
            self.body_of(indent + 1)
            return
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
            inner = self.child(step_tokens + [_Tok("op", ";")])
            inner.simple(indent + 1)
            self.lines += inner.lines

    def _range_colon(self) -> int | None:
        """The index of a range-for's ``:`` (``for (auto s : x.sizes())``), or None."""
        depth, j = 0, self.i
        while j < len(self.toks):
            text = self.toks[j].text
            if text in (";", "{") or depth == 0 and text == ")":
                return None
            depth += (text == "(") - (text == ")")
            if depth == 0 and text == ":":
                return j
            j += 1
        return None

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
        if self._tok(j).kind != "id" or self._tok(j).text in ("return", "if", "for", "while", "sizeof", "do", "else"):
            return False
        if self._tok(j).text == "auto" and self._tok(j + 1).text in ("[", "&"):  # auto [a, b] = t;
            return True
        k = j
        while self._tok(k).kind == "id":
            k += 1
        if k - j >= 2 and self._tok(k).text in ("=", ";", "(", "{", ",", "["):  # long long n = ...
            return True
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
        if words[-1] == "auto" and self.at("&"):
            self.take("&")
        if words[-1] == "auto" and self.at("["):  # a structured binding
            self.take("[")
            names = [self.take().text]
            while self.at(","):
                self.take(",")
                names.append(self.take().text)
            self.take("]")
            self.take("=")
            value = self.expr().text
            for name in names:
                self.declared.add(name)
                self.types.pop(name, None)
                self.pointers.discard(name)
            self.emit(indent, f"{', '.join(names)}{',' if len(names) == 1 else ''} = tuple({value})")
            return
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
        base = strip_namespace(" ".join(w for w in words if w not in _TYPE_WORDS - {"unsigned", "signed"}
                                         and w not in ("*", "&", "&&")))
        pointer = "*" in words
        if base in GUARD_TYPES:  # one device: a guard does nothing
            depth = 0
            while not (depth == 0 and self.at(";")):
                depth += self.at("(", "{") - self.at(")", "}")
                self.take()
            return
        while True:
            name = self.take().text
            self.declared.add(name)
            if self.at("["):
                raise Untranslatable(f"the host array '{name}'")
            if self.at("=", "(", "{"):
                opener = self.take().text
                if opener == "=":
                    value = self.expr()
                else:
                    closer = ")" if opener == "(" else "}"
                    args = self.args(closer)
                    value = Value("(" + ", ".join(a.text for a in args) + ("," if len(args) == 1 else "") + ")")
                    if base != "dim3":
                        value = args[0] if len(args) == 1 else value
                self.emit(indent, f"{name} = {self.convert(base, pointer, value, name)}")
            elif base == "dim3":
                self.emit(indent, f"{name} = (1, 1, 1)")
            elif base == "vector":
                self.sequences.add(name)
                self.emit(indent, f"{name} = []")
            else:
                self.emit(indent, f"{name} = None")
            if not self.at(","):
                break
            self.take(",")

    def convert(self, base: str, pointer: bool, value: Value, name: str) -> str:
        if pointer or value.pointer:
            self.pointers.add(name)
            return value.text
        self.pointers.discard(name)
        if base == "vector" or value.text.startswith(("tuple(", "list(", "[")):
            self.sequences.add(name)
        else:
            self.sequences.discard(name)
        ctype = value.ctype if base == "auto" else CTYPES.get(base)
        if ctype:
            self.types[name] = ctype
        else:
            self.types.pop(name, None)
        if base in INT_TYPES or base.replace("unsigned ", "") in INT_TYPES:
            return f"int({value.text})"
        if base in FLOAT_TYPES:
            return f"float({value.text})"
        if base == "bool":
            return f"bool({value.text})"
        return value.text

    def simple(self, indent: int) -> None:
        """An expression statement: a launch, an assignment, ++/--, or a call."""
        if self.peek().kind == "id" and self.peek(1).text == "<<<":
            self.emit(indent, self.launch())
            return
        if self.peek().kind == "id" and self.peek(1).text == "<" and \
                any(k.startswith(self.peek().text + "__") for k in self.kernels):
            self.emit(indent, self.templated_launch())
            return
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
            attribute = strip_namespace(self.take().text)
            if self.at(","):
                self.take(",")
            self.args(")")
            if attribute not in DEVICE_ATTRIBUTES:
                raise Untranslatable(f"cudaDeviceGetAttribute({attribute})")
            self.emit(indent, f"{target} = {DEVICE_ATTRIBUTES[attribute]}")
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
            combined = self.binary(op, target, Value(f"({value})"))
            self.emit(indent, f"{target.text} = {combined.text}")
        elif target.text:
            self.emit(indent, target.text)

    def launch(self, instance: str | None = None) -> str:
        name = instance or self.take().text
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
        shown = name.split("__")[0]
        if len(args) != len(params):
            raise HostCompileError(f"too {'few' if len(args) < len(params) else 'many'} arguments in the launch of "
                                   f"'{shown}': {len(args)} for {len(params)} parameters")
        texts = []
        for index, (arg, param) in enumerate(zip(args, params)):
            if param.pointer and not arg.pointer and arg.text != "None":
                raise HostCompileError(f"argument {index + 1} of the launch of '{shown}' is not a pointer: "
                                       f"`{arg.text}` cannot initialise the parameter '{param.name}' "
                                       f"({param.type}*); pass its data_ptr<{param.type}>()")
            if not param.pointer and arg.pointer:
                raise HostCompileError(f"argument {index + 1} of the launch of '{shown}' is a pointer, but the "
                                       f"parameter '{param.name}' is a {param.type}")
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

    def args(self, closer: str) -> list[Value]:
        out = []
        while not self.at(closer):
            out.append(self.expr())
            if not self.at(closer):
                self.take(",")
        self.take(closer)
        return out

    # -- expressions (precedence climbing)
    def expr(self, no_shift: bool = False) -> Value:
        cond = self.binary_level(0, no_shift)
        if self.at("?"):
            self.take()
            yes = self.expr(no_shift)
            self.take(":")
            no = self.expr(no_shift)
            return Value(f"({yes.text} if {cond.text} else {no.text})", yes.pointer or no.pointer,
                         arithmetic_type(yes.ctype, no.ctype))
        return cond

    def binary_level(self, level: int, no_shift: bool) -> Value:
        if level == len(_BINARY):
            return self.unary()
        left = self.binary_level(level + 1, no_shift)
        while self.peek().text in _BINARY[level] and not (no_shift and self.peek().text == ">>"):
            op = self.take().text
            right = self.binary_level(level + 1, no_shift)
            left = self.binary(op, left, right)
        return left

    def binary(self, op: str, left: Value, right: Value) -> Value:
        if op in ("+", "-") and (left.pointer or right.pointer):
            if op == "-" or right.pointer:
                raise Untranslatable("pointer arithmetic other than pointer + offset")
            return Value(f"kb_offset({left.text}, {right.text})", True)
        ctype = "int" if op in ("==", "!=", "<", ">", "<=", ">=", "&&", "||") else \
            left.ctype if op in ("<<", ">>") else arithmetic_type(left.ctype, right.ctype)
        if op == "/":
            return Value(f"kb_div({left.text}, {right.text})", ctype=ctype)
        if op == "%":
            return Value(f"kb_mod({left.text}, {right.text})", ctype=ctype)
        python = {"&&": "and", "||": "or"}.get(op, op)
        return Value(f"({left.text} {python} {right.text})", ctype=ctype)

    def unary(self) -> Value:
        tok = self.peek()
        if tok.text in ("-", "+", "~"):
            self.take()
            operand = self.unary()
            return Value(f"({tok.text}{operand.text})", ctype=operand.ctype)
        if tok.text == "!":
            self.take()
            return Value(f"(not {self.unary().text})")
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
        return bool(names) and all(strip_namespace(w) in INT_TYPES | FLOAT_TYPES | {"bool", "void", "half",
                                                                                      "__half", "scalar_t"}
                                   or w == "long" for w in names) or "*" in words and len(names) == 1

    def primary(self) -> Value:
        tok = self.take()
        if tok.kind == "num":
            text = tok.text.rstrip("fFuUlL") if not tok.text.lower().startswith("0x") else tok.text.rstrip("uUlL")
            suffix = tok.text[len(text):].lower()
            if any(c in text.lower() for c in ".e") and not text.lower().startswith("0x"):
                ctype = "float" if "f" in suffix else "double"
            else:
                ctype = {"": "int", "u": "unsigned", "l": "long", "ul": "unsigned long", "lu": "unsigned long",
                         "ll": "long long", "ull": "unsigned long long"}.get(suffix)
            return Value(text, ctype=ctype)
        if tok.kind == "str":
            parts = [tok.text]
            while self.peek().kind == "str":  # adjacent literals concatenate, in C as in Python
                parts.append(self.take().text)
            return Value(" ".join(parts))
        if tok.text == "(":
            inner = self.expr()
            self.take(")")
            return Value(f"({inner.text})", inner.pointer, inner.ctype)
        if tok.text == "{":
            items = self.args("}")
            return Value("[" + ", ".join(i.text for i in items) + "]")
        if tok.kind != "id":
            raise Untranslatable(f"'{tok.text or 'end of function'}' where a value was expected in host code")
        return self.name(tok.text)

    def postfix(self, value: Value) -> Value:
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
                value = Value(f"{value.text}[{index.text}]")
            else:
                return value

MAX_HEADER_CHARS = 2000


def function_header(header: str) -> re.Match[str] | None:
    """The name (group 1) and parameter list (group 2) of a function header, or None."""
    header = header.strip()
    if len(header) > MAX_HEADER_CHARS:
        raise Untranslatable(f"a host function header of {len(header)} characters")
    return re.search(r"([A-Za-z_]\w*)\s*\(([^()]*)\)\s*$", header)


@dataclass
class Declarations:
    """Top-level declarations of a source (``const int BLOCK = 256;``): Python lines, names and C types."""

    lines: list[str]
    names: set[str] = field(default_factory=set)
    types: dict[str, str] = field(default_factory=dict)


def translate_declarations(text: str, kernels: dict[str, KernelSignature]) -> Declarations:
    """Top-level declarations (``const int BLOCK = 256;``) as Python lines, with the names they declare."""
    translator = _Translator(tokenize("{" + text + "}"), kernels, set())
    translator.block(0)
    return Declarations([line for line in translator.lines if line != "pass"], translator.declared, translator.types)


def translate_function(header: str, body: str, kernels: dict[str, KernelSignature],
                       helpers: frozenset[str] = frozenset(), globals_: Declarations | None = None) -> HostFunction:
    """Translate one host function (its header text and ``{...}`` body text) to Python lines.

    Args:
        header: the text before the body (``torch::Tensor add(torch::Tensor a, torch::Tensor b)``).
        body: the ``{...}`` body.
        kernels: the kernels it may launch, by name.
        helpers: names of other host functions it may call (translated as ``kb_host_<name>``).
        globals_: the source's top-level declarations, which the body may name.

    Raises:
        HostCompileError: host code a real build rejects (an undeclared name, a launch's arguments).
        Untranslatable: a construct outside the translated subset, named in the message.
    """
    match = function_header(header)
    if match is None:
        raise Untranslatable(f"cannot read the host function header '{header.strip()[:80]}'")
    params, pointers, types = [], set(), dict(globals_.types if globals_ else {})
    for raw in split_params(match.group(2)):
        raw = raw.split("=")[0]
        words = re.findall(r"[A-Za-z_][\w:]*|\*", raw)
        if not words:
            raise Untranslatable(f"cannot read the parameter '{raw.strip()}'")
        params.append(words[-1])
        if "*" in words:
            pointers.add(words[-1])
        else:
            ctype = CTYPES.get(" ".join(strip_namespace(w) for w in words[:-1] if w not in _TYPE_WORDS - {"unsigned"}))
            if ctype:
                types[words[-1]] = ctype
    declared = set(params) | (globals_.names if globals_ else set())
    translator = _Translator(tokenize(body), kernels, pointers, helpers, declared, types)
    translator.block(0)
    return HostFunction(match.group(1), params, translator.lines)
