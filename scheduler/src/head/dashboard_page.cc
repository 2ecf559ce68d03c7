// The dashboard's page: plain HTML and script, drawn from /api/status and /api/jobs (the job
// queue: team, priority, replicas, why each waits, preemptions) every 2 s; the selected
// job's log streams from /api/jobs/<id>/logs and its gauges are charted from
// /api/jobs/<id>/curves with Chart.js.
#include "head/dashboard.h"

#include <string>

namespace yard::sched {

namespace {

// The document's head up to its styles.
constexpr const char* kHead = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Switchyard</title>
)HTML";

// States are coloured by their names (ALIVE, DEAD, ...), as /api/status gives them.
constexpr const char* kStyle = R"HTML(<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #ddd; vertical-align: top; }
.ALIVE, .RUNNING, .CREATED, .SUCCEEDED { color: #17702a; } .DEAD, .FAILED { color: #b00020; }
.PENDING, .RESTARTING, .DRAINING, .STOPPED, .QUEUED { color: #a06000; }
tr.job { cursor: pointer; } tr.job:hover { background: #f3f3f3; }
#log { background: #111; color: #ddd; padding: 8px; height: 16em; overflow: auto; white-space: pre-wrap; font: 12px monospace; }
#charts { display: flex; flex-wrap: wrap; gap: 12px; } #charts div { width: 420px; height: 220px; }
#error { color: #b00020; }
</style>
)HTML";

// The tables and the selected job's charts and log, filled by the script.
constexpr const char* kMarkup = R"HTML(<script src="/static/chart.js"></script>
</head><body>
<h1>Switchyard cluster <span id="address"></span></h1>
<div id="error"></div>
<div id="store"></div>
<h2>Nodes</h2><table id="nodes"><thead><tr><th>node</th><th>address</th><th>state</th><th>resources used/total</th><th>workers</th><th>actors</th><th>heartbeat</th></tr></thead><tbody></tbody></table>
<h2>Actors</h2><table id="actors"><thead><tr><th>actor</th><th>class</th><th>name</th><th>state</th><th>node</th><th>restarts</th><th>job</th></tr></thead><tbody></tbody></table>
<h2>Placement groups</h2><table id="groups"><thead><tr><th>group</th><th>strategy</th><th>state</th><th>bundles</th><th>job</th></tr></thead><tbody></tbody></table>
<h2>Waiting for nodes</h2><table id="waiting"><thead><tr><th>what</th><th>id</th><th>job</th><th>needs</th><th>waiting</th><th>why</th></tr></thead><tbody></tbody></table>
<h2>Job queue</h2><table id="queue"><thead><tr><th>job</th><th>team</th><th>priority</th><th>status</th><th>replicas now/MIN:MAX</th><th>queued</th><th>why it waits, or what took its room</th></tr></thead><tbody></tbody></table>
<h2>Jobs</h2><table id="jobs"><thead><tr><th>job</th><th>status</th><th>entrypoint</th><th>started</th></tr></thead><tbody></tbody></table>
<h2>Job <span id="job-title">(none selected)</span></h2>
<div id="charts"></div>
<div id="log"></div>
)HTML";

// Draws /api/status into the tables every 2 s; follows the selected job's log and curves.
constexpr const char* kScript = R"HTML(<script>
"use strict";
let selected = null, logOffset = 0, charts = {};
const esc = s => String(s ?? "").replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const cell = (v, cls) => `<td${cls ? ` class="${esc(cls)}"` : ""}>${esc(v)}</td>`;
function res(total, avail) {
  return Object.keys(total || {}).sort().map(k => {
    const t = total[k], a = (avail || {})[k] ?? t;
    return k === "memory" ? `memory ${((t - a) / 2 ** 30).toFixed(1)}/${(t / 2 ** 30).toFixed(1)} GiB` : `${k} ${+(t - a).toFixed(2)}/${t}`;
  }).join(", ");
}
function fill(id, rows) { document.querySelector(`#${id} tbody`).innerHTML = rows.join(""); }
async function getJSON(path) {
  const r = await fetch(path, {credentials: "same-origin"});
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
}
async function refresh() {
  try {
    const s = await getJSON("/api/status");
    document.getElementById("error").textContent = "";
    document.getElementById("address").textContent = s.cluster.address || "";
    const cs = s.cluster.control_store;  // a replicated control store only
    document.getElementById("store").textContent = !cs ? "" : cs.error ? `Control store: ${cs.error}` :
      `Control store: primary ${cs.primary}, ${cs.replicas.filter(r => r.state === "online").length} of ` +
      `${cs.replicas.length} replicas online, ${cs.sentinels.filter(t => t.ok).length} of ${cs.sentinels.length} ` +
      `Sentinels answering, failover ${cs.quorum ? "possible" : "NOT possible"}`;
    const now = Date.now() / 1000;
    fill("nodes", s.nodes.map(n => {
      const state = n.alive ? (n.state === "DRAINING" ? "DRAINING" : "ALIVE") : "DEAD";
      const hb = parseFloat(n.heartbeat);
      const beat = hb ? `${Math.max(0, now - hb).toFixed(1)} s ago` : "";
      return `<tr>${cell(n.node_id)}${cell(n.address)}${cell(state, state)}${cell(res(n.resources_total, n.resources_available))}` +
             `${cell(n.workers)}${cell((n.actors || []).length)}${cell(beat)}</tr>`;
    }));
    fill("actors", s.actors.map(a => `<tr>${cell(a.actor_id)}${cell(a.class)}${cell(a.name)}${cell(a.state, a.state)}` +
                                     `${cell(a.node)}${cell(a.restarts)}${cell(a.job)}</tr>`));
    fill("groups", (s.placement_groups || []).map(g => `<tr>${cell(g.placement_group_id)}${cell(g.strategy)}${cell(g.state, g.state)}` +
                                                        `${cell(JSON.stringify(g.bundles))}${cell(g.job)}</tr>`));
    fill("waiting", (s.waiting || []).map(w => `<tr>${cell(`${w.kind} ${w.what}`)}${cell(w.id)}${cell(w.job)}` +
                                              `${cell(JSON.stringify(w.needs))}${cell(w.for_s !== undefined ? `${Math.round(w.for_s)} s` : "")}` +
                                              `${cell(w.text)}</tr>`));
    fill("jobs", s.jobs.map(j => `<tr class="job" data-job="${esc(j.job_id)}">${cell(j.job_id)}${cell(j.status, j.status)}` +
                                 `${cell(j.entrypoint)}${cell(+j.start ? new Date(j.start * 1000).toLocaleString() : "")}</tr>`));
    const queue = (await getJSON("/api/jobs")).filter(j => "team" in j);
    fill("queue", queue.map(j => {
      const waited = j.waiting ? `${Math.round(j.waiting.for_s)} s` : "";
      return `<tr class="job" data-job="${esc(j.job_id)}">${cell(j.job_id)}${cell(j.team || "-")}${cell(j.priority)}` +
             `${cell(j.status, j.status)}${cell(`${j.replicas}/${j.min_replicas}:${j.max_replicas}`)}${cell(waited)}` +
             `${cell(j.waiting ? j.waiting.text : j.preempted ? `preempted: ${j.preempted}` : "")}</tr>`;
    }));
    document.querySelectorAll("tr.job").forEach(tr => tr.onclick = () => select(tr.dataset.job));
    if (!selected && s.jobs.length) {
      const running = s.jobs.filter(j => j.status === "RUNNING");
      select((running.length ? running[running.length - 1] : s.jobs[s.jobs.length - 1]).job_id);
    }
  } catch (e) {
    document.getElementById("error").textContent = e.message;
  }
}
function select(job) {
  selected = job; logOffset = 0;
  document.getElementById("job-title").textContent = job;
  document.getElementById("log").textContent = "";
  for (const c of Object.values(charts)) c.chart.destroy();
  charts = {};
  document.getElementById("charts").innerHTML = "";
  follow();
}
async function follow() {
  if (!selected) return;
  const job = selected;
  try {
    const l = await getJSON(`/api/jobs/${encodeURIComponent(job)}/logs?offset=${logOffset}`);
    if (job !== selected) return;
    const box = document.getElementById("log");
    box.textContent += l.text; logOffset = l.offset; box.scrollTop = box.scrollHeight;
  } catch (e) { /* a job run by hand has no log here */ }
  try {
    const points = await getJSON(`/api/jobs/${encodeURIComponent(job)}/curves`);
    if (job === selected) draw(points);
  } catch (e) { document.getElementById("error").textContent = e.message; }
}
function draw(points) {
  const series = {};
  for (const p of points) {
    const tags = Object.entries(p.tags || {}).map(([k, v]) => `${k}=${v}`).join(",");
    ((series[p.name] ??= {})[tags] ??= []).push({x: p.t, y: p.v});
  }
  for (const [name, lines] of Object.entries(series)) {
    if (!charts[name]) {
      const div = document.createElement("div");
      div.className = "curve"; div.dataset.name = name; div.dataset.points = "0"; div.dataset.marked = "0";
      const canvas = document.createElement("canvas");
      div.appendChild(canvas);
      document.getElementById("charts").appendChild(div);
      charts[name] = {div, chart: typeof Chart === "undefined" ? {destroy() {}, update() {}, data: {datasets: []}} :
        new Chart(canvas, {type: "line", data: {datasets: []}, options: {animation: false, parsing: false,
          maintainAspectRatio: false, plugins: {title: {display: true, text: name}},
          scales: {x: {type: "linear", ticks: {callback: v => new Date(v * 1000).toLocaleTimeString()}}}}})};
    }
    const c = charts[name].chart;
    const colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
    // A gauge is recorded when it changes: a step from each value to the next. A series of few
    // points (one per epoch) shows each as a mark: one point alone draws no line.
    const few = d => d.length < 60;
    const count = Object.values(lines).reduce((n, d) => n + d.length, 0);
    const marked = Object.values(lines).some(few);
    c.data.datasets = Object.entries(lines).map(([tags, data], i) => ({label: tags || name, data, stepped: "after",
      pointRadius: few(data) ? 3 : 0, borderWidth: 1.5, borderColor: colors[i % colors.length],
      backgroundColor: colors[i % colors.length]}));
    c.update();
    charts[name].div.dataset.points = String(count);
    charts[name].div.dataset.marked = marked ? "1" : "0";
  }
}
refresh();
setInterval(refresh, 2000);
setInterval(follow, 2000);
</script>
</body></html>
)HTML";

}  // namespace

const char* dashboard_page() {
  static const std::string page = std::string(kHead) + kStyle + kMarkup + kScript;
  return page.c_str();
}

}  // namespace yard::sched
