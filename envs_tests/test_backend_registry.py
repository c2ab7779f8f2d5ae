"""`register_backend` in the caller reaches the sandbox workers: ``backend="name"`` then works in `gym.make`."""

from __future__ import annotations

import gymnasium as gym
import pytest

import leap_gym
from leap_gym.backends import base

NAME = "cpu-wallclock"


def relu() -> leap_gym.Task:
    return next(t for t in leap_gym.load_tasks("builtin") if t.id == "level1/relu")


@pytest.fixture
def registered(monkeypatch):
    """`register_backend` as a user calls it; the registry and the environment variable restored afterwards."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_INSTANCES", dict(base._INSTANCES))
    monkeypatch.delenv(base.BACKENDS_ENV, raising=False)
    base.register_backend(NAME, "wallclock_backend:WallClockCpuBackend")
    yield NAME


def test_a_backend_registered_in_the_caller_judges_in_the_sandbox_worker(registered):
    env = gym.make("KernelDebugEnv-v0", backend=registered, max_turns=2)
    try:
        _, info = env.reset(seed=0, options={"task_id": "level1/relu"})
        _, reward, terminated, _, info = env.step(relu().reference_solutions[0])
        result = info["result"]
        assert result.status == "CORRECT" and terminated and reward == 1.0
        assert result.backend == registered
        # only the registered class times kernels: the worker imported and ran it, not the plain cpu backend
        assert result.timing is not None and result.timing.trials >= 5 and result.timing.kernel_ms > 0
        assert result.speedup is not None and result.speedup > 0
    finally:
        env.unwrapped.evaluator.close()


def test_the_plain_cpu_backend_reports_no_timing():
    task = relu()
    result = leap_gym.evaluate(task, task.reference_solutions[0], backend="cpu")
    assert result.status == "CORRECT" and result.timing is None


def test_registration_sets_the_variable_workers_read(registered):
    import json
    import os

    assert json.loads(os.environ[base.BACKENDS_ENV]) == {NAME: "wallclock_backend:WallClockCpuBackend"}
    assert base.get_backend(NAME).name == NAME and NAME in base.backend_names()


@pytest.mark.parametrize("name, target", [("x", "wallclock_backend.WallClockCpuBackend"), ("x", "a b:C"),
                                          ("auto", "wallclock_backend:WallClockCpuBackend"), ("", "m:C")])
def test_a_bad_registration_is_a_clear_error(name, target):
    with pytest.raises(ValueError, match="register_backend"):
        base.register_backend(name, target)
