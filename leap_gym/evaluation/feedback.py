"""Observation text: the task prompt, and the feedback on each response, trimmed to a token budget."""

from __future__ import annotations

from leap_gym.result import COMPILE_ERROR, COMPILED, CORRECT, FORMAT_ERROR, EvalResult
from leap_gym.tasks import Task

CHARS_PER_TOKEN = 4  # a plain budget estimate: code averages about four characters per token

RESPONSE_FORMAT = '''Answer with one ```cuda block and one ```python block:

```cuda
extern "C" __global__ void scale_kernel(const float* x, float* y, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
```

```python
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, alpha):          # the same constructor arguments as Model
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        y = torch.empty_like(x)         # allocate outputs; no torch compute operators here
        n = x.numel()
        kernels.scale_kernel(((n + 255) // 256,), (256,), x, y, self.alpha, n)
        return y
```

Kernels are `extern "C" __global__` functions; `kernels.<name>(grid, block, *args, shared_mem=0)`
launches one (tensors pass as device pointers, Python ints and floats as the kernel's scalar types).'''


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def input_shapes(task: Task) -> str:
    import torch

    namespace = task.module()
    with torch.device("meta"):
        inputs = namespace["get_inputs"]()
    init = namespace["get_init_inputs"]()
    parts = [f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')}" if isinstance(x, torch.Tensor) else repr(x)
             for x in inputs]
    return f"inputs: {', '.join(parts)}; constructor arguments: {list(init)!r}"


def render_prompt(task: Task, max_turns: int, mode: str = "debug") -> str:
    """The first observation: the reference program, shapes, response format and turn budget."""
    goal = ("Write a correct CUDA implementation" if mode == "debug" else
            f"Write a correct CUDA implementation at least {task.target_speedup:g}x faster than the reference")
    parts = [
        f"Task {task.id}: {task.description}",
        f"{goal} of the PyTorch program below as `ModelNew`.",
        f"```python\n{task.source.split('LEAP_TASK')[0].rstrip()}\n```",
        f"Sizes ({task.size or 'file'} preset): {input_shapes(task)}",
        RESPONSE_FORMAT,
    ]
    if task.has_wrapper:
        parts.append("Short form: this task ships a default wrapper, so a response with only the ```cuda block "
                     f"is complete. It launches\n    {task.wrapper_signature}\nas follows:\n"
                     f"```python\n{task.wrapper.strip()}\n```")
    parts.append(f"You have {max_turns} turn{'s' if max_turns != 1 else ''}; after each you get the compiler, "
                 "runtime and correctness feedback.")
    return "\n\n".join(parts)


def _section(title: str, lines: list[str]) -> str:
    return title + "\n" + "\n".join(lines) if lines else ""


def _compile_lines(result: EvalResult) -> list[str]:
    lines = []
    for d in result.diagnostics:
        if d.severity != "error":
            continue
        lines.append(f"line {d.line}: error: {d.message}" if d.line else f"error: {d.message}")
        if d.source_line is not None:
            lines.append(f"    {d.line} | {d.source_line}")
    return lines


def _mismatch_lines(result: EvalResult) -> list[str]:
    m = result.mismatch
    if m is None:
        return []
    lines = [f"output {m.output_index}: expected shape {m.shape_expected} {m.dtype_expected}, "
             f"got {m.shape_actual} {m.dtype_actual} (trial {m.trial})"]
    if m.max_abs_error is not None:
        lines.append(f"max abs error {m.max_abs_error:.4g}, max rel error {m.max_rel_error:.4g}, "
                     f"{100 * (m.fraction_mismatched or 0):.2f}% of values mismatched, first at index {m.first_index}")
        lines += [f"  at {idx}: expected {exp:.6g}, got {act:.6g}" for idx, exp, act in m.samples]
    return lines


def _resource_lines(result: EvalResult) -> list[str]:
    lines = []
    for name, r in sorted(result.resources.items()):
        occ = f", occupancy {100 * r.theoretical_occupancy:.0f}%" if r.theoretical_occupancy is not None else ""
        spill = f", spills {r.spill_stores_bytes}B stores/{r.spill_loads_bytes}B loads" if (
            r.spill_stores_bytes or r.spill_loads_bytes) else ", no spills"
        lines.append(f"  {name}: {r.registers} registers, {r.shared_mem_bytes} B shared memory{spill}{occ}")
    return lines


def render_feedback(result: EvalResult, turn: int, max_turns: int, token_budget: int = 1024) -> str:
    """Feedback on one response: the status first, then what a kernel engineer would look at."""
    head = f"{result.status}: {result.message}".rstrip(": ")
    sections: list[str] = []
    if result.status == FORMAT_ERROR:
        pass
    elif result.status == COMPILE_ERROR:
        sections.append(_section("Compiler errors:", _compile_lines(result)))
    elif result.status == CORRECT:
        t = result.timing
        if t is not None:
            sections.append(f"Time: {t.kernel_ms:.4f} ms (±{t.kernel_spread_ms:.4f}), reference {t.reference_ms:.4f} ms "
                            f"(±{t.reference_spread_ms:.4f}), speedup {t.speedup:.2f}x over {t.trials} trials")
        else:
            sections.append(f"Correctness checked on the {result.backend} backend; it reports no timing.")
        sections.append(_section("Kernel resources (sm target):", _resource_lines(result)))
    elif result.status == COMPILED:
        sections.append(_section("Kernel resources:", _resource_lines(result)))
    else:
        sections.append(_section("Details:", _mismatch_lines(result)))
        if result.errors and result.errors != [result.message]:
            sections.append(_section("Error:", result.errors))
    if result.device_output:
        sections.append(_section("Device printf output:", result.device_output.splitlines()))
    remaining = max_turns - turn
    tail = (f"Turn {turn} of {max_turns}: {remaining} turn{'s' if remaining != 1 else ''} left."
            if remaining > 0 else f"Turn {turn} of {max_turns}: no turns left.")
    return _trim([head, *[s for s in sections if s]], tail, token_budget)


def _trim(parts: list[str], tail: str, token_budget: int) -> str:
    """Join parts and the tail, cutting the longest part (lines first, then characters) until it fits."""
    budget = max(token_budget * CHARS_PER_TOKEN, 200) - len(tail) - 2
    parts = list(parts)

    def size() -> int:
        return sum(len(p) + 2 for p in parts)

    while size() > budget:
        longest = max(range(len(parts)), key=lambda i: len(parts[i]))
        lines = parts[longest].splitlines()
        if len(lines) > 3:
            keep = max(2, len(lines) * 2 // 3)
            parts[longest] = "\n".join([*lines[:keep], f"... ({len(lines) - keep} more lines)"])
            continue
        cut = max(60, len(parts[longest]) - (size() - budget) - 12)
        if cut >= len(parts[longest]) - 12:
            break
        parts[longest] = parts[longest][:cut] + " ... (cut)"
    return "\n\n".join(parts)[:budget] + "\n\n" + tail
