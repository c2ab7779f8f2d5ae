import gymnasium as gym

import leap_gym

env = gym.make("KernelDebugEnv-v0", tasks="builtin", backend="cpu", max_turns=4)
obs, info = env.reset(seed=0, options={"task_id": "level1/relu"})  # obs: the task prompt

KERNEL = """```cuda
extern "C" __global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = %s;
}
```"""
for response in (KERNEL % "fminf(x[i], 0.0f)", KERNEL % "fmaxf(x[i], 0.0f)"):  # a wrong operator, then the fix
    obs, reward, terminated, truncated, info = env.step(response)
    print("\n".join(obs.splitlines()[:6]))  # the feedback's head
    print(f"-> reward {reward}, terminated {terminated}, status {info['result'].status}\n")

task = leap_gym.load_tasks(["level1/relu"])[0]
print(leap_gym.evaluate(task, task.reference_solutions[0], backend="cpu").status)  # no environment needed
