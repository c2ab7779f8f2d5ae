"""The policy protocol: generate one response per chat history, with token ids and log-probs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]
History = list[Message]


@dataclass
class Generation:
    """One generated response.

    Attributes:
        text: the response text (special tokens removed).
        token_ids: the sampled response tokens (including a final EOS if one was sampled).
        logprobs: per-token log-probabilities under the sampling distribution (same length as
            `token_ids`; empty when the backend does not report them).
        prompt_token_ids: the tokenized prompt the response continues (empty for remote policies).
        finish_reason: ``"stop"`` (EOS or stop string) or ``"length"``.
        off_policy: the response did not come from the policy's own sampling (scripted, guidance).
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"
    off_policy: bool = False


@runtime_checkable
class Policy(Protocol):
    """Anything that answers a batch of chat histories.

    ``generate(histories, meta=None, **sampling)``: `histories` are lists of ``{"role", "content"}``
    messages (system/user/assistant), `meta` optional per-history context (``task_id``, ``turn``,
    ``group``, ``index``), `sampling` keyword arguments (``temperature``, ``top_p``,
    ``max_new_tokens``, ``seed``). Returns one `Generation` per history, in order.
    """

    def generate(self, histories: Sequence[History], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]: ...


def turn_of(history: History) -> int:
    """The 1-based turn a history asks for: one more than its assistant messages."""
    return 1 + sum(1 for m in history if m.get("role") == "assistant")


class ScriptedPolicy:
    """Replays given responses: for tests, demos and baselines that need no model.

    Args:
        responses: ``{task_id: [turn-1 response, turn-2 response, ...]}`` (the last one repeats
            once the list runs out), or ``{task_id: {group_index: [...]}}`` for per-trajectory scripts,
            or one list used for every task.
        default: the response for a task the script does not name.
    """

    def __init__(self, responses: dict[str, Any] | list[str], default: str = "I do not know."):
        self.responses = responses
        self.default = default
        self.calls = 0

    def _script(self, task_id: str | None, group_index: int | None) -> list[str]:
        if isinstance(self.responses, list):
            return self.responses
        script = self.responses.get(task_id, None) if task_id is not None else None
        if isinstance(script, dict):
            script = script.get(group_index, script.get(None, [self.default]))
        if script is None:
            return [self.default]
        return [script] if isinstance(script, str) else list(script)

    def generate(self, histories: Sequence[History], meta: Sequence[dict[str, Any]] | None = None,
                 **sampling: Any) -> list[Generation]:
        self.calls += 1
        out = []
        for i, history in enumerate(histories):
            info = meta[i] if meta is not None else {}
            script = self._script(info.get("task_id"), info.get("index"))
            turn = int(info.get("turn", turn_of(history)))
            text = script[min(turn, len(script)) - 1] if script else self.default
            out.append(Generation(text=text, off_policy=True))
        return out
