"""The run log (`leap_gym.report.run_log`), the HTML report of one run or two side by side, and the
page itself opened in a real headless Chromium (skipped, saying why, where none is installed).

The runs here are built with the real writer (`RunRecorder`) from real-shaped records: the built-in
tasks' ids and reference solutions, broken variants of them, DCP decisions from `dcp_decide` and
rewards from `rank_rewards` / `kevin_returns`. A real ``leap-train`` run writes the same files
(``leap_agents.training.run_record``); `test_mini_hook_records_a_real_step` checks that path on LEAP-mini's
own structures.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from leap_agents import dcp_decide, kevin_returns, rank_rewards
from leap_gym.report import GroupRecord, RunRecorder, StepRecord, TrajectoryLogRecord, TurnLog, load_run, write_report
from leap_gym.report.html import report_data

STATUS_RANK = {"FORMAT_ERROR": 0, "COMPILE_ERROR": 1, "RUNTIME_ERROR": 2, "WRONG_OUTPUT": 3, "CORRECT": 4}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _tasks(n: int) -> list[tuple[str, str]]:
    import leap_gym

    tasks = [t for t in leap_gym.load_tasks("builtin") if t.reference_solutions][:n]
    return [(t.id, t.reference_solutions[0]) for t in tasks]


def _broken(solution: str, status: str, rng: random.Random) -> tuple[str, str]:
    """A response of the given status made from a correct one, and feedback shaped like the env's."""
    if status == "CORRECT":
        return solution, "CORRECT ok"
    if status == "COMPILE_ERROR":
        return solution.replace(";", "", 1), "COMPILE_ERROR line 3: expected a \";\""
    if status == "WRONG_OUTPUT":
        return solution.replace("0.0f", "1.0f", 1) + "\n// scaled", (
            f"WRONG_OUTPUT max abs err {rng.uniform(0.1, 3):.3g}, {rng.uniform(5, 90):.1f}% mismatched, "
            "first at [0, 3]")
    if status == "RUNTIME_ERROR":
        return solution.replace("if (", "if (1 || ", 1), "RUNTIME_ERROR out-of-bounds write in kernel at line 4"
    return "I think the kernel should be written like this.", "FORMAT_ERROR expected one ```cuda block, found none"


def synthetic_run(path: Path, label: str, arm: str, steps: int = 6, tasks: int = 4, group_size: int = 4,
                  max_turns: int = 3, seed: int = 0) -> Path:
    """A run folder written by `RunRecorder` from real-shaped records (see the module docstring)."""
    rng = random.Random(seed)
    suite = _tasks(tasks)
    difficulty = {tid: rng.random() for tid, _ in suite}
    with RunRecorder(path, label, arm, "test", max_turns, group_size, {"seed": seed}) as rec:
        for step in range(1, steps + 1):
            groups, gen_tokens, stops = [], 0, {}
            all_first: list[int | None] = []
            rewards_all: list[float] = []
            turn_counts = [0] * max_turns
            for g, (tid, solution) in enumerate(suite):
                p = min(0.95, difficulty[tid] + 0.03 * step)
                trajs = [{"turns": [], "first": None, "stop": "", "best": 0, "live": True} for _ in range(group_size)]
                for turn in range(1, max_turns + 1):
                    live = [t for t in trajs if t["live"]]
                    if not live:
                        break
                    prev_best = [t["best"] for t in trajs]
                    for t in live:
                        status = "CORRECT" if rng.random() < p * (0.6 + 0.2 * turn) else rng.choice(
                            ["COMPILE_ERROR", "WRONG_OUTPUT", "RUNTIME_ERROR", "FORMAT_ERROR"])
                        response, feedback = _broken(solution, status, rng)
                        t["turns"].append(TurnLog(turn=turn, status=status, response=response, feedback=feedback))
                        t["best"] = max(t["best"], STATUS_RANK[status])
                        gen_tokens += len(response) // 4
                        turn_counts[turn - 1] += 1
                        if status == "CORRECT" and t["first"] is None:
                            t["first"] = turn
                    decisions = dcp_decide([t["first"] is not None for t in trajs], [t["best"] for t in trajs], turn,
                                           max_turns, prev_best_progress=prev_best, enabled=arm == "leap")
                    for t, d in zip(trajs, decisions):
                        if t["live"] and not d.continues:
                            t["live"], t["stop"] = False, d.reason
                            stops[d.reason] = stops.get(d.reason, 0) + 1
                firsts = [t["first"] for t in trajs]
                if arm == "leap":
                    rewards = rank_rewards(firsts)
                else:
                    rewards = [kevin_returns([1.0 if x.status == "CORRECT" else 0.0 for x in t["turns"]], 0.4)[0]
                               for t in trajs]
                mean_r = sum(rewards) / len(rewards)
                all_first += firsts
                rewards_all += rewards
                groups.append(GroupRecord(step=step, group=g, task_id=tid, trajectories=[
                    TrajectoryLogRecord(index=i, turns=t["turns"], first_solved=t["first"], reward=r,
                                        advantage=r - mean_r, stop_reason=t["stop"])
                    for i, (t, r) in enumerate(zip(trajs, rewards))]))
            n = len(all_first)
            by_turn = [sum(1 for f in all_first if f is not None and f <= j) / n for j in range(1, max_turns + 1)]
            rec.write_step(StepRecord(step=step, pass_at_1=by_turn[0], pass_by_turn=by_turn, trajectories=n,
                                      turns=sum(turn_counts), turn_counts=turn_counts, tokens=gen_tokens,
                                      trained_tokens=gen_tokens // 2,
                                      generation_s=rng.uniform(2, 6) * sum(turn_counts) / n,
                                      evaluation_s=rng.uniform(3, 9) * sum(turn_counts) / n, update_s=rng.uniform(1, 2),
                                      decisions=stops, reward_mean=sum(rewards_all) / n), groups)
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    return (synthetic_run(root / "leap", "LEAP", "leap", seed=1),
            synthetic_run(root / "multi", "multi-turn (Kevin)", "multi_turn", seed=2))


# ---- the run log -----------------------------------------------------------------------------------

def test_run_log_round_trip_and_resume(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "r", "LEAP", "leap", steps=3, tasks=2)
    data = load_run(run)
    assert [s["step"] for s in data.steps] == [1, 2, 3]
    assert len(data.groups) == 6 and data.meta["format"] == "leap-run/1" and data.label == "LEAP"
    g = data.groups[0]["trajectories"][0]
    assert g["turns"][0]["response"] and g["turns"][0]["status"] in STATUS_RANK
    # A resumed run keeps the steps up to its checkpoint and drops the rest.
    RunRecorder(run, "LEAP", "leap", "test", 3, 4, keep_until_step=2).close()
    data = load_run(run)
    assert [s["step"] for s in data.steps] == [1, 2] and {x["step"] for x in data.groups} == {1, 2}


def test_load_run_errors_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a folder"):
        load_run(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="run.json is missing"):
        load_run(tmp_path)
    RunRecorder(tmp_path / "empty", "x", "leap", "test", 2, 2).close()
    with pytest.raises(ValueError, match="no step yet"):
        load_run(tmp_path / "empty")


def test_trainer_records_a_real_step(tmp_path: Path) -> None:
    from leap_agents.training.rollout import RolloutBatch
    from leap_agents.training.run_record import trainer_step_records
    from leap_agents.training.trajectory import Trajectory, Turn, assign_rewards

    def traj(i: int, statuses: list[str], stop: str) -> Trajectory:
        t = Trajectory("level1/relu", 0, i, [Turn(turn=k + 1, prompt=[], response=f"resp {i}.{k}", token_ids=[2, 3],
                                                   status=s, score=float(s == "CORRECT")) for k, s in enumerate(statuses)])
        t.first_solved_turn = statuses.index("CORRECT") + 1 if "CORRECT" in statuses else None
        t.end_reason = stop
        return t

    batch = RolloutBatch([traj(0, ["CORRECT"], "solved"), traj(1, ["COMPILE_ERROR", "CORRECT"], "solved"),
                          traj(2, ["WRONG_OUTPUT", "WRONG_OUTPUT"], "max_turns")], responses=5, tokens=10)
    assign_rewards(batch.groups, "leap")
    metrics = {"pass_at_1": 1 / 3, "pass_turn_1": 1 / 3, "pass_turn_2": 2 / 3, "trained_tokens": 8,
               "time_generation": 1.0, "time_evaluation": 2.0, "time_update": 0.5,
               "reward_mean": sum(rank_rewards([1, 2, None])) / 3}
    with RunRecorder(tmp_path, "LEAP", "leap", "leap-train", 2, 3) as rec:
        rec.write_step(*trainer_step_records(1, metrics, batch, 2))
    data = load_run(tmp_path)
    step = data.steps[0]
    assert step["step"] == 1 and step["tokens"] == 10 and step["turns"] == 5 and step["trained_tokens"] == 8
    assert step["decisions"] == {"solved": 2, "max_turns": 1}
    assert [t["reward"] for t in data.groups[0]["trajectories"]] == rank_rewards([1, 2, None])
    assert math.isclose(step["reward_mean"], sum(rank_rewards([1, 2, None])) / 3)
    assert data.groups[0]["trajectories"][1]["turns"][1]["status"] == "CORRECT"


# ---- the HTML file ---------------------------------------------------------------------------------

def test_report_is_one_self_contained_file(pair: tuple[Path, Path], tmp_path: Path) -> None:
    info = write_report(list(pair), tmp_path / "r.html")
    text = info.path.read_text()
    assert info.bytes == len(text.encode())
    start = text.index('id="run-data">') + len('id="run-data">')
    end = text.index("</script>", start)
    data = json.loads(text[start:end])
    code = (text[:start] + text[end:]).replace('"http://www.w3.org/2000/svg"', "")  # a namespace name, not a load
    for external in ("src=", "href=", "<link", "@import", "url(", "http:", "https:", "fetch(", "XMLHttpRequest"):
        assert external not in code, f"the page must not load anything: found {external!r}"
    assert [r["label"] for r in data["runs"]] == ["LEAP", "multi-turn (Kevin)"]
    assert data["runs"][0]["steps"] == load_run(pair[0]).steps


def test_script_text_cannot_end_the_data_tag(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunRecorder(run, "</script><b>x", "leap", "test", 1, 1) as rec:
        rec.write_step(StepRecord(1, 0.0, [0.0], 1, 1, [1], 3, 1.0, 1.0, 1.0, {"max_turns": 1}, 0.0), [
            GroupRecord(1, 0, "level1/relu", [TrajectoryLogRecord(0, [TurnLog(1, "FORMAT_ERROR", "</script><!--", "x")],
                                                                  None, 0.0, 0.0, "max_turns")])])
    text = write_report([run], tmp_path / "r.html").path.read_text()
    assert text.count("</script>") == 2  # the data tag's and the code's, nothing from the data


def test_long_runs_keep_a_sample_of_groups_per_step(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "long", "LEAP", "leap", steps=10, tasks=6)
    full = report_data([load_run(run)])["runs"][0]
    assert full["sampled_per_step"] == 0 and len(full["groups"]) == 60
    budget = sum(len(json.dumps(g)) for g in full["groups"]) // 3
    small = report_data([load_run(run)], budget_bytes=budget)["runs"][0]
    k = small["sampled_per_step"]
    assert 1 <= k < 6 and len(small["groups"]) == 10 * k and small["groups_total"] == 60
    assert small["steps"] == full["steps"]  # the curves keep every step


def test_cli_report(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from leap_gym.cli import main

    out = tmp_path / "cli.html"
    assert main(["report", str(pair[0]), str(pair[1]), "-o", str(out)]) == 0
    assert out.exists() and "wrote" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing"), "-o", str(out)]) == 2
    assert "not a folder" in capsys.readouterr().err


# ---- in a real browser -----------------------------------------------------------------------------

def _chromium() -> str:
    for name in (os.environ.get("LEAP_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and (found := shutil.which(name)):
            return found
    pytest.skip("no Chromium installed (apt-get install chromium, or set LEAP_CHROMIUM); the browser test needs one")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install 'leap-gym[report]' (it uses the system Chromium)")
    executable = _chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith("file:") else None)
    start = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, problems, time.perf_counter() - start


def _shown(page, selector: str) -> float:
    return float(page.locator(selector).inner_text())


def _close(shown: float, value: float, digits: int) -> bool:
    return abs(shown - value) <= 0.5 * 10 ** -digits + 1e-9


def test_page_in_browser(browser, pair: tuple[Path, Path], tmp_path: Path) -> None:
    report = write_report(list(pair), tmp_path / "pair.html").path
    page, problems, _ = _open(browser, report)
    # The figures shown equal those computed from each run's steps.jsonl.
    for i, run_dir in enumerate(pair):
        steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
        wall = sum(s["generation_s"] + s["evaluation_s"] + s["update_s"] for s in steps)
        expected = {"steps": (len(steps), 0), "pass_at_1_last": (steps[-1]["pass_at_1"], 3),
                    "pass_at_1_mean": (sum(s["pass_at_1"] for s in steps) / len(steps), 3),
                    "turns": (sum(s["turns"] for s in steps), 0), "tokens": (sum(s["tokens"] for s in steps), 0),
                    "wall_s": (wall, 1), "update_s": (sum(s["update_s"] for s in steps), 1)}
        for reason in {r for s in steps for r in s["decisions"]}:
            expected[f"stop_{reason}"] = (sum(s["decisions"].get(reason, 0) for s in steps), 0)
        for metric, (value, digits) in expected.items():
            shown = _shown(page, f"#summary-table td[data-run='{i}'][data-metric='{metric}']")
            assert _close(shown, value, digits), (run_dir.name, metric, shown, value)
        for s in steps:
            row = f"#step-tables table[data-run='{i}'] tr[data-step='{s['step']}']"
            assert _close(_shown(page, f"{row} td[data-metric='pass_at_1']"), s["pass_at_1"], 3)
            assert _close(_shown(page, f"{row} td[data-metric='evaluation_s']"), s["evaluation_s"], 1)
            assert _close(_shown(page, f"{row} td[data-metric='pass_turn_3']"), s["pass_by_turn"][2], 3)
        assert page.locator(f"#chart-pass1 circle[data-run='{i}']").count() == len(steps)
    turns = [sum(json.loads(line)["turns"] for line in (d / "steps.jsonl").read_text().splitlines()) for d in pair]
    ratio = page.locator("#summary-table td[data-metric='ratio_turns']").inner_text()
    assert _close(float(ratio.rstrip("x")), turns[1] / turns[0], 2)
    # A filter changes what is shown: every group left holds a trajectory that stopped for that reason.
    groups = page.locator("#groups .group")
    before = groups.count()
    page.select_option("#filter-reason", "hopeless_no_progress")
    after = groups.count()
    assert 0 < after < before
    assert all("hopeless_no_progress" in groups.nth(k).get_attribute("data-reasons").split() for k in range(after))
    page.click("#filter-reset")
    assert groups.count() == before
    page.select_option("#filter-run", "1")
    only = groups.count()
    assert 0 < only < before and all(groups.nth(k).get_attribute("data-run") == "1" for k in range(only))
    page.click("#filter-reset")
    # A status chip opens the turn: the response as logged, the feedback as logged.
    first, traj = next((g, t) for g in load_run(pair[0]).groups for t in g["trajectories"] if len(t["turns"]) >= 2)
    selector = f"#groups .group[data-run='0'][data-step='{first['step']}'][data-task='{first['task_id']}']"
    card = page.locator(selector).first
    card.locator(f"tr[data-index='{traj['index']}'] .chip[data-turn='2']").click()
    page.locator(".detail input[type=checkbox]").first.uncheck()
    assert card.locator("pre.response").inner_text().strip() == traj["turns"][1]["response"].strip()
    assert card.locator("pre.feedback").inner_text().strip() == traj["turns"][1]["feedback"].strip()
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert problems == []


def test_a_24_step_run_opens_fast_and_stays_small(browser, tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "big", "LEAP", "leap", steps=24, tasks=8, group_size=4, max_turns=4)
    info = write_report([run], tmp_path / "big.html")
    assert info.bytes < 5_000_000 and info.groups_shown == [24 * 8]
    page, problems, seconds = _open(browser, info.path)
    assert problems == []
    assert seconds < 2.0, f"the report took {seconds:.2f} s to open"
    assert page.locator("#chart-pass1 circle").count() == 24
