"""`leap-gym`: list tasks, evaluate a response file, check the installation, run a demo episode, report a run."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from pathlib import Path

DEMO_TASK = "level1/relu"
DEMO_RESPONSES = [
    # Turn 1: a missing semicolon.
    '''A first try at ReLU.

```cuda
extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
```''',
    # Turn 2: compiles, but clamps at the wrong value.
    '''Fixed the semicolon.

```cuda
extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 1.0f);
}
```''',
    # Turn 3: the fix.
    '''ReLU clamps at zero, not one.

```cuda
extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
```''',
]


def cmd_tasks(args: argparse.Namespace) -> int:
    import warnings

    from leap_gym.tasks import load_tasks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped files are listed below, with their reasons
        tasks = load_tasks(args.path or args.suite, max_numel=args.max_numel)
    skipped = list(getattr(tasks, "skipped", []))
    if args.json:
        print(json.dumps([{"id": t.id, "level": t.level, "tags": t.tags, "dtype": t.dtype,
                           "description": t.description, "short_form": t.has_wrapper} for t in tasks], indent=1))
        return 0
    print(f"{'id':34} {'dtype':9} {'short':5}  tags / description")
    for t in tasks:
        print(f"{t.id:34} {t.dtype:9} {'yes' if t.has_wrapper else 'no':5}  {','.join(t.tags)}: {t.description}")
    levels = sorted({t.level for t in tasks})
    print(f"\n{len(tasks)} tasks over levels {levels}")
    if args.path:
        print(f"loaded {len(tasks)}, skipped {len(skipped)}")
        for item in skipped:
            print(f"  skipped {item}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from leap_gym.evaluation.evaluator import Evaluator
    from leap_gym.evaluation.feedback import render_feedback
    from leap_gym.evaluation.pipeline import EvalConfig
    from leap_gym.evaluation.rewards import get_reward_fn
    from leap_gym.tasks import load_tasks

    tasks = {t.id: t for t in load_tasks(args.suite)}
    if args.task not in tasks:
        print(f"unknown task {args.task!r}; `leap-gym tasks` lists them", file=sys.stderr)
        return 2
    response = Path(args.response).read_text(errors="replace")
    with Evaluator(EvalConfig(backend=args.backend, timeout_s=args.timeout)) as evaluator:
        task = tasks[args.task].with_size(args.size or evaluator.backend.size_preset)
        result = evaluator.evaluate(task, response)
    print(render_feedback(result, 1, 1, args.feedback_tokens))
    print(f"\nreward ({args.reward}): {get_reward_fn(args.reward)(result):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1, default=str))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from leap_gym.evaluation.parse import python_only_block
    from leap_gym.kernelbench import convert_answer

    text = Path(args.answer).read_text(errors="replace")
    found = python_only_block(text)
    converted = convert_answer(found[0] if found else text)
    if converted.error:
        print(f"cannot convert {args.answer}: {converted.error}", file=sys.stderr)
        return 1
    print(f"```cuda\n{converted.cuda}```\n\n```python\n{converted.python}```")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from leap_gym.backends.base import backend_names, get_backend
    from leap_gym.backends.nvrtc import include_dirs, nvrtc_version

    rows = [("python", platform.python_version()), ("platform", platform.platform())]
    try:
        import torch

        rows.append(("torch", f"{torch.__version__} (cuda available: {torch.cuda.is_available()})"))
    except ImportError:
        rows.append(("torch", "missing: pip install torch"))
    try:
        rows.append(("nvrtc", nvrtc_version()))
    except Exception as exc:
        rows.append(("nvrtc", f"unavailable: {exc}"))
    try:
        import triton

        rows.append(("triton", f"{triton.__version__} (Triton responses; cpu: Triton's interpreter)"))
    except ImportError:
        rows.append(("triton", "missing (Triton responses): pip install 'leap-gym[triton]'"))
    rows.append(("cuda headers", ", ".join(include_dirs()) or "missing: pip install 'nvidia-cuda-runtime>=13,<14'"))
    for compiler in ("g++", "clang++", "nvcc"):
        rows.append((compiler, shutil.which(compiler) or "not found"))
    for name in backend_names():
        if name == "auto":
            continue
        try:
            available = get_backend(name).availability()
            rows.append((f"backend {name}", "available" if available.ok else f"unavailable: {available.reason}"))
        except Exception as exc:
            rows.append((f"backend {name}", f"unavailable: {exc}"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:{width}}  {value}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import leap_gym  # noqa: F401  (registers the environment)

    env = gym.make("KernelDebugEnv-v0", backend=args.backend, max_turns=len(DEMO_RESPONSES))
    obs, info = env.reset(seed=0, options={"task_id": DEMO_TASK})
    print(f"=== task prompt ({info['task_id']}) ===\n{obs}\n")
    for response in DEMO_RESPONSES:
        obs, reward, terminated, truncated, info = env.step(response)
        print(f"=== turn {info['turn']}: response ===\n{response}\n")
        print(f"=== feedback (reward {reward:g}) ===\n{obs}\n")
        if terminated or truncated:
            break
    env.close()
    final = info["result"]
    print(f"episode ended after {info['turn']} turns: {final.status}")
    return 0 if final.correct else 1


def cmd_report(args: argparse.Namespace) -> int:
    from leap_gym.report import write_report

    try:
        info = write_report(args.runs, args.output)
    except (FileNotFoundError, ValueError) as exc:
        print(f"leap-gym report: {exc}", file=sys.stderr)
        return 2
    sampled = [f"{shown} of {total}" for shown, total in zip(info.groups_shown, info.groups_total) if shown < total]
    print(f"wrote {info.path} ({info.bytes / 1e6:.2f} MB)" + (f"; groups sampled per step: {', '.join(sampled)}"
                                                              if sampled else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leap-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("tasks", help="list the task suite, or load a folder of KernelBench files")
    p.add_argument("path", nargs="?", default=None, help="a folder of KernelBench task files (default: --suite)")
    p.add_argument("--suite", default="builtin", help="'builtin' or a folder of KernelBench task files")
    p.add_argument("--max-numel", type=int, default=None, help="shrink sizes to at most this many input elements")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(fn=cmd_tasks)
    p = sub.add_parser("eval", help="evaluate a response file on a task; print the feedback and the reward")
    p.add_argument("task", help="task id, e.g. level1/relu")
    p.add_argument("response", help="file holding the response text")
    p.add_argument("--suite", default="builtin")
    p.add_argument("--backend", default="cpu", help="cpu, cuda, compile-only or auto")
    p.add_argument("--size", default=None, help="size preset (default: the backend's)")
    p.add_argument("--reward", default="binary", help="binary, speedup or tiered")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before the evaluation is killed")
    p.add_argument("--feedback-tokens", type=int, default=2048)
    p.add_argument("--json", default=None, help="also write the EvalResult as JSON to this file")
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("convert", help="convert a KernelBench-style answer (load_inline) to the native format")
    p.add_argument("answer", help="file holding the answer (its Python, or a whole response)")
    p.set_defaults(fn=cmd_convert)
    p = sub.add_parser("doctor", help="report NVRTC, GPU, host compiler and backends")
    p.set_defaults(fn=cmd_doctor)
    p = sub.add_parser("demo", help="a short scripted episode: a broken kernel, then the fix")
    p.add_argument("--backend", default="cpu")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("report", help="a self-contained HTML report of a training run, or of two side by side")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run folder(s) written by leap-train: RUN_DIR [OTHER_RUN_DIR]")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write")
    p.set_defaults(fn=cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
