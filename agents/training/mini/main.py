"""``python -m leap_agents.training.mini``: a shortened LEAP training of the mini policy on the CPU.

Builds (first use) or loads (cached) the warm-up policy, judges it on the training and held-out
tasks, trains it with LEAP (DCP + rank reward) for a few steps with real compilation and real
kernel execution on the `cpu` backend, judges it again, and prints a summary table and writes a plot
of pass@1 against wall-clock. ``leap-train`` with no arguments runs it (about 6 minutes on two idle cores
from an empty cache, the warm-up's 4 included).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

from leap_agents.training.mini.data import mini_tasks
from leap_agents.training.mini.judge import Judge
from leap_agents.training.mini.rl import ArmConfig, ReferenceProbe, evaluate_policy, stats_dict, train_arm
from leap_agents.training.mini.warmup import WarmupConfig, pick_backend, warmup_policy
from leap_agents.training.run_record import mini_step_hook
from leap_gym.report import RunRecorder, write_report

log = logging.getLogger(__name__)


def _row(name: str, ev: dict) -> str:
    by_turn = " ".join(f"{x:.2f}" for x in ev["pass_by_turn"])
    return f"{name:<22} {ev['pass_at_1']:>7.2f}   {by_turn}"


def mini_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="leap-train (mini)", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--tasks-per-step", type=int, default=6)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--eval-samples", type=int, default=4, help="samples per task judged before and after")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--backend", default=None)
    p.add_argument("--out", default="leap_mini_run")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    policy, split, meta = warmup_policy(WarmupConfig(), backend=args.backend)
    warm_s = time.perf_counter() - t0
    by_id = {t.id: t for t in mini_tasks()}
    train = [by_id[i] for i in split.train]
    held = [by_id[i] for i in split.held_out]
    backend = args.backend or pick_backend()
    cfg = ArmConfig(arm="leap", steps=args.steps, tasks_per_step=args.tasks_per_step, group_size=args.group_size,
                    max_turns=args.max_turns)
    with Judge(backend) as judge:
        reference_p = ReferenceProbe(policy, train, cfg.temperature)()
        before = {"train": evaluate_policy(policy, train, judge, args.eval_samples, args.max_turns, cfg.temperature),
                  "held_out": evaluate_policy(policy, held, judge, args.eval_samples, args.max_turns, cfg.temperature)}
        with RunRecorder(args.out, "LEAP", cfg.arm, "leap-mini", cfg.max_turns, cfg.group_size, vars(cfg)) as rec:
            history = train_arm(policy, train, cfg, judge, on_step=mini_step_hook(rec, cfg.arm, cfg.gamma))
        after = {"train": evaluate_policy(policy, train, judge, args.eval_samples, args.max_turns, cfg.temperature),
                 "held_out": evaluate_policy(policy, held, judge, args.eval_samples, args.max_turns, cfg.temperature)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"warmup": meta, "warmup_seconds": warm_s, "before": before, "after": after,
              "history": [stats_dict(s) for s in history], "config": vars(args), "backend": backend}
    (out / "leap_mini.json").write_text(json.dumps(result, indent=1, default=str))
    _plot(history, out / "leap_mini.png", before["train"]["pass_at_1"], after["train"]["pass_at_1"], reference_p)
    write_report([out], out / "report.html")
    wall = sum(s.wall_s for s in history)
    print(f"\nLEAP-mini on the {backend} backend: warm-up {warm_s:.0f} s, LEAP {len(history)} steps in {wall:.0f} s "
          f"(generation {sum(s.generation_s for s in history):.0f} s, evaluation "
          f"{sum(s.evaluation_s for s in history):.0f} s, update {sum(s.update_s for s in history):.0f} s)")
    print(f"{'':<22} {'pass@1':>7}   pass by turn")
    for when, ev in (("before", before), ("after", after)):
        for part in ("train", "held_out"):
            print(_row(f"{when} / {part}", ev[part]))
    decisions: dict[str, int] = {}
    for s in history:
        for k, v in s.decisions.items():
            decisions[k] = decisions.get(k, 0) + v
    print(f"P(first-turn sample = reference), training tasks: {reference_p:.3f} -> {history[-1].reference_p:.3f}")
    print(f"DCP decisions: {decisions}")
    print(f"wrote {out / 'leap_mini.json'}, {out / 'leap_mini.png'} and {out / 'report.html'}")
    return 0


def _plot(history: list, path: Path, before: float | None = None, after: float | None = None,
          reference_p: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clock, t = [], 0.0
    for s in history:
        t += s.wall_s
        clock.append(t / 60)
    fig, ax = plt.subplots(figsize=(6, 4))
    raw = [s.pass_at_1 for s in history]
    smooth = [sum(raw[max(0, i - 2): i + 1]) / len(raw[max(0, i - 2): i + 1]) for i in range(len(raw))]
    ax.plot(clock, raw, marker="o", alpha=0.35, label="LEAP, each step's rollouts (first turn)")
    ax.plot(clock, smooth, linewidth=2.5, label="LEAP, mean of the last 3 steps")
    if reference_p is not None:
        ax.plot([0] + clock, [reference_p] + [s.reference_p for s in history], linewidth=2.5, color="tab:red",
                label="P(first-turn sample = reference), every training task")
    if before is not None and after is not None:
        ax.plot([0, clock[-1] if clock else 0], [before, after], "s--", color="black",
                label="judged on every training task, before and after")
    ax.set_xlabel("training wall-clock (min)")
    ax.set_ylabel("pass@1")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(mini_main())
