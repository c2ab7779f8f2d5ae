"""How much of one training step's policy gradient is signal, and how much is the noise of its rollouts.

The trainer of a preset and arm runs K training steps from its start policy, each with its own rollouts, rewards and
loss (the trainer's own), but a stand-in optimizer keeps each step's gradient and leaves the weights alone: K
independent gradients of one policy. If each is g_b = s + n_b, with s the expected gradient and n_b zero-mean noise
independent across steps, the mean inner product of two steps' gradients estimates |s|^2 and their mean squared norm
|s|^2 + E|n|^2; the ratio is the signal share. Noise falls as 1/batch, so a share p at B trajectories per step
reaches 0.5 at about B (1 - p) / p. A share whose interval holds 0 means a step's gradient has no direction that
the other steps' agree with. The share weighs each step by its gradient's size; the mean cosine of two steps'
gradients, also printed, weighs every step alike.

Two step directions from one gradient are also set against the mean of the other steps' gradients (an unbiased
estimate of s): the gradient itself (SGD) and its sign (Adam's first step, lr times the sign of each coordinate).
Each is the first-order gain of the training objective per unit of step length; 0 means the direction is noise.

    python benchmarks/gradient_noise.py                                      # LEAP-mini, LEAP, 10 steps
    python benchmarks/gradient_noise.py --preset smollm2 --arm multi_turn --set split=train --set task_ids= \\
        --steps 10 --threads 2                                               # the SmolLM2 race's multi-turn arm
    python benchmarks/gradient_noise.py --preset smollm2 --arm multi_turn --set split=train \\
        --set task_ids=level1/mul,level1/mean_dim,level1/gelu_erf,level1/embedding --steps 8   # the same tasks each step
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

import torch

from leap_agents.training.callbacks import TrainerCallback
from leap_agents.training.config import ARMS, arm_config, load_config
from leap_agents.training.trainer import LeapTrainer


class GradientRecorder(torch.optim.Optimizer):
    """Stands in for the trainer's optimizer: each `step` keeps the gradient (float64, flat) and moves nothing."""

    def __init__(self, params):
        super().__init__(list(params), {})
        self.gradients: list[torch.Tensor] = []

    @torch.no_grad()
    def step(self, closure=None):
        self.gradients.append(torch.cat([
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten().double().cpu()
            for group in self.param_groups for p in group["params"]]))


class StepTasks(TrainerCallback):
    """The task ids of each step's rollouts."""

    def __init__(self):
        self.tasks: list[set[str]] = []

    def on_step_end(self, trainer, metrics, batch) -> None:
        self.tasks.append({t.task_id for t in batch.trajectories})


def signal_share(grads: torch.Tensor) -> dict[str, float]:
    """The share of E|g|^2 that is |E g|^2, from K independent gradients (rows), with a leave-one-out jackknife
    standard error."""
    def share(gram: torch.Tensor) -> float:
        k = len(gram)
        squares = gram.diagonal().sum()
        cross = (gram.sum() - squares) / (k * (k - 1))
        return float(cross / (squares / k))

    k = len(grads)
    gram = grads @ grads.T  # every fold is a submatrix of it
    full = share(gram)
    folds = [share(gram[rest][:, rest]) for rest in ([j for j in range(k) if j != i] for i in range(k))]
    mean_fold = sum(folds) / k
    se = ((k - 1) / k * sum((f - mean_fold) ** 2 for f in folds)) ** 0.5
    return {"share": full, "share_se": se}


def direction_gains(grads: torch.Tensor) -> dict[str, dict[str, float]]:
    """Per direction (SGD: the gradient; sign: Adam's first step), the first-order gain per unit step length against
    the mean of the other gradients, averaged over the K choices of the step's own gradient (mean and standard
    error)."""
    k = len(grads)
    total = grads.sum(0)
    out = {}
    for name, direction in (("sgd", lambda g: g), ("sign", torch.sign)):
        gains = []
        for i in range(k):
            u = direction(grads[i])
            others = (total - grads[i]) / (k - 1)
            gains.append(float(u @ others / u.norm()))
        mean = sum(gains) / k
        se = (sum((x - mean) ** 2 for x in gains) / (k - 1) / k) ** 0.5
        out[name] = {"gain_per_unit_step": mean, "se": se}
    return out


def pairwise_cosines(grads: torch.Tensor, tasks: list[set[str]]) -> dict[str, list[float]]:
    """Cosine of each pair of gradients, split by whether the two steps shared a task."""
    norms = grads.norm(dim=1)
    out: dict[str, list[float]] = {"shared_task": [], "disjoint": []}
    for a, b in itertools.combinations(range(len(grads)), 2):
        cos = float(grads[a] @ grads[b] / (norms[a] * norms[b]))
        out["shared_task" if tasks[a] & tasks[b] else "disjoint"].append(cos)
    return out


def measure(args: argparse.Namespace) -> dict:
    overrides = [tuple(item.split("=", 1)) for item in args.set]
    config = arm_config(load_config(args.config, args.preset if not args.config else None, overrides), args.arm)
    # one gradient per step, clipped as the update clips it; the KL penalty's gradient is 0 at the start policy
    config.optim.epochs, config.optim.mini_batches, config.optim.kl_coef = 1, 1, 0.0
    config.run.probe, config.run.resume, config.run.tensorboard, config.run.save_every = "", False, False, 10 ** 9
    config.run.eval_samples, config.run.threads = 0, args.threads
    config.run.seed = args.seed
    with tempfile.TemporaryDirectory() as tmp:
        config.run.output_dir = args.runs_dir or tmp
        step_tasks = StepTasks()
        trainer = LeapTrainer(config, callbacks=[step_tasks])
        recorder = GradientRecorder(p for p in trainer.model.parameters() if p.requires_grad)
        trainer.optimizer = recorder
        steps = []
        for _ in range(args.steps):
            before = len(recorder.gradients)
            metrics = trainer.train_step()
            trained = len(recorder.gradients) > before
            steps.append({"step": trainer.step, "pass_at_1": metrics["pass_at_1"], "samples": metrics["samples"],
                          "trained_tokens": metrics["trained_tokens"], "grad_norm": metrics["grad_norm"],
                          "time_generation": metrics["time_generation"], "time_update": metrics["time_update"],
                          "tasks": sorted(step_tasks.tasks[-1]), "trained": trained})
            print(f"step {trainer.step:3d}  pass@1 {metrics['pass_at_1']:.3f}  samples {metrics['samples']:4.0f}  "
                  f"tokens {metrics['trained_tokens']:6.0f}  |g| {metrics['grad_norm']:.4f}"
                  + ("" if trained else "  (no sample with an advantage: no gradient)"), flush=True)
    grads = recorder.gradients  # one per trained step
    tasks = [set(s["tasks"]) for s in steps if s["trained"]]
    result = {"preset": args.preset, "config": args.config, "arm": args.arm, "set": args.set, "seed": args.seed,
              "trajectories_per_step": config.run.tasks_per_step * config.rollout.group_size,
              "parameters": int(grads[0].numel()) if grads else 0, "steps": steps, "gradients": len(grads)}
    if len(grads) < 3:
        result["error"] = f"{len(grads)} steps had a gradient; the statistics need at least 3"
        return result
    g = torch.stack(grads)
    result.update(signal_share(g))
    result["directions"] = direction_gains(g)
    cosines = pairwise_cosines(g, tasks)
    result["cosine"] = {key: {"pairs": len(v), "mean": sum(v) / len(v) if v else None} for key, v in cosines.items()}
    result["cosine"]["all_pairs_mean"] = sum(cosines["shared_task"] + cosines["disjoint"]) / (len(g) * (len(g) - 1) // 2)
    return result


def report(result: dict) -> None:
    if "error" in result:
        print(result["error"])
        return
    b = result["trajectories_per_step"]
    share, se = result["share"], result["share_se"]
    print(f"\n{result['gradients']} gradients of {result['parameters']:,} parameters, {b} trajectories per step")
    print(f"signal share of a step's gradient: {share:.3f} (standard error {se:.3f})")
    upper = share + 2 * se
    if share - 2 * se > 0:
        print(f"  signal and noise weigh the same at about {b * (1 - share) / share:.0f} trajectories per step")
    elif upper > 0:
        print(f"  no signal detected; below share {upper:.3f}, signal and noise would weigh the same only beyond "
              f"{b * (1 - upper) / upper:.0f} trajectories per step")
    else:
        print("  no signal detected")
    c = result["cosine"]
    print(f"cosine of two steps' gradients: {c['all_pairs_mean']:.3f} over all pairs; "
          + ", ".join(f"{k.replace('_', ' ')} {v['mean']:.3f} ({v['pairs']} pairs)"
                      for k, v in c.items() if isinstance(v, dict) and v["mean"] is not None))
    d = result["directions"]
    print("first-order gain per unit step against the other steps' mean gradient: "
          f"SGD {d['sgd']['gain_per_unit_step']:.2e} (se {d['sgd']['se']:.1e}), "
          f"sign (Adam's first step) {d['sign']['gain_per_unit_step']:.2e} (se {d['sign']['se']:.1e})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="leap-mini", help="the leap-train preset (default: LEAP-mini)")
    p.add_argument("--config", help="a leap-train config file instead of the preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--arm", default="leap", choices=sorted(ARMS))
    p.add_argument("--steps", type=int, default=10, help="independent rollout batches (training steps without a move)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--runs-dir", help="keep the run's logs here (default: a temporary folder)")
    p.add_argument("--out", type=Path, help="write the result as JSON")
    args = p.parse_args(argv)
    result = measure(args)
    report(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
