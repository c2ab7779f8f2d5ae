"""Judge every answer of the load_inline corpus on the ``cpu`` backend and print the table.

The corpus (``envs_tests/load_inline_corpus/``) holds KernelBench-style answers in the shapes models
write, each with the verdict a real GPU build gives it. Run::

    python benchmarks/load_inline_corpus.py [--only 03,04]

Prints one row per answer (expected, judged, seconds, the first line of the message) and how many
were judged as a build would.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "envs_tests" / "load_inline_corpus"


@dataclass
class CorpusAnswer:
    """One answer of the corpus: the file's name, its task, the verdict a GPU build gives, and the response."""

    name: str
    task_id: str
    expected: str
    shape: str
    response: str
    cpu: str  # the cpu backend's verdict where it cannot judge the answer as a build would ("" otherwise)


def load_corpus(folder: Path = CORPUS) -> list[CorpusAnswer]:
    answers = []
    for path in sorted(folder.glob("*.md")):
        header, _, response = path.read_text().partition("\n---\n")
        fields = dict(line.split(": ", 1) for line in header.splitlines() if ": " in line)
        answers.append(CorpusAnswer(path.stem, fields["task"], fields["expected"], fields.get("shape", ""), response,
                                    fields.get("cpu", "")))
    return answers


def main() -> int:
    import leap_gym

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated name prefixes to judge")
    args = parser.parse_args()
    tasks = {t.id: t for t in leap_gym.load_tasks("builtin")}
    answers = [a for a in load_corpus() if not args.only or any(a.name.startswith(p) for p in args.only.split(","))]
    agree = 0
    print("| answer | expected | judged | s | message |\n|---|---|---|---|---|")
    for answer in answers:
        start = time.perf_counter()
        result = leap_gym.evaluate(tasks[answer.task_id], answer.response, backend="cpu", timeout_s=120)
        seconds = time.perf_counter() - start
        agree += result.status == answer.expected
        mark = "" if result.status == answer.expected else \
            " (differs: named construct)" if result.status == answer.cpu else " **(differs)**"
        message = (result.message or "").splitlines()[0][:110].replace("|", "/")
        print(f"| {answer.name} | {answer.expected} | {result.status}{mark} | {seconds:.1f} | {message} |", flush=True)
    print(f"\n{agree}/{len(answers)} judged as a GPU build would")
    return 0


if __name__ == "__main__":
    sys.exit(main())
