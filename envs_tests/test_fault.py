"""Fault test (small version of ``benchmarks/fault_storm.py``): faulty responses through the environment.

Every kind of `fault_responses` (crashes, hangs, huge allocations, output floods, fork, file writes,
network) goes through ``env.step`` with a 5 s timeout and two workers: each step returns a status in
time, none raises, none is CORRECT, no sentinel file appears outside the sandbox, and the
environment is still CORRECT on an honest response afterwards.
"""

from __future__ import annotations

import os
import threading
import time

import gymnasium as gym
import pytest
from fault_responses import HONEST, KINDS, SENTINELS, fault_stream

import leap_gym  # noqa: F401  (registers the environment)
from leap_gym.result import CORRECT, STATUSES, TIMEOUT

TIMEOUT_S = 5.0


def _env():
    return gym.make("KernelDebugEnv-v0", tasks=["level1/relu"], backend="cpu", max_turns=10**6, timeout_s=TIMEOUT_S,
                    workers=2, locate_faults=False)


@pytest.fixture(autouse=True)
def _no_sentinels():
    for path in SENTINELS:
        if os.path.exists(path):
            os.remove(path)
    yield
    assert [p for p in SENTINELS if os.path.exists(p)] == []


def test_faulty_responses_are_all_answered_and_the_env_survives():
    jobs = list(fault_stream(len(KINDS) + 9))  # every kind once, a few twice: about 30 responses
    results: dict[int, tuple[str, str, float]] = {}
    errors: list[str] = []
    cursor = iter(range(len(jobs)))
    lock = threading.Lock()

    def work() -> None:
        env = _env()
        env.reset(seed=0, options={"task_id": "level1/relu"})
        while True:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            kind, response = jobs[index]
            start = time.perf_counter()
            try:
                _, _, _, _, info = env.step(response)
                results[index] = (kind, info["result"].status, time.perf_counter() - start)
            except Exception as exc:  # must never happen
                errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a step hung"
    assert errors == []
    assert len(results) == len(jobs)
    for kind, status, took in results.values():
        assert status in STATUSES and status != CORRECT, (kind, status)
        assert took < TIMEOUT_S * 3 + 30, (kind, took)
    by_kind = {kind: status for kind, status, _ in results.values()}
    assert by_kind["infinite_loop"] == TIMEOUT and by_kind["deadlock"] == TIMEOUT
    assert by_kind["null_write"] == "RUNTIME_ERROR" and by_kind["network"] == "FORMAT_ERROR"

    env = _env()
    env.reset(seed=0, options={"task_id": "level1/relu"})
    _, reward, terminated, _, info = env.step(HONEST)
    assert info["result"].status == CORRECT and terminated and reward == 1.0


@pytest.mark.parametrize("kind, wild", [("null_write", True), ("oob_near", False)])
def test_a_wild_access_replaces_its_worker_and_a_guarded_one_does_not(kind, wild):
    """A fault outside every argument's guard page may follow stray writes into the worker's own memory, so the
    worker that ran it is not reused; one that stopped at a guard page wrote nothing outside the copies."""
    from fault_responses import fault_response

    from leap_gym.evaluation.evaluator import Evaluator
    from leap_gym.evaluation.languages import prepare
    from leap_gym.tasks import load_tasks

    task = load_tasks(["level1/relu"])[0].with_size("cpu")
    with Evaluator(backend="cpu", workers=1, timeout_s=TIMEOUT_S, locate_faults=False) as evaluator:
        job = evaluator.job_for(task, prepare(task, fault_response(kind), "cpu"))
        outcome = evaluator._get_pool().run("leap_gym.evaluation.languages:run_job", job, timeout=TIMEOUT_S)
        assert outcome.ok and outcome.value.detail == "out_of_bounds", outcome
        assert ("no argument's buffer" in outcome.value.message) is wild
        assert outcome.replaced is wild
