"""Gymnasium-style wrappers for `KernelDebugEnv`: feedback format, reward shaping, curriculum, language.

Each wrapper reads the structured result (``info["result"]``, an `EvalResult`) rather than the
feedback text, and composes with the others and with Gymnasium's own wrappers:

- `FeedbackFormatWrapper`: the feedback observation as compact JSON or one short line.
- `RewardShapingWrapper`: a per-turn reward plus a progress bonus and a turn penalty, or any function.
- `TaskCurriculumWrapper`: picks each episode's task, unlocking harder levels as the agent succeeds.
- `KernelLanguageWrapper`: asks for Triton (``@triton.jit``) or Numba (``@cuda.jit``) kernels instead of CUDA C++.

The examples run on the ``compile-only`` backend (NVRTC only, no kernel runs), so they are quick.
"""

from __future__ import annotations

import json
import math
from collections import deque
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from leap_gym.result import CORRECT, STATUS_RANK, EvalResult

FEEDBACK_STYLES = ("json", "short", "text")


def result_summary(result: EvalResult, max_errors: int = 3, max_chars: int = 300) -> dict[str, Any]:
    """The facts of a result an agent acts on, as a small JSON-ready dict (no source, no logs)."""
    summary: dict[str, Any] = {"status": result.status, "message": result.message[:max_chars]}
    if result.detail:
        summary["detail"] = result.detail
    if result.errors and result.errors != [result.message]:
        summary["errors"] = [e[:max_chars] for e in result.errors[:max_errors]]
    m = result.mismatch
    if m is not None:
        summary["mismatch"] = {"output": m.output_index, "max_abs_error": m.max_abs_error,
                               "max_rel_error": m.max_rel_error, "fraction": m.fraction_mismatched,
                               "first_index": m.first_index,
                               "samples": [[idx, exp, act] for idx, exp, act in m.samples[:3]]}
    if result.speedup is not None:
        summary["speedup"] = round(result.speedup, 4)
    if result.resources:
        summary["resources"] = {name: {"registers": r.registers, "shared_mem_bytes": r.shared_mem_bytes,
                                       "spill_bytes": r.spill_stores_bytes + r.spill_loads_bytes}
                                for name, r in sorted(result.resources.items())}
    return summary


class FeedbackFormatWrapper(gym.Wrapper):
    """Rewrite each feedback observation as compact JSON or one short line.

    The first observation (the task prompt) is unchanged; each step's observation is built from
    ``info["result"]``. ``"json"``: `result_summary` plus ``turn`` and ``max_turns``. ``"short"``:
    ``"<STATUS> (turn t/T): <message>"``. ``"text"``: the environment's own feedback.

    Args:
        env: a `KernelDebugEnv` (or a wrapper of one).
        style: ``"json"``, ``"short"`` or ``"text"``.
        max_errors: error lines kept in the JSON form.

    Examples:
        >>> import json
        >>> import gymnasium as gym
        >>> import leap_gym
        >>> from leap_gym.integrations.wrappers import FeedbackFormatWrapper
        >>> env = FeedbackFormatWrapper(gym.make("KernelDebugEnv-v0", backend="compile-only",
        ...                                      task_ids=["level1/relu"]), style="json")
        >>> prompt, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step("no code here")
        >>> feedback = json.loads(obs)
        >>> feedback["status"], feedback["turn"], feedback["max_turns"]
        ('FORMAT_ERROR', 1, 4)
        >>> short = FeedbackFormatWrapper(env.env, style="short")
        >>> _ = short.reset(seed=0)
        >>> short.step("no code here")[0].split(":")[0]
        'FORMAT_ERROR (turn 1/4)'
    """

    def __init__(self, env: gym.Env, style: str = "json", max_errors: int = 3):
        super().__init__(env)
        if style not in FEEDBACK_STYLES:
            raise ValueError(f"style must be one of {FEEDBACK_STYLES}, got {style!r}")
        self.style = style
        self.max_errors = max_errors

    def format(self, result: EvalResult, turn: int, max_turns: int) -> str:
        """The observation for `result` at `turn` of `max_turns`."""
        if self.style == "short":
            message = result.message.splitlines()[0] if result.message else ""
            return f"{result.status} (turn {turn}/{max_turns}): {message}".rstrip(": ")
        summary = result_summary(result, self.max_errors)
        summary.update(turn=turn, max_turns=max_turns)
        return json.dumps(summary, separators=(",", ":"))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        result = info.get("result")
        if self.style != "text" and isinstance(result, EvalResult):
            obs = self.format(result, info.get("turn", 0), info.get("max_turns", 0))
        return obs, reward, terminated, truncated, info


ShapingFn = Callable[[float, EvalResult, dict[str, Any]], float]


class RewardShapingWrapper(gym.Wrapper):
    """Add a progress bonus and a turn penalty to the per-turn reward, or apply any shaping function.

    With the defaults, the reward of a turn is ``reward + progress_coef * (phi(now) - phi(before))
    - turn_penalty`` where ``phi`` is the stage a response reached (`STATUS_RANK` / 4: format error 0,
    compile error 0.25, compiled or runtime error 0.5, wrong output 0.75, correct 1) and ``before``
    the previous turn's stage (0 at the start). The bonus is potential-based, so over an episode it
    sums to ``progress_coef * phi(last)`` and cannot be farmed by oscillating.
    ``info["base_reward"]`` keeps the environment's own reward.

    Args:
        env: a `KernelDebugEnv` (or a wrapper of one).
        progress_coef: weight of the progress bonus.
        turn_penalty: subtracted on every turn (pressure to finish early).
        fn: instead of the above, ``fn(reward, result, info) -> float`` gives the shaped reward.

    Examples:
        >>> import gymnasium as gym
        >>> import leap_gym
        >>> from leap_gym.integrations.wrappers import RewardShapingWrapper
        >>> env = RewardShapingWrapper(gym.make("KernelDebugEnv-v0", backend="compile-only",
        ...                                     task_ids=["level1/relu"]), progress_coef=1.0, turn_penalty=0.05)
        >>> _ = env.reset(seed=0)
        >>> task = env.unwrapped.task
        >>> env.step("no code here")[1]     # no progress, one turn spent
        -0.05
        >>> env.step(task.reference_solutions[0])[1]    # FORMAT_ERROR -> COMPILED: +0.5
        0.45
    """

    def __init__(self, env: gym.Env, progress_coef: float = 0.5, turn_penalty: float = 0.0,
                 fn: ShapingFn | None = None):
        super().__init__(env)
        self.progress_coef = progress_coef
        self.turn_penalty = turn_penalty
        self.fn = fn
        self._phi = 0.0

    @staticmethod
    def potential(result: EvalResult | None) -> float:
        """How far a response got, in [0, 1]."""
        return 0.0 if result is None else STATUS_RANK.get(result.status, 0) / STATUS_RANK[CORRECT]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._phi = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        result = info.get("result")
        info = dict(info, base_reward=reward)
        if self.fn is not None:
            return obs, float(self.fn(reward, result, info)), terminated, truncated, info
        phi = self.potential(result)
        shaped = reward + self.progress_coef * (phi - self._phi) - self.turn_penalty
        self._phi = phi
        return obs, round(float(shaped), 10), terminated, truncated, info


class TaskCurriculumWrapper(gym.Wrapper):
    """Choose each episode's task: start on the easiest level and unlock the next as the agent succeeds.

    The environment's tasks are grouped by level. Episodes draw uniformly (seeded) from the
    unlocked levels, with tasks of the newest level drawn `new_level_weight` times as often. Once
    the success rate (episodes that ended CORRECT) over the last `window` episodes on the newest
    level reaches `threshold`, the next level unlocks. ``reset(options={"task_id": ...})`` still
    picks a task explicitly. `stats` holds per-task attempts and successes.

    Args:
        env: a `KernelDebugEnv` (or a wrapper of one).
        threshold: success rate on the newest level that unlocks the next.
        window: episodes on the newest level the rate is measured over.
        start_levels: levels unlocked at the start (default: the lowest).
        new_level_weight: sampling weight of the newest level's tasks relative to older ones.

    Examples:
        >>> import gymnasium as gym
        >>> import leap_gym
        >>> from leap_gym.integrations.wrappers import TaskCurriculumWrapper
        >>> base = gym.make("KernelDebugEnv-v0", backend="compile-only", max_turns=1,
        ...                 task_ids=["level1/relu", "level2/linear_relu"])
        >>> env = TaskCurriculumWrapper(base, threshold=1.0, window=1)
        >>> env.unlocked_levels
        [1]
        >>> _, info = env.reset(seed=0)
        >>> info["task_id"], info["curriculum_levels"]
        ('level1/relu', [1])
        >>> env.record("level1/relu", solved=True)     # what step() does when an episode ends
        >>> env.unlocked_levels
        [1, 2]
    """

    def __init__(self, env: gym.Env, threshold: float = 0.6, window: int = 8, start_levels: list[int] | None = None,
                 new_level_weight: float = 2.0):
        super().__init__(env)
        tasks = env.unwrapped.tasks
        self.levels: dict[int, list[str]] = {}
        for task in tasks:
            self.levels.setdefault(task.level, []).append(task.id)
        self._level_of = {task.id: task.level for task in tasks}
        ordered = sorted(self.levels)
        self.unlocked_levels = sorted(start_levels) if start_levels else ordered[:1]
        unknown = [lvl for lvl in self.unlocked_levels if lvl not in self.levels]
        if unknown:
            raise ValueError(f"start_levels {unknown} have no tasks in this environment; its levels are {ordered}")
        if not 0.0 <= threshold <= 1.0 or window < 1:
            raise ValueError("threshold must be in [0, 1] and window at least 1")
        self.threshold = threshold
        self.window = window
        self.new_level_weight = new_level_weight
        self.recent: deque[bool] = deque(maxlen=window)
        self.stats: dict[str, dict[str, int]] = {}
        self._rng = np.random.default_rng()
        self._task_id: str | None = None

    def _choose(self) -> str:
        newest = self.unlocked_levels[-1]
        ids = [t for lvl in self.unlocked_levels for t in self.levels[lvl]]
        weights = np.array([self.new_level_weight if self._level_of[t] == newest else 1.0 for t in ids])
        return ids[int(self._rng.choice(len(ids), p=weights / weights.sum()))]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        options = dict(options or {})
        options.setdefault("task_id", self._choose())
        obs, info = self.env.reset(seed=seed, options=options)
        self._task_id = info.get("task_id", options["task_id"])
        return obs, dict(info, curriculum_levels=list(self.unlocked_levels))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and self._task_id is not None:
            result = info.get("result")
            self.record(self._task_id, solved=isinstance(result, EvalResult) and result.status == CORRECT)
        return obs, reward, terminated, truncated, dict(info, curriculum_levels=list(self.unlocked_levels))

    def record(self, task_id: str, solved: bool) -> None:
        """Count an ended episode on `task_id`; unlock the next level when the newest one is mastered."""
        entry = self.stats.setdefault(task_id, {"episodes": 0, "solved": 0})
        entry["episodes"] += 1
        entry["solved"] += int(solved)
        if self._level_of.get(task_id) != self.unlocked_levels[-1]:
            return
        self.recent.append(bool(solved))
        if len(self.recent) >= self.window and sum(self.recent) / len(self.recent) >= self.threshold:
            higher = [lvl for lvl in sorted(self.levels) if lvl > self.unlocked_levels[-1]]
            if higher:
                self.unlocked_levels.append(higher[0])
                self.recent.clear()

    def success_rate(self, task_id: str) -> float:
        """Solved fraction of the ended episodes on `task_id` (NaN before any)."""
        entry = self.stats.get(task_id)
        return entry["solved"] / entry["episodes"] if entry and entry["episodes"] else math.nan


class KernelLanguageWrapper(gym.Wrapper):
    """Ask for kernels in another language: ``"triton"`` (``@triton.jit`` kernels launched as
    ``kernel[grid](...)``) or ``"numba"`` (``@cuda.jit`` functions), each in one python block.

    The prompt's response-format section and short-form note are replaced by the language's format
    (in the observation and in ``info["messages"]``); the environment judges these responses with the
    same statuses and rewards as CUDA C++ ones. On the ``cpu`` backend Triton kernels run in Triton's
    interpreter (every memory access checked; ``pip install 'leap-gym[triton]'``), Numba kernels in
    Numba's CUDA simulator, one Python thread per CUDA thread: build a Numba environment on tasks
    shrunk with `leap_gym.integrations.numba_examples.simulator_task`.

    Args:
        env: a `KernelDebugEnv` (or a wrapper of one).
        language: ``"triton"`` or ``"numba"`` (``"cuda"`` leaves the prompt unchanged).

    Examples:
        >>> import gymnasium as gym
        >>> import leap_gym
        >>> from leap_gym.integrations.wrappers import KernelLanguageWrapper
        >>> env = KernelLanguageWrapper(gym.make("KernelDebugEnv-v0", backend="compile-only",
        ...                                      task_ids=["level1/relu"]), language="numba")
        >>> prompt, info = env.reset(seed=0)
        >>> "@cuda.jit" in prompt, "Short form" in prompt, info["messages"][-1]["content"] == prompt
        (True, False, True)
    """

    LANGUAGES = ("cuda", "numba", "triton")

    def __init__(self, env: gym.Env, language: str = "numba"):
        super().__init__(env)
        if language not in self.LANGUAGES:
            raise ValueError(f"language must be one of {self.LANGUAGES}, got {language!r}")
        self.language = language

    def rewrite_prompt(self, prompt: str) -> str:
        """The prompt with the response-format section in this wrapper's language."""
        if self.language == "cuda":
            return prompt
        from leap_gym.evaluation.feedback import RESPONSE_FORMAT
        from leap_gym.integrations.numba_kernels import NUMBA_RESPONSE_FORMAT
        from leap_gym.integrations.triton_check import TRITON_RESPONSE_FORMAT

        language_format = TRITON_RESPONSE_FORMAT if self.language == "triton" else NUMBA_RESPONSE_FORMAT
        if RESPONSE_FORMAT not in prompt:
            return prompt + "\n\n" + language_format
        head, _, rest = prompt.partition(RESPONSE_FORMAT)
        start = rest.find("\n\nShort form:")
        if start >= 0:
            end = rest.find("\n\nYou have", start)
            rest = rest[:start] + (rest[end:] if end >= 0 else "")
        return head + language_format + rest

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        if self.language == "cuda":
            return obs, info
        rewritten = self.rewrite_prompt(obs)
        messages = [dict(m) for m in info.get("messages", [])]
        for m in messages:
            if m["role"] == "user" and m["content"] == obs:
                m["content"] = rewritten
        unwrapped = self.env.unwrapped
        if getattr(unwrapped, "messages", None) is not None:
            for m in unwrapped.messages:
                if m["role"] == "user" and m["content"] == obs:
                    m["content"] = rewritten
        return rewritten, dict(info, messages=messages)


__all__ = ["FeedbackFormatWrapper", "KernelLanguageWrapper", "RewardShapingWrapper", "TaskCurriculumWrapper",
           "result_summary"]
