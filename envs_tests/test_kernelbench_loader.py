"""KernelBench folders load whole: files that cannot load are skipped with reasons, and shrinking keeps
the reference valid (tuples, literals in get_inputs, tied sizes, derived sizes, groups, kernel sizes).

The task files here are written for the tests in KernelBench's format; none is KernelBench's own."""

import textwrap
import warnings

import pytest
import torch

import leap_gym
from leap_gym.cli import main as cli_main
from leap_gym.tasks import SkippedFile, TaskList, input_numel, instantiate, load_tasks
from leap_gym.tasks.sizes import ShrinkError, shrink_to_numel


def kb_file(model: str, constants: str, inputs: str, init: str = "[]") -> str:
    """A task file in KernelBench's layout: imports, Model, module-level sizes, get_inputs, get_init_inputs."""
    return "\n".join([
        "import torch", "import torch.nn as nn", "", "", "class Model(nn.Module):",
        textwrap.indent(textwrap.dedent(model).strip("\n"), "    "), "", "",
        textwrap.dedent(constants).strip("\n"), "", "",
        "def get_inputs():", f"    return {inputs}", "", "",
        "def get_init_inputs():", f"    return {init}", "",
    ])


RELU = kb_file('''
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
''', "batch_size = 4096\ndim = 65536", "[torch.rand(batch_size, dim)]")

SCAN = kb_file('''
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)
''', "batch_size = 32768\ninput_shape = (32768,)\ndim = 1", "[torch.rand(batch_size, *input_shape)]", "[dim]")

HINGE = kb_file('''
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))
''', "batch_size = 32768\ninput_shape = (32768,)\ndim = 1",
    "[torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]")

CONV_LITERAL = kb_file('''
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=96, kernel_size=11, stride=4, padding=2)

    def forward(self, x):
        return self.conv1(x)
''', "batch_size = 256\nnum_classes = 1000", "[torch.rand(batch_size, 3, 224, 224)]", "[num_classes]")

GROUPED_BIAS = kb_file('''
    def __init__(self, in_channels, out_channels, kernel_size, groups, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, groups=groups)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return self.conv(x) + self.bias
''', "batch_size = 128\nin_channels = 48\nout_channels = 96\nkernel_size = 5\ngroups = 3\n"
     "height = width = 128\nbias_shape = (out_channels, 1, 1)",
    "[torch.rand(batch_size, in_channels, height, width)]",
    "[in_channels, out_channels, kernel_size, groups, bias_shape]")

CROSS_ENTROPY = kb_file('''
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)
''', "batch_size = 32768\nnum_classes = 4096\ninput_shape = (num_classes,)\ndim = 1",
    "[torch.rand(batch_size, *input_shape), torch.randint(0, num_classes, (batch_size,))]")

CUDA_INPUTS = kb_file('''
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b
''', "", "[torch.randn(1, 128).cuda(), torch.randn(1, 128).cuda()]")

BROKEN_IMPORT = "import not_a_module_anywhere\n" + RELU
NO_MODEL = RELU.replace("class Model(", "class Other(")
UNSHRINKABLE = kb_file('''
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.view(16, 16, 16).sum(0)
''', "", "[torch.rand(4096)]")


def write_level(root, files: dict[str, str], level: int = 1):
    folder = root / "KernelBench" / f"level{level}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def runs(task) -> torch.Tensor:
    _, model, inputs, _ = instantiate(task, seed=0)
    with torch.no_grad():
        return model(*inputs)


def test_a_folder_never_fails_for_one_file(tmp_path):
    folder = write_level(tmp_path, {"19_ReLU.py": RELU, "2_Broken.py": BROKEN_IMPORT, "3_NoModel.py": NO_MODEL,
                                    "4_Unshrinkable.py": UNSHRINKABLE})
    with pytest.warns(UserWarning) as caught:
        tasks = load_tasks(folder, max_numel=2**10)
    assert isinstance(tasks, TaskList) and isinstance(tasks, list)
    assert [t.id for t in tasks] == ["level1/relu"]
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in tasks.skipped}
    assert set(reasons) == {"2_Broken.py", "3_NoModel.py", "4_Unshrinkable.py"}
    assert "No module named 'not_a_module_anywhere'" in reasons["2_Broken.py"]
    assert "lacks `Model`" in reasons["3_NoModel.py"]
    assert "cannot shrink" in reasons["4_Unshrinkable.py"]
    assert all(isinstance(s, SkippedFile) for s in tasks.skipped)
    messages = [str(w.message) for w in caught]
    assert len([m for m in messages if m.startswith("skipped task file")]) == 3
    assert any("2_Broken.py" in m and "not_a_module_anywhere" in m for m in messages)
    with pytest.raises(ModuleNotFoundError):
        load_tasks(folder, max_numel=2**10, on_error="raise")
    with pytest.raises(ValueError, match="on_error"):
        load_tasks(folder, on_error="ignore")
    builtin = leap_gym.load_tasks("builtin")
    assert type(builtin) is list and builtin and not hasattr(builtin, "skipped")


def test_cli_tasks_path_prints_loaded_and_skipped(tmp_path, capsys):
    folder = write_level(tmp_path, {"19_ReLU.py": RELU, "2_Broken.py": BROKEN_IMPORT})
    assert cli_main(["tasks", str(folder), "--max-numel", "4096"]) == 0
    out = capsys.readouterr().out
    assert "level1/relu" in out and "loaded 1, skipped 1" in out
    assert "skipped 2_Broken.py: ModuleNotFoundError" in out


def test_tuples_literals_and_tied_sizes_shrink(tmp_path):
    folder = write_level(tmp_path, {"89_cumsum.py": SCAN, "100_HingeLoss.py": HINGE, "50_conv.py": CONV_LITERAL})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is skipped
        tasks = {t.id: t for t in load_tasks(folder, max_numel=2**16)}
    scan, hinge, conv = tasks["level1/cumsum"], tasks["level1/hingeloss"], tasks["level1/conv"]
    assert isinstance(scan.overrides["input_shape"], tuple) and input_numel(scan) <= 2**16
    assert hinge.overrides["batch_size"] == hinge.overrides["input_shape"][0]  # halved together
    assert runs(hinge).shape == ()
    assert "get_inputs:224" in conv.overrides and input_numel(conv) <= 2**16
    assert "224" in conv.source  # the file's text is unchanged; sizes apply when it runs
    out = runs(conv)
    assert out.shape[1] == 96 and out.shape[-1] >= 1  # the 11x11 kernel still fits the shrunk image


def test_derived_sizes_follow_and_groups_stay_valid(tmp_path):
    folder = write_level(tmp_path, {"1_grouped.py": GROUPED_BIAS, "2_xent.py": CROSS_ENTROPY}, level=2)
    tasks = {t.id: t for t in load_tasks(folder, max_numel=2**14)}
    grouped, xent = tasks["level2/grouped"], tasks["level2/xent"]
    assert input_numel(grouped) <= 2**14
    namespace = grouped.module()
    assert namespace["bias_shape"] == (namespace["out_channels"], 1, 1)  # derived from the shrunk constant
    assert namespace["in_channels"] % namespace["groups"] == 0 and namespace["out_channels"] % namespace["groups"] == 0
    assert namespace["height"] >= namespace["kernel_size"]
    assert runs(grouped).shape[1] == namespace["out_channels"]
    assert "num_classes" in xent.overrides  # the class count shrinks, so targets stay in range
    assert torch.isfinite(runs(xent))


def test_cuda_calls_in_task_files_are_dropped(tmp_path):
    folder = write_level(tmp_path, {"1_add.py": CUDA_INPUTS})
    (task,) = load_tasks(folder)
    assert runs(task).device.type == "cpu"


def test_shrink_error_names_what_was_reached(tmp_path):
    folder = write_level(tmp_path, {"4_Unshrinkable.py": UNSHRINKABLE})
    (task,) = load_tasks(folder)
    with pytest.raises(ShrinkError, match="cannot shrink level1/unshrinkable to 100 input elements"):
        shrink_to_numel(task, 100)
