"""The three LEAP-mini arms: single-turn GRPO, full multi-turn refinement with Kevin's discounted
return, and LEAP (DCP + rank reward), as one minimal loop over the mini policy.

The loop is written here (not `leap_agents.training.trainer`) because the mini policy reads its own compact
prompt (`leap_agents.training.mini.data.render_prompt`) instead of a chat history; it uses the package's
pure functions for everything that defines the arms: `rank_rewards`, `kevin_returns`,
`group_advantages`, `dcp_decide` and `DifficultyTracker`.

One step: every task of the step's batch gets a group of G trajectories; turn 1 for all; after each
turn the arm decides who refines (single-turn: nobody; multi-turn: every unsolved trajectory; LEAP:
`dcp_decide`); then rewards, group-relative advantages, and one policy-gradient update in which every
turn of a trajectory is a sample conditioned on its history (a single clipped-PPO epoch, so the ratio
is 1 and the clip never binds: REINFORCE with a group baseline, every sample's tokens averaged and
the samples weighted equally).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from leap_agents.algorithms.dcp import DifficultyTracker, dcp_decide
from leap_agents.training.mini.data import brief_feedback, render_prompt
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
    easy_threshold: float = field(default=0.5, metadata={"help": "DCP: a group at this pass rate stops"})
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate (3e-4 collapses the warm-up policy within a few steps)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (1.0: the warm-up policy solves some tasks at once, fixes some, fails some)"})
    clip: float = field(default=0.2, metadata={"help": "PPO clip range"})
    micro_batch: int = field(default=8, metadata={"help": "samples per forward/backward"})
    seed: int = field(default=0, metadata={"help": "task order and sampling seed"})

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")


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


def update(policy: MiniPolicy, optimizer: torch.optim.Optimizer, groups: list[list[Traj]], cfg: ArmConfig
           ) -> tuple[int, int]:
    """One clipped policy-gradient step over every turn with a nonzero advantage. Returns (samples, tokens)."""
    samples = [rec for group in groups for t in group for rec in t.turns if abs(rec.advantage) > 1e-8
               and rec.response_ids]
    if not samples:
        return 0, 0
    total_tokens = sum(len(s.response_ids) for s in samples)
    policy.model.train()
    optimizer.zero_grad()
    for start in range(0, len(samples), cfg.micro_batch):
        chunk = samples[start:start + cfg.micro_batch]
        logp, mask = policy.token_logprobs([s.prompt_ids for s in chunk], [s.response_ids for s in chunk])
        adv = torch.tensor([s.advantage for s in chunk]).unsqueeze(1)
        ratio = torch.exp(logp - logp.detach())
        obj = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * adv)
        # Each sample's mean over its tokens, then the mean over samples (GRPO's normalisation): with a
        # sum over all tokens, long failed responses (truncated rambling) outweigh short correct ones.
        loss = -((obj * mask).sum(1) / mask.sum(1)).sum() / len(samples)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
    optimizer.step()
    policy.model.eval()
    return len(samples), total_tokens


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
    tracker = DifficultyTracker()
    stream = batches(train, cfg.tasks_per_step, cfg.seed)
    history: list[StepStats] = []
    for step in range(cfg.steps):
        tasks = next(stream)
        hits_before = judge.hits
        groups, costs = rollout(policy, tasks, cfg, judge, tracker, seed=cfg.seed * 100_003 + step)
        rewards = assign_advantages(groups, cfg)
        t0 = time.perf_counter()
        n_samples, n_tokens = update(policy, optimizer, groups, cfg)
        update_s = time.perf_counter() - t0
        trajs = [t for g in groups for t in g]
        max_turns = 1 if cfg.arm == "single_turn" else cfg.max_turns
        by_turn = [sum(1 for t in trajs if t.first_solved is not None and t.first_solved <= k) / len(trajs)
                   for k in range(1, max_turns + 1)]
        turn_counts = [sum(1 for t in trajs if len(t.turns) >= k) for k in range(1, max_turns + 1)]
        stats = StepStats(step=step, pass_at_1=by_turn[0], pass_by_turn=by_turn, generation_s=costs["generation_s"],
                          evaluation_s=costs["evaluation_s"], update_s=update_s, responses=costs["responses"],
                          evaluations=costs["evaluations"], cache_hits=judge.hits - hits_before, samples=n_samples,
                          tokens=n_tokens, decisions=costs["decisions"], rewards=rewards, turn_counts=turn_counts)
        history.append(stats)
        log.info("[%s seed %d] step %d: pass@1 %.2f by turn %s, gen %.1fs eval %.1fs update %.1fs, turns %s, %s",
                 cfg.arm, cfg.seed, step, stats.pass_at_1, [round(x, 2) for x in by_turn], stats.generation_s,
                 stats.evaluation_s, update_s, turn_counts, costs["decisions"])
        if on_step is not None:
            on_step(stats, groups)
    return history


def evaluate_policy(policy: MiniPolicy, tasks: list[Task], judge: Judge, samples: int = 4, max_turns: int = 3,
                    temperature: float = 1.0, seed: int = 12345) -> dict[str, Any]:
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
