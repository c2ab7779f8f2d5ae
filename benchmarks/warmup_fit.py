"""How well a LoRA warm-up learned the reference answers it was trained on, task by task.

For each LEAP-mini training task (the warm-up's split) the adapter scores the task's first reference as the
first-turn answer, on the prompt the warm-up trained it with (`warmup_lora.first_turn_history`): the loss of the
whole answer in nats, per token and at its worst token. Then it answers greedily, and the answer is compared with
the reference: equal, or the character where it departs. A task whose reference costs many nats is one the warm-up
did not learn; its greedy answer shows what the model writes instead. The cpu backend is not involved: this reads
the model only (`leap-eval` judges the answers).

    python benchmarks/warmup_fit.py                                  # the newest built warm-up, else the shipped one
    python benchmarks/warmup_fit.py --adapter PATH --out fit.json    # another adapter; the rows as JSON
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from leap_agents.policies.hf import HFPolicy
from leap_agents.training.logprobs import response_logprobs
from leap_agents.training.mini.data import as_response, reference_cuda
from leap_agents.training.warmup_lora import LoraWarmupConfig, first_turn_history, warmup_split


def reference_fit(policy: HFPolicy, task, max_new_tokens: int = 256) -> dict:
    """One task's row: the reference answer's loss under `policy` and the policy's greedy answer against it."""
    history = first_turn_history(task)
    reference = as_response(reference_cuda(task))
    prompt, answer = policy.encode_prompt(history), policy.encode_response(reference)
    with torch.no_grad():
        (logprobs,) = response_logprobs(policy.model, [prompt], [answer], policy.tokenizer.pad_token_id)
    nll = -logprobs.float()
    greedy = policy.generate([history], temperature=0.0, max_new_tokens=max_new_tokens)[0].text.strip()
    departs = next((i for i, (a, b) in enumerate(zip(greedy, reference)) if a != b), min(len(greedy), len(reference)))
    return {"task_id": task.id, "tokens": len(answer), "nll": float(nll.sum()), "nll_per_token": float(nll.mean()),
            "nll_max": float(nll.max()), "worst_token": policy.tokenizer.decode([answer[int(nll.argmax())]]),
            "greedy_is_reference": greedy == reference.strip(), "departs_at": departs, "reference_chars": len(reference),
            "greedy_from_there": greedy[departs:departs + 80], "reference_from_there": reference[departs:departs + 80]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapter", default="warmup", help="a folder, or `warmup` (newest built, else shipped)")
    parser.add_argument("--tasks", nargs="*", help="task ids (default: the warm-up's training split)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    tasks, split = warmup_split(LoraWarmupConfig(model=args.model))
    by_id = {t.id: t for t in tasks}
    policy = HFPolicy.from_pretrained(args.model, device="cpu", adapter=args.adapter)
    policy.model.eval()
    rows = [reference_fit(policy, by_id[task_id]) for task_id in (args.tasks or split.train)]
    print(f"{'task':28s} {'tokens':>6s} {'nats':>7s} {'per token':>9s} {'worst':>6s}  greedy answer")
    for r in rows:
        verdict = "the reference" if r["greedy_is_reference"] else (
            f"departs at char {r['departs_at']} of {r['reference_chars']}: {r['greedy_from_there'][:40]!r}")
        print(f"{r['task_id']:28s} {r['tokens']:6d} {r['nll']:7.1f} {r['nll_per_token']:9.3f} {r['nll_max']:6.2f}  {verdict}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
