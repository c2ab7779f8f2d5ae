"""LEAP gym: a Gymnasium environment in which LLMs write, debug and optimise CUDA kernels."""

from gymnasium.envs.registration import register

from leap_gym.evaluation.evaluator import Evaluator, evaluate
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.integrations import vector as _vector  # noqa: F401  (shared-memory layout of SourceText for AsyncVectorEnv)
from leap_gym.result import EvalResult
from leap_gym.tasks import Task, load_tasks

__version__ = "0.1.0"

register(id="KernelDebugEnv-v0", entry_point="leap_gym.env:KernelDebugEnv")


__all__ = ["EvalConfig", "EvalResult", "Evaluator", "Task", "evaluate", "load_tasks", "__version__"]
