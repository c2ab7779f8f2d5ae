"""Task loading: the built-in suite's format, KernelBench folders unchanged, size scaling."""

import textwrap

import pytest

import leap_gym
from leap_gym.tasks import input_numel, load_tasks

KERNELBENCH_FILE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        """Simple model that performs a ReLU activation."""
        def __init__(self):
            super(Model, self).__init__()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x)

    batch_size = 4096
    dim = 393216

    def get_inputs():
        x = torch.rand(batch_size, dim)
        return [x]

    def get_init_inputs():
        return []
''')


@pytest.fixture
def kernelbench_dir(tmp_path):
    level1 = tmp_path / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (level1 / "19_ReLU.py").write_text(KERNELBENCH_FILE)
    (level1 / "1_Square_matrix_multiplication_.py").write_text(KERNELBENCH_FILE.replace("torch.relu(x)", "x @ x.T"))
    return tmp_path / "KernelBench"


def test_kernelbench_folder_loads_unchanged(kernelbench_dir):
    tasks = load_tasks(kernelbench_dir / "level1")
    assert {t.id for t in tasks} == {"level1/relu", "level1/square_matrix_multiplication_"}
    relu = next(t for t in tasks if "relu" in t.id)
    assert relu.level == 1 and relu.reference_solutions == []
    assert relu.wrapper_signature.startswith('extern "C" __global__ void relu_kernel(')  # derived: elementwise
    assert not next(t for t in tasks if "matrix" in t.id).has_wrapper
    assert input_numel(relu) == 4096 * 393216
    assert load_tasks(kernelbench_dir)[0].level == 1  # the parent folder finds level<N>/ subfolders


def test_size_scaling_shrinks_module_constants(kernelbench_dir):
    (relu,) = [t for t in load_tasks(kernelbench_dir / "level1", max_numel=2**16) if "relu" in t.id]
    assert input_numel(relu) <= 2**16
    assert set(relu.overrides) <= {"batch_size", "dim"}
    namespace = relu.module()
    x = namespace["get_inputs"]()[0]
    assert x.numel() <= 2**16 and x.dim() == 2


def test_builtin_ids_and_presets():
    tasks = leap_gym.load_tasks("builtin")
    relu = next(t for t in tasks if t.id == "level1/relu")
    assert relu.with_size("cpu").overrides == relu.sizes["cpu"]
    assert input_numel(relu.with_size("cpu")) < input_numel(relu.with_size("gpu"))
    assert load_tasks(["level1/relu"])[0].id == "level1/relu"
    with pytest.raises(KeyError, match="unknown task ids"):
        load_tasks(["level9/nope"])
    with pytest.raises(FileNotFoundError, match="no task folder"):
        load_tasks("/nonexistent/folder")


def test_kernelbench_task_runs_unchanged_on_the_cpu_backend(kernelbench_dir):
    from leap_gym.cli import DEMO_RESPONSES
    from leap_gym.evaluation.parse import parse_response

    (relu,) = [t for t in load_tasks(kernelbench_dir / "level1", max_numel=2**14) if "relu" in t.id]
    cuda = parse_response(DEMO_RESPONSES[2], wrapper=leap_gym.load_tasks(["level1/relu"])[0].wrapper)
    response = f"```cuda\n{cuda.cuda}```\n\n```python\n{cuda.python}```"
    result = leap_gym.evaluate(relu, response, backend="cpu", timeout_s=120)
    assert result.status == "CORRECT", result.message
    assert leap_gym.evaluate(relu, response.replace("0.0f)", "1.0f)"), backend="cpu").status == "WRONG_OUTPUT"
