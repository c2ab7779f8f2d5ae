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

from leap_agents.policies.prompts import kernel_name_of, short_id
from leap_gym.evaluation.parse import parse_response, strip_comments
from leap_gym.tasks import Task, load_tasks

#: End of every response and of every training sequence.
EOS = "<|eos|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [PAD, EOS]

def reference_cuda(task: Task, index: int = 0) -> str:
    """The `cuda` block of one of the task's reference solutions, comments stripped."""
    cuda = strip_comments(parse_response(task.reference_solutions[index], wrapper=task.wrapper).cuda)
    return "\n".join(line.rstrip() for line in cuda.splitlines() if line.strip()) + "\n"


def as_response(cuda: str) -> str:
    """A short-form response (only the ```cuda block) holding `cuda`."""
    return f"```cuda\n{cuda.rstrip()}\n```"


@dataclass
class Split:
    """Train and held-out task ids of the mini benchmark.

    The training tasks come in three tiers, set by what the warm-up teaches: `refine` tasks get buggy first
    drafts only (their reference is taught by repair examples alone: fixed with feedback, rarely solved at
    once), `unseen` tasks get no warm-up example (out of the warm-up policy's reach), and the rest are taught
    both ways (solved at once at a known rate).
    """

    train: list[str]
    held_out: list[str]
    seed: int = 0
    refine: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)

    @property
    def easy(self) -> list[str]:
        return [i for i in self.train if i not in self.refine and i not in self.unseen]

    def tier(self, task_id: str) -> str:
        """``"easy"``, ``"refine"``, ``"unseen"`` (training tiers) or ``"held_out"``."""
        if task_id in self.held_out:
            return "held_out"
        return "refine" if task_id in self.refine else "unseen" if task_id in self.unseen else "easy"

    def to_dict(self) -> dict:
        return {"train": self.train, "held_out": self.held_out, "seed": self.seed, "refine": self.refine,
                "unseen": self.unseen}


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


def make_split(tasks: list[Task], held_out: int = 6, seed: int = 0, refine: int = 0, unseen: int = 0) -> Split:
    """A seeded split: `held_out` tasks never trained on, the rest for warm-up and RL, of which `refine`
    and `unseen` are drawn into those tiers (see `Split`).

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
    train = [i for i in ids if i not in held]
    if refine + unseen >= len(train):
        raise ValueError(f"refine={refine} + unseen={unseen} leaves no easy task among {len(train)} training tasks")
    tiered = random.Random(seed + 1).sample(train, refine + unseen)
    return Split(train=train, held_out=held, seed=seed, refine=sorted(tiered[:refine]), unseen=sorted(tiered[refine:]))


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
