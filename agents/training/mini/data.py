"""LEAP-mini data: the task split, the compact prompts a small policy reads, and its short-form responses.

The mini policy answers level-1 tasks that ship a default wrapper, in the short form (a ```cuda block
only: docs/environment/response-format.md, "The short form"). Its prompt is a compact rendering, not the
environment's full prompt, so a model of a few million parameters trains and samples fast on a CPU:

    task relu: ReLU: y = max(x, 0), elementwise.
    sig relu_kernel(const float* x, float* y, int n)

and, from the second turn on, the status line and key facts of the previous attempt's feedback
(not its code: sequences stay short enough for a CPU):

    fb WRONG_OUTPUT max abs err 3.2, 50.00% mismatched, first at [256]
    fix:

The split is deterministic: a seeded draw of held-out tasks that no warm-up example, tokenizer merge
or RL step ever sees (`check_split` asserts it).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from leap_gym.evaluation.parse import FormatError, parse_response
from leap_gym.result import COMPILE_ERROR, CORRECT, FORMAT_ERROR, RUNTIME_ERROR, TIMEOUT, WRONG_OUTPUT, EvalResult
from leap_gym.tasks import Task, load_tasks

#: End of every response and of every training sequence.
EOS = "<|eos|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [PAD, EOS]

_LINE_COMMENT_RE = re.compile(r"//[^\n]*")
_BLOCK_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)


def strip_comments(cuda: str) -> str:
    """The CUDA source without comments, trailing spaces and blank lines (shorter training targets)."""
    cuda = _BLOCK_COMMENT_RE.sub("", cuda)
    cuda = _LINE_COMMENT_RE.sub("", cuda)
    lines = [line.rstrip() for line in cuda.splitlines()]
    return "\n".join(line for line in lines if line.strip()) + "\n"


def reference_cuda(task: Task, index: int = 0) -> str:
    """The `cuda` block of one of the task's reference solutions, comments stripped."""
    parsed = parse_response(task.reference_solutions[index], wrapper=task.wrapper)
    return strip_comments(parsed.cuda)


def as_response(cuda: str) -> str:
    """A short-form response (only the ```cuda block) holding `cuda`."""
    return f"```cuda\n{cuda.rstrip()}\n```"


def cuda_of(response: str) -> str:
    """The `cuda` block of a response, or the raw text when it has none (for the next prompt)."""
    try:
        return parse_response(response, wrapper="// short form").cuda
    except (FormatError, ValueError):
        return response


@dataclass
class Split:
    """Train and held-out task ids of the mini benchmark."""

    train: list[str]
    held_out: list[str]
    seed: int = 0
    excluded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"train": self.train, "held_out": self.held_out, "seed": self.seed, "excluded": self.excluded}


def mini_tasks(max_cuda_chars: int = 800) -> list[Task]:
    """The built-in level-1 tasks the mini policy can answer in the short form, at CPU sizes.

    A task qualifies when it ships a wrapper and its first reference `cuda` block (comments stripped)
    is at most `max_cuda_chars` long, which keeps every sequence within a few hundred tokens.
    """
    out = []
    for task in load_tasks("builtin"):
        if task.level != 1 or not task.has_wrapper or not task.reference_solutions:
            continue
        if len(reference_cuda(task)) <= max_cuda_chars:
            out.append(task.with_size("cpu"))
    return out


def make_split(tasks: list[Task], held_out: int = 6, seed: int = 0) -> Split:
    """A seeded split: `held_out` tasks never trained on, the rest for warm-up and RL.

    Elementwise tasks (the family a small model can carry to a new operator) are drawn for the
    held-out side in proportion to their share, so the held-out set is neither all easy nor all hard.
    """
    if held_out >= len(tasks):
        raise ValueError(f"held_out={held_out} leaves no training task among {len(tasks)}; use a smaller number")
    rng = random.Random(seed)
    ids = sorted(t.id for t in tasks)
    elementwise = [t.id for t in sorted(tasks, key=lambda t: t.id) if "elementwise" in t.tags]
    others = [i for i in ids if i not in elementwise]
    n_elem = round(held_out * len(elementwise) / len(ids))
    chosen = rng.sample(elementwise, min(n_elem, len(elementwise)))
    chosen += rng.sample(others, min(held_out - len(chosen), len(others)))
    held = sorted(chosen)
    return Split(train=[i for i in ids if i not in held], held_out=held, seed=seed)


def check_split(split: Split, training_texts: list[str], tasks_by_id: dict[str, Task]) -> None:
    """Raise if any held-out task's reference kernel (or its prompt as a training target) is in `training_texts`."""
    overlap = set(split.train) & set(split.held_out)
    if overlap:
        raise AssertionError(f"tasks {sorted(overlap)} are both train and held-out")
    for task_id in split.held_out:
        task = tasks_by_id[task_id]
        kernel_name = kernel_name_of(task)
        ref = reference_cuda(task)
        for text in training_texts:
            if (ref.strip() in text or f"task {short_id(task)}:" in text
                    or re.search(rf"\b{re.escape(kernel_name)}\s*\(", text)):
                raise AssertionError(f"held-out task {task_id} leaks into the training data")


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


def render_prompt(task: Task, prev_response: str | None = None, prev_result: EvalResult | None = None,
                  with_code: bool = False, max_prev_chars: int = 1400) -> str:
    """The mini policy's prompt: the task header, then (after turn 1) the last attempt's feedback.

    Args:
        with_code: also show the previous attempt's `cuda` block (longer sequences; off for the mini model).
    """
    text = task_header(task)
    if prev_result is not None:
        if with_code and prev_response is not None:
            prev = cuda_of(prev_response).strip()[:max_prev_chars]
            text += f"prev:\n```cuda\n{prev}\n```\n"
        text += f"fb {brief_feedback(prev_result)}\nfix:\n"
    else:
        text += "answer:\n"
    return text
