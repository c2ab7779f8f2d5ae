"""Render one or more run folders as a single static HTML page: styles, script and data inline, so it
opens from disk with no server and no network.

The page (``assets/report.js``) draws the per-step curves as inline SVG, the runs side by side on
the same axes, and a task view of each group as G trajectories x turns with filters. The data sits
in a ``<script type="application/json">`` tag. A long run's groups are sampled per step to keep the
file under a size budget; the page says so, and the curves always use every step.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import logging
import os
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from leap_gym.report.run_log import RunData, load_run

log = logging.getLogger(__name__)

#: Upper bound of the embedded rollout text over all runs of a report (the curves are not limited).
DEFAULT_BUDGET_BYTES = 4_000_000
MAX_RUNS = 4


@dataclass
class ReportInfo:
    """What `write_report` wrote: the file, its size, and per run how many groups it shows of how many."""

    path: Path
    bytes: int
    groups_shown: list[int]
    groups_total: list[int]


def _asset(name: str) -> str:
    return resources.files("leap_gym.report").joinpath("assets", name).read_text(encoding="utf-8")


def _size(group: dict[str, Any]) -> int:
    return len(json.dumps(group, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def sample_groups(groups: list[dict[str, Any]], budget_bytes: int, seed: int = 0) -> tuple[list[dict[str, Any]], int]:
    """All groups if they fit `budget_bytes`, else the same number per step (at least one), drawn with a seed.

    Returns the kept groups in (step, group) order and how many are kept per step (0: all kept).
    """
    total = sum(_size(g) for g in groups)
    if total <= budget_bytes:
        return sorted(groups, key=lambda g: (g["step"], g["group"])), 0
    by_step: dict[int, list[dict[str, Any]]] = {}
    for g in groups:
        by_step.setdefault(g["step"], []).append(g)
    per_group = total / len(groups)
    per_step = max(1, int(budget_bytes / (per_group * len(by_step))))
    rng = random.Random(seed)
    kept = []
    for step in sorted(by_step):
        pool = sorted(by_step[step], key=lambda g: g["group"])
        kept += sorted(rng.sample(pool, min(per_step, len(pool))), key=lambda g: g["group"])
    return kept, per_step


def report_data(runs: list[RunData], budget_bytes: int = DEFAULT_BUDGET_BYTES) -> dict[str, Any]:
    """The JSON the page reads: per run its metadata, every step record and a (possibly sampled) set of groups."""
    out = []
    for run in runs:
        groups, per_step = sample_groups(run.groups, budget_bytes // max(1, len(runs)))
        out.append({"label": run.label, "path": str(run.path), "arm": run.meta.get("arm", ""),
                    "source": run.meta.get("source", ""), "max_turns": run.meta.get("max_turns"),
                    "group_size": run.meta.get("group_size"), "config": run.meta.get("config", {}),
                    "steps": run.steps, "groups": groups, "groups_total": len(run.groups),
                    "sampled_per_step": per_step})
    labels = [r["label"] for r in out]
    for r in out:  # two runs named alike stay apart in legends and menus
        if labels.count(r["label"]) > 1:
            r["label"] = f"{r['label']} ({Path(r['path']).name})"
    return {"generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "runs": out}


def render_html(data: dict[str, Any]) -> str:
    """The whole page for `report_data`'s output."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("<", "\\u003c")  # no "</script>" or "<!--" can end the data tag early
    title = "LEAP run report: " + " vs ".join(r["label"] for r in data["runs"])
    page = _asset("report.html")
    for key, value in (("{{TITLE}}", html.escape(title)), ("{{CSS}}", _asset("report.css")),
                       ("{{DATA}}", payload), ("{{JS}}", _asset("report.js"))):
        page = page.replace(key, value, 1)
    return page


def write_report(run_dirs: list[str | os.PathLike[str]], output: str | os.PathLike[str],
                 budget_bytes: int = DEFAULT_BUDGET_BYTES) -> ReportInfo:
    """Write the HTML report of one run, or of several side by side (e.g. LEAP and a baseline).

    Args:
        run_dirs: run folders written by `RunRecorder` (``leap-train``'s output folder), 1 to 4.
        output: the HTML file to write (parent folders are created).
        budget_bytes: the most rollout text to embed; beyond it, groups are sampled per step.

    Raises:
        ValueError: no run folder, or more than `MAX_RUNS`.
        FileNotFoundError: a folder is not a run folder (see `load_run`).
    """
    if not run_dirs or len(run_dirs) > MAX_RUNS:
        raise ValueError(f"a report shows 1 to {MAX_RUNS} runs, got {len(run_dirs)}")
    runs = [load_run(d) for d in run_dirs]
    data = report_data(runs, budget_bytes)
    text = render_html(data)
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    info = ReportInfo(path=path, bytes=len(text.encode("utf-8")), groups_shown=[len(r["groups"]) for r in data["runs"]],
                      groups_total=[r["groups_total"] for r in data["runs"]])
    log.info("wrote %s (%.2f MB; groups shown %s of %s)", path, info.bytes / 1e6, info.groups_shown, info.groups_total)
    return info
