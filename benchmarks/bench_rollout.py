"""The SmolLM2 rollout path before and after: sampling throughput at the race's settings, side by side.

SmolLM2-135M-Instruct with its LoRA warm-up loaded trainable (as `leap-train --preset smollm2` holds it), float32,
sampling the environment's first prompts of four easy level-1 tasks (the preset's when this was written), each
repeated as a group (the race's first turn: 4 tasks x G=8 = 32 sequences), 256 new tokens at temperature 0.8, the
compact rendering and the block stop rule. Two paths, one run, the same seed:

- before: transformers' `generate`, 8 histories per call, through the peft model (the LoRA adapter unmerged), the
  log-probabilities from its stored logits: how `HFPolicy` sampled before;
- generate, merged: the same `generate` with every open trajectory in one call, from the merged copy of the adapter;
- after: `HFPolicy.generate` as it is now: one call for every open trajectory (`model.gen_batch_size`), the merged
  copy (`merged_sampling`, rebuilt after each update), and `leap_agents.policies.decoding.sample`, which prefills
  a group's G copies of its prompt once, appends to the KV cache in place, and drops finished sequences from the
  batch and its cache instead of decoding them to the longest one's end.

Prints tokens per second of each and their ratio, and the largest gap between the log-probabilities each path
reports and the trainer's own recomputation (one forward pass of the peft model, as the update divides by):

    python benchmarks/bench_rollout.py                    # 32 sequences, 256 tokens
    python benchmarks/bench_rollout.py --sequences 8 --max-new-tokens 64   # a quick look
"""

from __future__ import annotations

import argparse
import time

import torch

from leap_agents.policies.base import Generation
from leap_agents.policies.hf import HFPolicy
from leap_agents.training.logprobs import response_logprobs

NAME = "smollm2-135m-instruct"
TASKS = ["level1/relu", "level1/sigmoid", "level1/clamp", "level1/leaky_relu"]


def first_histories(n: int) -> list[list[dict[str, str]]]:
    """`n` first-turn histories: the tasks' prompts, each repeated as a group."""
    import gymnasium as gym

    import leap_gym  # noqa: F401  (registers the environment)

    env = gym.make("KernelDebugEnv-v0", tasks="builtin", backend="cpu", max_turns=1)
    prompts = [env.reset(seed=0, options={"task_id": task})[1]["messages"] for task in TASKS]
    env.close()
    return [prompts[i * len(prompts) // n] for i in range(n)]


def hf_generate(policy: HFPolicy, model: torch.nn.Module, histories: list, batch_size: int,
                max_new_tokens: int) -> list[Generation]:
    """The former sampling path: transformers' `generate` with its logits stored, the block rule checked on the
    decoded batch after every token."""
    from transformers import StoppingCriteria

    class BlockClosed(StoppingCriteria):
        def __init__(self, width: int):
            self.width = width

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
            texts = policy.tokenizer.batch_decode(input_ids[:, self.width:], skip_special_tokens=True)
            return torch.tensor([t.count("```") >= 2 for t in texts], dtype=torch.bool)

    prompts = [policy.encode_prompt(h) for h in histories]
    pad = policy.tokenizer.pad_token_id
    gens = []
    model.eval()
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            result = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.8, top_p=1.0,
                                    top_k=0, max_new_tokens=max_new_tokens, pad_token_id=pad,
                                    eos_token_id=sorted(policy.eos_ids), return_dict_in_generate=True,
                                    output_logits=True, stopping_criteria=[BlockClosed(width)])
        new = result.sequences[:, width:]
        lps = torch.log_softmax(torch.stack([lg.float() for lg in result.logits], dim=1) / 0.8, dim=-1)
        lps = lps.gather(-1, new[:, :lps.shape[1], None]).squeeze(-1)
        for i, prompt in enumerate(chunk):
            tokens = new[i].tolist()
            end = next((j + 1 for j, tok in enumerate(tokens) if tok in policy.eos_ids), None)
            tokens = tokens[:end] if end is not None else tokens
            if policy.tokenizer.decode(tokens, skip_special_tokens=True).count("```") >= 2:  # cut at the closing fence
                tokens = tokens[:next(n for n in range(1, len(tokens) + 1) if policy.tokenizer.decode(
                    tokens[:n], skip_special_tokens=True).count("```") >= 2)]
            gens.append(Generation(text="", token_ids=tokens, logprobs=lps[i, :len(tokens)].tolist(),
                                   prompt_token_ids=prompt))
    return gens


def measure(policy: HFPolicy, histories: list, path: str, max_new_tokens: int) -> dict:
    torch.manual_seed(0)
    start = time.perf_counter()
    if path == "before":
        gens = hf_generate(policy, policy.model, histories, 8, max_new_tokens)
    elif path == "generate, merged":
        gens = hf_generate(policy, policy.sampling_model(), histories, len(histories), max_new_tokens)
    else:
        policy.batch_size = len(histories)
        gens = policy.generate(histories, temperature=0.8, max_new_tokens=max_new_tokens, seed=0)
    seconds = time.perf_counter() - start
    tokens = sum(len(g.token_ids) for g in gens)
    gap = 0.0
    with torch.no_grad():
        for i in range(0, len(gens), 8):
            chunk = gens[i:i + 8]
            trainer = response_logprobs(policy.model, [g.prompt_token_ids for g in chunk], [g.token_ids for g in chunk],
                                        policy.tokenizer.pad_token_id, 0.8)
            gap = max([gap] + [float((lp - torch.tensor(g.logprobs)).abs().max()) for g, lp in zip(chunk, trainer)])
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "max_logprob_gap": gap}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=32, help="open trajectories of the turn (tasks x G)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    policy = HFPolicy.from_pretrained(NAME, adapter="warmup", trainable=True, device="cpu", dtype="float32")
    t_merge = time.perf_counter()
    policy.merged_sampling = True
    policy.sampling_model()
    print(f"SmolLM2 + LoRA warm-up loaded in {t_merge - t0:.0f} s; its merged copy built in "
          f"{time.perf_counter() - t_merge:.1f} s; {args.sequences} sequences, up to {args.max_new_tokens} tokens, "
          f"{args.threads} threads", flush=True)
    histories = first_histories(args.sequences)
    results = {}
    for path in ("before", "generate, merged", "after"):
        results[path] = r = measure(policy, histories, path, args.max_new_tokens)
        print(f"  {path:18s} {r['tokens']:6d} tokens {r['seconds']:7.1f} s {r['tokens_per_s']:7.1f} tokens/s "
              f"{r['tokens_per_s'] / results['before']['tokens_per_s']:5.2f}x  max |sampler - trainer log-prob| "
              f"{r['max_logprob_gap']:.1e}", flush=True)
    print(f"rollout sampling speed-up, after / before: "
          f"{results['after']['tokens_per_s'] / results['before']['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
