"""The `leap-gym` command line."""

import json
import subprocess
import sys

from leap_gym.cli import DEMO_RESPONSES, main


def test_tasks_lists_the_suite(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "level1/relu" in out and "tasks over levels" in out


def test_eval_prints_feedback_and_reward(tmp_path, capsys):
    response = tmp_path / "r.md"
    response.write_text(DEMO_RESPONSES[0])
    out_json = tmp_path / "r.json"
    assert main(["eval", "level1/relu", str(response), "--backend", "compile-only", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("COMPILE_ERROR") and "reward (binary): 0.000" in out
    assert json.loads(out_json.read_text())["status"] == "COMPILE_ERROR"


def test_doctor_reports_nvrtc_and_backends(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "nvrtc" in out and "backend cpu" in out and "backend cuda" in out


def test_demo_runs_an_episode_to_the_fix():
    proc = subprocess.run([sys.executable, "-m", "leap_gym.cli", "demo"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.index("COMPILE_ERROR") < out.index("WRONG_OUTPUT") < out.index("episode ended after 3 turns: CORRECT")
