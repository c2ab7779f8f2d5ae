"""`leap-eval` over a small suite (reference replay on compile-only) and what `leap-train` runs by default."""

import json

from leap_agents.cli import DEFAULT_PRESET, eval_main, train_main


def test_leap_eval_table_and_json(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert eval_main(["--reference", "--backend", "compile-only", "--task-ids", "level1/relu,level1/add",
                      "--samples", "2", "--max-turns", "2", "--no-progress", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "pass@1" in table and "level1/relu" in table and "ALL" in table
    data = json.loads(out.read_text())
    assert data["overall"]["pass_at_1"] == 1.0 and data["overall"]["pass_turn_2"] == 1.0
    assert [t["task_id"] for t in data["tasks"]] == ["level1/relu", "level1/add"]
    assert data["tasks"][0]["statuses"] == [["COMPILED"], ["COMPILED"]]


def test_leap_train_runs_leap_mini_through_the_trainer_by_default(capsys):
    assert DEFAULT_PRESET == "leap-mini"
    assert train_main(["--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["model"]["path"] == "leap-mini" and cfg["split"] == "train" and cfg["run"]["probe"] == "reference"
    assert train_main(["--preset", "smoke", "--arm", "multi_turn", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["reward"]["scheme"] == "kevin" and not cfg["dcp"]["enabled"]


def test_leap_train_probes_the_start_policy_before_the_first_step(tmp_path, capsys):
    """With the learning rate at 0 the policy never moves, so the probe before training reads what it reads after
    the first step: the same tasks, prompts and temperature."""
    out = tmp_path / "run"
    assert train_main(["--preset", "smoke", "--set", "run.probe=reference", "--set", "optim.lr=0",
                       "--set", "run.steps=1", "--set", "run.tasks_per_step=1", "--set", "rollout.max_turns=1",
                       "--set", "rollout.progress_bar=false", "--set", f"run.output_dir={out}"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    start, after = summary["reference_p_before"], summary["history"][0]["reference_p"]
    assert 0 < start < 1 and abs(start - after) < 1e-6 * start
    assert f"{start:.3f} before training, {after:.3f} after the first step" in capsys.readouterr().out
    assert (out / "curve.png").stat().st_size > 0
