"""The trainer end to end: `leap-train --preset smoke` (compile-only backend, smaller) takes real
optimizer steps, writes metrics, trajectories and checkpoints, and after a SIGKILL resumes from its
last checkpoint. Plus configs: YAML presets and command-line overrides."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leap_agents.cli import _split_overrides
from leap_agents.training.config import TrainConfig, help_lines, load_config, set_value

ARGS = ["--preset", "smoke", "--backend", "compile-only", "--rollout.group_size", "2", "--rollout.max_new_tokens", "8",
        "--rollout.guide_prob", "0.5", "--rollout.progress_bar", "false", "--model.tiny_vocab", "512",
        "--optim.kl_coef", "0.05", "--optim.micro_batch_size", "8", "--run.steps", "2", "--run.tensorboard", "false",
        "--model.max_prompt_tokens", "256"]


def test_config_yaml_and_overrides(tmp_path):
    cfg = load_config(preset="smoke", overrides=[("optim.lr", "3e-5"), ("dcp.enabled", "false"),
                                                 ("task_ids", "level1/relu,level1/add")])
    assert cfg.optim.lr == 3e-5 and cfg.dcp.enabled is False and cfg.task_ids == ["level1/relu", "level1/add"]
    assert cfg.model.path == "tiny" and cfg.rollout.group_size == 4
    (tmp_path / "c.yaml").write_text("reward:\n  scheme: kevin\nrun:\n  steps: 7\n")
    cfg = load_config(tmp_path / "c.yaml", preset="smoke")
    assert cfg.reward.scheme == "kevin" and cfg.run.steps == 7 and cfg.backend == "cpu"
    with pytest.raises(KeyError, match="valid"):
        set_value(TrainConfig(), "optim.lrr", "1")
    with pytest.raises(ValueError, match="bool"):
        set_value(TrainConfig(), "dcp.enabled", "maybe")
    assert _split_overrides(["--a.b", "1", "--c=2", "--flag"], None) == [("a.b", "1"), ("c", "2"), ("flag", "true")]
    assert any("dcp.easy_threshold" in line for line in help_lines())


def _train(out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "leap_agents.cli", *ARGS, "--run.output_dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_smoke_training_survives_sigkill_and_resumes(tmp_path):
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "run"
    proc = _train(out)
    first_ckpt = out / "checkpoints" / "step-000001" / "state.json"
    deadline = time.time() + 150
    while not first_ckpt.exists():
        if proc.poll() is not None:
            pytest.fail("leap-train exited before its first checkpoint:\n" + proc.stdout.read()[-3000:])
        if time.time() > deadline:
            proc.kill()
            pytest.fail("no checkpoint within 150 s")
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)  # mid-run: step 2 is under way (or its checkpoint being written)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    proc = _train(out)
    log, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, log[-3000:]
    assert "resumed from" in log and "at step" in log and "done: 2 steps" in log

    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2]  # no step lost, none duplicated
    for key in ("pass_at_1", "pass_at_k", "pass_turn_1", "pass_turn_2", "mean_speedup", "responses", "tokens",
                "time_generation", "time_evaluation", "time_update", "loss", "kl", "stop_easy_group"):
        assert key in rows[0]
    assert any(float(r["optimizer_steps"]) > 0 and float(r["samples"]) > 0 for r in rows)
    steps_logged = [json.loads(line)["step"] for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(set(steps_logged)) == [1, 2] and len(steps_logged) == 2 * 2 * 2  # steps x tasks x G
    record = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert {"task_id", "turns", "first_solved_turn", "end_reason", "decisions", "reward"} <= set(record)
    assert [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()] == [1, 2]
    groups = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(g["step"] for g in groups) == [1, 1, 2, 2] and all(len(g["trajectories"]) == 2 for g in groups)
    assert "</html>" in (out / "report.html").read_text()  # the run log rendered at the end of the run

    ckpt = out / "checkpoints" / "step-000002"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == 2 and state["tracker"]["count"]  # the difficulty tracker is saved
    trained = torch.load(ckpt / "trainable.pt")  # a full fine-tune: every weight trains
    init = load_file(str(out / "init_model" / "model.safetensors"))
    changed = [k for k, v in init.items() if not torch.equal(v, trained[k])]
    assert changed, "the optimizer steps did not change any parameter"
