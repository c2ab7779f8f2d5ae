"""Default wrappers derived for KernelBench files (no LEAP_TASK metadata): elementwise tasks get one, and
a short-form answer (only the ```cuda block) is complete there; any other task gets none."""

import pytest

import leap_gym
from leap_gym.evaluation.feedback import render_prompt
from leap_gym.tasks import load_tasks

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
TAIL = '''
batch_size = 64
dim = 1000

def get_inputs():
    return [torch.randn(batch_size, dim) for _ in range({count})]

def get_init_inputs():
    return {init}
'''


def kernelbench_file(init: str, forward_args: str, body: str, count: int = 1, init_args: str = "[]") -> str:
    return HEADER + f'''class Model(nn.Module):
    def __init__(self{init}):
        super().__init__()
{"        self.alpha = alpha" if "alpha" in init else "        self.unused = None"}

    def forward(self, {forward_args}):
        return {body}
''' + TAIL.format(count=count, init=init_args)


FILES = {
    "31_ELU.py": kernelbench_file(", alpha: float = 1.0", "x", "F.elu(x, alpha=self.alpha)", init_args="[1.5]"),
    "1_Add.py": kernelbench_file("", "a, b", "a + b * 2", count=2),
    "2_Softmax.py": kernelbench_file("", "x", "torch.softmax(x, dim=1)"),
    "3_Cumsum.py": kernelbench_file("", "x", "torch.cumsum(x, dim=1)"),
    "4_Centered.py": kernelbench_file("", "x", "x - x.mean()"),
    "5_Dropout.py": kernelbench_file("", "x", "F.dropout(x, p=0.5, training=True)"),
    "6_Sum.py": kernelbench_file("", "x", "x.sum(dim=1)"),
    "7_Roll.py": kernelbench_file("", "x", "torch.roll(x, 1, dims=1)"),
}
LINEAR = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1000, 1000)

    def forward(self, x):
        return self.fc(x)
''' + TAIL.format(count=1, init="[]")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kb") / "level1"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)
    (folder / "8_Linear.py").write_text(LINEAR)
    return {t.name: t for t in load_tasks(folder, max_numel=2 ** 14)}


def test_only_elementwise_tasks_get_a_wrapper(tasks):
    assert {name for name, t in tasks.items() if t.has_wrapper} == {"elu", "add"}


def test_wrapper_signature_carries_inputs_and_scalar_constructor_arguments(tasks):
    assert tasks["elu"].wrapper_signature == \
        'extern "C" __global__ void elu_kernel(const float* x, float* out, float alpha, int n)'
    assert tasks["add"].wrapper_signature == \
        'extern "C" __global__ void add_kernel(const float* a, const float* b, float* out, int n)'
    prompt = render_prompt(tasks["elu"], max_turns=2)
    assert "Short form" in prompt and "def __init__(self, alpha=1.0)" in prompt


ELU_SHORT = '''```cuda
extern "C" __global__ void elu_kernel(const float* x, float* out, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : alpha * (expf(x[i]) - 1.0f);
}
```'''


def test_short_form_answer_is_complete_on_a_derived_task(tasks):
    result = leap_gym.evaluate(tasks["elu"], ELU_SHORT, backend="cpu", timeout_s=120)
    assert result.status == "CORRECT", result.message
    wrong = leap_gym.evaluate(tasks["elu"], ELU_SHORT.replace("alpha *", "1.0f *"), backend="cpu", timeout_s=120)
    assert wrong.status == "WRONG_OUTPUT"  # the module's alpha (1.5) reaches the kernel


def test_builtin_tasks_keep_their_own_wrappers():
    for task in load_tasks("builtin"):
        assert task.wrapper == task.module()["LEAP_TASK"].get("wrapper", ""), task.id
