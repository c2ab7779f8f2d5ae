"""The JSONL trajectory log: records survive the writer's crash, a cut last line is skipped."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from leap_gym.integrations.trajectory_log import TrajectoryLog, read_trajectory_log, to_jsonable
from leap_gym.result import EvalResult, KernelResources, Mismatch


@dataclasses.dataclass
class Turn:
    task_id: str
    turn: int
    result: EvalResult
    tags: tuple[str, ...] = ()


def test_round_trip_of_dicts_and_dataclasses(tmp_path):
    path = tmp_path / "runs" / "log.jsonl"
    result = EvalResult("CORRECT", task_id="level1/relu", message="ok",
                        resources={"relu": KernelResources(registers=12)})
    with TrajectoryLog(path) as log:
        log.write({"task_id": "level1/relu", "turn": 1, "response": "```cuda\n...\n```", "result": result})
        log.write(Turn("level1/add", 2, EvalResult("WRONG_OUTPUT", detail="mismatch"), ("a", "b")))
        log.write({"nan": float("nan"), "path": Path("/x"), "bytes": b"\xff", "set": {1}})
        assert log.count == 3
    records = read_trajectory_log(path)
    assert len(records) == 3
    assert records[0]["result"]["status"] == "CORRECT" and records[0]["result"]["correct"] is True
    assert records[0]["result"]["resources"]["relu"]["registers"] == 12
    assert EvalResult.from_dict(records[0]["result"]).resources["relu"].registers == 12
    assert records[1]["result"]["detail"] == "mismatch" and records[1]["tags"] == ["a", "b"]
    assert records[2] == {"nan": "nan", "path": "/x", "bytes": "\ufffd", "set": [1]}


def test_each_write_is_on_disk_before_the_next(tmp_path):
    path = tmp_path / "log.jsonl"
    log = TrajectoryLog(path, fsync=True)
    log.write({"turn": 1})
    assert read_trajectory_log(path) == [{"turn": 1}]  # visible to another reader without close
    log.write({"turn": 2})
    assert len(path.read_text().splitlines()) == 2
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.write({"turn": 3})


def test_truncated_last_line_is_skipped_and_appending_resumes(tmp_path):
    path = tmp_path / "log.jsonl"
    with TrajectoryLog(path) as log:
        for turn in range(3):
            log.write({"turn": turn, "text": "x" * 100})
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # the last write cut short by a crash
    assert [r["turn"] for r in read_trajectory_log(path)] == [0, 1]
    with TrajectoryLog(path) as log:  # a restarted writer appends after the damage
        log.write({"turn": 3})
    assert [r["turn"] for r in read_trajectory_log(path)] == [0, 1, 3]


def test_missing_file_and_blank_lines(tmp_path):
    assert read_trajectory_log(tmp_path / "none.jsonl") == []
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n\n[1, 2]\n{"b": 2}\n')
    assert read_trajectory_log(path) == [{"a": 1}, {"b": 2}]


def test_rejects_records_that_are_not_mappings(tmp_path):
    with TrajectoryLog(tmp_path / "log.jsonl") as log, pytest.raises(ValueError, match="dict or a dataclass"):
        log.write([1, 2, 3])


def test_concurrent_writers_do_not_interleave(tmp_path):
    path = tmp_path / "log.jsonl"
    with TrajectoryLog(path) as log:
        def work(i: int) -> None:
            for j in range(50):
                log.write({"thread": i, "j": j, "pad": "y" * 5000})

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    records = read_trajectory_log(path)
    assert len(records) == 200 and all(len(r["pad"]) == 5000 for r in records)


def test_a_killed_writer_loses_at_most_the_record_in_flight(tmp_path):
    path = tmp_path / "log.jsonl"
    script = (
        "import sys, time\n"
        "from leap_gym.integrations.trajectory_log import TrajectoryLog\n"
        "log = TrajectoryLog(sys.argv[1])\n"
        "i = 0\n"
        "while True:\n"
        "    log.write({'turn': i, 'pad': 'z' * 20000})\n"
        "    if i == 20: print('ready', flush=True)\n"
        "    i += 1\n"
    )
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    records = read_trajectory_log(path)
    assert len(records) >= 21
    assert [r["turn"] for r in records] == list(range(len(records)))  # nothing lost in the middle
    lines = path.read_bytes().split(b"\n")
    assert len(lines) - 1 - len(records) <= 1  # at most one cut line at the end


def test_to_jsonable_handles_numpy_like_scalars_and_mismatch():
    class Scalar:
        def item(self):
            return 2.5

    mismatch = Mismatch(0, [2], [2], "float32", "float32", max_abs_error=float("inf"))
    data = to_jsonable({"s": Scalar(), "m": mismatch})
    assert data["s"] == 2.5 and data["m"]["max_abs_error"] == "inf"
    json.dumps(data)
