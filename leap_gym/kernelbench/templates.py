"""Templated kernels of a KernelBench answer: their instantiation for NVRTC, and the host side that picks one.

A real build instantiates a ``template <typename scalar_t> __global__`` kernel for each scalar type its
``AT_DISPATCH_FLOATING_TYPES*`` macros (or explicit ``kernel<float><<<...>>>`` launches) name. NVRTC's
kernels are ``extern "C"``, which a template cannot be, so `instantiate_template` turns the kernel into a
device function and adds one ``extern "C"`` kernel per type (``name__float``, ``name__double``,
``name__half``); `TemplateStatements` translates the dispatch macro to a branch per dtype with
``scalar_t`` substituted, and a templated launch to the launch of its instance.
"""

from __future__ import annotations

import re
from typing import Any

from leap_gym.evaluation.parse import strip_comments
from leap_gym.kernelbench.names import DISPATCH_TYPES, ELEMENT_TYPES, Untranslatable, strip_namespace

_TEMPLATE_RE = re.compile(r"^\s*template\s*<\s*(?:typename|class)\s+([A-Za-z_]\w*)\s*>")
_LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\s*\([^)]*\)")


def instantiated_types(template: str, source: str) -> list[str]:
    """The scalar types (``Float``, ``Double``, ``Half``...) a real build instantiates kernel `template` for:
    those of the source's AT_DISPATCH_FLOATING_TYPES macros, and of its explicit ``template<T><<<`` launches."""
    clean = strip_comments(source)
    found: list[str] = []
    if "AT_DISPATCH_FLOATING_TYPES" in clean:
        found += ["Float", "Double"]
    if "AT_DISPATCH_FLOATING_TYPES_AND_HALF" in clean:
        found.append("Half")
    for head in re.findall(r"AT_DISPATCH_FLOATING_TYPES_AND\d?\s*\(([^\"]*)", clean):
        found += [t for t in ("Half", "BFloat16") if re.search(rf"\bk?{t}\b", head)]
    for words in re.findall(rf"\b{re.escape(template)}\s*<\s*([\w:\s]+?)\s*>\s*<<<", clean):
        scalar = ELEMENT_TYPES.get(strip_namespace(words).replace("c10::", ""))
        if scalar in DISPATCH_TYPES:
            found.append(scalar)
    return list(dict.fromkeys(found))


def instantiate_template(item: Any, source: str) -> str:
    """A ``template <typename T> __global__`` kernel as a device function plus one ``extern "C"`` kernel per
    scalar type a real build instantiates it for (``name__float``, ``name__double``, ``name__half``)."""
    header = strip_comments(item.header)
    template = _TEMPLATE_RE.match(header)
    match = re.search(r"([A-Za-z_]\w*)\s*\(([^()]*)\)\s*$", header.strip())
    if template is None or match is None:
        return item.text  # kept as written; a launch of it is reported as unsupported
    name, params = match.group(1), match.group(2)
    scalars = instantiated_types(name, source)
    if not scalars:
        return item.text
    param_name = template.group(1)
    bounds = _LAUNCH_BOUNDS_RE.search(header)
    device_header = _LAUNCH_BOUNDS_RE.sub("", header).replace("__global__", "__device__ __forceinline__", 1)
    device_header = re.sub(rf"\b{re.escape(name)}\s*\(", f"{name}__body(", device_header, count=1)
    parts = [device_header + item.body]
    names = [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in split_params(params)]
    for scalar in scalars:
        ctype, suffix, _ = DISPATCH_TYPES[scalar]
        typed = re.sub(rf"\b{re.escape(param_name)}\b", ctype, params)
        parts.append(f'extern "C" __global__ void {bounds.group(0) + " " if bounds else ""}{name}__{suffix}({typed}) '
                     f"{{ {name}__body<{ctype}>({', '.join(names)}); }}")
    includes = "".join(f"#include <{h}>\n" for s, h in (("Half", "cuda_fp16.h"), ("BFloat16", "cuda_bf16.h"))
                       if s in scalars)
    return includes + "\n".join(parts)


def split_params(params: str) -> list[str]:
    """A C++ parameter list split at its top-level commas (``std::tuple<int, int> stride`` stays whole)."""
    out, depth, start = [], 0, 0
    for k, c in enumerate(params):
        depth += (c in "<(") - (c in ">)")
        if c == "," and depth == 0:
            out.append(params[start:k])
            start = k + 1
    tail = params[start:]
    return [p for p in out + [tail] if p.strip() and p.strip() != "void"]




class TemplateStatements:
    """The dispatch macros and templated launches of host code (a mixin of the host-code translator)."""

    kernels: dict[str, Any]
    lines: list[str]

    def dispatch(self, indent: int) -> None:
        """``AT_DISPATCH_FLOATING_TYPES[_AND_HALF|_AND|_AND2](type, "name", [&] { body })``: the body once per
        scalar type, ``scalar_t`` standing for it; another dtype raises as torch does."""
        macro = self.take().text
        self.take("(")
        extra: list[str] = []
        for _ in range({"AT_DISPATCH_FLOATING_TYPES_AND": 1, "AT_DISPATCH_FLOATING_TYPES_AND2": 2,
                        "AT_DISPATCH_FLOATING_TYPES_AND3": 3}.get(macro, 0)):
            extra.append(strip_namespace(self.take().text).replace("k", "", 1))
            self.take(",")
        if macro not in ("AT_DISPATCH_FLOATING_TYPES", "AT_DISPATCH_FLOATING_TYPES_AND_HALF",
                         "AT_DISPATCH_FLOATING_TYPES_AND", "AT_DISPATCH_FLOATING_TYPES_AND2",
                         "AT_DISPATCH_FLOATING_TYPES_AND3"):
            raise Untranslatable(f"the dispatch macro {macro} (the AT_DISPATCH_FLOATING_TYPES family is translated)")
        scalar_types = ["Float", "Double"] + (["Half"] if macro.endswith("_AND_HALF") else []) + \
            [e for e in extra if e in DISPATCH_TYPES]
        dtype = self.expr().text
        self.take(",")
        label = self.expr().text
        self.take(",")
        depth, start = 0, self.i
        while not (depth == 0 and self.at(")")):
            if self.peek().kind == "eof":
                raise Untranslatable(f"unbalanced parentheses in {macro}")
            depth += self.at("(", "[", "{") - self.at(")", "]", "}")
            self.take()
        lambda_tokens = self.toks[start:self.i]
        self.take(")")
        opening = next((k for k, t in enumerate(lambda_tokens) if t.text == "{"), None)
        closing = max((k for k, t in enumerate(lambda_tokens) if t.text == "}"), default=None)
        if opening is None or closing is None:
            raise Untranslatable(f"the {macro} body is not a lambda")
        body = lambda_tokens[opening:closing + 1]
        if any(t.text == "return" for t in body):
            raise Untranslatable(f"'return' inside an {macro} lambda")
        for index, scalar in enumerate(scalar_types):
            spelling = {"Float": "float", "Double": "double", "Half": "at::Half", "BFloat16": "at::BFloat16"}[scalar]
            tokens = [type(t)("id", spelling) if t.text == "scalar_t" else t for t in body]
            self.emit(indent, f"{'if' if index == 0 else 'elif'} {dtype} == {DISPATCH_TYPES[scalar][2]}:")
            inner = self.child(tokens)
            inner.block(indent + 1)
            self.lines += inner.lines
        self.emit(indent, "else:")
        self.emit(indent + 1, f"raise RuntimeError(str({label}) + ' not implemented for ' + str({dtype}))")

    def templated_launch(self) -> str:
        template = self.take().text
        self.take("<")
        words = []
        while not self.at(">"):
            words.append(self.take().text)
        self.take(">")
        scalar = ELEMENT_TYPES.get(strip_namespace(" ".join(words)).replace("c10::", ""))
        if scalar not in DISPATCH_TYPES or f"{template}__{DISPATCH_TYPES[scalar][1]}" not in self.kernels:
            raise Untranslatable(f"the launch of '{template}<{' '.join(words)}>' (templated kernels are instantiated "
                                 "for float, double, and half/bfloat16 where a dispatch macro names them)")
        return self.launch(f"{template}__{DISPATCH_TYPES[scalar][1]}")
