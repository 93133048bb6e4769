"""The `kbatchd replay --timeline --html` page: one self-contained file (inline CSS, JS and
SVG, the data as inline JSON; nothing is fetched), drawn by its script from `daemon.tools.timeline`
data: a time axis per workload with its decisions as marks and its GPU use as a shaded step
(a dashed line across all of them where a daemon started), and the racks (blocks → racks →
hosts, GPUs per host coloured by workload) at a seq chosen with the slider or by clicking a
mark.

The script marks ``<body data-ready="true">`` once everything is drawn, and
``data-error="..."`` if anything failed: what the headless browser test reads.
"""

from __future__ import annotations

import html
from typing import Any, Final

import msgspec

# Rows drawn in the time axis; the rest are listed as a count (the racks show them all).
MAX_ROWS: Final = 200


def render_html(data: dict[str, Any]) -> str:
    """The page for timeline `data`."""
    body = msgspec.json.encode(data).decode()
    # Inside <script> only "</" can end the element early (and "<!--" confuse the parser).
    body = body.replace("</", "<\\/").replace("<!--", "<\\!--")
    title = html.escape(f"kbatchd timeline — {data['log']}")
    return (
        _TEMPLATE.replace("{{TITLE}}", title)
        .replace("{{MAX_ROWS}}", str(MAX_ROWS))
        .replace("{{DATA}}", body)
    )


_TEMPLATE: Final = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>{{TITLE}}</title>
<style>
  :root { --fg: #1d2330; --muted: #6b7385; --line: #d8dce5; --bg: #fbfcfe; }
  * { box-sizing: border-box; }
  body { margin: 0; padding: 16px 20px 40px; font: 13px/1.4 system-ui, sans-serif;
         color: var(--fg); background: var(--bg); }
  h1 { font-size: 18px; margin: 0 0 2px; }
  h2 { font-size: 14px; margin: 22px 0 6px; }
  .sub, .note { color: var(--muted); }
  .legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 8px 0; }
  .legend span { display: inline-flex; align-items: center; gap: 5px; }
  .dot { width: 10px; height: 10px; border-radius: 50%; display: inline-block; }
  #timeline svg { width: 100%; background: #fff; border: 1px solid var(--line); }
  #timeline .label { font-size: 11px; fill: var(--fg); cursor: pointer; }
  #timeline .axis { font-size: 10px; fill: var(--muted); }
  #timeline .grid { stroke: #eef0f4; }
  #timeline .mark { cursor: pointer; stroke: #fff; stroke-width: 1; }
  #timeline .mark.other { stroke: none; }
  #timeline.hide-other .mark.other { display: none; }
  #cursor { stroke: #111; stroke-width: 1; stroke-dasharray: 3 2; }
  #timeline .start { stroke: #7c3aed; stroke-width: 1.5; stroke-dasharray: 6 3; }
  .controls { display: flex; align-items: center; gap: 10px; margin: 10px 0; flex-wrap: wrap; }
  .controls input[type=range] { flex: 1; min-width: 240px; }
  #seq-label { font-variant-numeric: tabular-nums; min-width: 360px; }
  button { font: inherit; padding: 2px 8px; }
  #racks { display: flex; flex-direction: column; gap: 10px; }
  .cluster > .name, .domain > .name { font-size: 11px; color: var(--muted); margin-bottom: 3px; }
  .domains { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-start; }
  .domain { border: 1px solid var(--line); background: #fff; border-radius: 4px; padding: 4px; }
  .hosts { display: flex; flex-direction: column; gap: 2px; }
  .host { display: flex; gap: 1px; height: 10px; cursor: default; }
  .host .slot { width: 9px; height: 10px; background: #edf0f5; border-radius: 1px; }
  .host.bar { width: 90px; background: #edf0f5; gap: 0; }
  .host.bar .slot { width: auto; border-radius: 0; }
  .host.down { opacity: .35; background-image: repeating-linear-gradient(
                 45deg, transparent 0 3px, #9aa1b0 3px 4px); }
  #racks.focus .host:not(.focused) { opacity: .25; }
  #workloads { display: flex; flex-wrap: wrap; gap: 4px 14px; margin-top: 10px; }
  #workloads span { cursor: pointer; }
  #workloads span.on { font-weight: 600; }
</style>
</head>
<body>
<h1>{{TITLE}}</h1>
<div class="sub" id="summary"></div>
<h2>Decisions and GPU use over time</h2>
<div class="legend" id="legend"></div>
<label><input type="checkbox" id="show-other"> routine decisions (status, pod tracking)</label>
<div id="timeline" class="hide-other"></div>
<div class="note" id="rows-note"></div>
<h2>Racks</h2>
<div class="controls">
  <button id="prev" title="previous mark">◀</button>
  <input type="range" id="seq" step="1">
  <button id="next" title="next mark">▶</button>
  <span id="seq-label"></span>
</div>
<div class="note" id="cut-note"></div>
<div id="racks"></div>
<div id="workloads"></div>
<script type="application/json" id="kbatchd-data">{{DATA}}</script>
<script>
(function () {
  "use strict";
  const MAX_ROWS = {{MAX_ROWS}};
  const NS = "http" + "://www.w3.org/2000/svg";  // the SVG namespace name, never fetched
  const COLOURS = {
    "preempted": "#d62728", "preempting": "#ff7f0e", "restarted": "#9467bd",
    "admitted": "#2ca02c", "not-admitted": "#e377c2", "finished": "#1f77b4",
    "started": "#17becf", "suspended": "#7f7f7f", "backoff": "#bcbd22", "other": "#b8bfcc"
  };
  const data = JSON.parse(document.getElementById("kbatchd-data").textContent);
  const unit = data.resource === "nvidia.com/gpu" ? "GPU" : data.resource;

  function el(tag, attrs, parent, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function svg(tag, attrs, parent, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function colour(w) { return "hsl(" + ((w * 137.508) % 360).toFixed(1) + " 62% 50%)"; }
  function clock(ms) { return new Date(ms).toISOString().slice(11, 23); }
  function fmt(n) { return n.toLocaleString("en-US"); }

  // seq -> time, from every seq the data names (marks and changes), for the slider label.
  const times = [];
  for (const m of data.marks) times.push([m.seq, m.at]);
  for (const c of data.changes) times.push([c[0], c[1]]);
  times.sort((a, b) => a[0] - b[0]);
  function timeOf(seq) {
    let lo = 0, hi = times.length - 1, found = data.start;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (times[mid][0] <= seq) { found = times[mid][1]; lo = mid + 1; } else hi = mid - 1;
    }
    return found;
  }

  function summary() {
    const span = (data.end - data.start) / 1000;
    document.getElementById("summary").textContent =
      "seq " + fmt(data.first_seq) + "…" + fmt(data.last_seq) + " · " +
      new Date(data.start).toISOString().replace("T", " ").slice(0, 23) + " + " +
      span.toFixed(1) + " s · " + data.workloads.length + " workload(s) · " +
      data.hosts.length + " host(s) · " + fmt(data.marks.length) + " decision mark(s)";
    const legend = document.getElementById("legend");
    for (const cat of data.categories) {
      const item = el("span", {}, legend);
      el("i", {"class": "dot", "style": "background:" + COLOURS[cat]}, item);
      item.appendChild(document.createTextNode(cat));
    }
  }

  // ---- the time axis ---------------------------------------------------------------------
  let cursor = null, xOf = null;
  function drawTimeline() {
    const box = document.getElementById("timeline");
    const rows = data.workloads.map((w, i) => i)
      .filter(i => data.workloads[i].marks > 0 || data.workloads[i].peak > 0);
    const marked = new Set(data.marks.filter(m => m.cat !== "other").map(m => m.w));
    const important = i => (marked.has(i) ? 1 : 0);
    rows.sort((a, b) => (important(b) - important(a)) || (a - b));
    const shown = rows.slice(0, MAX_ROWS);
    if (rows.length > shown.length) {
      document.getElementById("rows-note").textContent =
        (rows.length - shown.length) + " more workload(s) not drawn (the racks show them all)";
    }
    const rowOf = new Map(shown.map((w, r) => [w, r]));
    const left = 230, right = 20, top = 24, rowH = 22, width = 1200;
    const height = top + rowH * shown.length + 8;
    const root = svg("svg", {"viewBox": "0 0 " + width + " " + height, "role": "img"}, box);
    const span = Math.max(data.end - data.start, 1);
    xOf = t => left + (width - left - right) * (t - data.start) / span;
    for (let k = 0; k <= 8; k++) {
      const t = data.start + span * k / 8, x = xOf(t);
      svg("line", {"class": "grid", "x1": x, "x2": x, "y1": top - 6, "y2": height}, root);
      const anchor = k === 0 ? "start" : (k === 8 ? "end" : "middle");
      svg("text", {"class": "axis", "x": x, "y": 12, "text-anchor": anchor}, root, clock(t));
    }
    shown.forEach((w, r) => {
      const y = top + r * rowH, info = data.workloads[w];
      svg("rect", {"x": 0, "y": y, "width": width, "height": rowH,
                   "fill": r % 2 ? "#fafbfd" : "#ffffff"}, root);
      svg("rect", {"x": 6, "y": y + 6, "width": 10, "height": 10, "fill": colour(w)}, root);
      const label = svg("text", {"class": "label", "x": 22, "y": y + 15}, root,
                        info.label.length > 34 ? info.label.slice(0, 33) + "…" : info.label);
      svg("title", {}, label, info.ref + " — peak " + info.peak + " " + unit);
      label.addEventListener("click", () => focus(w));
      const series = data.usage[String(w)] || [];
      if (info.peak > 0 && series.length) {
        let d = "M" + xOf(series[0][1]) + "," + (y + rowH - 2);
        let lastY = y + rowH - 2;
        for (const [, at, total] of series) {
          const x = xOf(at), yy = y + rowH - 2 - (rowH - 6) * total / info.peak;
          d += "L" + x + "," + lastY + "L" + x + "," + yy;
          lastY = yy;
        }
        d += "L" + xOf(data.end) + "," + lastY + "L" + xOf(data.end) + "," + (y + rowH - 2) + "Z";
        const area = svg("path", {"d": d, "fill": colour(w), "fill-opacity": 0.28}, root);
        svg("title", {}, area,
            info.label + ": " + unit + " held over time (peak " + info.peak + ")");
      }
    });
    for (const d of data.daemon_starts || []) {
      const x = xOf(d.at);
      const line = svg("line", {"class": "start", "x1": x, "x2": x, "y1": top - 6, "y2": height,
                                "data-seq": d.seq}, root);
      svg("title", {}, line, clock(d.at) + "  seq " + fmt(d.seq) + "  kbatchd " + d.version +
          " started (decision rules " + d.rules + ")");
    }
    for (const m of data.marks) {
      const r = rowOf.get(m.w);
      if (r === undefined) continue;
      const cy = top + r * rowH + rowH / 2;
      const mark = svg("circle", {"class": "mark " + m.cat, "cx": xOf(m.at), "cy": cy,
                                  "r": m.cat === "other" ? 2.5 : 5, "fill": COLOURS[m.cat],
                                  "data-seq": m.seq, "data-cat": m.cat}, root);
      const by = m.by !== undefined ? " by " + data.workloads[m.by].label : "";
      svg("title", {}, mark, clock(m.at) + "  seq " + fmt(m.seq) + "  " + m.cat + by +
          "\n" + m.reconciler + " about " + m.key + "\n" + m.reason);
      mark.addEventListener("click", () => select(m.seq));
    }
    cursor = svg("line", {"id": "cursor", "y1": top - 6, "y2": height}, root);
    document.getElementById("show-other").addEventListener("change", e => {
      box.classList.toggle("hide-other", !e.target.checked);
    });
  }

  // ---- the racks -------------------------------------------------------------------------
  const hostNodes = [];
  function drawRacks() {
    const root = document.getElementById("racks");
    const clusters = new Map();
    data.hosts.forEach((h, i) => {
      if (!clusters.has(h.cluster)) clusters.set(h.cluster, []);
      clusters.get(h.cluster).push(i);
    });
    const natural = (a, b) => a.localeCompare(b, "en", {numeric: true});
    for (const [name, members] of [...clusters].sort((a, b) => natural(a[0], b[0]))) {
      const box = el("div", {"class": "cluster"}, root);
      el("div", {"class": "name"}, box, "cluster " + name);
      nest(el("div", {"class": "domains"}, box), members, 0);
    }
    function nest(parent, members, depth) {
      const depthOfHosts = data.levels.length - 1;
      if (depth >= depthOfHosts) {
        const list = el("div", {"class": "hosts"}, parent);
        members.sort((a, b) => natural(data.hosts[a].node, data.hosts[b].node));
        for (const i of members) hostNodes[i] = el("div", {"class": "host",
                                                          "data-node": data.hosts[i].node}, list);
        return;
      }
      const groups = new Map();
      for (const i of members) {
        const key = data.hosts[i].path[depth] || "(unlabelled)";
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(i);
      }
      for (const [key, inner] of [...groups].sort((a, b) => natural(a[0], b[0]))) {
        const box = el("div", {"class": "domain level-" + depth, "data-domain": key}, parent);
        el("div", {"class": "name"}, box, key);
        const next = depth + 1 >= depthOfHosts ? box : el("div", {"class": "domains"}, box);
        nest(next, inner, depth + 1);
      }
    }
  }

  // The picture at a seq: the starting cells, then every change up to the seq, in order.
  let cells = new Map(), applied = 0, shownSeq = 0;
  const lastChange = data.changes.length ? data.changes[data.changes.length - 1][0] : 0;
  function cellsAt(seq) {
    if (data.changes_cut && seq > lastChange) {
      if (seq !== data.at) return null;
      return new Map(data.picture.map(c => [c[0], c.slice(1)]));
    }
    if (seq < shownSeq || applied === 0) {
      cells = new Map(data.initial.map(c => [c[0], c.slice(1)]));
      applied = 0;
    }
    while (applied < data.changes.length && data.changes[applied][0] <= seq) {
      const c = data.changes[applied++];
      cells.set(c[2], [c[3], c[4], c[5]]);
    }
    shownSeq = seq;
    return cells;
  }

  let focused = null;
  function paint(seq) {
    const now = cellsAt(seq);
    const note = document.getElementById("cut-note");
    if (now === null) {
      note.textContent = "The log is too long to keep every change: only seq " +
        fmt(lastChange) + " and earlier, and seq " + fmt(data.at) + " (--at), can be drawn.";
      return;
    }
    note.textContent = "";
    let used = 0, capacity = 0;
    const held = new Map();
    data.hosts.forEach((h, i) => {
      const node = hostNodes[i];
      if (!node) return;
      const [cap, up, pairs] = now.get(i) || [0, 0, []];
      node.textContent = "";
      const total = pairs.reduce((s, p) => s + p[1], 0);
      const slots = Math.max(cap, total);
      node.className = "host" + (slots > 16 ? " bar" : "") + (up ? "" : " down") +
        (focused !== null && pairs.some(p => p[0] === focused) ? " focused" : "");
      const parts = [];
      for (const [w, n] of pairs) {
        held.set(w, (held.get(w) || 0) + n);
        parts.push(data.workloads[w].label + " " + n);
        if (slots > 16) {
          el("span", {"class": "slot", "data-workload": data.workloads[w].ref,
                      "style": "flex:" + n + ";background:" + colour(w)}, node);
        } else {
          for (let k = 0; k < n; k++) {
            el("span", {"class": "slot", "data-workload": data.workloads[w].ref,
                        "style": "background:" + colour(w)}, node);
          }
        }
      }
      if (slots > 16) {
        if (slots > total) el("span", {"class": "slot", "style": "flex:" + (slots - total)}, node);
      } else {
        for (let k = total; k < slots; k++) el("span", {"class": "slot"}, node);
      }
      node.title = h.node + ": " + total + "/" + cap + " " + unit +
        (up ? "" : " (not in the topology)") + (parts.length ? "\n" + parts.join("\n") : "");
      used += total;
      capacity += up ? cap : 0;
    });
    const at = timeOf(seq);
    document.getElementById("seq-label").textContent =
      "seq " + fmt(seq) + " · " + clock(at) + " · " + used + "/" + capacity + " " + unit +
      " in use";
    if (cursor) {
      cursor.setAttribute("x1", xOf(at));
      cursor.setAttribute("x2", xOf(at));
    }
    const list = document.getElementById("workloads");
    list.textContent = "";
    for (const [w, n] of [...held].sort((a, b) => b[1] - a[1])) {
      const item = el("span", {"class": focused === w ? "on" : "", "data-workload":
                               data.workloads[w].ref}, list);
      el("i", {"class": "dot", "style": "background:" + colour(w)}, item);
      const text = " " + data.workloads[w].label + " " + n + " " + unit;
      item.appendChild(document.createTextNode(text));
      item.addEventListener("click", () => focus(w));
    }
  }

  const slider = document.getElementById("seq");
  function select(seq) {
    slider.value = seq;
    paint(Number(slider.value));
  }
  function focus(w) {
    focused = focused === w ? null : w;
    document.getElementById("racks").classList.toggle("focus", focused !== null);
    paint(Number(slider.value));
  }
  function step(direction) {
    const seq = Number(slider.value);
    const seqs = data.marks.filter(m => m.cat !== "other").map(m => m.seq);
    const next = direction > 0 ? seqs.find(s => s > seq) : seqs.reverse().find(s => s < seq);
    if (next !== undefined) select(next);
  }

  try {
    summary();
    drawTimeline();
    drawRacks();
    slider.min = Math.max(data.first_seq - 1, 0);
    slider.max = data.last_seq;
    slider.value = data.open;
    slider.addEventListener("input", () => paint(Number(slider.value)));
    document.getElementById("prev").addEventListener("click", () => step(-1));
    document.getElementById("next").addEventListener("click", () => step(1));
    paint(data.open);
    document.body.dataset.ready = "true";
  } catch (error) {
    document.body.dataset.error = String(error && error.stack || error);
    throw error;
  }
})();
</script>
</body>
</html>
"""
