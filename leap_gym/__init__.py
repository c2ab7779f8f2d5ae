"""LEAP gym: a Gymnasium environment in which LLMs write, debug and optimise CUDA kernels."""

from gymnasium.envs.registration import register

from leap_gym.integrations import vector as _vector  # noqa: F401  (shared-memory layout of SourceText for AsyncVectorEnv)
from leap_gym.deprecation import install_moved_modules
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.evaluation.evaluator import Evaluator, evaluate
from leap_gym.result import EvalResult
from leap_gym.tasks import Task, load_tasks

__version__ = "0.1.0"

register(id="KernelDebugEnv-v0", entry_point="leap_gym.env:KernelDebugEnv")

#: Module paths before the restructuring into stage sub-packages; they import, with a DeprecationWarning, for one release.
MOVED_MODULES: dict[str, str | tuple[str, ...]] = {
    "leap_gym.parse": "leap_gym.evaluation.parse",
    "leap_gym.static_check": "leap_gym.evaluation.static_check",
    "leap_gym.kernels": "leap_gym.evaluation.kernels",
    "leap_gym.correctness": "leap_gym.evaluation.correctness",
    "leap_gym.hostile": "leap_gym.evaluation.hostile",
    "leap_gym.feedback": "leap_gym.evaluation.feedback",
    "leap_gym.rewards": "leap_gym.evaluation.rewards",
    "leap_gym.evaluate": ("leap_gym.evaluation.evaluator", "leap_gym.evaluation.languages",
                          "leap_gym.evaluation.pipeline"),
    "leap_gym.timing": "leap_gym.backends.timing",
    "leap_gym.sb3": "leap_gym.integrations.sb3",
    "leap_gym.vector": "leap_gym.integrations.vector",
    "leap_gym.wrappers": "leap_gym.integrations.wrappers",
    "leap_gym.numba_kernels": "leap_gym.integrations.numba_kernels",
    "leap_gym.numba_examples": "leap_gym.integrations.numba_examples",
    "leap_gym.trajectory_log": "leap_gym.integrations.trajectory_log",
    "leap_gym._sandbox_host": "leap_gym.sandbox.host",
}
install_moved_modules("leap_gym", MOVED_MODULES, kept=("evaluate",))

__all__ = ["EvalConfig", "EvalResult", "Evaluator", "Task", "evaluate", "load_tasks", "__version__"]
