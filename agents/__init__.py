"""LEAP: the reference agent of the LEAP gym (imported as `leap_agents`, source folder `agents/`).

Pure, stable functions (no torch needed): `rank_rewards`, `dcp_decide`, `kevin_returns`,
`single_turn_rewards`, `group_advantages`, `DifficultyTracker`. Policies (`ScriptedPolicy`,
`HFPolicy`, `OpenAIPolicy`, `VLLMPolicy`: vllm), the rollout engine (`RolloutEngine`, `Trajectory`, `Turn`) and the
trainer (`LeapTrainer`, `TrainConfig`), and the optional extras (`RayEvaluator`: ray; `LeapRollout`,
`make_grpo_trainer`: trl) load lazily on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from leap_agents.algorithms.dcp import REASONS, DCPConfig, Decision, DifficultyTracker, dcp_decide
from leap_agents.algorithms.rewards import (
    group_advantages,
    kevin_returns,
    rank_rewards,
    single_turn_rewards,
    solved_fraction,
)

_LAZY = {
    "Generation": "leap_agents.policies.base",
    "Policy": "leap_agents.policies.base",
    "ScriptedPolicy": "leap_agents.policies.base",
    "HFPolicy": "leap_agents.policies.hf",
    "OpenAIPolicy": "leap_agents.policies.openai",
    "VLLMPolicy": "leap_agents.policies.vllm",
    "RolloutConfig": "leap_agents.training.rollout",
    "RolloutEngine": "leap_agents.training.rollout",
    "RolloutBatch": "leap_agents.training.rollout",
    "Trajectory": "leap_agents.training.trajectory",
    "Turn": "leap_agents.training.trajectory",
    "assign_rewards": "leap_agents.training.trajectory",
    "TrainConfig": "leap_agents.training.config",
    "load_config": "leap_agents.training.config",
    "arm_config": "leap_agents.training.config",
    "evaluate_policy": "leap_agents.training.evaluate",
    "LeapTrainer": "leap_agents.training.trainer",
    "summarize": "leap_agents.training.metrics",
    "build_tiny": "leap_agents.training.tiny",
    "RayEvaluator": "leap_agents.integrations.ray_pool",
    "LeapRollout": "leap_agents.integrations.trl",
    "make_grpo_trainer": "leap_agents.integrations.trl",
}


__all__ = ["REASONS", "DCPConfig", "Decision", "DifficultyTracker", "dcp_decide", "group_advantages", "kevin_returns",
           "rank_rewards", "single_turn_rewards", "solved_fraction", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'leap_agents' has no attribute {name!r}")
