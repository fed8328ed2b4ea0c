"""The status page served at `/`: one self-contained HTML document (inline CSS, JS and SVG).

It polls `status` (relative, so it also works behind a path prefix or `kubectl proxy`) and draws
the recent batches' input rate, processing time, where each batch's time went (stacked by
lifecycle step), end-to-end latency and scheduling delay as timelines, like Spark's Streaming tab.
It loads nothing else, so it renders without network access; the server sends a
Content-Security-Policy that forbids any other origin.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'"
)

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dstreams status</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 980px;
         color: #1d2733; background: #fbfcfd; padding: 0 1em; }
  h1 { font-size: 1.4em; margin: 0 0 .3em; }
  h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
  h2 small, .muted { color: #6a7785; font-weight: normal; }
  .cards { display: flex; flex-wrap: wrap; gap: .6em; }
  .card { border: 1px solid #d8dee4; border-radius: 6px; padding: .4em .8em; background: #fff; }
  .card b { display: block; font-size: 1.2em; }
  .ok { color: #1a7f37; } .bad { color: #cf222e; } .wait { color: #9a6700; }
  svg.chart { width: 100%; height: 170px; background: #fff; border: 1px solid #d8dee4;
              border-radius: 6px; }
  .axis { stroke: #d8dee4; } .label { fill: #6a7785; font-size: 11px; }
  .limit { stroke: #9a6700; stroke-dasharray: 5 4; }
  .checkpoint { stroke: #1a7f37; stroke-dasharray: 2 3; }
  table { border-collapse: collapse; width: 100%; margin-top: .5em; background: #fff; }
  th, td { text-align: right; padding: .25em .6em; border-bottom: 1px solid #eaeef2; }
  th:first-child, td:first-child, td.outcome { text-align: left; }
  .legend span { margin-right: 1em; font-size: 12px; }
  .legend i { display: inline-block; width: .8em; height: .8em; margin-right: .3em; }
</style>
</head>
<body>
<h1>dstreams <span id="app" class="muted"></span></h1>
<div class="cards" id="cards"></div>
<h2>Input rate <small>records/s</small></h2>
<svg class="chart" id="rate" viewBox="0 0 940 170" preserveAspectRatio="none"></svg>
<h2>Processing time <small>seconds; dashed: batch interval</small></h2>
<svg class="chart" id="processing" viewBox="0 0 940 170" preserveAspectRatio="none"></svg>
<h2>Batch breakdown <small>seconds per step, stacked; hover a bar for its Spark jobs</small></h2>
<svg class="chart" id="breakdown" viewBox="0 0 940 170" preserveAspectRatio="none"></svg>
<div class="legend" id="legend"></div>
<h2>End-to-end latency <small>seconds from record timestamp to sink commit: oldest record
  (solid), newest (thin)</small></h2>
<svg class="chart" id="latency" viewBox="0 0 940 170" preserveAspectRatio="none"></svg>
<h2>Scheduling delay <small>seconds</small></h2>
<svg class="chart" id="delay" viewBox="0 0 940 170" preserveAspectRatio="none"></svg>
<h2>Recent batches <small>newest first; times UTC</small></h2>
<table>
  <thead><tr><th>batch time</th><th>ranges</th><th>records</th><th>rate/s</th>
    <th>processing s</th><th>delay s</th><th>end-to-end s</th><th>outcome</th></tr></thead>
  <tbody id="rows"></tbody>
</table>
<p class="muted" id="updated">loading…</p>
<script>
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";
const W = 940, H = 170, LEFT = 56, RIGHT = 12, TOP = 10, BOTTOM = 22;

function svgEl(name, attrs, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function clock(ms) { return new Date(ms).toISOString().substring(11, 19); }
function num(value, digits) {
  return value === null || value === undefined ? "–" : value.toFixed(digits);
}

function draw(id, batches, valueOf, color, limit, thinValueOf) {
  const svg = document.getElementById(id);
  svg.replaceChildren();
  const series = f => batches.map(b => [b.batch_time, f(b)]).filter(p => p[1] !== null);
  const points = series(valueOf);
  const thin = thinValueOf ? series(thinValueOf) : [];
  const top = Math.max(limit || 0, ...points.map(p => p[1]), ...thin.map(p => p[1]), 1e-9) * 1.15;
  const t0 = batches.length ? batches[0].batch_time : 0;
  const t1 = batches.length ? batches[batches.length - 1].batch_time : 1;
  const x = t => LEFT + (W - LEFT - RIGHT) * (t1 > t0 ? (t - t0) / (t1 - t0) : 0.5);
  const y = v => TOP + (H - TOP - BOTTOM) * (1 - v / top);
  svg.append(svgEl("line", {class: "axis", x1: LEFT, y1: y(0), x2: W - RIGHT, y2: y(0)}));
  svg.append(svgEl("text", {class: "label", x: 4, y: TOP + 10}, num(top / 1.15, top < 10 ? 2 : 0)));
  svg.append(svgEl("text", {class: "label", x: 4, y: y(0)}, "0"));
  if (batches.length) {
    svg.append(svgEl("text", {class: "label", x: LEFT, y: H - 5}, clock(t0)));
    const end = {class: "label", x: W - RIGHT, y: H - 5, "text-anchor": "end"};
    svg.append(svgEl("text", end, clock(t1)));
  }
  if (limit) {
    const line = {class: "limit", x1: LEFT, y1: y(limit), x2: W - RIGHT, y2: y(limit)};
    svg.append(svgEl("line", line));
  }
  for (const c of (window.checkpoints || [])) {
    if (c.batch_time < t0 || c.batch_time > t1) continue;
    const mark = {class: "checkpoint", x1: x(c.batch_time), y1: TOP, x2: x(c.batch_time), y2: y(0)};
    svg.append(svgEl("line", mark, "checkpoint of batch " + c.batch_time));
  }
  if (!points.length) return;
  const path = ps => ps.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
  svg.append(svgEl("polyline", {points: path(points), fill: "none", stroke: color,
                                "stroke-width": 2}));
  if (thin.length) {
    svg.append(svgEl("polyline", {points: path(thin), fill: "none", stroke: color,
                                  "stroke-width": 1}));
  }
  for (const b of batches) {
    const v = valueOf(b);
    if (v === null || b.outcome === "completed") continue;
    const fill = b.outcome === "running" ? "#9a6700" : "#cf222e";
    svg.append(svgEl("circle", {cx: x(b.batch_time), cy: y(v), r: 4, fill: fill}));
  }
}

const STEPS = {plan: "#57606a", journal_planned: "#bf8700", run_outputs: "#8250df",
  commit_sinks: "#0969da", journal_completed: "#1a7f37", checkpoint: "#6e7781",
  acknowledge: "#bc4c00"};

function jobsOf(b) {
  const outputs = (b.breakdown || {}).outputs || {};
  return Object.entries(outputs).map(([name, o]) => name + ": " + o.jobs.map(
    j => "job " + j.job_id + " " + num(j.seconds, 3) + " s (" + j.stages + " stages, " + j.tasks
      + " tasks)").join(", ") + "; write " + num(o.write_s, 3) + " s, commit "
      + num(o.commit_s, 3) + " s").join("\\n");
}

function drawBreakdown(batches, interval) {
  const svg = document.getElementById("breakdown");
  svg.replaceChildren();
  const done = batches.filter(b => b.breakdown);
  const total = b => Object.values(b.breakdown.steps).reduce((s, v) => s + v, 0);
  const top = Math.max(interval, ...done.map(total), 1e-9) * 1.15;
  const y = v => (H - TOP - BOTTOM) * v / top;
  const width = (W - LEFT - RIGHT) / Math.max(done.length, 1);
  svg.append(svgEl("text", {class: "label", x: 4, y: TOP + 10}, num(top / 1.15, 2)));
  done.forEach((b, i) => {
    let base = H - BOTTOM;
    for (const [step, seconds] of Object.entries(b.breakdown.steps)) {
      const height = y(seconds);
      base -= height;
      const bar = {x: LEFT + i * width, y: base, width: Math.max(width - 1, 1), height: height,
                   fill: STEPS[step] || "#999"};
      const text = clock(b.batch_time) + " " + step + " " + num(seconds, 3) + " s\\n" + jobsOf(b);
      const rect = svgEl("rect", bar);
      rect.append(svgEl("title", {}, text));
      svg.append(rect);
    }
  });
  document.getElementById("legend").replaceChildren(...Object.entries(STEPS).map(([step, c]) => {
    const span = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = c;
    span.append(swatch, step);
    return span;
  }));
}

function card(label, value, cls) {
  const div = document.createElement("div");
  div.className = "card";
  const strong = document.createElement("b");
  strong.textContent = value;
  if (cls) strong.className = cls;
  div.append(strong, label);
  return div;
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
}

function render(status) {
  const interval = status.batch_interval_ms / 1000;
  const batches = status.batches;
  window.checkpoints = status.checkpoints || [];
  const rate = b => b.records_in === null ? null : b.records_in / interval;
  document.getElementById("app").textContent = status.app;
  const done = batches.filter(b => b.processing_s !== null);
  const avg = f => done.length ? done.reduce((s, b) => s + f(b), 0) / done.length : null;
  document.getElementById("cards").replaceChildren(
    card("health", status.healthy ? "healthy" : "wedged", status.healthy ? "ok" : "bad"),
    card("readiness", status.ready ? "ready" : "not ready", status.ready ? "ok" : "wait"),
    card("epoch", status.epoch === null ? "–" : String(status.epoch)),
    card("batch interval", interval + " s"),
    card("completed / failed", status.totals.completed + " / " + status.totals.failed,
         status.totals.failed ? "bad" : ""),
    card("avg input rate", num(avg(b => rate(b) || 0), 1) + " /s"),
    card("avg processing", num(avg(b => b.processing_s), 3) + " s"),
    ...Object.entries(status.watermarks || {}).map(([name, w]) => card(
      "watermark " + name + " (lag " + num(w.lag_ms === null ? null : w.lag_ms / 1000, 1) +
        " s, " + w.open_windows + " open windows)",
      w.watermark_ms === null ? "–" : clock(w.watermark_ms))));
  draw("rate", batches, rate, "#0969da");
  draw("processing", batches, b => b.processing_s, "#8250df", interval);
  drawBreakdown(batches, interval);
  const newest = b => b.end_to_end_s ? b.end_to_end_s.min : null;
  draw("latency", batches, b => b.end_to_end_s ? b.end_to_end_s.max : null, "#cf222e", interval,
       newest);
  draw("delay", batches, b => b.scheduling_delay_s, "#bc4c00");
  const rows = document.getElementById("rows");
  rows.replaceChildren();
  for (const b of batches.slice(-25).reverse()) {
    const row = rows.insertRow();
    const range = r => r.topic + "-" + r.partition + " [" + r.from + ", " + r.until + ")";
    row.title = b.ranges.map(range).join("\\n");
    cell(row, clock(b.batch_time) + " (" + b.batch_time + ")");
    cell(row, String(b.ranges.length));
    cell(row, b.records_in === null ? "–" : String(b.records_in));
    cell(row, num(rate(b), 1));
    cell(row, num(b.processing_s, 3));
    cell(row, num(b.scheduling_delay_s, 3));
    const e2e = b.end_to_end_s;
    cell(row, e2e ? num(e2e.min, 2) + "–" + num(e2e.max, 2) : "–");
    if (b.breakdown) row.title += "\\n" + jobsOf(b);
    const look = b.outcome === "completed" ? "ok" : b.outcome === "running" ? "wait" : "bad";
    cell(row, b.outcome, "outcome " + look);
  }
  document.getElementById("updated").textContent = "updated " + status.now;
}

async function poll() {
  try {
    const response = await fetch("status", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
  } catch (error) {
    document.getElementById("updated").textContent = "status unavailable: " + error.message;
  }
  setTimeout(poll, 2000);
}
poll();
</script>
</body>
</html>
"""
