"""`KernelDebugEnv-v0`: a multi-turn environment in which a model writes and repairs CUDA kernels."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from leap_gym.evaluation.evaluator import Evaluator, shared_evaluator
from leap_gym.evaluation.feedback import render_feedback, render_prompt
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.evaluation.rewards import RewardFn, get_reward_fn
from leap_gym.result import CORRECT, EvalResult
from leap_gym.tasks import Task, load_tasks

MAX_OBSERVATION_CHARS = 65_536
MAX_ACTION_CHARS = 262_144
# What `sample()` draws from; `contains()` accepts any text without NUL bytes (Unicode comments too).
SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \t\n"


class SourceText(spaces.Text):
    """A text space for source code: any Unicode without NUL, up to `max_length` characters."""

    def __init__(self, max_length: int, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length and "\0" not in x

    def __repr__(self) -> str:
        return f"SourceText(max_length={self.max_length})"


class KernelDebugEnv(gym.Env):
    """Write a CUDA kernel for a PyTorch program, read the feedback, and try again.

    ## Description

    Each episode is one task: a PyTorch reference `Model` (KernelBench format). The agent answers
    with a response holding a ```cuda block of ``extern "C" __global__`` kernels and a ```python
    block defining ``ModelNew`` that launches them through ``kernels.<name>(grid, block, *args)``.
    The environment compiles the kernels with NVRTC, runs them on the chosen backend in a sandboxed
    worker, checks them against the reference on several input sets and, on a GPU, times them.

    ## Action Space

    `SourceText(262144)`: the model's whole response text. Text outside the code blocks is ignored.

    ## Observation Space

    `SourceText(65536)`: text. After `reset`, the task prompt (the reference program, input
    shapes, the response format with an example, the turn budget). After each `step`, the feedback
    on the response, starting with its status (``FORMAT_ERROR``, ``COMPILE_ERROR``,
    ``RUNTIME_ERROR``, ``TIMEOUT``, ``WRONG_OUTPUT``, ``CORRECT``, or ``COMPILED`` on the
    `compile-only` backend), trimmed to `feedback_tokens`. The same facts, structured, are in
    ``info["result"]`` (an `EvalResult`); the chat history is in ``info["messages"]``.

    ## Rewards

    A per-turn function of the `EvalResult`: ``"binary"`` (1 if correct), ``"speedup"`` (1 + log2
    speedup for a correct kernel), ``"tiered"`` (partial credit per stage), or any callable.

    ## Episode End

    Terminated when the kernel is correct (``mode="debug"``) or correct and at least the task's
    target speedup (``mode="optimize"``; on backends that report no speedup, correct suffices).
    Truncated after `max_turns` responses.

    ## Arguments

    - `tasks`: ``"builtin"``, a folder of KernelBench files, a list of `Task`, or task ids.
    - `task_ids`: restrict the suite to these ids.
    - `backend`: ``"cpu"``, ``"cuda"``, ``"compile-only"`` or ``"auto"``.
    - `max_turns`: responses per episode.
    - `mode`: ``"debug"`` or ``"optimize"``.
    - `reward`: a reward name or a callable of an `EvalResult`.
    - `feedback_tokens`: token budget of each feedback observation.
    - `size`: task size preset (``"cpu"``/``"gpu"``); the backend's by default.
    - `evaluator`: an `Evaluator` to share; otherwise one per configuration is shared process-wide.
    - further keyword arguments: `EvalConfig` fields (``trials``, ``timeout_s``, ``arch``, ``workers``).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, tasks: str | list[Task] | list[str] = "builtin", backend: str = "cpu", max_turns: int = 4,
                 mode: str = "debug", reward: str | RewardFn = "binary", feedback_tokens: int = 1024,
                 task_ids: list[str] | None = None, size: str | None = None, render_mode: str | None = "ansi",
                 evaluator: Evaluator | None = None, **eval_config: Any):
        if mode not in ("debug", "optimize"):
            raise ValueError(f"mode must be 'debug' or 'optimize', got {mode!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.evaluator = evaluator or shared_evaluator(EvalConfig(backend=backend, **eval_config))
        preset = size or self.evaluator.backend.size_preset
        suite = load_tasks(tasks)
        if task_ids is not None:
            by_id = {t.id: t for t in suite}
            missing = [t for t in task_ids if t not in by_id]
            if missing:
                raise KeyError(f"unknown task ids {missing}; `leap-gym tasks` lists the built-in ones")
            suite = [by_id[t] for t in task_ids]
        if not suite:
            raise ValueError("the task suite is empty")
        self.tasks = [t.with_size(preset) for t in suite]
        self._by_id = {t.id: t for t in self.tasks}
        self.max_turns = max_turns
        self.mode = mode
        self.reward_fn = get_reward_fn(reward)
        self.feedback_tokens = feedback_tokens
        self.render_mode = render_mode
        self.observation_space = SourceText(MAX_OBSERVATION_CHARS)
        self.action_space = SourceText(MAX_ACTION_CHARS)
        self.task: Task | None = None
        self.turn = 0
        self.messages: list[dict[str, str]] = []
        self.results: list[EvalResult] = []
        self._done = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in self._by_id:
                raise KeyError(f"unknown task id {task_id!r}; choose one of this env's tasks (env.unwrapped.tasks)")
            self.task = self._by_id[task_id]
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.turn = 0
        self.results = []
        self._done = False
        prompt = render_prompt(self.task, self.max_turns, self.mode)
        self.messages = [{"role": "system", "content": "You are an expert CUDA kernel engineer."},
                         {"role": "user", "content": prompt}]
        return prompt, self._info(None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode has ended; call reset() to start another")
        if isinstance(action, bytes):
            action = action.decode("utf-8", "replace")
        if not isinstance(action, str):
            raise TypeError(f"the action is the response text (str), got {type(action).__name__}")
        self.turn += 1
        result = self.evaluator.evaluate(self.task, action)
        self.results.append(result)
        observation = render_feedback(result, self.turn, self.max_turns, self.feedback_tokens)
        self.messages += [{"role": "assistant", "content": action}, {"role": "user", "content": observation}]
        reward = float(self.reward_fn(result))
        terminated = self._solved(result)
        truncated = not terminated and self.turn >= self.max_turns
        self._done = terminated or truncated
        return observation, reward, terminated, truncated, self._info(result)

    def _solved(self, result: EvalResult) -> bool:
        if result.status != CORRECT:
            return False
        if self.mode == "debug" or result.speedup is None:
            return True
        return result.speedup >= self.task.target_speedup

    def _info(self, result: EvalResult | None) -> dict[str, Any]:
        return {"task_id": self.task.id, "turn": self.turn, "max_turns": self.max_turns, "result": result,
                "messages": list(self.messages), "backend": self.evaluator.config.backend}

    def render(self) -> str:
        """The transcript so far."""
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)

    def close(self) -> None:
        """Environments share their evaluator's workers; `Evaluator.close` or process exit stops them."""
        super().close()

