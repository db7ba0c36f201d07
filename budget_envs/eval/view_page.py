"""The trajectory viewer's page (:mod:`budget_envs.eval.view`): one HTML file, its style and
script inline; it loads ``data/*.js`` beside it (no network, no CDN)."""

from __future__ import annotations

__all__ = ["PAGE_HTML"]

PAGE_HTML = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>BudgetMix episodes</title>
<style>
body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 8px 14px; background: #f3f4f6; border-bottom: 1px solid #ddd; }
h1 { font-size: 16px; margin: 0 0 6px; }
#filters label { margin-right: 10px; white-space: nowrap; }
#filters select, #filters input { font: inherit; }
main { display: flex; gap: 12px; padding: 10px 14px; align-items: flex-start; }
#left { flex: 1 1 52%; min-width: 0; }
#right { flex: 1 1 48%; min-width: 0; }
#turns td { word-break: break-word; }
#turns td:last-child { width: 62%; }
#turns td:nth-child(5) { max-width: 12em; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: 2px 6px; text-align: left; vertical-align: top; }
#list tbody tr { cursor: pointer; }
#list tbody tr:hover { background: #eef5ff; }
#list tbody tr.open { background: #dbeafe; }
.won { color: #15803d; } .lost { color: #b91c1c; } .error { color: #a16207; }
.fault { background: #fff7ed; }
.offpath td.ag { color: #b91c1c; font-weight: 600; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; max-height: 10em; overflow: auto;
      background: #f9fafb; padding: 3px; }
.muted { color: #6b7280; }
#charts svg { background: #fff; border: 1px solid #eee; margin: 4px 4px 8px 0; }
#count { margin: 4px 0; }
</style>
</head>
<body>
<header>
<h1 id="title">BudgetMix episodes</h1>
<div id="filters">
<label>env <select id="f-env"></select></label>
<label>agent <select id="f-agent"></select></label>
<label>outcome <select id="f-outcome"></select></label>
<label>stop <select id="f-stop"></select></label>
<label>budget <select id="f-budget"></select></label>
<label>fault <select id="f-fault"></select></label>
<label>task <input id="f-task" size="18" placeholder="task id contains"></label>
</div>
</header>
<main>
<section id="left">
<div id="count"></div>
<table id="list"><thead><tr><th>#</th><th>env</th><th>agent</th><th>task</th><th>s</th>
<th>T</th><th>fault</th><th>outcome</th><th>stop</th><th>turns</th></tr></thead><tbody></tbody></table>
</section>
<section id="right">
<div id="episode"><p class="muted">Open an episode from the list.</p></div>
<div id="charts"></div>
</section>
</main>
<div id="errors" hidden></div>
<script>
"use strict";
const errors = [];
window.addEventListener("error", (e) => {
  errors.push(String(e.message));
  const box = document.getElementById("errors");
  box.textContent = errors.join("\n");
  box.hidden = false;
});
const VIEW = { m: null, rows: [], pages: {}, waiting: {} };
VIEW.meta = (m) => { VIEW.m = m; };
VIEW.episodes = (rows) => { VIEW.rows = rows; };
VIEW.turns = (page) => {
  const n = Math.floor(page.start / VIEW.m.page);
  VIEW.pages[n] = page;
  (VIEW.waiting[n] || []).forEach((f) => f());
  delete VIEW.waiting[n];
};
window.VIEW = VIEW;
const MAX_ROWS = 500;
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s == null ? "" : s).replace(/[&<>"]/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
function load(src, then) {
  const s = document.createElement("script");
  s.src = src;
  s.onload = then;
  s.onerror = () => { throw new Error("cannot load " + src); };
  document.head.appendChild(s);
}
function state() { return new URLSearchParams(location.hash.slice(1)); }
function setState(key, value) {
  const st = state();
  if (value === "" || value == null) st.delete(key); else st.set(key, value);
  location.hash = st.toString();
}
function options(id, values, label) {
  const sel = $(id);
  sel.innerHTML = '<option value="">all</option>' + values.map((v) =>
    '<option value="' + esc(v[0]) + '">' + esc(v[1]) + "</option>").join("");
}
function fillFilters() {
  const m = VIEW.m, rows = VIEW.rows;
  const uniq = (f) => [...new Set(rows.map(f))].sort((a, b) => (a > b) - (a < b));
  options("f-env", m.envs.map((e, i) => [String(i), e]));
  options("f-agent", m.agents.map((a, i) => [String(i), a]));
  options("f-outcome", uniq((r) => r[8]).map((v) => [v, v]));
  options("f-stop", uniq((r) => r[9]).map((v) => [v, v]));
  options("f-budget", uniq((r) => r[5]).sort((a, b) => a - b).map((v) => [String(v), String(v)]));
  const turns = uniq((r) => r[7]).filter((v) => v != null).sort((a, b) => a - b);
  options("f-fault", [["none", "none"], ["any", "any"]].concat(turns.map((t) => [String(t), "at turn " + t])));
  for (const [id, key] of [["f-env", "env"], ["f-agent", "agent"], ["f-outcome", "outcome"],
      ["f-stop", "stop"], ["f-budget", "budget"], ["f-fault", "fault"]]) {
    $(id).addEventListener("change", (e) => setState(key, e.target.value));
  }
  $("f-task").addEventListener("input", (e) => setState("task", e.target.value));
}
function matches(r, st) {
  const f = (k) => st.get(k);
  if (f("env") && String(r[1]) !== f("env")) return false;
  if (f("agent") && String(r[2]) !== f("agent")) return false;
  if (f("outcome") && r[8] !== f("outcome")) return false;
  if (f("stop") && r[9] !== f("stop")) return false;
  if (f("budget") && String(r[5]) !== f("budget")) return false;
  const fault = f("fault");
  if (fault === "none" && r[7] != null) return false;
  if (fault === "any" && r[7] == null) return false;
  if (fault && fault !== "none" && fault !== "any" && String(r[7]) !== fault) return false;
  if (f("task") && !r[3].includes(f("task"))) return false;
  return true;
}
function renderList() {
  const st = state();
  for (const [id, key] of [["f-env", "env"], ["f-agent", "agent"], ["f-outcome", "outcome"],
      ["f-stop", "stop"], ["f-budget", "budget"], ["f-fault", "fault"], ["f-task", "task"]]) {
    $(id).value = st.get(key) || "";
  }
  const hit = VIEW.rows.filter((r) => matches(r, st));
  $("count").textContent = hit.length + " of " + VIEW.rows.length + " episodes" +
    (hit.length > MAX_ROWS ? " (the first " + MAX_ROWS + " listed)" : "");
  const open = st.get("open");
  $("list").tBodies[0].innerHTML = hit.slice(0, MAX_ROWS).map((r) =>
    '<tr data-id="' + r[0] + '"' + (String(r[0]) === open ? ' class="open"' : "") + "><td>" + r[0] +
    "</td><td>" + esc(VIEW.m.envs[r[1]]) + "</td><td>" + esc(VIEW.m.agents[r[2]]) + "</td><td>" +
    esc(r[3]) + "</td><td>" + r[4] + "</td><td>" + r[5] + (r[6] !== "hidden" ? " " + esc(r[6]) : "") +
    "</td><td>" + (r[7] == null ? "" : "t=" + r[7]) + '</td><td class="' + esc(r[8]) + '">' + esc(r[8]) +
    "</td><td>" + esc(r[9]) + "</td><td>" + r[10] + "</td></tr>").join("");
}
function renderEpisode() {
  const open = state().get("open");
  const box = $("episode");
  if (open == null || open === "") { box.innerHTML = '<p class="muted">Open an episode from the list.</p>'; return; }
  const id = Number(open), r = VIEW.rows[id];
  if (!r) { box.innerHTML = '<p class="muted">No episode ' + esc(open) + ".</p>"; return; }
  const n = Math.floor(id / VIEW.m.page);
  const page = VIEW.pages[n];
  if (!page) {
    box.innerHTML = '<p class="muted">Loading episode ' + id + "...</p>";
    if (!VIEW.waiting[n]) {
      VIEW.waiting[n] = [];
      load("data/turns-" + String(n).padStart(3, "0") + ".js", () => {});
    }
    VIEW.waiting[n].push(renderEpisode);
    return;
  }
  const ep = page.turns[id - page.start], err = page.errors[id - page.start];
  let html = '<h2 id="ep-title">Episode ' + id + ": " + esc(VIEW.m.agents[r[2]]) + " on " +
    esc(VIEW.m.envs[r[1]]) + "</h2><p>task " + esc(r[3]) + ", sample " + r[4] + ", T=" + r[5] +
    " (" + esc(r[6]) + '), <span class="' + esc(r[8]) + '">' + esc(r[8]) + "</span>, stop " +
    esc(r[9]) + ", " + r[10] + " turns" + (r[11] != null ? ", first success at turn " + r[11] : "") +
    (r[7] != null ? ", fault at turn " + r[7] : "") +
    (ep.left_oracle != null ? ", left the oracle's path at turn " + ep.left_oracle : "") + ".</p>";
  if (err) html += "<p class=\"error\">error: " + esc(err) + "</p>";
  if (ep.first != null) html += "<p><b>First observation</b></p><pre>" + esc(ep.first) + "</pre>";
  else if (!VIEW.m.transcripts) html += '<p class="muted">Observations: run eval with --save-transcripts.</p>';
  html += '<table id="turns"><thead><tr><th>t</th><th>left</th><th>oracle</th>' +
    "<th>cost-to-go</th><th>fault</th><th>action, then the observation</th></tr></thead><tbody>";
  for (const t of ep.turns) {
    const cls = (t.fault ? "fault " : "") + (t.oracle === false ? "offpath" : "");
    const calls = t.calls ? t.calls.map((c) => "<div>tool <b>" + esc(c.name) + "</b> " +
      esc(JSON.stringify(c.arguments)) + "</div>").join("") : "<pre>" + esc(t.action) + "</pre>";
    const reply = t.reply != null && t.reply !== t.action ? '<div class="muted">reply: ' + esc(t.reply) + "</div>" : "";
    const fault = t.fault ? t.fault.map((f) => esc(f.kind) + (f.effect ? " (" + esc(f.effect) + ")" : "") +
      (f.executed != null && f.executed !== f.action ? ": ran " + esc(f.executed) : "")).join("; ") : "";
    html += '<tr class="turn ' + cls + '"><td>' + t.t + "</td><td>" + t.left + '</td><td class="ag">' +
      (t.oracle == null ? "" : t.oracle ? "yes" : "no") + "</td><td>" + (t.cost == null ? "" : t.cost) +
      "</td><td>" + fault + "</td><td>" + calls + reply +
      (t.obs == null ? "" : "<pre>" + esc(t.obs) + "</pre>") + "</td></tr>";
  }
  box.innerHTML = html + "</tbody></table>";
}
function svg(w, h, body) {
  return '<svg xmlns="http://www.w3.org/2000/svg" width="' + w + '" height="' + h + '">' + body + "</svg>";
}
function heatmap(c) {
  const cw = Math.max(4, Math.min(24, Math.floor(360 / c.ts.length))), ch = 16, x0 = 36, y0 = 18;
  let b = '<text x="2" y="12" font-size="11">' + esc(c.agent) + ": Pass@(K,T)</text>";
  c.surface.forEach((row, i) => row.forEach((v, j) => {
    const g = Math.round(255 - 200 * v);
    b += '<rect class="cell" x="' + (x0 + j * cw) + '" y="' + (y0 + (c.ks.length - 1 - i) * ch) +
      '" width="' + cw + '" height="' + ch + '" fill="rgb(' + g + "," + Math.round(255 - 120 * v) + ",255)\">" +
      "<title>K=" + c.ks[i] + ", T=" + c.ts[j] + ": " + v.toFixed(3) + "</title></rect>";
  }));
  c.ks.forEach((k, i) => { b += '<text x="4" y="' + (y0 + (c.ks.length - 1 - i) * ch + 12) + '" font-size="10">K=' + k + "</text>"; });
  const h = y0 + c.ks.length * ch + 16;
  [0, c.ts.length - 1].forEach((j) => { b += '<text x="' + (x0 + j * cw) + '" y="' + (h - 3) + '" font-size="10">T=' + c.ts[j] + "</text>"; });
  return svg(x0 + c.ts.length * cw + 8, h, b);
}
function curves(env, cs) {
  const w = 420, h = 180, x0 = 30, y0 = 20, pw = w - x0 - 10, ph = h - y0 - 24;
  const tmax = Math.max(...cs.map((c) => c.ts[c.ts.length - 1]));
  const X = (t) => x0 + (tmax <= 1 ? 0 : (t - 1) / (tmax - 1) * pw), Y = (p) => y0 + (1 - p) * ph;
  const colors = ["#2563eb", "#ea580c", "#16a34a", "#dc2626", "#7c3aed", "#0891b2"];
  let b = '<text x="2" y="12" font-size="11">' + esc(env) + ": Pass@1 against T (budget curve)</text>";
  b += '<line x1="' + x0 + '" y1="' + Y(0) + '" x2="' + (x0 + pw) + '" y2="' + Y(0) + '" stroke="#999"/>';
  b += '<text x="' + x0 + '" y="' + (h - 6) + '" font-size="10">T=1</text><text x="' + (x0 + pw - 30) +
    '" y="' + (h - 6) + '" font-size="10">T=' + tmax + "</text>";
  cs.forEach((c, i) => {
    const col = colors[i % colors.length];
    b += '<polyline fill="none" stroke="' + col + '" points="' + c.ts.map((t, j) => X(t) + "," + Y(c.pass1[j])).join(" ") + '"/>';
    c.ts.forEach((t, j) => {
      b += '<circle class="pt" cx="' + X(t) + '" cy="' + Y(c.pass1[j]) + '" r="3" fill="' + col + '"><title>' +
        esc(c.agent) + " T=" + t + ": Pass@1 " + c.pass1[j].toFixed(3) + " [" + c.low[j].toFixed(3) + ", " +
        c.high[j].toFixed(3) + "]" + (t === c.t_keep ? " (keeps 95%)" : "") + "</title></circle>";
    });
    b += '<text x="' + (x0 + 6) + '" y="' + (y0 + 12 + 12 * i) + '" font-size="10" fill="' + col + '">' + esc(c.agent) + "</text>";
  });
  return svg(w, h, b);
}
function renderCharts() {
  let html = "<h2>Pass@(K,T) and budget curves</h2>";
  for (const env of VIEW.m.envs) {
    const cs = VIEW.m.charts.filter((c) => c.env === env);
    if (!cs.length) continue;
    html += "<h3>" + esc(env) + "</h3>" + curves(env, cs) + "<div>" + cs.map(heatmap).join("") + "</div>" +
      "<ul>" + cs.map((c) => "<li>" + esc(c.sentence) + "</li>").join("") + "</ul>";
  }
  $("charts").innerHTML = html;
}
function render() { renderList(); renderEpisode(); }
function start() {
  $("title").textContent = VIEW.m.title + " (" + VIEW.m.episodes + " episodes)";
  document.title = VIEW.m.title;
  fillFilters();
  $("list").tBodies[0].addEventListener("click", (e) => {
    const tr = e.target.closest("tr");
    if (tr) setState("open", tr.dataset.id);
  });
  window.addEventListener("hashchange", render);
  render();
  renderCharts();
  document.body.dataset.ready = "1";
}
load("data/meta.js", () => load("data/episodes.js", start));
</script>
</body>
</html>
"""
