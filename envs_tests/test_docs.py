"""The README stays a one-screen start that is true: its commands first, its quick start runs as printed, its
links resolve. The documentation site itself is built by ``mkdocs build --strict`` in .ci/run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SNIPPET = ROOT / "docs" / "snippets" / "quickstart.py"


def fenced_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_readme_is_short_and_starts_with_the_two_commands():
    assert len(README.splitlines()) <= 150
    first = re.search(r"^```(\w*)\n(.*?)^```$", README, flags=re.S | re.M)
    assert first.group(1) == "bash"
    commands = [line.split("#")[0].strip() for line in first.group(2).splitlines()]
    install = 'pip install torch==2.13.0 && pip install -e ".[train,dev]" && leap-train'
    assert commands == [install, "python -m pytest -q"]


def test_the_readme_quick_start_is_the_docs_snippet_and_prints_what_it_shows(tmp_path):
    code = fenced_blocks(README.split("## Quick start", 1)[1], "python")[0]
    assert code == SNIPPET.read_text()
    shown = fenced_blocks(README.split("## Quick start", 1)[1], "text")[0]
    run = subprocess.run([sys.executable, str(SNIPPET)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = [line for line in run.stdout.splitlines() if line.startswith(("->", "WRONG_OUTPUT", "CORRECT"))]
    assert summary == [line for line in shown.splitlines() if line.startswith(("->", "WRONG_OUTPUT", "CORRECT"))]
    assert summary[1] == "-> reward 0.0, terminated False, status WRONG_OUTPUT"
    assert summary[-2:] == ["-> reward 1.0, terminated True, status CORRECT", "CORRECT"]


def test_the_readme_links_to_files_that_exist():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local and [t for t in local if not (ROOT / t).exists()] == []
