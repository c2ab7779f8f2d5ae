"""Judging a policy without training it: every task, `samples` trajectories, full refinement (no pruning)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from leap_agents.algorithms.dcp import DCPConfig
from leap_agents.training.metrics import summarize
from leap_agents.training.rollout import RolloutConfig, RolloutEngine


def evaluate_policy(policy: Any, tasks: Sequence[Any], backend: str = "cpu", samples: int = 4, max_turns: int = 4,
                    temperature: float = 0.8, seed: int = 12345, max_new_tokens: int = 512, eval_workers: int = 2,
                    env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pass@1 and pass by turn over `tasks`, `samples` sampled trajectories each, every unsolved one refined
    up to `max_turns`.

    Returns:
        ``pass_at_1``, its standard error ``stderr`` (binomial, over the trajectories), ``pass_by_turn``,
        ``per_task`` (each trajectory's first solved turn, `None` if never) and ``seconds``.
    """
    config = RolloutConfig(group_size=samples, max_turns=max_turns, temperature=temperature,
                           max_new_tokens=max_new_tokens, eval_workers=eval_workers, progress_bar=False)
    engine = RolloutEngine(policy, list(tasks), backend=backend, config=config, dcp=DCPConfig(enabled=False),
                           env_kwargs=env_kwargs)
    batch = engine.run([t.id for t in tasks], seed=seed, desc="judge")
    metrics = summarize(batch, max_turns)
    n = max(len(batch.trajectories), 1)
    p = metrics["pass_at_1"]
    return {"pass_at_1": p, "stderr": math.sqrt(p * (1 - p) / n),
            "pass_by_turn": [metrics[f"pass_turn_{j}"] for j in range(1, max_turns + 1)],
            "per_task": {g[0].task_id: [t.first_solved_turn for t in g] for g in batch.groups},
            "seconds": batch.generation_s + batch.evaluation_s}
