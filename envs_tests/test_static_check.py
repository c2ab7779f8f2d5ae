"""Static check of the python block: what wrappers may do, and the escapes it refuses."""

from __future__ import annotations

import textwrap

import pytest

from leap_gym.evaluation.parse import FormatError
from leap_gym.evaluation.static_check import (
    ALLOWED_IMPORTS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_NAMES,
    PYTHON_RULES,
    check_python_block,
    find_violations,
)

HEAD = "import torch\nimport torch.nn as nn\n\n"


def model(forward_body: str, init_body: str = "super().__init__()", prelude: str = "") -> str:
    """A wrapper with the given forward body (indentation added)."""
    return (HEAD + textwrap.dedent(prelude) + "\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
            + textwrap.indent(textwrap.dedent(init_body), " " * 8)
            + "\n\n    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(forward_body), " " * 8) + "\n")


LAUNCH = "y = torch.empty_like(x)\nkernels.k(((x.numel() + 255) // 256,), (256,), x, y, x.numel())\nreturn y"

ALLOWED = [
    ("plain wrapper", model(LAUNCH)),
    ("torch.nn.functional as F, math, typing, __future__",
     "from __future__ import annotations\nimport math\nfrom typing import Optional, List\n"
     "import torch.nn.functional as F\n" + model(LAUNCH + "  # math.sqrt(2)")),
    ("from torch import nn", "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n"
     "class ModelNew(nn.Module):\n    pass\n"),
    ("parameters and buffers", model(LAUNCH, "super().__init__()\nself.weight = nn.Parameter(torch.randn(4, 4))\n"
                                             "self.register_buffer('scale', torch.ones(4))\n"
                                             "self.lin = nn.Linear(4, 4)")),
    ("nn.Module.__init__(self) and super(ModelNew, self)",
     model(LAUNCH, "nn.Module.__init__(self)\nsuper(ModelNew, self).__init__()")),
    ("decorated forward with torch.no_grad", HEAD + "class ModelNew(nn.Module):\n    @torch.no_grad()\n"
     "    def forward(self, x):\n        self.calls = 1\n        return x\n"),
    ("with torch.no_grad(), try/except, lambda, comprehension",
     model("with torch.no_grad():\n    try:\n        g = lambda n: (n + 255) // 256\n    except Exception:\n"
           "        g = None\nsizes = [d for d in x.shape]\n" + LAUNCH)),
    ("parameter named input", HEAD + "class ModelNew(nn.Module):\n    def forward(self, input, type=None):\n"
     "        out = torch.empty_like(input)\n        kernels.k((1,), (1,), input, out)\n        return out\n"),
    ("helper function and class at module level",
     HEAD + "BLOCK = 256\n\ndef grid(n):\n    return ((n + BLOCK - 1) // BLOCK,)\n\nclass Cfg:\n    tile = 16\n\n"
     "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"),
    ("closure over self in a nested function",
     model("def launch(z):\n    self.last = z.shape\n    return z\nreturn launch(x)")),
    ("staticmethod helper", HEAD + "class ModelNew(nn.Module):\n    @staticmethod\n    def blocks(n):\n"
     "        return (n + 255) // 256\n"),
    ("main guard", model(LAUNCH) + "\nif __name__ == '__main__':\n    print(ModelNew())\n"),
    ("test harness under the main guard is not checked",
     model(LAUNCH) + "\nif __name__ == '__main__':\n    import time\n    torch.manual_seed(0)\n"
     "    print(eval('1'), ModelNew()(torch.randn(4)).numpy())\n"),
    ("kernel named like a forbidden attribute", model("kernels.load((1,), (1,), x)\nkernels.stream((1,), (1,), x)\n"
                                                      "return x")),
    ("local list mutation", model("out = [None]\nout[0] = torch.empty_like(x)\nreturn out[0]")),
    ("isinstance and shapes", model("assert isinstance(x, torch.Tensor) and x.dtype == torch.float32\n"
                                    "b, n = x.shape\nreturn x.view(b, n).contiguous()")),
    ("dtype and device attributes", model("y = torch.empty(x.shape, dtype=torch.float16, device=x.device)\n"
                                          "return y.reshape(-1)")),
]

FORBIDDEN = [
    ("import os", "import os\n" + model(LAUNCH), "`import os` is not allowed"),
    ("import subprocess", "import subprocess\n" + model(LAUNCH), "`import subprocess`"),
    ("import ctypes inside a function", model("import ctypes\nreturn x"), "`import ctypes`"),
    ("import numpy", "import numpy as np\n" + model(LAUNCH), "`import numpy`"),
    ("from torch.utils.cpp_extension import load_inline",
     "from torch.utils.cpp_extension import load_inline\n" + model(LAUNCH), "`from torch.utils.cpp_extension import"),
    ("torch.utils.cpp_extension via attribute", model("m = torch.utils.cpp_extension.load_inline('m', '')\nreturn x"),
     "`.utils`"),
    ("relative import", "from . import helper\n" + model(LAUNCH), "`from . import"),
    ("star import", "from torch import *\n" + model(LAUNCH), "import *"),
    ("from torch import ops", "from torch import ops\n" + model(LAUNCH), "`from torch import ops`"),
    ("eval", model("return eval('x')"), "`eval` is not allowed"),
    ("exec", model("exec('y = x')\nreturn x"), "`exec`"),
    ("open", model("open('/tmp/out', 'w').write('1')\nreturn x"), "`open`"),
    ("__import__", model("__import__('os').system('id')\nreturn x"), "`__import__`"),
    ("getattr introspection", model("f = getattr(torch, 'o' + 'ps')\nreturn x"), "`getattr`"),
    ("globals", model("globals()['kernels'] = None\nreturn x"), "`globals`"),
    ("type with three arguments", "T = type('T', (), {})\n" + model(LAUNCH), "`type`"),
    ("builtin input at module level (not a parameter)", "data = input()\n" + model(LAUNCH), "`input`"),
    ("subclasses escape", model("c = ().__class__.__bases__[0].__subclasses__()\nreturn x"), "`.__class__`"),
    ("function globals", model("g = self.forward.__globals__\nreturn x"), "`.__globals__`"),
    ("__builtins__", model("b = __builtins__\nreturn x"), "`__builtins__`"),
    ("__dict__", model("d = torch.__dict__\nreturn x"), "`.__dict__`"),
    ("private torch internals", model("torch._C._set_grad_enabled(True)\nreturn x"), "private attribute `._C`"),
    ("dispatch guard escape", model("torch.utils._python_dispatch._disable_current_modes()\nreturn x"), ".utils"),
    ("torch.ops", model("return torch.ops.aten.relu(x)"), "`.ops`"),
    ("torch.compile", model("f = torch.compile(lambda t: t.relu())\nreturn f(x)"), "`.compile`"),
    ("torch.library", model("lib = torch.library.Library('x', 'DEF')\nreturn x"), "`.library`"),
    ("torch.jit", model("return torch.jit.script(self)(x)"), "`.jit`"),
    ("side stream", model("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    " + LAUNCH.replace("\n", "\n    ")),
     "`.Stream`"),
    ("current_stream", model("torch.cuda.current_stream().synchronize()\nreturn x"), "streams and graphs"),
    ("CUDA graph", model("g = torch.cuda.CUDAGraph()\nreturn x"), "`.CUDAGraph`"),
    ("tf32 downgrade", model("torch.backends.cuda.matmul.allow_tf32 = True\nreturn x"), "`.backends`"),
    ("matmul precision", model("torch.set_float32_matmul_precision('medium')\nreturn x"),
     "`.set_float32_matmul_precision`"),
    ("reseeding", model("torch.manual_seed(0)\nreturn x"), "`.manual_seed`"),
    ("numpy compute", model("return torch.from_numpy(x.cpu().numpy() * 2)"), "`.numpy`"),
    ("torch.save", model("torch.save(x, 'x.pt')\nreturn x"), "no file access"),
    ("forward hook", model(LAUNCH, "super().__init__()\nnn.modules.module.register_module_forward_hook(None)"),
     "hooks could change"),
    ("monkeypatch torch", model(LAUNCH, prelude="torch.allclose = lambda *a, **k: True"), "assigning the attribute"),
    ("monkeypatch a class", model("nn.Module.forward = lambda s, *a: a[0]\nreturn x"), "of anything but `self`"),
    ("delete a torch function", model("del torch.relu\nreturn x"), "deleting the attribute `.relu`"),
    ("self parameter outside a method", HEAD + "def patch(self):\n    self.relu = None\n\n"
     "class ModelNew(nn.Module):\n    pass\n", "a parameter named `self`"),
    ("rebinding self", model("self = x\nself.data = x\nreturn x"), "rebinding `self`"),
    ("rebinding a differently named self", HEAD + "class ModelNew(nn.Module):\n    def forward(s, x):\n"
     "        for s in [x]:\n            s.data = x\n        return x\n", "rebinds its first parameter `s`"),
    ("module passed as a value", model("alias = torch\nreturn x"), "the module `torch` may only be used"),
    ("submodule passed as a value", model("fn = torch.nn\nreturn x"), "the module `torch.nn` may only be used"),
    ("local import passed as a value", model("import torch as T\nalias = T\nreturn x"), "the module `T`"),
    ("method called through the class", HEAD + "class ModelNew(nn.Module):\n    def patch(self):\n"
     "        self.add = None\n\n    def forward(self, x):\n        ModelNew.patch(torch.Tensor)\n        return x\n",
     "`ModelNew.patch` reaches a method through its class"),
    ("global statement", "CALLS = 0\n" + model("global CALLS\nCALLS += 1\nreturn x"), "`global CALLS`"),
    ("nonlocal statement", model("n = 0\ndef f():\n    nonlocal n\n    n += 1\nf()\nreturn x"), "`nonlocal n`"),
    ("module-level cache", "CACHE = {}\n" + model("CACHE[x.shape] = x\nreturn x"), "module-level variable `CACHE`"),
    ("async def", HEAD + "class ModelNew(nn.Module):\n    async def forward(self, x):\n        return x\n",
     "async code"),
    ("__del__ method", HEAD + "class ModelNew(nn.Module):\n    def __del__(self):\n        pass\n",
     "defining `__del__`"),
    ("__torch_function__ override", HEAD + "class T(torch.Tensor):\n    @classmethod\n"
     "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        return 0\n"
     "class ModelNew(nn.Module):\n    pass\n", "defining `__torch_function__`"),
    ("metaclass", HEAD + "class ModelNew(nn.Module, metaclass=object):\n    pass\n", "metaclass="),
    ("else branch of the main guard is checked",
     model(LAUNCH) + "\nif __name__ == '__main__':\n    pass\nelse:\n    import os\n", "`import os`"),
    ("kernels rebound, then kernels.numpy()", model("kernels = x\nreturn kernels.numpy()"), "`.numpy`"),
    ("raise SystemExit", model("raise SystemExit(0)"), "`SystemExit`"),
    ("exit()", model("exit()"), "`exit`"),
]


@pytest.mark.parametrize("source", [c[1] for c in ALLOWED], ids=[c[0] for c in ALLOWED])
def test_allowed(source: str):
    assert find_violations(source) == []
    check_python_block(source)


@pytest.mark.parametrize("source,fragment", [c[1:] for c in FORBIDDEN], ids=[c[0] for c in FORBIDDEN])
def test_forbidden(source: str, fragment: str):
    with pytest.raises(FormatError) as info:
        check_python_block(source)
    err = info.value
    assert fragment in err.reason, err.reason
    assert err.line and err.line >= 1 and f"line {err.line}:" in err.reason
    assert "may import only torch" in err.message and "kernels.<name>(grid, block" in err.message


def test_case_counts():
    assert len(ALLOWED) >= 10 and len(FORBIDDEN) >= 20
    assert len({c[0] for c in ALLOWED + FORBIDDEN}) == len(ALLOWED) + len(FORBIDDEN)


def test_violation_names_the_line():
    source = model(LAUNCH) + "\nimport os\n"
    (v,) = find_violations(source)
    assert v.line == source.splitlines().index("import os") + 1 and "import os" in v.what


def test_many_violations_are_listed_in_line_order_and_capped():
    source = model("\n".join(f"eval('{i}')" for i in range(8)) + "\nreturn x", prelude="import os")
    with pytest.raises(FormatError) as info:
        check_python_block(source)
    reason = info.value.reason
    assert "9 constructs" in reason and "... and 4 more" in reason
    assert reason.index("import os") < reason.index("`eval`")


def test_unparsable_source_is_a_format_error():
    with pytest.raises(FormatError, match="does not parse"):
        check_python_block("def f(:\n")
    with pytest.raises(FormatError):
        check_python_block("x = a" + ".b" * 100_000)


def test_reference_solutions_and_wrappers_pass():
    from leap_gym.evaluation.parse import parse_response
    from leap_gym.tasks import load_tasks

    checked = 0
    for task in load_tasks("builtin"):
        if task.wrapper:
            check_python_block(task.wrapper)
        for response in task.reference_solutions:
            check_python_block(parse_response(response, wrapper=task.wrapper).python)
            checked += 1
    assert checked >= 50


def test_rule_constants_are_explained():
    assert {"torch", "torch.nn", "torch.nn.functional", "math"} <= ALLOWED_IMPORTS
    assert {"eval", "exec", "open", "getattr"} <= FORBIDDEN_NAMES
    assert {"ops", "compile", "Stream", "stream", "library"} <= FORBIDDEN_ATTRIBUTES
    assert "kernels.<name>" in PYTHON_RULES
