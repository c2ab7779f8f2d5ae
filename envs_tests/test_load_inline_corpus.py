"""The load_inline corpus: KernelBench-style answers in the shapes models write, each judged on the
``cpu`` backend and held to the verdict a real GPU build gives it (``expected:`` in each file).

``python benchmarks/load_inline_corpus.py`` prints the same judgements as a table.
"""

from pathlib import Path

import pytest

import leap_gym

CORPUS = Path(__file__).parent / "load_inline_corpus"


def _read(path: Path) -> dict[str, str]:
    header, _, response = path.read_text().partition("\n---\n")
    fields = dict(line.split(": ", 1) for line in header.splitlines() if ": " in line)
    fields["response"] = response
    return fields


ANSWERS = sorted(CORPUS.glob("*.md"))


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in leap_gym.load_tasks("builtin")}


def test_corpus_is_large_varied_and_mostly_judged_as_a_build_would():
    answers = [_read(p) for p in ANSWERS]
    assert len(answers) >= 40
    verdicts = {a["expected"] for a in answers}
    assert {"CORRECT", "WRONG_OUTPUT", "COMPILE_ERROR", "RUNTIME_ERROR"} <= verdicts
    assert all(a["response"].count("load_inline(") >= 1 for a in answers)
    differing = [a for a in answers if a.get("cpu", a["expected"]) != a["expected"]]
    assert len(differing) <= 0.05 * len(answers)
    assert all(a.get("cpu_names") for a in differing)  # each names the construct its message must name


@pytest.mark.parametrize("path", ANSWERS, ids=[p.stem for p in ANSWERS])
def test_answer_is_judged_as_a_gpu_build_would(tasks, path):
    """`expected:` is a GPU build's verdict; `cpu:` (rare) is the cpu backend's where it cannot judge the answer,
    and then the message names the construct (`cpu_names:`), never a format error."""
    answer = _read(path)
    result = leap_gym.evaluate(tasks[answer["task"]], answer["response"], backend="cpu", timeout_s=120)
    assert result.answer_format == "load_inline"
    assert result.status == answer.get("cpu", answer["expected"]), result.message
    if "cpu" in answer:
        assert result.detail in ("unsupported", "torch_op_in_forward") and answer["cpu_names"] in result.message
    assert "cannot translate the host code" not in result.message
