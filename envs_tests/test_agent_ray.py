"""`RayEvaluator` on a local Ray instance (2 CPUs, no dashboard): the Evaluator interface on the
compile-only and cpu backends, least-loaded dispatch over several actors, use inside the environment
and the rollout engine, and an actor killed mid-evaluation (restarted, the evaluation retried)."""

import time

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'leap-gym[ray]')")

import gymnasium as gym  # noqa: E402

import leap_gym  # noqa: E402
from leap_agents import DCPConfig, ScriptedPolicy  # noqa: E402
from leap_agents.integrations.ray_pool import RayEvaluator  # noqa: E402
from leap_agents.training.rollout import RolloutConfig, RolloutEngine  # noqa: E402

BAD_CUDA = '```cuda\nextern "C" __global__ void relu_kernel(const float* x, float* y, int n) { y[0] = x; }\n```'
WRONG_CUDA = ('```cuda\nextern "C" __global__ void relu_kernel(const float* x, float* y, int n) {\n'
              '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n```')
HANG_CUDA = ('```cuda\nextern "C" __global__ void relu_kernel(const float* x, float* y, int n) {\n'
             '    volatile int k = 0;\n    while (k >= 0) { k = 1; }\n}\n```')


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def tasks():
    by_id = {t.id: t for t in leap_gym.load_tasks("builtin")}
    return [by_id["level1/relu"], by_id["level1/add"]]


@pytest.fixture(scope="class")
def compile_pool():
    with RayEvaluator(backend="compile-only", num_actors=2) as pool:
        yield pool


@pytest.fixture(scope="class")
def cpu_pool():  # one class at a time: the 2 logical CPUs hold either pool's actors, not both
    with RayEvaluator(backend="cpu", num_actors=1, timeout_s=8.0, trials=1) as pool:
        yield pool


class TestCompileOnly:
    @pytest.fixture
    def pool(self, compile_pool):
        return compile_pool

    def test_interface_and_statuses(self, pool, tasks):
        relu = tasks[0]
        assert not pool._started_ray  # joined the running instance
        assert pool.config.backend == "compile-only" and pool.config.arch
        assert pool.backend.name == "compile-only" and pool.capacity == 2 and len(pool.actors) == 2
        assert pool.evaluate(relu, relu.reference_solutions[0]).status == "COMPILED"
        bad = pool.evaluate(relu, BAD_CUDA)
        assert bad.status == "COMPILE_ERROR" and bad.errors and bad.task_id == "level1/relu"
        assert pool.evaluate(relu, "no code here").status == "FORMAT_ERROR"

    def test_concurrent_submissions_use_every_actor(self, pool, tasks):
        relu, add = tasks
        before = list(pool.dispatched)
        futures = [pool.submit(t, t.reference_solutions[0]) for t in (relu, add, relu, add)]
        assert [f.result(timeout=120).status for f in futures] == ["COMPILED"] * 4
        assert [a - b for a, b in zip(pool.dispatched, before)] == [2, 2]  # least-loaded: 2 each

    def test_plugs_into_env_and_rollout_engine(self, pool, tasks):
        relu = tasks[0]
        env = gym.make("KernelDebugEnv-v0", tasks=tasks, backend="compile-only", max_turns=2, evaluator=pool)
        env.reset(seed=0, options={"task_id": "level1/relu"})
        _, _, _, _, info = env.step(BAD_CUDA)
        assert info["result"].status == "COMPILE_ERROR" and info["backend"] == "compile-only"
        assert env.unwrapped.evaluator is pool

        policy = ScriptedPolicy({"level1/relu": {0: [relu.reference_solutions[0]],
                                                 1: [BAD_CUDA, relu.reference_solutions[0]]},
                                 "level1/add": ["no code"]})
        engine = RolloutEngine(policy, tasks, backend="compile-only", env_kwargs={"evaluator": pool},
                               config=RolloutConfig(group_size=2, max_turns=2, eval_workers=pool.capacity,
                                                    progress_bar=False),
                               dcp=DCPConfig(enabled=False))
        batch = engine.run(["level1/relu", "level1/add"], seed=0)
        relu_group, add_group = batch.groups
        assert [t.first_solved_turn for t in relu_group] == [1, 2]
        assert [t.first_solved_turn for t in add_group] == [None, None]
        assert all(e.unwrapped.evaluator is pool for e in engine._envs)


class TestCpuBackend:
    @pytest.fixture
    def pool(self, cpu_pool):
        return cpu_pool

    def test_correct_and_wrong_output(self, pool, tasks):
        relu = tasks[0]
        futures = [pool.submit(relu, relu.reference_solutions[0]), pool.submit(relu, WRONG_CUDA)]
        ok, wrong = (f.result(timeout=180) for f in futures)
        assert ok.status == "CORRECT" and ok.correct and ok.backend == "cpu", ok.message
        assert wrong.status == "WRONG_OUTPUT" and wrong.mismatch is not None

    def test_actor_killed_mid_evaluation_is_restarted_and_retried(self, pool, tasks):
        relu = tasks[0]
        pid = ray.get(pool.actors[0].pid.remote())
        future = pool.submit(relu, HANG_CUDA)  # busy for timeout_s in its sandboxed worker
        time.sleep(2.0)
        assert not future.done()
        ray.kill(pool.actors[0], no_restart=False)  # the actor process dies; Ray starts a new one
        result = future.result(timeout=180)
        assert result.status == "TIMEOUT", result.message  # the retry ran to its own verdict
        assert pool.stats["retries"] == 1 and pool.stats["lost"] == 0
        assert ray.get(pool.actors[0].pid.remote()) != pid  # a new process serves the actor
        assert pool.evaluate(relu, relu.reference_solutions[0]).status == "CORRECT"


def test_unschedulable_actors_time_out_with_a_hint():
    with pytest.raises(TimeoutError, match="lacks the resources"):
        RayEvaluator(backend="compile-only", num_actors=1, cpus_per_actor=64, restart_timeout_s=3)


def test_closed_pool_refuses_work(tasks):
    pool = RayEvaluator(backend="compile-only", num_actors=1)
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(tasks[0], "x")
