"use strict";
// The LEAP run report: reads the JSON in #run-data and draws everything with plain DOM and SVG.
(function () {
  const DATA = JSON.parse(document.getElementById("run-data").textContent);
  const RUNS = DATA.runs;
  const RUN_COLORS = ["#2563eb", "#d97706", "#059669", "#7c3aed"];
  const SPLIT = [["generation_s", "generation", "#14b8a6"], ["evaluation_s", "evaluation", "#a855f7"],
                 ["update_s", "update", "#f43f5e"]];
  const REASON_COLORS = {solved: "#16a34a", easy_group: "#06b6d4", hopeless_no_progress: "#dc2626",
                         hopeless_history: "#7f1d1d", max_turns: "#9ca3af", refine: "#a3a3a3"};
  const PAGE = 40;
  const SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "style") node.style.cssText = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) node.append(kid);
    return node;
  }
  function svg(tag, attrs, ...kids) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const kid of kids) if (kid) node.append(kid);
    return node;
  }
  const fmt = (x, d) => (x === null || x === undefined || Number.isNaN(x)) ? "–" : Number(x).toFixed(d);
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  const mean = (xs) => xs.length ? sum(xs) / xs.length : NaN;

  // ---- derived figures ---------------------------------------------------------------------------
  const REASONS = [];
  for (const run of RUNS) for (const s of run.steps) for (const r of Object.keys(s.decisions || {}))
    if (!REASONS.includes(r)) REASONS.push(r);
  const ORDER = Object.keys(REASON_COLORS);
  REASONS.sort((a, b) => (ORDER.indexOf(a) + 99 * (ORDER.indexOf(a) < 0)) - (ORDER.indexOf(b) + 99 * (ORDER.indexOf(b) < 0)));
  const wall = (s) => s.generation_s + s.evaluation_s + s.update_s;

  function summary(run) {
    const st = run.steps, last = st[st.length - 1];
    const out = [
      ["steps", "steps", st.length, 0],
      ["trajectories", "trajectories", sum(st.map((s) => s.trajectories)), 0],
      ["pass_at_1_first", "pass@1, first step", st[0].pass_at_1, 3],
      ["pass_at_1_last", "pass@1, last step", last.pass_at_1, 3],
      ["pass_at_1_mean", "pass@1, mean over steps", mean(st.map((s) => s.pass_at_1)), 3],
      ["pass_final_turn_mean", "pass within the turn budget, mean", mean(st.map((s) => s.pass_by_turn[s.pass_by_turn.length - 1])), 3],
      ["turns", "turns (responses judged)", sum(st.map((s) => s.turns)), 0],
      ["turns_per_traj", "turns per trajectory", sum(st.map((s) => s.turns)) / sum(st.map((s) => s.trajectories)), 2],
      ["tokens", "tokens generated", sum(st.map((s) => s.tokens)), 0],
      ["wall_s", "wall-clock (s)", sum(st.map(wall)), 1],
      ["generation_s", "  generation (s)", sum(st.map((s) => s.generation_s)), 1],
      ["evaluation_s", "  evaluation (s)", sum(st.map((s) => s.evaluation_s)), 1],
      ["update_s", "  update (s)", sum(st.map((s) => s.update_s)), 1],
      ["reward_mean", "shaped reward, mean", mean(st.map((s) => s.reward_mean)), 3],
    ];
    for (const r of REASONS) out.push(["stop_" + r, "stopped: " + r, sum(st.map((s) => (s.decisions || {})[r] || 0)), 0]);
    return out;
  }

  // ---- header and summary ------------------------------------------------------------------------
  function renderHeader() {
    document.getElementById("generated").textContent =
      `Generated ${DATA.generated} from ${RUNS.length} run folder${RUNS.length > 1 ? "s" : ""}.`;
    const cards = document.getElementById("run-cards");
    RUNS.forEach((run, i) => {
      const st = run.steps;
      const tasks = run.group_size ? Math.round(st[0].trajectories / run.group_size) : "?";
      cards.append(el("div", {class: "run-card", style: `--c:${RUN_COLORS[i]}`, "data-run": i},
        el("b", {text: run.label}),
        el("div", {class: "meta", text: `${run.source || "run"} · arm ${run.arm || "?"} · ${st.length} steps × ${tasks} tasks × G=${run.group_size} · up to ${run.max_turns} turns`}),
        el("div", {class: "meta", text: run.path})));
    });
  }

  function renderSummary() {
    const table = document.getElementById("summary-table");
    const head = el("tr", {}, el("th", {text: "figure"}));
    RUNS.forEach((run, i) => head.append(el("th", {}, el("span", {class: "swatch", style: `background:${RUN_COLORS[i]}`}), run.label)));
    const RATIO = ["turns", "tokens", "wall_s", "generation_s", "evaluation_s", "update_s"];
    if (RUNS.length === 2) head.append(el("th", {text: `${RUNS[1].label} / ${RUNS[0].label}`}));
    table.append(el("thead", {}, head));
    const body = el("tbody");
    const rows = RUNS.map(summary);
    rows[0].forEach((_, k) => {
      const tr = el("tr", {}, el("td", {text: rows[0][k][1]}));
      RUNS.forEach((run, i) => {
        const [key, , value, digits] = rows[i][k] || [rows[0][k][0], "", NaN, 0];
        tr.append(el("td", {"data-run": i, "data-metric": key, text: fmt(value, digits)}));
      });
      if (RUNS.length === 2) {
        const key = rows[0][k][0], a = rows[0][k][2], b = rows[1][k] ? rows[1][k][2] : NaN;
        tr.append(el("td", {"data-metric": "ratio_" + key, text: RATIO.includes(key) && a > 0 ? fmt(b / a, 2) + "x" : ""}));
      }
      body.append(tr);
    });
    table.append(body);
  }

  // ---- charts ------------------------------------------------------------------------------------
  const W = 460, H = 250, M = {l: 46, r: 12, t: 8, b: 34};

  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) hi = lo + 1;
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    const ticks = [];
    const top = Math.ceil(hi / step - 1e-9) * step;
    for (let v = Math.floor(lo / step) * step; v <= top + step * 1e-9; v += step) ticks.push(+v.toFixed(10));
    return ticks;
  }
  const tickLabel = (v) => Math.abs(v) >= 1000 ? (v / 1000).toFixed(v % 1000 ? 1 : 0) + "k" : String(+v.toFixed(3));

  function frame(xDomain, xTicks, yTicks, xLabel, yLabel) {
    const [x0, x1] = xDomain, [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]];
    const sx = (x) => M.l + (x - x0) / (x1 - x0 || 1) * (W - M.l - M.r);
    const sy = (y) => H - M.b - (y - y0) / (y1 - y0 || 1) * (H - M.t - M.b);
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img"});
    const grid = svg("g", {class: "grid"}), axis = svg("g", {class: "axis"});
    for (const y of yTicks) {
      grid.append(svg("line", {x1: M.l, x2: W - M.r, y1: sy(y), y2: sy(y)}));
      axis.append(svg("text", {x: M.l - 5, y: sy(y) + 3.5, "text-anchor": "end"}, document.createTextNode(tickLabel(y))));
    }
    for (const x of xTicks) axis.append(svg("text", {x: sx(x), y: H - M.b + 13, "text-anchor": "middle"}, document.createTextNode(tickLabel(x))));
    axis.append(svg("line", {x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b}));
    axis.append(svg("line", {x1: M.l, x2: M.l, y1: M.t, y2: H - M.b}));
    axis.append(svg("text", {x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle"}, document.createTextNode(xLabel)));
    axis.append(svg("text", {x: 11, y: (M.t + H - M.b) / 2, "text-anchor": "middle",
      transform: `rotate(-90 11 ${(M.t + H - M.b) / 2})`}, document.createTextNode(yLabel)));
    root.append(grid, axis);
    return {root, sx, sy};
  }

  function chartBox(id, title, legend) {
    const box = el("div", {class: "chart", id: "chart-" + id}, el("h3", {text: title}));
    const leg = el("div", {class: "legend"});
    for (const item of legend) {
      const mark = el("i", {class: item.box ? "box" : "", style: item.box ? `background:${item.color}` :
        `border-top-color:${item.color};border-top-style:${item.dash ? "dashed" : "solid"};opacity:${item.opacity || 1}`});
      leg.append(el("span", {}, mark, item.name));
    }
    box.append(leg);
    document.getElementById("charts").append(box);
    return box;
  }

  // series: [{name, color, dash, opacity, run, points: [[x, y, tip]]}]
  function lineChart(id, title, xLabel, yLabel, series, yFixed) {
    const xs = series.flatMap((s) => s.points.map((p) => p[0])), ys = series.flatMap((s) => s.points.map((p) => p[1]));
    const byStep = xLabel === "step", x1 = Math.max(...xs, 1);
    const xTicks = byStep ? niceTicks(1, x1, Math.min(x1, 8)).filter((x) => Number.isInteger(x) && x >= 1 && x <= x1)
      : niceTicks(0, x1, 6);
    const xDomain = byStep ? [0.7, x1 + 0.3] : [xTicks[0], xTicks[xTicks.length - 1]];
    const yTicks = yFixed || niceTicks(0, Math.max(...ys, 1e-9) * 1.05, 5);
    const {root, sx, sy} = frame(xDomain, xTicks, yTicks, xLabel, yLabel);
    for (const s of series) {
      const d = s.points.map((p, k) => `${k ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      const g = svg("g", {"data-series": s.name});
      g.append(svg("path", {d, fill: "none", stroke: s.color, "stroke-width": s.width || 2,
        "stroke-dasharray": s.dash ? "5 4" : "none", opacity: s.opacity || 1}));
      for (const p of s.points) {
        g.append(svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.8, fill: s.color, opacity: s.opacity || 1,
          "data-run": s.run, "data-value": p[1]}, svg("title", {}, document.createTextNode(p[2]))));
      }
      root.append(g);
    }
    chartBox(id, title, series.filter((s) => !s.hideLegend)).append(root);
  }

  // stacks[run][step] = [[key, value], ...]; bars of the runs side by side at each step
  function barChart(id, title, yLabel, keys, stacks, tipOf) {
    const nSteps = Math.max(...RUNS.map((r) => r.steps.length));
    const totals = stacks.flatMap((runStacks) => runStacks.map((parts) => sum(parts.map((p) => p[1]))));
    const yTicks = niceTicks(0, Math.max(...totals, 1e-9) * 1.05, 5);
    const xTicks = niceTicks(1, nSteps, Math.min(nSteps, 8)).filter((x) => Number.isInteger(x) && x >= 1 && x <= nSteps);
    const {root, sx, sy} = frame([0.5, nSteps + 0.5], xTicks, yTicks, "step", yLabel);
    const slot = (W - M.l - M.r) / nSteps, bw = Math.max(1.5, slot * 0.8 / RUNS.length);
    stacks.forEach((runStacks, i) => runStacks.forEach((parts, k) => {
      const step = RUNS[i].steps[k].step;
      const x = sx(step) - slot * 0.4 + i * bw;
      let base = 0;
      for (const [key, value] of parts) {
        if (!value) continue;
        root.append(svg("rect", {x, width: Math.max(bw - 0.6, 0.8), y: sy(base + value), height: sy(base) - sy(base + value),
          fill: keys[key], "data-run": i, "data-key": key}, svg("title", {}, document.createTextNode(tipOf(i, step, key, value)))));
        base += value;
      }
      if (RUNS.length > 1) root.append(svg("rect", {x, width: Math.max(bw - 0.6, 0.8), y: H - M.b + 1, height: 3, fill: RUN_COLORS[i]}));
    }));
    const legend = Object.entries(keys).map(([name, color]) => ({name, color, box: true}));
    const place = RUNS.length === 2 ? ["left", "right"] : ["1st", "2nd", "3rd", "4th"];
    if (RUNS.length > 1) RUNS.forEach((r, i) => legend.push({name: `${place[i]} bar: ${r.label}`, color: RUN_COLORS[i]}));
    chartBox(id, title, legend).append(root);
  }

  function renderCharts() {
    const perRun = (key, digits, fn) => RUNS.map((run, i) => ({name: run.label, color: RUN_COLORS[i], run: i,
      points: run.steps.map((s) => { const y = fn ? fn(s) : s[key]; return [s.step, y, `${run.label}, step ${s.step}: ${fmt(y, digits)}`]; })}));
    lineChart("pass1", "pass@1 per step (training rollouts)", "step", "pass@1", perRun("pass_at_1", 3), [0, 0.25, 0.5, 0.75, 1]);
    lineChart("pass1-wall", "pass@1 against training wall-clock", "wall-clock (min): generation + evaluation + update", "pass@1",
      RUNS.map((run, i) => {
        let t = 0;
        return {name: run.label, color: RUN_COLORS[i], run: i, points: run.steps.map((s) => {
          t += wall(s) / 60; return [t, s.pass_at_1, `${run.label}, step ${s.step} at ${fmt(t, 2)} min: pass@1 ${fmt(s.pass_at_1, 3)}`]; })};
      }), [0, 0.25, 0.5, 0.75, 1]);
    const byTurn = [];
    RUNS.forEach((run, i) => {
      const T = Math.max(...run.steps.map((s) => s.pass_by_turn.length));
      for (let j = 0; j < T; j++) byTurn.push({name: `${run.label} ≤${j + 1}`, color: RUN_COLORS[i], run: i,
        dash: j < T - 1, opacity: 0.35 + 0.65 * (j + 1) / T, width: j === T - 1 ? 2.2 : 1.5,
        points: run.steps.map((s) => [s.step, s.pass_by_turn[Math.min(j, s.pass_by_turn.length - 1)],
          `${run.label}, step ${s.step}: solved within ${j + 1} turn(s) ${fmt(s.pass_by_turn[Math.min(j, s.pass_by_turn.length - 1)], 3)}`])});
    });
    lineChart("pass-by-turn", "pass by turn: solved within j turns", "step", "fraction solved", byTurn, [0, 0.25, 0.5, 0.75, 1]);
    lineChart("turns", "turns per step (responses generated and judged)", "step", "turns", perRun("turns", 0));
    lineChart("tokens", "tokens generated per step", "step", "tokens", perRun("tokens", 0));
    barChart("wall", "wall-clock per step, split", "seconds", Object.fromEntries(SPLIT.map(([, n, c]) => [n, c])),
      RUNS.map((run) => run.steps.map((s) => SPLIT.map(([k, n]) => [n, s[k]]))),
      (i, step, key, v) => `${RUNS[i].label}, step ${step}: ${key} ${fmt(v, 1)} s`);
    barChart("dcp", "DCP decisions per step: trajectories stopped, by reason", "trajectories",
      Object.fromEntries(REASONS.map((r) => [r, REASON_COLORS[r] || "#64748b"])),
      RUNS.map((run) => run.steps.map((s) => REASONS.map((r) => [r, (s.decisions || {})[r] || 0]))),
      (i, step, key, v) => `${RUNS[i].label}, step ${step}: ${v} stopped (${key})`);
  }

  // ---- per-step tables ---------------------------------------------------------------------------
  function renderStepTables() {
    const host = document.getElementById("step-tables");
    RUNS.forEach((run, i) => {
      const T = Math.max(...run.steps.map((s) => s.pass_by_turn.length));
      const cols = [["pass_at_1", "pass@1", 3]];
      for (let j = 1; j < T; j++) cols.push([`pass_turn_${j + 1}`, `≤${j + 1} turns`, 3]);
      cols.push(["turns", "turns", 0], ["tokens", "tokens", 0], ["generation_s", "gen s", 1], ["evaluation_s", "eval s", 1],
        ["update_s", "update s", 1], ["reward_mean", "reward", 3]);
      for (const r of REASONS) cols.push(["stop_" + r, r, 0]);
      const table = el("table", {class: "num", "data-run": i});
      const head = el("tr", {}, el("th", {text: "step"}));
      for (const [, name] of cols) head.append(el("th", {text: name}));
      table.append(el("thead", {}, head));
      const body = el("tbody");
      for (const s of run.steps) {
        const tr = el("tr", {"data-step": s.step}, el("td", {text: s.step}));
        for (const [key, , d] of cols) {
          const v = key.startsWith("pass_turn_") ? s.pass_by_turn[+key.slice(10) - 1]
            : key.startsWith("stop_") ? ((s.decisions || {})[key.slice(5)] || 0) : s[key];
          tr.append(el("td", {"data-metric": key, text: fmt(v, d)}));
        }
        body.append(tr);
      }
      table.append(body);
      const box = el("details", {open: ""}, el("summary", {}, el("span", {class: "swatch", style: `background:${RUN_COLORS[i]}`}),
        `${run.label}: ${run.steps.length} steps`), el("div", {class: "table-wrap"}, table));
      host.append(box);
    });
  }

  // ---- rollouts ----------------------------------------------------------------------------------
  const GROUPS = [];
  RUNS.forEach((run, i) => run.groups.forEach((g) => {
    const finals = g.trajectories.map((t) => t.turns.length ? t.turns[t.turns.length - 1].status : "");
    GROUPS.push({run: i, g, finals: new Set(finals), reasons: new Set(g.trajectories.map((t) => t.stop_reason).filter(Boolean))});
  }));
  const state = {run: "all", step: "all", task: "all", status: "all", reason: "all", limit: PAGE};

  function select(id, label, options) {
    const s = el("select", {id: "filter-" + id, "data-filter": id,
      onchange: (e) => { state[id] = e.target.value; state.limit = PAGE; renderGroups(); }});
    for (const [value, text] of options) s.append(el("option", {value, text}));
    return el("label", {}, label, s);
  }
  const uniq = (xs) => [...new Set(xs)];

  function renderFilters() {
    const f = document.getElementById("filters");
    if (RUNS.length > 1) f.append(select("run", "run", [["all", "all runs"], ...RUNS.map((r, i) => [String(i), r.label])]));
    const steps = uniq(GROUPS.map((x) => x.g.step)).sort((a, b) => a - b);
    f.append(select("step", "step", [["all", "all steps"], ...steps.map((s) => [String(s), "step " + s])]));
    f.append(select("task", "task", [["all", "all tasks"], ...uniq(GROUPS.map((x) => x.g.task_id)).sort().map((t) => [t, t])]));
    f.append(select("status", "final status of a trajectory", [["all", "any"],
      ...uniq(GROUPS.flatMap((x) => [...x.finals])).filter(Boolean).sort().map((s) => [s, s])]));
    f.append(select("reason", "DCP stop reason", [["all", "any"], ...REASONS.filter((r) => GROUPS.some((x) => x.reasons.has(r))).map((r) => [r, r])]));
    f.append(el("button", {id: "filter-reset", onclick: () => {
      for (const k of ["run", "step", "task", "status", "reason"]) { state[k] = "all"; const s = document.getElementById("filter-" + k); if (s) s.value = "all"; }
      state.limit = PAGE; renderGroups(); }}, "reset filters"));
    const notes = RUNS.map((r) => r.sampled_per_step ?
      `${r.label}: a long run; the page keeps ${r.sampled_per_step} group(s) per step, a seeded sample (${r.groups.length} of ${r.groups_total} groups). Curves, summary and per-step figures use every step.` : "").filter(Boolean);
    if (notes.length) { const n = document.getElementById("sample-note"); n.hidden = false; n.textContent = notes.join(" "); }
    document.getElementById("more").addEventListener("click", () => { state.limit += PAGE; renderGroups(); });
  }

  function matches(x) {
    return (state.run === "all" || x.run === +state.run) && (state.step === "all" || x.g.step === +state.step)
      && (state.task === "all" || x.g.task_id === state.task) && (state.status === "all" || x.finals.has(state.status))
      && (state.reason === "all" || x.reasons.has(state.reason));
  }

  function renderGroups() {
    const host = document.getElementById("groups");
    host.replaceChildren();
    const hits = GROUPS.filter(matches);
    for (const x of hits.slice(0, state.limit)) host.append(groupCard(x));
    document.getElementById("shown-count").textContent =
      `${hits.length} of ${GROUPS.length} groups match` + (hits.length > state.limit ? `; showing the first ${state.limit}` : "");
    document.getElementById("more").hidden = hits.length <= state.limit;
  }

  function groupCard(x) {
    const {g, run} = x, R = RUNS[run];
    const T = Math.max(R.max_turns || 1, ...g.trajectories.map((t) => t.turns.length));
    const solved = g.trajectories.filter((t) => t.first_solved !== null && t.first_solved !== undefined).length;
    const card = el("div", {class: "group", style: `--c:${RUN_COLORS[run]}`, "data-run": run, "data-step": g.step,
      "data-task": g.task_id, "data-statuses": [...x.finals].join(" "), "data-reasons": [...x.reasons].join(" ")});
    card.append(el("div", {class: "group-head"},
      RUNS.length > 1 ? el("span", {class: "run", text: R.label}) : null,
      el("span", {class: "facts", text: `step ${g.step}`}), el("span", {class: "task", text: g.task_id}),
      el("span", {class: "facts", text: `solved at turn 1: ${g.trajectories.filter((t) => t.first_solved === 1).length}/${g.trajectories.length}` +
        ` · solved: ${solved}/${g.trajectories.length} · turns: ${sum(g.trajectories.map((t) => t.turns.length))}`})));
    const table = el("table", {class: "traj"});
    const head = el("tr", {}, el("th", {text: ""}));
    for (let k = 1; k <= T; k++) head.append(el("th", {class: "turn", text: "turn " + k}));
    head.append(el("th", {text: "reward", title: "the trajectory's shaped reward (LEAP: the rank reward)"}),
      el("th", {text: "adv.", title: "group-relative advantage"}), el("th", {text: "DCP decision"}));
    table.append(head);
    const detail = el("div", {class: "detail", hidden: ""});
    g.trajectories.forEach((t) => {
      const tr = el("tr", {"data-index": t.index}, el("td", {class: "idx", text: "#" + t.index}));
      for (let k = 1; k <= T; k++) {
        const turn = t.turns[k - 1];
        if (turn) {
          tr.append(el("td", {class: "cell"}, el("span", {class: "chip s-" + turn.status, title: turn.feedback, "data-turn": k,
            onclick: (e) => showTurn(card, detail, t, k, e.target)}, turn.status.replace("_ERROR", "_ERR"))));
        } else {
          const pruned = t.stop_reason && t.stop_reason !== "solved" && t.stop_reason !== "max_turns" && k === t.turns.length + 1;
          tr.append(el("td", {class: "cell pruned", text: pruned ? "✂ pruned" : ""}));
        }
      }
      const stopAt = t.turns.length;
      tr.append(el("td", {class: "val", "data-field": "reward", text: fmt(t.reward, 2)}),
        el("td", {class: "val", "data-field": "advantage", text: (t.advantage > 0 ? "+" : "") + fmt(t.advantage, 2)}),
        el("td", {}, t.stop_reason ? el("span", {class: "reason r-" + t.stop_reason, title: `stopped after turn ${stopAt}: ${t.stop_reason}`,
          text: `${t.stop_reason.replace(/_/g, " ")} · t${stopAt}`}) : ""));
      table.append(tr);
    });
    card.append(table, detail);
    return card;
  }

  function diffLines(a, b) {
    const x = a.split("\n"), y = b.split("\n");
    if (x.length * y.length > 4e6) return y.map((line) => [" ", line]);
    const n = x.length, m = y.length, L = Array.from({length: n + 1}, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    const out = [];
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push([" ", y[j]]); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) out.push(["-", x[i++]]);
      else out.push(["+", y[j++]]);
    }
    while (i < n) out.push(["-", x[i++]]);
    while (j < m) out.push(["+", y[j++]]);
    return out;
  }

  function showTurn(card, detail, t, k, chip) {
    for (const c of card.querySelectorAll(".chip.sel")) c.classList.remove("sel");
    chip.classList.add("sel");
    const turn = t.turns[k - 1], prev = k > 1 ? t.turns[k - 2] : null;
    const code = el("pre", {class: "response"});
    const draw = (asDiff) => {
      code.replaceChildren();
      if (!asDiff || !prev) { code.textContent = turn.response; return; }
      for (const [op, line] of diffLines(prev.response, turn.response))
        code.append(op === " " ? document.createTextNode(line + "\n") : el("span", {class: op === "+" ? "add" : "del", text: line}));
    };
    const toggle = prev ? el("label", {}, el("input", {type: "checkbox", checked: "", onchange: (e) => draw(e.target.checked)}),
      ` diff from turn ${k - 1}`) : null;
    draw(true);
    detail.replaceChildren(
      el("div", {}, el("h4", {}, `trajectory #${t.index}, turn ${k}: ${turn.status}`, toggle), code),
      el("div", {}, el("h4", {text: k < t.turns.length ? `feedback, read at turn ${k + 1}` : "feedback on this turn"}),
        el("pre", {class: "feedback", text: turn.feedback || "(none)"})));
    detail.hidden = false;
  }

  renderHeader();
  renderSummary();
  renderCharts();
  renderFilters();
  renderGroups();
  renderStepTables();
  document.body.setAttribute("data-ready", "1");
})();
