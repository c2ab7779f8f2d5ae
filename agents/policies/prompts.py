"""The prompts a policy reads: the environment's chat history as it is or compacted, and LEAP-mini's text.

A `PromptFormat` turns what the rollout engine hands a policy (a chat history and its ``meta``: the
``task``, the ``last_result`` of the trajectory's previous turn, ...) into the text the model continues:

- `ChatPrompt`: the chat history through the tokenizer's chat template (ChatML without one); with
  ``compact=True`` through `compact_history` first: the task line, the kernel signature the default
  wrapper launches and the reference ``forward``; from the second turn on, the last attempt's ``cuda``
  block and the head of the environment's feedback. A level-1 task's full prompt is about 660 SmolLM2
  tokens and a 4-turn history over 1,500; the compact one stays under about 400, which is what makes SFT,
  sampling and LEAP on a CPU affordable.
- `MiniPrompt`: LEAP-mini's two-line prompt (`mini_prompt`) from the structured task and result, so a model
  of a million parameters trains and samples fast::

      task relu: ReLU: y = max(x, 0), elementwise.
      sig relu_kernel(const float* x, float* y, int n)
      fb WRONG_OUTPUT max abs err 3.2, 50.00% mismatched, first at [256]
      fix:

Training data and rollouts render through the same format, from what the environment really produced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from leap_gym.result import COMPILE_ERROR, CORRECT, FORMAT_ERROR, RUNTIME_ERROR, TIMEOUT, WRONG_OUTPUT, EvalResult
from leap_gym.tasks import Task

History = Sequence[dict[str, str]]


#: ChatML, used when a tokenizer has no chat template of its own (tiny test tokenizers).
DEFAULT_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def render_chat(messages: History, add_generation_prompt: bool = True) -> str:
    """`DEFAULT_CHAT_TEMPLATE` in plain Python, for tokenizers without a chat template (tiny test tokenizers)."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class PromptFormat(Protocol):
    """Renders one history (and its ``meta``) into the prompt text a tokenizer encodes."""

    def __call__(self, tokenizer: Any, history: History, meta: dict[str, Any] | None = None) -> str: ...


class ChatPrompt:
    """The chat history through the tokenizer's chat template, with the assistant turn opened.

    Args:
        compact: render `compact_history(history)` instead of the history itself.
    """

    def __init__(self, compact: bool = False):
        self.compact = compact

    def __call__(self, tokenizer: Any, history: History, meta: dict[str, Any] | None = None) -> str:
        messages = compact_history(history) if self.compact else list(history)
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return render_chat(messages)


class MiniPrompt:
    """LEAP-mini's `mini_prompt`, from ``meta["task"]`` and ``meta["last_result"]`` (the history is not read)."""

    def __call__(self, tokenizer: Any, history: History, meta: dict[str, Any] | None = None) -> str:
        if not meta or "task" not in meta:
            raise ValueError("MiniPrompt renders from meta['task'] (and meta['last_result'] after turn 1); the rollout "
                             "engine passes them, a direct call must too")
        return mini_prompt(meta["task"], meta.get("last_result"))


# -- LEAP-mini's prompt ---------------------------------------------------------------------------

def short_id(task: Task) -> str:
    return task.id.split("/", 1)[1]


def kernel_name_of(task: Task) -> str:
    match = re.search(r"void\s+(\w+)\s*\(", task.wrapper_signature)
    return match.group(1) if match else short_id(task)


def task_header(task: Task) -> str:
    """The first two lines of every prompt: the task and the kernel signature the wrapper launches."""
    sig = re.sub(r'^\s*extern\s+"C"\s+__global__\s+void\s+', "", task.wrapper_signature).strip()
    desc = re.sub(r"\s+", " ", task.description).strip()
    return f"task {short_id(task)}: {desc}\nsig {sig}\n"


def brief_feedback(result: EvalResult, max_chars: int = 160) -> str:
    """The status line and the key facts of a result, on one line (what the mini policy reads)."""
    status = result.status
    if status == COMPILE_ERROR:
        first = next((d for d in result.diagnostics if d.severity == "error"), None)
        fact = f"line {first.line}: {first.message}" if first is not None and first.line else (
            first.message if first is not None else result.message)
    elif status == WRONG_OUTPUT and result.mismatch is not None and result.mismatch.max_abs_error is not None:
        m = result.mismatch
        fact = (f"max abs err {m.max_abs_error:.3g}, {100 * (m.fraction_mismatched or 0):.1f}% mismatched, "
                f"first at {m.first_index}")
    elif status in (RUNTIME_ERROR, TIMEOUT, WRONG_OUTPUT, FORMAT_ERROR):
        fact = (result.message or result.detail).splitlines()[0] if (result.message or result.detail) else ""
    elif status == CORRECT:
        fact = "ok"
    else:
        fact = result.message
    fact = re.sub(r"\s+", " ", fact).strip()
    line = f"{status} {fact}".strip()
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."


def mini_prompt(task: Task, prev_result: EvalResult | None = None) -> str:
    """LEAP-mini's prompt: the task header, then (after turn 1) the last attempt's feedback, not its code
    (sequences stay short enough for a CPU)."""
    text = task_header(task)
    if prev_result is None:
        return text + "answer:\n"
    return text + f"fb {brief_feedback(prev_result)}\nfix:\n"


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
