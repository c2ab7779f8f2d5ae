"""`RayEvaluator`: the evaluation pool on Ray, behind the interface of `leap_gym.evaluation.evaluator.Evaluator`.

One Ray actor per GPU (``num_gpus=1`` each, spread over the cluster's nodes) or, without GPUs, N
actors with one CPU each; every actor holds a local `Evaluator` (its own sandboxed worker
processes) and serves `workers` evaluations at once. Calls go to the least-loaded actor. An actor
that dies (its node lost, its process killed) is restarted by Ray (`max_restarts`) and the
evaluation it was running is retried once, on whichever actor is then least loaded.

```python
import gymnasium as gym
from leap_agents.integrations.ray_pool import RayEvaluator

with RayEvaluator(backend="cuda", address="auto") as pool:        # one actor per GPU of the cluster
    env = gym.make("KernelDebugEnv-v0", backend="cuda", evaluator=pool)
    engine = RolloutEngine(policy, backend="cuda", env_kwargs={"evaluator": pool},
                           config=RolloutConfig(eval_workers=pool.capacity))
```

Needs the ``ray`` extra (``pip install 'leap-gym[ray]'``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from leap_gym.backends.base import Backend, get_backend
from leap_gym.evaluation.evaluator import Evaluator
from leap_gym.evaluation.pipeline import EvalConfig
from leap_gym.result import EvalResult
from leap_gym.tasks import Task

log = logging.getLogger(__name__)

INSTALL_HINT = "RayEvaluator needs Ray: pip install 'leap-gym[ray]' (or pip install 'ray>=2.9')"


class EvaluatorLost(RuntimeError):
    """An evaluation's actor died twice (first attempt and its retry); not the response's fault."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - optional extra
        raise ImportError(INSTALL_HINT) from exc
    return ray


class _EvalActor:
    """The body of one Ray actor: a local `Evaluator` (its sandboxed worker pool) in the actor's process."""

    def __init__(self, config: EvalConfig):
        import os

        self.evaluator = Evaluator(config)
        self._pid = os.getpid()

    def evaluate(self, task: Task, response: str) -> EvalResult:
        return self.evaluator.evaluate(task, response)

    def config(self) -> EvalConfig:
        return self.evaluator.config

    def pid(self) -> int:
        return self._pid

    def close(self) -> None:
        self.evaluator.close()


class RayEvaluator:
    """Evaluates responses on Ray actors; a drop-in for `leap_gym.evaluation.evaluator.Evaluator`.

    Args:
        config: how responses are judged (`EvalConfig`); its ``workers`` is per actor.
        num_actors: how many actors; by default one per GPU of the cluster for GPU backends
            (``cuda``, or ``auto`` on a cluster with GPUs), else one per CPU of the cluster
            (at most 8).
        gpus_per_actor: GPUs reserved by each actor; by default 1 for GPU backends, 0 otherwise.
        cpus_per_actor: CPUs reserved by each actor (default 1).
        address: a Ray cluster to connect to (``"auto"``, ``"ray://head:10001"``); by default the
            running Ray instance, or a new local one.
        max_restarts: how often Ray restarts a dead actor (``-1``: without limit).
        restart_timeout_s: how long the actors may take to start, and a retry waits for a restarted
            actor to answer.
        spread: place actors on as many nodes as possible (Ray's ``SPREAD`` strategy).
        init_kwargs: further `ray.init` arguments when this object starts Ray (``num_cpus``,
            ``include_dashboard``, ``runtime_env``...).
        **overrides: `EvalConfig` fields (``backend``, ``timeout_s``, ``trials``, ``workers``...).

    Attributes:
        config: the resolved `EvalConfig` (backend and architecture as the actors resolved them).
        backend: the `Backend` of `config.backend` (its size preset and flags; runs nothing here).
        actors: the Ray actor handles.
        capacity: evaluations the pool serves at once (actors x workers per actor); a good
            ``RolloutConfig.eval_workers``.
        stats: counters: ``submitted``, ``retries``, ``lost``.
        dispatched: calls sent to each actor (retries included).
    """

    def __init__(self, config: EvalConfig | None = None, *, num_actors: int | None = None,
                 gpus_per_actor: float | None = None, cpus_per_actor: float = 1.0, address: str | None = None,
                 max_restarts: int = 3, restart_timeout_s: float = 300.0, spread: bool = True,
                 init_kwargs: dict[str, Any] | None = None, **overrides: Any):
        ray = _import_ray()
        self._ray = ray
        self.restart_timeout_s = restart_timeout_s
        config = replace(config or EvalConfig(), **overrides)
        self._started_ray = False
        if not ray.is_initialized():
            ray.init(address=address, **{"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})})
            self._started_ray = True
        elif address is not None:
            log.info("Ray already initialised; ignoring address=%r", address)
        resources = ray.cluster_resources()
        cluster_gpus = int(resources.get("GPU", 0))
        wants_gpu = config.backend == "cuda" or (config.backend == "auto" and cluster_gpus > 0)
        if gpus_per_actor is None:
            gpus_per_actor = 1.0 if wants_gpu else 0.0
        if num_actors is None:
            if gpus_per_actor > 0:
                num_actors = int(cluster_gpus / gpus_per_actor)
            else:
                num_actors = min(8, int(resources.get("CPU", 1) / max(cpus_per_actor, 1e-9)))
        if num_actors < 1:
            if self._started_ray:
                ray.shutdown()
            raise ValueError(f"no room for an actor: the cluster has {resources.get('GPU', 0)} GPUs and "
                             f"{resources.get('CPU', 0)} CPUs for actors of {gpus_per_actor} GPU / {cpus_per_actor} "
                             "CPU; pass num_actors=, gpus_per_actor= or cpus_per_actor= that fit, or a CPU backend")
        options: dict[str, Any] = {"num_cpus": cpus_per_actor, "num_gpus": gpus_per_actor, "max_restarts": max_restarts,
                                   "max_task_retries": 0, "max_concurrency": max(1, config.workers)}
        if spread:
            options["scheduling_strategy"] = "SPREAD"
        actor_cls = ray.remote(_EvalActor).options(**options)
        self.actors = [actor_cls.remote(config) for _ in range(num_actors)]
        self._load = [0] * num_actors
        self.dispatched = [0] * num_actors
        self._lock = threading.Lock()
        self._next = itertools.count()
        self.stats = {"submitted": 0, "retries": 0, "lost": 0}
        self._closed = False
        self._ready = False
        try:
            configs = ray.get([a.config.remote() for a in self.actors], timeout=restart_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            raise TimeoutError(f"{num_actors} evaluation actors ({gpus_per_actor} GPU, {cpus_per_actor} CPU each) "
                               f"did not start within {restart_timeout_s:g} s: the cluster lacks the resources for "
                               "them; pass fewer num_actors, smaller cpus_per_actor/gpus_per_actor, or a longer "
                               "restart_timeout_s") from exc
        except Exception:
            self.close()
            raise
        self._ready = True
        self.config: EvalConfig = configs[0]
        self.backend: Backend = get_backend(self.config.backend)
        self.capacity = num_actors * max(1, config.workers)
        log.info("RayEvaluator: %d actors (%s GPU, %s CPU each), backend %s", num_actors, gpus_per_actor,
                 cpus_per_actor, self.config.backend)

    # dispatch ---------------------------------------------------------------------------------------

    def _pick(self) -> int:
        """The least-loaded actor; ties go round-robin."""
        with self._lock:
            start = next(self._next) % len(self.actors)
            order = [(start + k) % len(self.actors) for k in range(len(self.actors))]
            i = min(order, key=lambda j: self._load[j])
            self._load[i] += 1
            self.dispatched[i] += 1
            return i

    def _release(self, i: int) -> None:
        with self._lock:
            self._load[i] -= 1

    def _dispatch(self, task: Task, response: str, outer: Future, attempt: int) -> None:
        i = self._pick()
        try:
            inner = self.actors[i].evaluate.remote(task, response).future()
        except Exception as exc:  # submitting itself failed (Ray shut down)
            self._release(i)
            outer.set_exception(exc)
            return

        def done(f: Future) -> None:
            self._release(i)
            exc = f.exception()
            if exc is None:
                outer.set_result(f.result())
            elif self._actor_died(exc) and attempt == 0 and not self._closed:
                with self._lock:
                    self.stats["retries"] += 1
                log.warning("evaluation actor %d died (%s); retrying the evaluation once", i, type(exc).__name__)
                threading.Thread(target=self._retry, args=(task, response, outer), daemon=True).start()
            elif self._actor_died(exc):
                with self._lock:
                    self.stats["lost"] += 1
                outer.set_exception(EvaluatorLost(
                    f"the evaluation of a response to {task.id} was lost twice with its Ray actor ({exc}); "
                    "check the cluster's nodes, or raise max_restarts"))
            else:
                outer.set_exception(exc)

        inner.add_done_callback(done)

    def _retry(self, task: Task, response: str, outer: Future) -> None:
        """Wait until the actors answer again (a dead one is being restarted), then dispatch once more."""
        if self._await_alive():
            self._dispatch(task, response, outer, 1)
            return
        with self._lock:
            self.stats["lost"] += 1
        outer.set_exception(EvaluatorLost(
            f"the evaluation of a response to {task.id} was lost with its Ray actor, and no actor came back within "
            f"{self.restart_timeout_s:g} s; check the cluster's nodes, or raise max_restarts / restart_timeout_s"))

    def _await_alive(self) -> bool:
        """Ping every actor until each answers or is dead for good; drop the dead ones. True if any is left."""
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        deadline = time.monotonic() + self.restart_timeout_s
        for i, actor in enumerate(list(self.actors)):
            while not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    self._ray.get(actor.pid.remote(), timeout=left)
                    break
                except (ActorUnavailableError, GetTimeoutError):  # restarting
                    time.sleep(0.2)
                except RayActorError:  # dead for good (restarts used up): stop dispatching to it
                    with self._lock:
                        self._load[i] = 1 << 30
                    break
        with self._lock:
            return any(load < 1 << 30 for load in self._load)

    def _actor_died(self, exc: BaseException) -> bool:
        from ray.exceptions import ActorUnavailableError, RayActorError

        return isinstance(exc, (RayActorError, ActorUnavailableError))

    # the Evaluator interface --------------------------------------------------------------------------

    def submit(self, task: Task, response: str) -> Future:
        """Judge one response on the least-loaded actor; a `concurrent.futures.Future` of its `EvalResult`."""
        if self._closed:
            raise RuntimeError("this RayEvaluator is closed; create a new one")
        outer: Future = Future()
        with self._lock:
            self.stats["submitted"] += 1
        self._dispatch(task, response, outer, 0)
        return outer

    def evaluate(self, task: Task, response: str) -> EvalResult:
        """Judge one response to `task` (blocking); same result as the local `Evaluator.evaluate`."""
        return self.submit(task, response).result()

    def close(self) -> None:
        """Stop the actors (and the Ray instance, if this object started it)."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        for actor in getattr(self, "actors", []):
            if self._ready:  # stop its worker processes first; an actor that never started has none
                try:
                    ray.get(actor.close.remote(), timeout=30)
                except Exception as exc:  # an actor already gone
                    log.debug("closing an actor: %s", exc)
            ray.kill(actor, no_restart=True)
        if self._started_ray:
            ray.shutdown()

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RayEvaluator(backend={self.config.backend!r}, actors={len(self.actors)}, capacity={self.capacity})"
