"""The three LEAP-mini arms: single-turn GRPO, full multi-turn refinement with Kevin's discounted
return, and LEAP (DCP + rank reward), as one minimal loop over the mini policy.

The loop is written here (not `leap_agents.training.trainer`) because the mini policy reads its own compact
prompt (`leap_agents.training.mini.data.render_prompt`) instead of a chat history; it uses the package's
pure functions for everything that defines the arms: `rank_rewards`, `kevin_returns`,
`group_advantages`, `dcp_decide` and `DifficultyTracker`.

One step: every task of the step's batch gets a group of G trajectories; turn 1 for all; after each
turn the arm decides who refines (single-turn: nobody; multi-turn: every unsolved trajectory; LEAP:
`dcp_decide`); then rewards, group-relative advantages, and a clipped-PPO update in which every turn
of a trajectory is a sample conditioned on its history: `epochs` optimizer steps over the batch, each
token's ratio to the sampling policy clipped to ``1 +- clip``, plus a KL penalty (`kl_coef`, the k3
estimator) to the frozen start policy, which keeps the memorised kernels from collapsing; every
sample's tokens averaged and the samples weighted equally (GRPO's normalisation).
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from leap_agents.algorithms.dcp import DifficultyTracker, dcp_decide
from leap_agents.training.mini.data import EOS, as_response, brief_feedback, reference_cuda, render_prompt
from leap_agents.training.mini.judge import Judge
from leap_agents.training.mini.policy import MiniPolicy
from leap_agents.algorithms.rewards import group_advantages, kevin_returns, rank_rewards
from leap_gym.result import CORRECT, STATUS_RANK
from leap_gym.tasks import Task

log = logging.getLogger(__name__)

ARMS = ("single_turn", "multi_turn", "leap")


@dataclass
class ArmConfig:
    """One arm's training run."""

    arm: str = field(default="leap", metadata={"help": "single_turn | multi_turn | leap"})
    steps: int = field(default=10, metadata={"help": "RL steps"})
    tasks_per_step: int = field(default=8, metadata={"help": "tasks (groups) per step: the prompt budget"})
    group_size: int = field(default=4, metadata={"help": "trajectories per task (G)"})
    max_turns: int = field(default=3, metadata={"help": "turn budget (single-turn uses 1)"})
    gamma: float = field(default=0.4, metadata={"help": "Kevin's discount (multi-turn arm)"})
    easy_threshold: float = field(default=0.25, metadata={
        "help": "DCP: a group at this pass rate stops (0.25 with G=4: any solve stops it, so only groups whose "
                "first turn carried no signal refine; at 0.5 LEAP learned less per step than multi-turn)"})
    lr: float = field(default=5e-5, metadata={"help": "AdamW learning rate (Adam moves every weight by about lr per step, noise included: at 2e-4 the memorised kernels erode within a dozen steps)"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature (0.8: the warm-up policy solves about 0.4 of first attempts; at 1.0 token slips sink it to about 0.14)"})
    clip: float = field(default=0.2, metadata={"help": "PPO clip range"})
    epochs: int = field(default=2, metadata={"help": "PPO inner epochs (optimizer steps) per batch"})
    kl_coef: float = field(default=0.01, metadata={"help": "weight of the KL penalty to the start policy (0: none; without it the memorised kernels erode)"})
    micro_batch: int = field(default=8, metadata={"help": "samples per forward/backward"})
    seed: int = field(default=0, metadata={"help": "task order and sampling seed"})

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")
        if self.epochs < 1 or self.clip <= 0 or self.kl_coef < 0:
            raise ValueError(f"need epochs >= 1, clip > 0 and kl_coef >= 0, got {self.epochs}, {self.clip}, "
                             f"{self.kl_coef}")


@dataclass
class TurnRecord:
    prompt: str
    response: str
    prompt_ids: list[int]
    response_ids: list[int]
    status: str
    feedback: str
    advantage: float = 0.0


@dataclass
class Traj:
    task_id: str
    index: int
    turns: list[TurnRecord] = field(default_factory=list)
    first_solved: int | None = None
    stop_reason: str = ""

    @property
    def best_rank(self) -> int:
        return max((STATUS_RANK.get(t.status, 0) for t in self.turns), default=0)


@dataclass
class StepStats:
    """What one step measured."""

    step: int
    pass_at_1: float
    pass_by_turn: list[float]
    generation_s: float
    evaluation_s: float
    update_s: float
    responses: int
    evaluations: int
    cache_hits: int
    samples: int
    tokens: int
    decisions: dict[str, int]
    rewards: dict[str, float]
    turn_counts: list[int]
    update_stats: dict[str, float] = field(default_factory=dict)
    reference_p: float | None = None  # after the update; measured off the clock

    @property
    def wall_s(self) -> float:
        return self.generation_s + self.evaluation_s + self.update_s


def rollout(policy: MiniPolicy, tasks: list[Task], cfg: ArmConfig, judge: Judge, tracker: DifficultyTracker,
            seed: int) -> tuple[list[list[Traj]], dict[str, Any]]:
    """G trajectories per task, turn by turn, with the arm's continuation rule. Returns groups and costs."""
    max_turns = 1 if cfg.arm == "single_turn" else cfg.max_turns
    groups = [[Traj(t.id, i) for i in range(cfg.group_size)] for t in tasks]
    live = [[True] * cfg.group_size for _ in tasks]
    gen_s = eval_s = 0.0
    evaluations_before = judge.evaluations
    responses = 0
    decisions: Counter = Counter()
    for turn in range(1, max_turns + 1):
        slots = [(g, i) for g in range(len(tasks)) for i in range(cfg.group_size) if live[g][i]]
        if not slots:
            break
        prompts = []
        for g, i in slots:
            traj = groups[g][i]
            prev = traj.turns[-1] if traj.turns else None
            prompts.append(render_prompt(tasks[g], prev.response if prev else None, prev.result if prev else None))
        t0 = time.perf_counter()
        samples = policy.generate(prompts, seed=seed * 7919 + turn, temperature=cfg.temperature)
        t1 = time.perf_counter()
        results = judge([(tasks[g], s.text) for (g, _), s in zip(slots, samples)])
        t2 = time.perf_counter()
        gen_s += t1 - t0
        eval_s += t2 - t1
        responses += len(slots)
        for (g, i), prompt, s, r in zip(slots, prompts, samples, results):
            traj = groups[g][i]
            rec = TurnRecord(prompt, s.text, s.prompt_ids, s.response_ids, r.status, brief_feedback(r))
            rec.result = r  # type: ignore[attr-defined]  (kept for the next prompt, not serialised)
            traj.turns.append(rec)
            if r.status == CORRECT and traj.first_solved is None:
                traj.first_solved = turn
        for g, group in enumerate(groups):
            if not any(live[g]):
                continue
            solved = [t.first_solved is not None for t in group]
            best = [t.best_rank for t in group]
            prev_best = [max((STATUS_RANK.get(x.status, 0) for x in t.turns[:-1]), default=0) for t in group]
            est = tracker.estimate(group[0].task_id)
            ds = dcp_decide(solved, best, turn, max_turns, cfg.easy_threshold, prev_best_progress=prev_best,
                            history_estimate=est, history_count=tracker.count(group[0].task_id),
                            enabled=cfg.arm == "leap")
            for i, d in enumerate(ds):
                if not live[g][i]:
                    continue
                if not d.continues:
                    live[g][i] = False
                    group[i].stop_reason = d.reason
                    decisions[d.reason] += 1
    for group in groups:
        tracker.update(group[0].task_id, sum(t.first_solved is not None for t in group) / len(group))
    costs = {"generation_s": gen_s, "evaluation_s": eval_s, "responses": responses,
             "evaluations": judge.evaluations - evaluations_before, "decisions": dict(decisions)}
    return groups, costs


def assign_advantages(groups: list[list[Traj]], cfg: ArmConfig) -> dict[str, float]:
    """Set every turn's advantage by the arm's return shaping; returns reward statistics."""
    seen: list[float] = []
    for group in groups:
        if cfg.arm == "single_turn":
            rewards = [1.0 if t.turns[0].status == CORRECT else 0.0 for t in group]
            for t, a in zip(group, group_advantages(rewards)):
                t.turns[0].advantage = a
            seen += rewards
        elif cfg.arm == "leap":
            rewards = rank_rewards([t.first_solved for t in group])
            for t, a in zip(group, group_advantages(rewards)):
                for rec in t.turns:
                    rec.advantage = a
            seen += rewards
        else:  # Kevin: per-turn discounted returns, normalised over all turns of the group
            returns = [kevin_returns([1.0 if r.status == CORRECT else 0.0 for r in t.turns], cfg.gamma) for t in group]
            flat = [x for rs in returns for x in rs]
            advs = group_advantages(flat)
            k = 0
            for t, rs in zip(group, returns):
                for rec in t.turns:
                    rec.advantage = advs[k]
                    k += 1
            seen += [rs[0] for rs in returns]
    return {"mean": sum(seen) / max(1, len(seen)), "nonzero": sum(1 for x in seen if x > 0) / max(1, len(seen))}


def ppo_kl_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None, adv: torch.Tensor,
                mask: torch.Tensor, clip: float, kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped-PPO objective with a KL penalty, summed over samples (each sample's tokens averaged).

    Per token: ``-min(r * A, clip(r, 1 - clip, 1 + clip) * A) + kl_coef * k3``, with ``r = exp(logp -
    old_logp)`` and ``k3 = exp(ref - logp) - (ref - logp) - 1`` (non-negative, zero where the policy
    equals the reference, an unbiased estimate of KL(policy || reference) under the policy's samples).

    Args:
        logp, old_logp, ref_logp: ``(batch, tokens)`` log-probabilities of the sampled tokens under the
            policy being trained (with grad), the sampling policy, and the reference (`None`: no KL).
        adv: ``(batch,)`` advantages.
        mask: ``(batch, tokens)``, 1 on real tokens.

    Returns:
        The loss (a sum over samples: divide by the batch's sample count) and statistics (the share
        of tokens whose ratio was clipped, the mean k3).
    """
    adv = adv.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + kl_coef * kl
    per_sample = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
    n_tok = mask.sum().clamp(min=1)
    with torch.no_grad():
        binds = ((ratio * adv) > (clipped * adv)).float()
        stats = {"clipped": float((binds * mask).sum() / n_tok), "kl": float((kl * mask).sum() / n_tok)}
    return per_sample.sum(), stats


@torch.no_grad()
def _logprobs(model_policy: MiniPolicy, samples: list[TurnRecord], micro_batch: int, temperature: float
              ) -> list[torch.Tensor]:
    out = []
    for start in range(0, len(samples), micro_batch):
        chunk = samples[start:start + micro_batch]
        logp, _ = model_policy.token_logprobs([s.prompt_ids for s in chunk], [s.response_ids for s in chunk],
                                              temperature)
        out.append(logp)
    return out


def update(policy: MiniPolicy, optimizer: torch.optim.Optimizer, groups: list[list[Traj]], cfg: ArmConfig,
           reference: MiniPolicy | None = None) -> tuple[int, int, dict[str, float]]:
    """`cfg.epochs` clipped-PPO steps over every turn with a nonzero advantage, KL to `reference`.

    The sampling policy's log-probabilities are taken once, before the first step, so from the second
    epoch on the ratio moves and the clip binds. Returns (samples, tokens, statistics of the last epoch).
    """
    samples = [rec for group in groups for t in group for rec in t.turns if abs(rec.advantage) > 1e-8
               and rec.response_ids]
    if not samples:
        return 0, 0, {}
    total_tokens = sum(len(s.response_ids) for s in samples)
    policy.model.eval()  # no dropout in the mini model; eval keeps old and new log-probs comparable
    old = _logprobs(policy, samples, cfg.micro_batch, cfg.temperature)
    ref = (_logprobs(reference, samples, cfg.micro_batch, cfg.temperature)
           if reference is not None and cfg.kl_coef > 0 else None)
    stats: dict[str, float] = {}
    for _ in range(cfg.epochs):
        optimizer.zero_grad()
        clipped = kl = 0.0
        for k, start in enumerate(range(0, len(samples), cfg.micro_batch)):
            chunk = samples[start:start + cfg.micro_batch]
            logp, mask = policy.token_logprobs([s.prompt_ids for s in chunk], [s.response_ids for s in chunk],
                                               cfg.temperature)
            adv = torch.tensor([s.advantage for s in chunk])
            loss, st = ppo_kl_loss(logp, old[k], ref[k] if ref is not None else None, adv, mask, cfg.clip,
                                   cfg.kl_coef)
            (loss / len(samples)).backward()
            clipped += st["clipped"] * len(chunk) / len(samples)
            kl += st["kl"] * len(chunk) / len(samples)
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        optimizer.step()
        stats = {"clipped": clipped, "kl": kl}
    return len(samples), total_tokens, stats


def batches(train: list[Task], per_step: int, seed: int):
    """An endless seeded stream of task batches, each epoch a fresh shuffle."""
    rng = random.Random(seed)
    pool: list[Task] = []
    while True:
        if len(pool) < per_step:
            more = list(train)
            rng.shuffle(more)
            pool += more
        yield [pool.pop(0) for _ in range(per_step)]


def train_arm(policy: MiniPolicy, train: list[Task], cfg: ArmConfig, judge: Judge,
              on_step: Any = None) -> list[StepStats]:
    """Run one arm for `cfg.steps` steps from the policy as given (the caller copies the warm-up).

    `on_step(stats, groups)` is called after each step (``leap_agents.training.run_record.mini_step_hook`` logs it)."""
    torch.manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    reference = None
    if cfg.kl_coef > 0:  # the frozen start policy the KL penalty pulls towards
        reference = MiniPolicy(copy.deepcopy(policy.model).eval(), policy.tokenizer, policy.max_new_tokens)
        for p in reference.model.parameters():
            p.requires_grad_(False)
    tracker = DifficultyTracker()
    stream = batches(train, cfg.tasks_per_step, cfg.seed)
    probe = ReferenceProbe(policy, train, cfg.temperature)
    history: list[StepStats] = []
    for step in range(cfg.steps):
        tasks = next(stream)
        hits_before = judge.hits
        groups, costs = rollout(policy, tasks, cfg, judge, tracker, seed=cfg.seed * 100_003 + step)
        rewards = assign_advantages(groups, cfg)
        t0 = time.perf_counter()
        n_samples, n_tokens, upd = update(policy, optimizer, groups, cfg, reference)
        update_s = time.perf_counter() - t0
        trajs = [t for g in groups for t in g]
        max_turns = 1 if cfg.arm == "single_turn" else cfg.max_turns
        by_turn = [sum(1 for t in trajs if t.first_solved is not None and t.first_solved <= k) / len(trajs)
                   for k in range(1, max_turns + 1)]
        turn_counts = [sum(1 for t in trajs if len(t.turns) >= k) for k in range(1, max_turns + 1)]
        stats = StepStats(step=step, pass_at_1=by_turn[0], pass_by_turn=by_turn, generation_s=costs["generation_s"],
                          evaluation_s=costs["evaluation_s"], update_s=update_s, responses=costs["responses"],
                          evaluations=costs["evaluations"], cache_hits=judge.hits - hits_before, samples=n_samples,
                          tokens=n_tokens, decisions=costs["decisions"], rewards=rewards, turn_counts=turn_counts,
                          update_stats=upd, reference_p=probe())
        history.append(stats)
        log.info("[%s seed %d] step %d: pass@1 %.2f (reference p %.3f) by turn %s, gen %.1fs eval %.1fs "
                 "update %.1fs, turns %s, %s, %s", cfg.arm, cfg.seed, step, stats.pass_at_1, stats.reference_p,
                 [round(x, 2) for x in by_turn], stats.generation_s, stats.evaluation_s, update_s, turn_counts,
                 costs["decisions"], {k: round(v, 4) for k, v in upd.items()})
        if on_step is not None:
            on_step(stats, groups)
    return history


class ReferenceProbe:
    """Mean over `tasks` of the probability that one first-turn sample at `temperature` is exactly the
    task's reference solution: a lower bound on first-turn pass@1 that carries no sampling noise (the
    policy's failures are slips from memorised references), one forward pass over every task."""

    def __init__(self, policy: MiniPolicy, tasks: list[Task], temperature: float):
        self.policy = policy
        self.temperature = temperature
        self.prompts = [policy.encode(render_prompt(t)) for t in tasks]
        self.references = [policy.encode(as_response(reference_cuda(t)) + EOS) for t in tasks]

    @torch.no_grad()
    def __call__(self) -> float:
        logp, mask = self.policy.token_logprobs(self.prompts, self.references, self.temperature)
        return float(((logp * mask).sum(1)).exp().mean())


def evaluate_policy(policy: MiniPolicy, tasks: list[Task], judge: Judge, samples: int = 4, max_turns: int = 3,
                    temperature: float = 0.8, seed: int = 12345) -> dict[str, Any]:
    """Pass@1 and pass by turn with full refinement (no pruning, no update) over `tasks`, `samples` each."""
    cfg = ArmConfig(arm="multi_turn", group_size=samples, max_turns=max_turns, temperature=temperature)
    groups, costs = rollout(policy, tasks, cfg, judge, DifficultyTracker(), seed=seed)
    trajs = [t for g in groups for t in g]
    by_turn = [sum(1 for t in trajs if t.first_solved is not None and t.first_solved <= k) / len(trajs)
               for k in range(1, max_turns + 1)]
    per_task = {g[0].task_id: [t.first_solved for t in g] for g in groups}
    return {"pass_at_1": by_turn[0], "pass_by_turn": by_turn, "per_task": per_task,
            "seconds": costs["generation_s"] + costs["evaluation_s"]}


def stats_dict(s: StepStats) -> dict[str, Any]:
    d = asdict(s)
    d["wall_s"] = s.wall_s
    return d
