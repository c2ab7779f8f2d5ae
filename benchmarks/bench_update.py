"""The update before and after: one training step's update at the race's settings, side by side.

One rollout step of a preset (by default the SmolLM2 race's: the `smollm2` preset over LEAP-mini's 19 training
tasks, 4 per step, G=8, 2 turns), its rewards shaped, then `LeapTrainer.update` on that batch three times from the
same weights and optimizer state:

- before: every sample's prompt and response as one right-padded sequence per row, the vocabulary projection at
  every position (how `response_logprobs` scored before), and a scoring pass for the ratio's denominator before
  the update's own forward pass;
- shared prompts: `leap_agents.training.logprobs.response_logprobs` as it is now: each distinct prompt of a
  micro-batch run once, its keys and values copied to the rows of its samples (the update puts a group's samples
  side by side), and the vocabulary projection only where a response token is predicted; still the scoring pass;
- after: as the update runs now: with one mini-batch (the `smollm2` and `leap-mini` presets) the denominator is the
  first epoch's own forward pass, detached, and the scoring pass is gone.

Prints the batch's samples and tokens, the seconds of each update and their ratio, each update's loss, and the
largest difference between the log-probabilities the two scorers give every turn of the batch:

    python benchmarks/bench_update.py                        # SmolLM2, the race's step
    python benchmarks/bench_update.py --preset leap-mini     # LEAP-mini's step: two epochs of one mini-batch
    python benchmarks/bench_update.py --preset smoke         # the tiny model, a quick look
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from collections.abc import Sequence

import torch

from leap_agents.training import trainer as trainer_module
from leap_agents.training.config import load_config
from leap_agents.training.logprobs import pad, response_logprobs
from leap_agents.training.trajectory import assign_rewards


def one_pass_logprobs(model: torch.nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                      pad_id: int, temperature: float = 1.0) -> list[torch.Tensor]:
    """The former scorer: one right-padded row per sample, logits at every position."""
    device = next(model.parameters()).device
    ids, mask = pad([list(p) + list(r) for p, r in zip(prompts, responses)], pad_id, device)
    logits = model(input_ids=ids, attention_mask=mask).logits
    t = temperature if temperature and temperature > 0 else 1.0
    out = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        rows = logits[i, len(p) - 1:len(p) - 1 + len(r)].float() / t
        target = torch.tensor(list(r), dtype=torch.long, device=device)
        out.append(torch.log_softmax(rows, dim=-1).gather(-1, target[:, None]).squeeze(-1))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="smollm2")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="config overrides (default: the SmolLM2 race's, split=train task_ids=)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    args.set = args.set if args.set is not None else ["split=train", "task_ids="]
    torch.set_num_threads(args.threads)
    config = load_config(None, args.preset, [tuple(item.split("=", 1)) for item in args.set])
    config.run.output_dir = tempfile.mkdtemp(prefix="bench-update-")
    config.run.tensorboard, config.run.resume, config.run.threads = False, False, args.threads
    trainer = trainer_module.LeapTrainer(config)
    batch = trainer.engine.run(trainer.stream.next(), seed=0, desc="rollout")
    r = config.reward
    assign_rewards(batch.groups, r.scheme, r.gamma, r.tie_break, r.normalize_std, r.credit)
    turns = [t for traj in batch.trajectories for t in traj.turns if t.token_ids]
    scorers = {"before": one_pass_logprobs, "after": response_logprobs}
    with torch.no_grad():
        scored = {name: scorer(trainer.model, [t.prompt_token_ids for t in turns], [t.token_ids for t in turns],
                               trainer.policy.tokenizer.pad_token_id, config.rollout.temperature)
                  for name, scorer in scorers.items()}
    gap = max(float((a - b).abs().max()) for a, b in zip(scored["before"], scored["after"]))
    start_weights = {n: w.detach().clone() for n, w in trainer.model.named_parameters() if w.requires_grad}
    start_optimizer = copy.deepcopy(trainer.optimizer.state_dict())
    seconds, stats = {}, {}
    paths = {"before": (one_pass_logprobs, True), "shared prompts": (response_logprobs, True),
             "after": (response_logprobs, False)}
    for name, (scorer, scoring_pass) in paths.items():
        trainer.model.load_state_dict(start_weights, strict=False)
        trainer.optimizer.load_state_dict(copy.deepcopy(start_optimizer))
        trainer_module.response_logprobs = scorer
        if scoring_pass:  # whatever the epochs and mini-batches
            trainer._one_pass = lambda n: False
        else:
            trainer.__dict__.pop("_one_pass", None)
        t0 = time.perf_counter()
        stats[name] = trainer.update(batch)
        seconds[name] = time.perf_counter() - t0
    trainer_module.response_logprobs = response_logprobs
    prompts = {tuple(t.prompt_token_ids) for t in turns}
    print(f"{args.preset} {' '.join(args.set)}: {len(turns)} turns ({len(prompts)} distinct prompts, "
          f"{sum(len(t.prompt_token_ids) for t in turns) / len(turns):.0f} prompt and "
          f"{sum(len(t.token_ids) for t in turns) / len(turns):.0f} response tokens each on average); "
          f"{stats['after']['samples']:.0f} trained, {config.optim.epochs} epochs, micro-batch "
          f"{config.optim.micro_batch_size}, {args.threads} threads")
    print(f"{'path':<15} {'update s':>9} {'vs before':>10} {'loss':>10}")
    for name in paths:
        print(f"{name:<15} {seconds[name]:>9.1f} {seconds['before'] / seconds[name]:>9.2f}x "
              f"{stats[name]['loss']:>10.5f}")
    print(f"largest log-probability difference between the two scorers, over every turn: {gap:.1e}")


if __name__ == "__main__":
    main()
