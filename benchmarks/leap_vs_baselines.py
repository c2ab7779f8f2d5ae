"""LEAP-mini: LEAP against single-turn GRPO and full multi-turn refinement (Kevin, gamma 0.4), on a CPU.

All three arms start from the same cached warm-up checkpoint (`leap_agents.training.mini.warmup`), with the same
seeds and the same prompt budget (tasks per step x group size x steps), real NVRTC compilation and
real kernel execution on the `cpu` backend. Every step records pass@1 and pass by turn of its
rollout (on-policy, before the update; the training tasks), the wall-clock split into generation,
evaluation and update, turns spent and DCP decisions. Held-out tasks (never trained on) are judged
at the start and at the end of every run, outside the timed training clock.

Printed at the end, side by side: first and final pass@1 per arm (mean over seeds), pass@1 on every
training task after training (``--eval-train``), the ratio of wall-clock the full multi-turn arm
needs to reach its own final pass@1 to the wall-clock LEAP needs to reach it, and whether the
multi-turn arm learned at all (without learning the ratio only compares the cost of steps).
Written: ``leap_vs_baselines.json`` and ``leap_vs_baselines.png`` (pass@1 against wall-clock, one
line per arm, spread shaded).

    python benchmarks/leap_vs_baselines.py --eval-train   # the full run: 3 seeds x 24 steps, 35 min on 2 cores
    python benchmarks/leap_vs_baselines.py --quick        # a few minutes: 1 seed, 2 steps, small batches
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

from leap_agents.training.mini.judge import Judge
from leap_agents.training.mini.rl import ARMS, ArmConfig, evaluate_policy, stats_dict, train_arm
from leap_agents.training.mini.warmup import WarmupConfig, pick_backend, warmup_policy
from leap_agents.training.run_record import mini_step_hook
from leap_gym.report import RunRecorder, write_report

log = logging.getLogger("leap_vs_baselines")
ARM_LABELS = {"leap": "LEAP", "multi_turn": "multi-turn (Kevin)", "single_turn": "single-turn GRPO"}


def smoothed(values: list[float], window: int) -> list[float]:
    """Trailing mean over `window` steps (pass@1 of one step's rollout is a small-sample estimate)."""
    return [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
            for i in range(len(values))]


def arm_curve(runs: list[dict], window: int) -> dict[str, list[float]]:
    """Per step: mean cumulative wall-clock, mean and spread of smoothed pass@1 over the arm's seeds."""
    steps = min(len(r["history"]) for r in runs)
    times, means, lo, hi = [], [], [], []
    per_seed = [smoothed([h["pass_at_1"] for h in r["history"]], window) for r in runs]
    clocks = [[sum(h["wall_s"] for h in r["history"][: i + 1]) for i in range(steps)] for r in runs]
    for i in range(steps):
        vals = [p[i] for p in per_seed]
        m = statistics.fmean(vals)
        sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
        times.append(statistics.fmean(c[i] for c in clocks))
        means.append(m)
        lo.append(m - sd)
        hi.append(m + sd)
    return {"wall_s": times, "pass_at_1": means, "low": lo, "high": hi}


def time_to_reach(curve: dict[str, list[float]], target: float) -> float | None:
    """Wall-clock of the first step whose smoothed mean pass@1 is at least `target`."""
    for t, p in zip(curve["wall_s"], curve["pass_at_1"]):
        if p >= target - 1e-9:
            return t
    return None


def plot(curves: dict[str, dict[str, list[float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, c in curves.items():
        minutes = [t / 60 for t in c["wall_s"]]
        ax.plot(minutes, c["pass_at_1"], marker="o", label=arm)
        ax.fill_between(minutes, c["low"], c["high"], alpha=0.2)
    ax.set_xlabel("training wall-clock (min): generation + evaluation + update")
    ax.set_ylabel("pass@1 (training rollouts, smoothed)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    warm_cfg = WarmupConfig(sft_steps=args.sft_steps)
    t0 = time.perf_counter()
    policy, split, warm_meta = warmup_policy(warm_cfg, backend=args.backend)
    warm_s = time.perf_counter() - t0
    from leap_agents.training.mini.data import mini_tasks

    by_id = {t.id: t for t in mini_tasks()}
    train = [by_id[i] for i in split.train]
    held = [by_id[i] for i in split.held_out]
    backend = args.backend or pick_backend()
    start_state = copy.deepcopy(policy.model.state_dict())
    runs: dict[str, list[dict]] = {arm: [] for arm in args.arms}
    with Judge(backend, workers=args.workers) as judge:
        initial = {"held_out": evaluate_policy(policy, held, judge, args.eval_samples, args.max_turns, args.temperature)}
        if args.eval_train:
            initial["train"] = evaluate_policy(policy, train, judge, args.eval_samples, args.max_turns, args.temperature)
    log.info("warm-up policy: held-out pass@1 %.2f by turn %s", initial["held_out"]["pass_at_1"],
             initial["held_out"]["pass_by_turn"])
    for seed in range(args.seeds):
        for arm in args.arms:
            policy.model.load_state_dict(start_state)
            cfg = ArmConfig(arm=arm, steps=args.steps, tasks_per_step=args.tasks_per_step, group_size=args.group_size,
                            max_turns=args.max_turns, lr=args.lr, temperature=args.temperature,
                            seed=seed)
            # A fresh response memo per run; the workers' compile cache on disk is shared (see --arms).
            with Judge(backend, workers=args.workers) as judge:
                judge([(train[0], "```cuda\n" + "// warm the worker\n```")])  # start workers off the clock
                if args.runs_dir:
                    with RunRecorder(Path(args.runs_dir) / f"{arm}-seed{seed}", ARM_LABELS[arm], arm, "leap_vs_baselines",
                                     cfg.max_turns, cfg.group_size, vars(cfg)) as rec:
                        history = train_arm(policy, train, cfg, judge, on_step=mini_step_hook(rec, arm, cfg.gamma))
                else:
                    history = train_arm(policy, train, cfg, judge)
                final = {"held_out": evaluate_policy(policy, held, judge, args.eval_samples, args.max_turns, args.temperature)}
                if args.eval_train:
                    final["train"] = evaluate_policy(policy, train, judge, args.eval_samples, args.max_turns, args.temperature)
            runs[arm].append({"seed": seed, "config": vars(cfg) if hasattr(cfg, "__dict__") else {},
                              "history": [stats_dict(s) for s in history], "final": final})
            log.info("%s seed %d done: train pass@1 %.2f (last step), held-out %.2f, wall %.0f s", arm, seed,
                     history[-1].pass_at_1, final["held_out"]["pass_at_1"], sum(s.wall_s for s in history))
    curves = {arm: arm_curve(rs, args.window) for arm, rs in runs.items() if rs}
    summary = summarize(runs, curves, initial)
    return {"args": vars(args), "backend": backend, "split": split.to_dict(), "warmup": warm_meta,
            "warmup_seconds": warm_s, "initial": initial, "runs": runs, "curves": curves, "summary": summary}


def summarize(runs: dict[str, list[dict]], curves: dict[str, dict[str, list[float]]], initial: dict) -> dict:
    out: dict = {"arms": {}}
    for arm, rs in runs.items():
        if not rs:
            continue
        final = [curves[arm]["pass_at_1"][-1]]
        held = [r["final"]["held_out"]["pass_at_1"] for r in rs]
        walls = [sum(h["wall_s"] for h in r["history"]) for r in rs]
        split = {k: statistics.fmean(sum(h[k] for h in r["history"]) for r in rs)
                 for k in ("generation_s", "evaluation_s", "update_s")}
        turns = statistics.fmean(sum(sum(h["turn_counts"]) for h in r["history"]) for r in rs)
        decisions: dict[str, int] = {}
        for r in rs:
            for h in r["history"]:
                for k, v in h["decisions"].items():
                    decisions[k] = decisions.get(k, 0) + v
        out["arms"][arm] = {
            "first_pass_at_1_smoothed": curves[arm]["pass_at_1"][0],
            "final_pass_at_1_smoothed": final[0],
            "final_pass_at_1_per_seed": [r["history"][-1]["pass_at_1"] for r in rs],
            "held_out_pass_at_1": statistics.fmean(held), "held_out_spread": statistics.pstdev(held) if len(held) > 1 else 0,
            "held_out_pass_by_turn": [statistics.fmean(x) for x in zip(*[r["final"]["held_out"]["pass_by_turn"] for r in rs])],
            "wall_s": statistics.fmean(walls), "wall_split_s": split, "turns": turns, "decisions": decisions,
        }
        if all("train" in r["final"] for r in rs):
            out["arms"][arm]["train_eval_pass_at_1"] = statistics.fmean(r["final"]["train"]["pass_at_1"] for r in rs)
            out["arms"][arm]["train_eval_pass_by_turn"] = [
                statistics.fmean(x) for x in zip(*[r["final"]["train"]["pass_by_turn"] for r in rs])]
    if "multi_turn" in curves and "leap" in curves:
        target = curves["multi_turn"]["pass_at_1"][-1]
        t_base = time_to_reach(curves["multi_turn"], target)
        t_leap = time_to_reach(curves["leap"], target)
        out["target_pass_at_1"] = target
        out["multi_turn_time_to_target_s"] = t_base
        out["leap_time_to_target_s"] = t_leap
        out["speedup_leap_vs_multi_turn"] = (t_base / t_leap) if (t_base and t_leap) else None
        # Did the baseline learn? Judged on every training task (--eval-train), else on its rollout curve.
        before = initial["train"]["pass_at_1"] if "train" in initial else curves["multi_turn"]["pass_at_1"][0]
        after = out["arms"]["multi_turn"].get("train_eval_pass_at_1", target)
        out["multi_turn_learned"] = after > before
        out["multi_turn_before_after"] = [before, after]
    return out


def print_summary(result: dict) -> None:
    s = result["summary"]
    print(f"\nLEAP-mini on the {result['backend']} backend; warm-up {result['warmup_seconds']:.0f} s "
          f"({result['warmup'].get('parameters', 0) / 1e6:.2f}M parameters); held-out before RL: "
          f"{result['initial']['held_out']['pass_at_1']:.2f}")
    print(f"{'arm':<12} {'pass@1 first -> last':>20} {'train eval':>10} {'held-out':>9} {'wall s':>7} {'gen s':>6} "
          f"{'eval s':>7} {'upd s':>6} {'turns':>6}")
    for arm, a in s["arms"].items():
        w = a["wall_split_s"]
        train = f"{a['train_eval_pass_at_1']:.2f}" if "train_eval_pass_at_1" in a else "-"
        print(f"{arm:<12} {a['first_pass_at_1_smoothed']:>12.2f} -> {a['final_pass_at_1_smoothed']:.2f} {train:>10} "
              f"{a['held_out_pass_at_1']:>9.2f} {a['wall_s']:>7.0f} {w['generation_s']:>6.0f} {w['evaluation_s']:>7.0f} "
              f"{w['update_s']:>6.0f} {a['turns']:>6.0f}")
    if "target_pass_at_1" in s:
        ratio = s["speedup_leap_vs_multi_turn"]
        print(f"target (multi-turn's final smoothed pass@1): {s['target_pass_at_1']:.2f}; multi-turn reaches it at "
              f"{s['multi_turn_time_to_target_s'] or float('nan'):.0f} s, LEAP at "
              + (f"{s['leap_time_to_target_s']:.0f} s" if s["leap_time_to_target_s"] else "never (within its steps)"))
        print("wall-clock ratio multi-turn / LEAP to that pass@1: " + (f"{ratio:.2f}x" if ratio else "n/a"))
        before, after = s["multi_turn_before_after"]
        if not s["multi_turn_learned"]:
            print(f"multi-turn did not learn (pass@1 on the training tasks {before:.2f} before, {after:.2f} after): "
                  "its target is a level the warm-up policy already had, so the ratio compares the cost of "
                  "steps, not the speed of learning")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few-minute version: 1 seed, 2 steps, small batches")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--tasks-per-step", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--lr", type=float, default=ArmConfig().lr)
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (training and evaluation)")
    p.add_argument("--sft-steps", type=int, default=WarmupConfig().sft_steps)
    p.add_argument("--eval-samples", type=int, default=2, help="samples per held-out task at start and end")
    p.add_argument("--eval-train", action="store_true", help="also judge every training task at the end")
    p.add_argument("--window", type=int, default=3, help="steps in the pass@1 smoothing window")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (more than 1 is far slower on a loaded 2-core box)")
    p.add_argument("--backend", default=None, help="cpu (default where available) or compile-only")
    p.add_argument("--arms", nargs="+", default=["leap", "multi_turn", "single_turn"], choices=ARMS,
                   help="run order; the evaluation workers share a compile cache, so later arms find more kernels "
                        "already built: LEAP runs first, which can only favour the baselines")
    p.add_argument("--out", default="benchmarks/results", help="folder of the JSON and the plot")
    p.add_argument("--runs-dir", default=None, help="also write each arm and seed's run log to DIR/<arm>-seed<n> "
                                                    "and a report of the arms of seed 0 to DIR/report.html")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.tasks_per_step, args.group_size, args.window = 1, 2, 3, 2, 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "leap_vs_baselines.json").write_text(json.dumps(result, indent=1, default=str))
    plot(result["curves"], out / "leap_vs_baselines.png",
         f"LEAP-mini, {args.seeds} seed(s), {args.steps} steps x {args.tasks_per_step} tasks x G={args.group_size}")
    print_summary(result)
    print(f"\nwrote {out / 'leap_vs_baselines.json'} and {out / 'leap_vs_baselines.png'}")
    if args.runs_dir:
        write_report([Path(args.runs_dir) / f"{arm}-seed0" for arm in args.arms], Path(args.runs_dir) / "report.html")
        print(f"wrote {Path(args.runs_dir) / 'report.html'}")


if __name__ == "__main__":
    main()
