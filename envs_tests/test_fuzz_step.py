"""Property-based fuzz of ``env.step`` (hypothesis): arbitrary text, bytes, fence soup and huge inputs.

No exception escapes ``step`` and every step returns a status. Most examples run on the
``compile-only`` backend (parse, static check, NVRTC, in a sandboxed worker) for speed; a few run on
``cpu`` (real execution). The parser alone is fuzzed in ``test_fuzz_parse.py``.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leap_gym  # noqa: F401  (registers the environment)
from leap_gym.result import STATUSES

RELU_CUDA = '''extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}'''
PY_LINES = ["import torch", "import torch.nn as nn", "class ModelNew(nn.Module):", "    def forward(self, x):",
            "        y = torch.empty_like(x)", "        kernels.relu_kernel(1, 32, x, y, x.numel())",
            "        return y",
            "        return torch.relu(x)", "import os", "    pass", "def f(", "        while True: pass"]
FENCES = ["```cuda\n", "```python\n", "```\n", "```cpp\n", "~~~\n", "``` cuda\n", "```CUDA\n", "\n"]
CUDA_BITS = [RELU_CUDA, "__global__ void k() {}", 'extern "C" {', "}", "__syncthreads();", "#include <x>",
             "int main() { return 0; }", "float* p = 0; *p = 1;", "\x00", "é"]

fence_soup = st.lists(st.one_of(st.sampled_from(FENCES), st.sampled_from(PY_LINES), st.sampled_from(CUDA_BITS),
                                st.text(max_size=40)), max_size=30).map("\n".join)
huge = st.builds(lambda piece, n: piece * n, st.sampled_from(["```cuda\n", "a", "```python\nimport torch\n", "\n"]),
                 st.integers(min_value=10_000, max_value=300_000))
actions = st.one_of(st.text(max_size=2000), st.binary(max_size=2000), fence_soup, huge)


def _step_ok(env, action) -> None:
    if env.unwrapped._done:
        env.reset(seed=0, options={"task_id": "level1/relu"})
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and obs
    assert info["result"].status in STATUSES
    assert isinstance(reward, float)


@pytest.fixture(scope="module")
def compile_env():
    env = gym.make("KernelDebugEnv-v0", tasks=["level1/relu"], backend="compile-only", max_turns=10**6, timeout_s=20)
    env.reset(seed=0, options={"task_id": "level1/relu"})
    return env


@pytest.fixture(scope="module")
def cpu_env():
    env = gym.make("KernelDebugEnv-v0", tasks=["level1/relu"], backend="cpu", max_turns=10**6, timeout_s=10)
    env.reset(seed=0, options={"task_id": "level1/relu"})
    return env


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(action=actions)
def test_step_answers_anything(compile_env, action):
    _step_ok(compile_env, action)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(action=st.one_of(fence_soup, st.sampled_from([f"```cuda\n{RELU_CUDA}\n```\n```python\n" + "\n".join(PY_LINES[:7])
                                                     + "\n```\n"])))
def test_step_answers_anything_on_cpu(cpu_env, action):
    _step_ok(cpu_env, action)
