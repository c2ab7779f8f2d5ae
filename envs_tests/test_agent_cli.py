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

