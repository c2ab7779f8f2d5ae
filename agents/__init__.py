"""LEAP: the reference agent of the LEAP gym (imported as `leap_agents`, source folder `agents/`).

Pure, stable functions (no torch needed): `rank_rewards`, `dcp_decide`, `kevin_returns`,
`single_turn_rewards`, `group_advantages`, `DifficultyTracker`. Policies (`ScriptedPolicy`,
`HFPolicy`, `OpenAIPolicy`, `VLLMPolicy`: vllm), the rollout engine (`RolloutEngine`, `Trajectory`, `Turn`) and the
trainer (`LeapTrainer`, `TrainConfig`), and the optional extras (`RayEvaluator`: ray; `LeapRollout`,
`make_grpo_trainer`: trl) load lazily on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

from leap_agents.algorithms.dcp import REASONS, Decision, DCPConfig, DifficultyTracker, dcp_decide
from leap_agents.algorithms.rewards import group_advantages, kevin_returns, rank_rewards, single_turn_rewards, solved_fraction

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
    "LeapTrainer": "leap_agents.training.trainer",
    "summarize": "leap_agents.training.metrics",
    "build_tiny": "leap_agents.training.tiny",
    "RayEvaluator": "leap_agents.integrations.ray_pool",
    "LeapRollout": "leap_agents.integrations.trl",
    "make_grpo_trainer": "leap_agents.integrations.trl",
}

#: Module paths before the restructuring into sub-packages; they import, with a DeprecationWarning, for one release.
MOVED_MODULES: dict[str, str | tuple[str, ...]] = {
    "leap_agents.dcp": "leap_agents.algorithms.dcp",
    "leap_agents.rewards": "leap_agents.algorithms.rewards",
    "leap_agents.trainer": "leap_agents.training.trainer",
    "leap_agents.rollout": "leap_agents.training.rollout",
    "leap_agents.trajectory": "leap_agents.training.trajectory",
    "leap_agents.config": "leap_agents.training.config",
    "leap_agents.metrics": "leap_agents.training.metrics",
    "leap_agents.logprobs": "leap_agents.training.logprobs",
    "leap_agents.tiny": "leap_agents.training.tiny",
    "leap_agents.mini": "leap_agents.training.mini",
    "leap_agents.ray_pool": "leap_agents.integrations.ray_pool",
    "leap_agents.trl_integration": "leap_agents.integrations.trl",
}


def _deprecation_module() -> Any:
    """`leap_gym.deprecation`, loaded without the rest of `leap_gym` (torch), so `leap_agents` stays light."""
    if "leap_gym.deprecation" not in sys.modules:
        origin = importlib.util.find_spec("leap_gym").submodule_search_locations[0]
        spec = importlib.util.spec_from_file_location("leap_gym.deprecation", f"{origin}/deprecation.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["leap_gym.deprecation"]


_deprecation_module().install_moved_modules("leap_agents", MOVED_MODULES)

__all__ = ["REASONS", "DCPConfig", "Decision", "DifficultyTracker", "dcp_decide", "group_advantages", "kevin_returns",
           "rank_rewards", "single_turn_rewards", "solved_fraction", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'leap_agents' has no attribute {name!r}")
