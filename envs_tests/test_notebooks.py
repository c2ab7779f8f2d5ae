"""The tutorials in notebooks/ execute top to bottom on the CPU (nbclient, kernel python3)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_notebooks_present_and_clean():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_plug_in_your_agent.ipynb",
                                           "03_leap_training_cpu.ipynb", "04_sb3.ipynb", "05_smollm2_repair.ipynb"]
    for path in NOTEBOOKS:
        book = nbformat.read(path, as_version=4)
        code = [c for c in book.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name}: clear its outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    if "smollm2" in path.name:
        from leap_agents.policies.pretrained import PretrainedNotInstalled, gguf_path

        try:
            gguf_path("smollm2-135m-instruct")
        except PretrainedNotInstalled as exc:
            pytest.skip(str(exc))

    # The python3 kernelspec runs `python` from PATH: make it this interpreter (the one with leap_gym).
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    book = nbformat.read(path, as_version=4)
    client = NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    images = [o for c in book.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    if "02_plug" not in path.name:
        assert images, f"{path.name} should draw its plot"
