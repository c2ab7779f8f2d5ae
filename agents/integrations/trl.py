"""TRL integration: multi-turn LEAP rollouts and rewards driving TRL's `GRPOTrainer`.

`LeapRollout` is a `rollout_func` for `trl.GRPOTrainer` (its experimental hook, tested with TRL 1.16:
``rollout_func(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs", ...}``). For the
prompts TRL hands to one process (each task prompt repeated `num_generations` times), it runs a
group of multi-turn episodes of `KernelDebugEnv-v0` per task, sampling at the trainer's temperature
with TRL's own vLLM engine where the trainer has one (``GRPOConfig(use_vllm=True)``: the colocated
``trainer.vllm_generation.llm``, or the ``vllm_client`` of a ``trl vllm-serve`` server, whose weights
TRL syncs before each rollout) and with the trainer's own model otherwise, DCP pruning the refinement turns,
and returns each trajectory as one
TRL sample: the first turn's prompt, then all its turns as one completion (responses, and between
them the environment's feedback, which ``env_mask`` keeps out of the loss). The LEAP rank reward
(`assign_rewards`, scheme ``"leap"``; or ``"kevin"``, ``"single_turn"``) comes back as the extra
field ``leap_reward``, which the reward function `leap_reward` hands to TRL; TRL's group-relative
advantage is then LEAP's. Every turn of a trajectory shares its advantage, as in `assign_rewards`.

```python
from trl import GRPOConfig
from leap_agents.integrations.trl import LeapRollout, make_grpo_trainer

rollout = LeapRollout(tasks="builtin", backend="cuda", max_turns=4)       # or evaluator=RayEvaluator(...)
args = GRPOConfig(output_dir="out", num_generations=8, per_device_train_batch_size=8, max_completion_length=1024)
trainer = make_grpo_trainer(model, tokenizer, rollout, args)             # dataset: rollout.dataset()
trainer.train()
```

Multi-GPU: ``accelerate launch train.py``; each process rolls out its own prompts, so each
process's share of a generation batch (``per_device_train_batch_size * steps_per_generation``) must
hold whole groups: a multiple of ``num_generations`` (checked). Needs the ``trl`` extra.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from leap_agents.algorithms.dcp import DCPConfig, DifficultyTracker
from leap_agents.policies.base import Generation, History, turn_of
from leap_agents.policies.hf import HFPolicy
from leap_agents.policies.prompts import DEFAULT_CHAT_TEMPLATE, render_chat
from leap_agents.training.logprobs import response_logprobs
from leap_agents.training.rollout import RolloutBatch, RolloutConfig, RolloutEngine
from leap_agents.training.trajectory import assign_rewards

log = logging.getLogger(__name__)

_SENTINEL = "\x00LEAP-RESPONSE\x00"
INSTALL_HINT = "the TRL integration needs TRL: pip install 'leap-gym[trl]' (or pip install trl accelerate)"


@dataclass
class _Sequence:
    """One trajectory's token stream: its first prompt, then model tokens (mask 1) and feedback (mask 0)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    history: list[dict[str, str]] = field(default_factory=list)
    ended_with_eos: bool = True

    def add(self, ids: Sequence[int], logprobs: Sequence[float] | None, model: bool) -> None:
        self.completion_ids += list(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)
        self.mask += [int(model)] * len(ids)


class TokenStreamPolicy(HFPolicy):
    """An `HFPolicy` that keeps each trajectory's tokens as one growing sequence.

    Turn 1 encodes the chat prompt; each later turn continues from the exact tokens of the earlier
    turns (the sampled ids, not a re-tokenisation of their text) plus the chat-template text of the
    new feedback message, so the sample TRL trains on is the sequence the model really sampled from.
    Needs a prefix-stable chat template (ChatML, Qwen2.5, Llama 3: rendering a longer history
    extends the shorter one's text).
    """

    def __init__(self, model: Any, tokenizer: Any, sample_batch: Callable[[list[list[int]], dict[str, Any]],
                                                                         list[Generation]] | None = None, **kwargs: Any):
        super().__init__(model, tokenizer, max_prompt_tokens=1 << 30, **kwargs)
        self.sample_batch = sample_batch
        self.streams: dict[tuple[int, int], _Sequence] = {}
        self._before: dict[tuple[int, int], tuple[int, bool]] = {}
        self._key_of_history: dict[int, tuple[int, int]] = {}

    def _render(self, history: History, add_generation_prompt: bool) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(list(history), tokenize=False,
                                                      add_generation_prompt=add_generation_prompt)
        return render_chat(history, add_generation_prompt=add_generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _continue(self, key: tuple[int, int], history: History) -> list[int]:
        """The token ids this trajectory's next response continues (and its stream updated to them)."""
        stream = self.streams.get(key)
        if stream is None or turn_of(history) == 1:
            stream = self.streams[key] = _Sequence(prompt_ids=self.encode_prompt(history), history=list(history))
            return list(stream.prompt_ids)
        done = self._render(history[:-1], add_generation_prompt=False)  # ... last response, its turn closed
        full = self._render(history, add_generation_prompt=True)       # ... the feedback, assistant turn opened
        if not full.startswith(done):
            raise ValueError("the tokenizer's chat template re-renders earlier turns differently as the history grows; "
                             "multi-turn token streams need a prefix-stable template (ChatML, Qwen2.5, Llama 3)")
        # what the template puts after a response's text to close its turn (e.g. "<|im_end|>\n")
        marked = self._render([*history[:-2], {**history[-2], "content": _SENTINEL}], add_generation_prompt=False)
        after = marked.split(_SENTINEL)[-1]
        eos_text = self.tokenizer.decode([self.tokenizer.eos_token_id])
        if stream.ended_with_eos and after.startswith(eos_text):
            after = after[len(eos_text):]  # the sampled EOS already closed the turn
        stream.add(self._encode(after + full[len(done):]), None, model=False)
        stream.history = list(history)
        return stream.prompt_ids + stream.completion_ids

    def _record(self, key: tuple[int, int], gen: Generation) -> None:
        stream = self.streams[key]
        self._before[key] = (len(stream.completion_ids), stream.ended_with_eos)
        stream.add(gen.token_ids, gen.logprobs, model=True)
        stream.ended_with_eos = bool(gen.token_ids) and gen.token_ids[-1] in self.eos_ids

    @staticmethod
    def _keys(histories: Sequence[History], meta: Sequence[dict[str, Any]] | None) -> list[tuple[int, int]]:
        if meta is None:
            raise ValueError("TokenStreamPolicy needs meta with 'group' and 'index' per history "
                             "(RolloutEngine gives it)")
        return [(int(m["group"]), int(m["index"])) for m in meta]

    @torch.no_grad()
    def generate(self, histories: Sequence[History], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]:
        opts = {**self.defaults, **{k: v for k, v in sampling.items() if v is not None}}
        if opts.get("seed") is not None:
            torch.manual_seed(int(opts["seed"]))
        keys = self._keys(histories, meta)
        self._key_of_history = {id(h): k for h, k in zip(histories, keys)}
        inputs = [self._continue(k, h) for k, h in zip(keys, histories)]
        out: list[Generation] = []
        if self.sample_batch is not None:  # TRL's vLLM engine: every stream in one call
            out = self.sample_batch(inputs, opts)
        else:
            for start in range(0, len(inputs), self.batch_size):
                out.extend(self._generate_batch(inputs[start:start + self.batch_size], opts))
        for key, gen in zip(keys, out):
            self._record(key, gen)
        return out

    @torch.no_grad()
    def score(self, histories: Sequence[History], responses: Sequence[str], temperature: float = 1.0,
              meta: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        """Replace the latest generations of these histories' trajectories by `responses` (off-policy guidance,
        `RolloutConfig.guide_prob`), scored with this policy's log-probs; the histories are those just given
        to `generate` (which tells the trajectory; `meta` is not needed)."""
        out = []
        for history, text in zip(histories, responses):
            key = self._key_of_history.get(id(history))
            if key is None or key not in self._before:
                raise ValueError("TokenStreamPolicy.score replaces a response of the latest generate() call; "
                                 "pass the same history objects")
            stream = self.streams[key]
            length, ended = self._before[key]
            del stream.completion_ids[length:], stream.logprobs[length:], stream.mask[length:]
            stream.ended_with_eos = ended
            prefix = stream.prompt_ids + stream.completion_ids
            ids = self.encode_response(text)
            lps = response_logprobs(self.model, [prefix], [ids], self.tokenizer.pad_token_id, temperature)[0]
            gen = Generation(text=text, token_ids=ids, logprobs=lps.tolist(), prompt_token_ids=prefix, off_policy=True)
            self._record(key, gen)
            out.append(gen)
        return out


class TRLVLLMSampler:
    """Samples token prompts with the vLLM engine of a `GRPOTrainer` built with ``use_vllm=True``.

    Colocate mode: ``trainer.vllm_generation.llm`` (a ``vllm.LLM`` in this process, started by TRL with
    ``logprobs_mode="processed_logprobs"``); server mode: ``trainer.vllm_generation.vllm_client`` (one process only:
    TRL builds the client on the main process). TRL syncs the trainer's weights into the engine before each rollout.
    """

    def __init__(self, trainer: Any, tokenizer: Any, eos_ids: set[int]):
        generation = getattr(trainer, "vllm_generation", None)
        self.mode = getattr(trainer, "vllm_mode", "colocate")
        if generation is None:
            raise ValueError("the trainer has use_vllm=True but no vllm_generation (TRL >= 1.16 builds one)")
        if self.mode == "server" and trainer.accelerator.num_processes > 1:
            raise ValueError("LeapRollout with vllm_mode='server' runs in one process (TRL's client lives on the main "
                             "process); use vllm_mode='colocate' for several processes")
        self.engine = generation.llm if self.mode == "colocate" else generation.vllm_client
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids

    def __call__(self, prompts: list[list[int]], opts: dict[str, Any]) -> list[Generation]:
        from leap_agents.policies.vllm import sample_logprobs, sampling_params, to_generation

        if not prompts:
            return []
        if self.mode == "colocate":
            outputs = self.engine.generate([{"prompt_token_ids": p} for p in prompts],
                                           [sampling_params(opts, i, self.eos_ids) for i in range(len(prompts))],
                                           use_tqdm=False)
            return [to_generation(self.tokenizer, p, list(o.outputs[0].token_ids), sample_logprobs(o.outputs[0]),
                                  o.outputs[0].finish_reason) for p, o in zip(prompts, outputs)]
        temperature = float(opts["temperature"])
        out = self.engine.generate(prompts=prompts, n=1, temperature=temperature, top_p=float(opts.get("top_p", 1.0)),
                                   top_k=int(opts.get("top_k") or 0), max_tokens=int(opts["max_new_tokens"]), logprobs=0)
        gens = []
        for p, tokens, lps in zip(prompts, out["completion_ids"], out["logprobs"]):
            tokens = list(tokens)
            finish = "stop" if tokens and tokens[-1] in self.eos_ids else "length"
            gens.append(to_generation(self.tokenizer, p, tokens, [row[0] for row in lps], finish))
        return gens


def _tokenizer_of(processing_class: Any) -> Any:
    return getattr(processing_class, "tokenizer", processing_class)


class LeapRollout:
    """A `rollout_func` for `trl.GRPOTrainer`: multi-turn LEAP group rollouts through `KernelDebugEnv-v0`.

    Args:
        tasks: the suite (``"builtin"``, a KernelBench folder, or a list of `Task`).
        backend: the environments' backend (``"compile-only"``, ``"cpu"``, ``"cuda"``, ``"auto"``).
        max_turns: turn budget of each trajectory.
        dcp: pruning settings (`DCPConfig`); ``DCPConfig(enabled=False)`` for full refinement.
        scheme: the sample reward: ``"leap"`` (rank reward), ``"kevin"`` (discounted return of the
            first turn), ``"single_turn"``.
        tie_break: with ``"leap"``, spread same-turn solves by speedup rank.
        max_new_tokens: tokens per response; the trainer's ``max_completion_length`` by default
            (the completion of a trajectory holds up to `max_turns` responses and the feedback between).
        feedback_tokens: token budget of each feedback observation.
        eval_workers: concurrent environment evaluations (use ``evaluator.capacity`` with a `RayEvaluator`).
        guide_prob: probability that a response is replaced by the task's reference solution, scored
            with the model's log-probs (off-policy guidance, as in `RolloutConfig`; TRL then trains on it
            as if sampled: a from-scratch model's only signal). 0 by default.
        evaluator: an evaluator the environments share (`leap_gym.evaluation.evaluator.Evaluator`, `RayEvaluator`).
        env_kwargs: further ``gym.make`` arguments (``reward``, ``mode``, ``timeout_s``...).
        env_factory: builds one environment (see `RolloutEngine`).

    Attributes:
        last_batch: the `RolloutBatch` of the latest call (trajectories with their DCP decisions).
        tracker: the running per-task difficulty estimate DCP uses (kept across calls).
    """

    def __init__(self, tasks: Any = "builtin", backend: str = "compile-only", max_turns: int = 2,
                 dcp: DCPConfig | None = None, scheme: str = "leap", tie_break: bool = False,
                 max_new_tokens: int | None = None, feedback_tokens: int = 512, eval_workers: int = 2,
                 guide_prob: float = 0.0, evaluator: Any = None, env_kwargs: dict[str, Any] | None = None,
                 env_factory: Callable[[], Any] | None = None):
        import leap_gym

        by_name = not isinstance(tasks, list) or (tasks and isinstance(tasks[0], str))
        self.tasks = leap_gym.load_tasks(tasks) if by_name else tasks
        self.backend = backend
        self.max_turns = max_turns
        self.dcp = dcp or DCPConfig()
        self.scheme = scheme
        self.tie_break = tie_break
        self.max_new_tokens = max_new_tokens
        self.eval_workers = eval_workers
        self.guide_prob = guide_prob
        self.env_kwargs = {"feedback_tokens": feedback_tokens, **(env_kwargs or {})}
        if evaluator is not None:
            self.env_kwargs["evaluator"] = evaluator
        self.tracker = DifficultyTracker(self.dcp.ema_alpha)
        self.last_batch: RolloutBatch | None = None
        self._engine = RolloutEngine(None, self.tasks, backend=backend,  # type: ignore[arg-type]
                                     config=RolloutConfig(group_size=1, max_turns=max_turns, eval_workers=eval_workers,
                                                          progress_bar=False),
                                     dcp=self.dcp, tracker=self.tracker, env_kwargs=self.env_kwargs,
                                     env_factory=env_factory)
        self._prompts: dict[str, tuple[str, list[dict[str, str]]]] | None = None
        self._calls = 0

    # the dataset ------------------------------------------------------------------------------------

    def task_prompts(self) -> dict[str, tuple[str, list[dict[str, str]]]]:
        """``{task_id: (task_id, messages)}`` and ``{user prompt text: ...}``: the environment's first messages."""
        if self._prompts is None:
            env = self._engine._env(0)
            self._prompts = {}
            for task in self.tasks:
                _, info = env.reset(seed=0, options={"task_id": task.id})
                messages = [dict(m) for m in info["messages"]]
                self._prompts[task.id] = self._prompts[messages[-1]["content"]] = (task.id, messages)
        return self._prompts

    def dataset(self, task_ids: Sequence[str] | None = None, repeats: int = 1) -> Any:
        """A `datasets.Dataset` of conversational prompts (the environment's first messages), one row per task."""
        from datasets import Dataset

        prompts = self.task_prompts()
        ids = list(task_ids) if task_ids is not None else [t.id for t in self.tasks]
        unknown = [t for t in ids if t not in prompts]
        if unknown:
            raise KeyError(f"unknown task ids {unknown}; the rollout's suite has {len(self.tasks)} tasks")
        return Dataset.from_list([{"prompt": prompts[t][1], "task_id": t} for t in ids for _ in range(repeats)])

    def _task_id(self, prompt: Any) -> str:
        text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
        found = self.task_prompts().get(text)
        if found is None:
            raise KeyError("a prompt the rollout does not know: build the training set with LeapRollout.dataset() "
                           "(its prompts are the environment's first messages), or pass task ids as prompts")
        return found[0]

    # the rollout ------------------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        training = trainer.model.training
        group = trainer.num_generations if training else trainer.num_generations_eval
        task_ids = [self._task_id(p) for p in prompts]
        if len(task_ids) % group:
            raise ValueError(f"this process got {len(task_ids)} prompts, not whole groups of num_generations={group}: "
                             "make per_device_train_batch_size * steps_per_generation a multiple of num_generations")
        heads = task_ids[::group]
        for g, head in enumerate(heads):
            if any(t != head for t in task_ids[g * group:(g + 1) * group]):
                raise ValueError("a group of num_generations prompts mixes tasks: each process must receive whole "
                                 "groups (per_device_train_batch_size * steps_per_generation a multiple of "
                                 "num_generations)")
        args = trainer.args
        engine = self._engine
        engine.config = RolloutConfig(group_size=group, max_turns=self.max_turns, temperature=trainer.temperature,
                                      top_p=args.top_p, eval_workers=self.eval_workers, progress_bar=False,
                                      guide_prob=self.guide_prob,
                                      max_new_tokens=self.max_new_tokens or trainer.max_completion_length)
        seed = int(args.seed) * 1_000_003 + trainer.accelerator.process_index * 7919 + self._calls
        self._calls += 1
        with _unwrapped(trainer) as model:
            tokenizer = _tokenizer_of(trainer.processing_class)
            policy = TokenStreamPolicy(model, tokenizer,
                                       batch_size=max(1, args.per_device_train_batch_size * args.steps_per_generation))
            if getattr(trainer, "use_vllm", False):
                policy.sample_batch = TRLVLLMSampler(trainer, tokenizer, policy.eos_ids)
            engine.policy = policy
            try:
                batch = engine.run(heads, seed=seed, desc="leap-rollout")
            finally:
                engine.policy = None  # type: ignore[assignment]
        assign_rewards(batch.groups, scheme=self.scheme, tie_break=self.tie_break)
        self.last_batch = batch
        fields = ("prompt_ids", "completion_ids", "logprobs", "env_mask", "leap_reward", "leap_first_solved",
                  "leap_turns", "leap_status", "leap_end_reason")
        out: dict[str, list[Any]] = {k: [] for k in fields}
        for traj in batch.trajectories:  # group-major, as TRL's prompts are
            stream = policy.streams[traj.group, traj.index]
            out["prompt_ids"].append(stream.prompt_ids)
            out["completion_ids"].append(stream.completion_ids)
            out["logprobs"].append(stream.logprobs)
            out["env_mask"].append(stream.mask)
            out["leap_reward"].append(float(traj.reward))
            out["leap_first_solved"].append(traj.first_solved_turn or 0)
            out["leap_turns"].append(len(traj.turns))
            out["leap_status"].append(traj.turns[-1].status if traj.turns else "")
            out["leap_end_reason"].append(traj.end_reason or "")
        log.info("leap rollout: %d trajectories, %d responses, pass rate %.2f, decisions %s", len(batch.trajectories),
                 batch.responses, sum(t.solved for t in batch.trajectories) / max(1, len(batch.trajectories)),
                 dict(batch.decisions))
        return out


@contextlib.contextmanager
def _unwrapped(trainer: Any) -> Any:
    """The trainer's model unwrapped for generation (DDP/FSDP; DeepSpeed ZeRO-3 parameters gathered)."""
    try:
        from trl.models.utils import unwrap_model_for_generation
    except ImportError:  # pragma: no cover - older TRL layouts
        yield trainer.accelerator.unwrap_model(trainer.model)
        return
    wrapped = getattr(trainer, "model_wrapped", None) or trainer.model
    gather = getattr(trainer.args, "ds3_gather_for_generation", True)
    with unwrap_model_for_generation(wrapped, trainer.accelerator, gather_deepspeed3_params=gather) as model:
        yield model


# reward functions (TRL calls them with the prompts, completions and the rollout's extra fields) -------

def leap_reward(completions: list[Any], leap_reward: list[float] | None = None, **kwargs: Any) -> list[float]:
    """The shaped reward `LeapRollout` computed per trajectory (LEAP rank reward by default)."""
    if leap_reward is None:
        raise ValueError("leap_reward needs the rollout's 'leap_reward' field: pass rollout_func=LeapRollout(...) "
                         "to GRPOTrainer")
    return [float(r) for r in leap_reward]


def solved_reward(completions: list[Any], leap_first_solved: list[int] | None = None, **kwargs: Any) -> list[float]:
    """1 for a trajectory solved at any turn, else 0 (for logging with reward weight 0, or as a baseline)."""
    if leap_first_solved is None:
        raise ValueError("solved_reward needs the rollout's 'leap_first_solved' field: "
                         "pass rollout_func=LeapRollout(...)")
    return [1.0 if t else 0.0 for t in leap_first_solved]


def make_grpo_trainer(model: Any, tokenizer: Any, rollout: LeapRollout, args: Any, train_dataset: Any = None,
                      reward_funcs: list[Callable[..., list[float]]] | None = None, **kwargs: Any) -> Any:
    """A `trl.GRPOTrainer` driven by `rollout`, rewarded by `leap_reward` (and `solved_reward` at weight 0 when
    ``args.reward_weights`` gives it one).

    A tokenizer without a chat template gets ChatML (`DEFAULT_CHAT_TEMPLATE`), the template `HFPolicy` assumes.
    """
    try:
        from trl import GRPOTrainer
    except ImportError as exc:  # pragma: no cover - optional extra
        raise ImportError(INSTALL_HINT) from exc
    tok = _tokenizer_of(tokenizer)
    if not getattr(tok, "chat_template", None):
        tok.chat_template = DEFAULT_CHAT_TEMPLATE
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return GRPOTrainer(model=model, reward_funcs=reward_funcs or [leap_reward], args=args,
                       train_dataset=train_dataset if train_dataset is not None else rollout.dataset(),
                       processing_class=tokenizer, rollout_func=rollout, **kwargs)
