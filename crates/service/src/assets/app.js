// The tao-slurm dashboard: plain JavaScript, no framework, no build step. Everything it shows comes
// from the API with the user's bearer token; live updates come from the API's event streams, read
// with fetch (EventSource cannot send an Authorization header). Remote text is only ever set as text.
"use strict";

const STORE_KEY = "tao-slurm-dashboard";
const STATUSES = ["Pending", "Running", "Done", "Error", "Canceled", "Paused", "Pausing", "Resuming"];
let auth = null; // {org, token}
let jobs = new Map(); // id -> job
let workspaces = [];
let view = null; // {name, stop()}
const filters = { status: "", workspace: "", text: "" };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v; // CSSOM: allowed by the page's style-src policy
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function api(path) {
  return `/api/v2/orgs/${encodeURIComponent(auth.org)}${path}`;
}

async function call(path, options = {}) {
  const res = await fetch(api(path), {
    ...options,
    headers: { Authorization: `Bearer ${auth.token}`, ...(options.headers || {}) },
  });
  if (res.status === 401) {
    signOut("The token was refused (unknown or revoked). Sign in again.");
    throw new Error("unauthorized");
  }
  const type = res.headers.get("content-type") || "";
  const body = type.includes("json") ? await res.json() : await res.text();
  if (!res.ok) throw new Error(body && body.error_desc ? body.error_desc : `HTTP ${res.status}`);
  return body;
}

// A server-sent event stream over fetch; reconnects after a pause until stopped.
function stream(path, onEvent, onState) {
  const ctl = new AbortController();
  let stopped = false;
  (async () => {
    let pause = 1000;
    while (!stopped) {
      try {
        const res = await fetch(api(path), { headers: { Authorization: `Bearer ${auth.token}` }, signal: ctl.signal });
        if (res.status === 401) { signOut("The token was refused. Sign in again."); return; }
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        onState && onState(true);
        pause = 1000;
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let name = "message";
            const data = [];
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
            }
            if (data.length && onEvent(name, JSON.parse(data.join("\n"))) === false) { stopped = true; ctl.abort(); }
          }
        }
      } catch (e) {
        if (stopped) return;
      }
      if (stopped) return;
      onState && onState(false);
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 15000);
    }
  })();
  return () => { stopped = true; ctl.abort(); };
}

function setLive(on) {
  const live = document.getElementById("live");
  live.hidden = false;
  live.className = "live " + (on ? "on" : "off");
  document.getElementById("live-text").textContent = on ? "live" : "reconnecting";
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function pill(status) {
  return el("span", { class: `pill ${status} status`, "data-status": status }, status);
}

function nodesText(j) {
  const m = j.backend_details.slurm_metadata;
  const size = `${j.nodes} × ${j.gpus_per_node} GPU`;
  return m.node_list ? `${m.node_list} (${size})` : size;
}

function progressCell(j) {
  const p = j.progress;
  if (!p) return el("span", { class: "muted" }, "–");
  const epoch = Number(p.epoch), max = Number(p.max_epoch);
  const parts = [];
  if (Number.isFinite(epoch) && Number.isFinite(max) && max > 0) {
    parts.push(el("div", { class: "small" }, `epoch ${epoch}/${max}`));
    parts.push(el("div", { class: "bar" }, el("span", { style: `width:${Math.min(100, (100 * epoch) / max)}%` })));
  }
  if (p.last_message) parts.push(el("div", { class: "small muted" }, p.last_message));
  return parts.length ? parts : el("span", { class: "muted" }, "–");
}

function reasonText(j) {
  const r = j.pending_reason;
  if (!r) return j.status === "Pending" ? el("span", { class: "muted" }, j.message) : el("span", { class: "muted" }, "–");
  return el("span", { title: r.advice || "" }, r.words ? `${r.words}` : r.code);
}

// ---- views ----

function showLogin(message) {
  stopView();
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("live").hidden = true;
  document.getElementById("who").textContent = "";
  const err = el("div", { class: "error-text", id: "login-error" }, message || "");
  const form = el("form", { class: "panel login", id: "login-form" },
    el("h1", {}, "Sign in"),
    el("p", { class: "muted" }, "Use a token from your admin (tao-slurm token create --org ORG)."),
    el("label", { for: "org" }, "Org"),
    el("input", { id: "org", name: "org", autocomplete: "username", required: true }),
    el("label", { for: "token" }, "Token"),
    el("input", { id: "token", name: "token", type: "password", autocomplete: "current-password", required: true }),
    el("div", { style: "margin-top:14px" }, el("button", { type: "submit", id: "signin" }, "Sign in")),
    el("p", {}, el("a", { href: "/auth/login", id: "sign-in-provider" }, "Sign in with your identity provider")),
    err);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    auth = { org: form.org.value.trim(), token: form.token.value.trim() };
    try {
      await loadWorkspaces();
      localStorage.setItem(STORE_KEY, JSON.stringify(auth));
      route();
    } catch (e) {
      err.textContent = `Cannot sign in: ${e.message}`;
    }
  });
  document.getElementById("main").replaceChildren(form);
}

function signOut(message) {
  localStorage.removeItem(STORE_KEY);
  auth = null;
  jobs = new Map();
  showLogin(message);
}

async function loadWorkspaces() {
  const body = await call("/workspaces");
  workspaces = body.workspaces;
}

function stopView() {
  if (view && view.stop) view.stop();
  view = null;
}

function jobsView() {
  const statusSel = el("select", { id: "filter-status" }, el("option", { value: "" }, "All statuses"),
    STATUSES.map((s) => el("option", { value: s }, s)));
  const wsSel = el("select", { id: "filter-workspace" }, el("option", { value: "" }, "All clusters"),
    workspaces.map((w) => el("option", { value: w.id }, w.id)));
  const text = el("input", { id: "filter-text", type: "search", placeholder: "Filter by name or id" });
  statusSel.value = filters.status; wsSel.value = filters.workspace; text.value = filters.text;
  const count = el("span", { class: "muted", id: "job-count" });
  const tbody = el("tbody", { id: "jobs-body" });
  const table = el("table", { id: "jobs-table" },
    el("thead", {}, el("tr", {}, ["Name", "Status", "Slurm state", "Pending reason", "Progress", "Nodes", "Cluster", "Age"].map((h) => el("th", {}, h)))),
    tbody);
  const render = () => {
    const t = filters.text.toLowerCase();
    const list = [...jobs.values()]
      .filter((j) => !filters.status || j.status === filters.status)
      .filter((j) => !filters.workspace || j.workspace === filters.workspace)
      .filter((j) => !t || (j.name || "").toLowerCase().includes(t) || j.id.includes(t))
      .sort((a, b) => Date.parse(b.created_on) - Date.parse(a.created_on) || (a.id < b.id ? 1 : -1));
    count.textContent = `${list.length} of ${jobs.size} jobs`;
    tbody.replaceChildren(...(list.length ? list.map((j) => el("tr", { class: "job-row", "data-job-id": j.id, onclick: () => { location.hash = `#/jobs/${j.id}`; } },
      el("td", {}, el("a", { href: `#/jobs/${j.id}` }, j.name || j.id.slice(0, 8)), el("div", { class: "small muted mono" }, j.id.slice(0, 8))),
      el("td", {}, pill(j.status)),
      el("td", { class: "slurm-state" }, j.backend_details.slurm_metadata.slurm_state || "–"),
      el("td", { class: "reason" }, reasonText(j)),
      el("td", { class: "progress" }, progressCell(j)),
      el("td", { class: "small" }, nodesText(j)),
      el("td", {}, j.workspace),
      el("td", { class: "age", "data-created": j.created_on }, age(j.created_on)),
    )) : [el("tr", {}, el("td", { colspan: 8, class: "empty" }, jobs.size ? "No job matches the filters." : "No jobs yet. Submit one with POST /api/v2/orgs/{org}/jobs."))]));
  };
  const onFilter = () => { filters.status = statusSel.value; filters.workspace = wsSel.value; filters.text = text.value; render(); };
  statusSel.addEventListener("change", onFilter); wsSel.addEventListener("change", onFilter); text.addEventListener("input", onFilter);
  document.getElementById("main").replaceChildren(
    el("div", { class: "title" }, el("h1", {}, "Jobs"), count),
    el("div", { class: "filters" }, statusSel, wsSel, text),
    el("div", { class: "panel", style: "padding:0" }, table));
  render();
  const stop = stream("/jobs:stream", (name, data) => {
    if (name === "snapshot") jobs = new Map();
    for (const j of data.jobs) jobs.set(j.id, j);
    for (const id of data.removed || []) jobs.delete(id);
    render();
  }, setLive);
  const timer = setInterval(() => { for (const td of tbody.querySelectorAll("td.age")) td.textContent = age(td.dataset.created); }, 5000);
  return { stop: () => { stop(); clearInterval(timer); } };
}

function confirmDialog(title, text, yes, no) {
  return new Promise((resolve) => {
    const m = document.getElementById("modal");
    document.getElementById("modal-title").textContent = title;
    document.getElementById("modal-text").textContent = text;
    const y = document.getElementById("modal-yes"), n = document.getElementById("modal-no");
    y.textContent = yes; n.textContent = no;
    const done = (v) => { m.hidden = true; y.onclick = n.onclick = null; resolve(v); };
    y.onclick = () => done(true); n.onclick = () => done(false);
    m.hidden = false;
    n.focus();
  });
}

// A job's KPIs over time as an SVG line chart: x the epoch (or the report's number), y each KPI
// scaled to its own range, one line and a point per report. Built with DOM calls, text as text.
const SVG_NS = "http://www.w3.org/2000/svg";
const KPI_COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children.flat()) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function kpiChart(points) {
  const names = [...new Set(points.flatMap((p) => Object.keys(p.kpi)))].sort();
  if (!names.length) return el("div", { class: "muted small", id: "kpi-empty" }, "No KPIs reported yet (status.json).");
  const W = 720, H = 240, L = 48, R = 16, T = 12, B = 28;
  const xs = points.map((p, i) => (p.epoch ?? p.cur_iter ?? i + 1));
  const xMin = Math.min(...xs), xMax = Math.max(...xs, xMin + 1);
  const x = (v) => L + ((v - xMin) / (xMax - xMin)) * (W - L - R);
  const chart = svg("svg", { id: "kpi-chart", viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": "KPIs over time" },
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#94a3b8" }),
    svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#94a3b8" }),
    svg("text", { x: L, y: H - 8, "font-size": 11, fill: "#64748b" }, `${points[0].epoch != null ? "epoch" : "report"} ${xMin}`),
    svg("text", { x: W - R, y: H - 8, "font-size": 11, fill: "#64748b", "text-anchor": "end" }, String(xMax)));
  const legend = el("div", { class: "kpi-legend small" });
  names.forEach((name, k) => {
    const color = KPI_COLORS[k % KPI_COLORS.length];
    const pts = points.map((p, i) => [xs[i], p.kpi[name]]).filter(([, v]) => v != null);
    const vs = pts.map(([, v]) => v);
    const lo = Math.min(...vs), hi = Math.max(...vs), span = hi - lo || 1;
    const y = (v) => H - B - ((v - lo) / span) * (H - T - B);
    chart.append(svg("polyline", { points: pts.map(([a, v]) => `${x(a)},${y(v)}`).join(" "), fill: "none", stroke: color, "stroke-width": 2, "data-kpi": name }));
    // A point per report while they are few enough to see one by one.
    if (pts.length <= 200) for (const [a, v] of pts) chart.append(svg("circle", { cx: x(a), cy: y(v), r: 3.5, fill: color, "data-kpi": name, "data-x": a, "data-value": v }, svg("title", {}, `${name} ${v} at ${a}`)));
    legend.append(el("span", { class: "kpi-key", "data-kpi": name }, el("span", { class: "swatch", style: `background:${color}` }), ` ${name} ${vs[vs.length - 1]} (${lo}–${hi})`));
  });
  return el("div", {}, chart, legend);
}

// A job's GPU utilisation over time, one line per node (its GPUs' mean), y 0 to 100%: the job's
// history as the service keeps it (each node's last samples, `gpu.history`), so a page opened late
// shows the minutes before it. A sample without data is a gap in its line, never drawn as 0%.
function gpuChart(view) {
  // Each node's samples (`all`, gaps included) and those with data (`points`, the ones drawn).
  const history = ((view && view.history) || []).map((h) => ({ node: h.node, all: h.points, points: h.points.filter((p) => p.util != null) }));
  const drawn = history.flatMap((h) => h.points);
  const why = view && view.util == null ? view.nodes.map((n) => n.no_data).find((r) => r) : null;
  const noData = view && view.util == null ? el("div", { class: "muted small", id: "gpu-empty" }, `No GPU data${why ? ` (${why})` : ""}.`) : null;
  if (!drawn.length) return noData || el("div", { class: "muted small", id: "gpu-empty" }, "No GPU samples yet.");
  const W = 720, H = 200, L = 48, R = 16, T = 12, B = 28;
  const ats = drawn.map((p) => p.at), x0 = Math.min(...ats), x1 = Math.max(...ats, x0 + 1);
  const x = (a) => L + ((a - x0) / (x1 - x0)) * (W - L - R), y = (v) => H - B - (v / 100) * (H - T - B);
  const clock = (a) => new Date(a * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const chart = svg("svg", { id: "gpu-chart", viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": "GPU utilisation over time" },
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#94a3b8" }),
    svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#94a3b8" }),
    svg("text", { x: L - 6, y: T + 8, "font-size": 11, fill: "#64748b", "text-anchor": "end" }, "100%"),
    svg("text", { x: L - 6, y: H - B, "font-size": 11, fill: "#64748b", "text-anchor": "end" }, "0%"),
    svg("text", { x: L, y: H - 8, "font-size": 11, fill: "#64748b" }, clock(x0)),
    svg("text", { x: W - R, y: H - 8, "font-size": 11, fill: "#64748b", "text-anchor": "end" }, `${clock(x1)} (${Math.round((x1 - x0) / 60)} min)`));
  const legend = el("div", { class: "kpi-legend small" });
  history.filter((h) => h.points.length).sort((a, b) => a.node.localeCompare(b.node)).forEach((h, k) => {
    const color = KPI_COLORS[k % KPI_COLORS.length];
    // One polyline per run of samples with data: a gap where the node gave none.
    let run = [];
    const flush = () => { if (run.length) chart.append(svg("polyline", { points: run.map((p) => `${x(p.at)},${y(p.util)}`).join(" "), fill: "none", stroke: color, "stroke-width": 2, "data-node": h.node })); run = []; };
    for (const p of h.all) { if (p.util == null) flush(); else run.push(p); }
    flush();
    for (const p of h.points) chart.append(svg("circle", { cx: x(p.at), cy: y(p.util), r: 2.5, fill: color, "data-node": h.node, "data-value": p.util, "data-at": p.at }, svg("title", {}, `${h.node} ${p.util}% at ${clock(p.at)}`)));
    const last = h.points[h.points.length - 1];
    legend.append(el("span", { class: "kpi-key", "data-node": h.node }, el("span", { class: "swatch", style: `background:${color}` }), ` ${h.node} ${last.util}% (${last.power_w} W)`));
  });
  const sources = [...new Set(view.nodes.map((n) => n.source).filter((s) => s))];
  const from = el("div", { class: "muted small", id: "gpu-source" }, `${drawn.length} samples, from ${sources.map((s) => (s === "dcgm" ? "DCGM" : s)).join(" and ") || "nvidia-smi"}`);
  const h = view && view.health;
  const health = h ? el("div", { class: "message", id: "gpu-health" }, h.state === "hung" ? `Hung: the GPUs of ${h.nodes.join(", ")} are idle and the training makes no progress.` : "Idle: every GPU is under the idle threshold.") : "";
  return el("div", {}, noData || "", chart, legend, from, health);
}

function jobView(id) {
  const main = document.getElementById("main");
  const head = el("div", { class: "title" });
  const details = el("div", { class: "panel" });
  const attempts = el("div", { class: "panel", id: "attempts" }, el("h2", {}, "Attempts"));
  const events = el("div", { class: "panel", id: "events" }, el("h2", {}, "Events"));
  const kpis = el("div", { class: "panel", id: "kpis" }, el("h2", {}, "KPIs"), el("div", { class: "muted small" }, "loading"));
  const gpus = el("div", { class: "panel", id: "gpus" }, el("h2", {}, "GPU utilisation"), el("div", { class: "muted small" }, "loading"));
  // The job's GPU view, with its history, as the service keeps it.
  const keepGpu = (view) => gpus.replaceChildren(el("h2", {}, "GPU utilisation"), gpuChart(view));
  const out = el("pre", { class: "log", id: "log-stdout" });
  const err = el("pre", { class: "log err", id: "log-stderr" });
  const logs = el("div", { class: "panel" }, el("h2", {}, "Logs"),
    el("div", { class: "logs" }, el("div", {}, el("div", { class: "small muted" }, "main.out"), out), el("div", {}, el("div", { class: "small muted" }, "main.err"), err)),
    el("div", { class: "small muted", id: "log-state", style: "margin-top:6px" }, "following"));
  main.replaceChildren(el("div", {}, el("a", { href: "#/", class: "small" }, "← All jobs")), head, details, kpis, gpus, logs, attempts, events);
  let job = null;
  const row = (k, v, cls) => [el("div", {}, el("div", { class: "k" }, k), el("div", { class: `v ${cls || ""}` }, v === null || v === undefined || v === "" ? "–" : v))];
  const renderJob = () => {
    const m = job.backend_details.slurm_metadata;
    const terminal = ["Done", "Error", "Canceled"].includes(job.status);
    const cancel = el("button", { class: "danger", id: "cancel-job", disabled: terminal, onclick: async () => {
      const ok = await confirmDialog("Cancel this job?", `${job.name || job.id} will be stopped on Slurm (scancel). This cannot be undone.`, "Cancel job", "Keep running");
      if (!ok) return;
      cancel.disabled = true;
      try { job = await call(`/jobs/${id}:cancel`, { method: "POST" }); renderJob(); }
      catch (e) { cancel.disabled = false; alertText(`Cancel failed: ${e.message}`); }
    } }, "Cancel job");
    // TensorBoard opens through the service: the link's one-time ticket becomes a cookie for its path.
    const tensorboard = el("button", { id: "open-tensorboard", disabled: job.status !== "Running", onclick: async () => {
      tensorboard.disabled = true;
      try { const link = await call(`/jobs/${id}:tensorboard`, { method: "POST" }); window.open(link.url, "_blank", "noopener"); }
      catch (e) { alertText(`TensorBoard failed: ${e.message}`); }
      finally { tensorboard.disabled = job.status !== "Running"; }
    } }, "TensorBoard");
    head.replaceChildren(el("h1", { id: "job-title" }, job.name || job.id), pill(job.status), el("span", { class: "muted mono" }, job.id), el("span", { class: "spacer" }), tensorboard, cancel);
    details.replaceChildren(el("div", { class: "grid" },
      row("Slurm job", m.slurm_job_id, "mono"), row("Slurm state", m.slurm_state, "slurm-state"), row("Cluster", job.workspace),
      row("Nodes", nodesText(job)), row("Partition", job.backend_details.partition), row("Image", job.image, "mono"),
      row("Exit code", m.exit_code), row("Retries", `${m.retry_count}${m.failed_slurm_job_ids.length ? ` (failed Slurm jobs ${m.failed_slurm_job_ids.join(", ")})` : ""}`),
      row("Next retry", m.next_retry_at), row("Created", `${job.created_on} (${age(job.created_on)} ago)`), row("Updated", job.last_modified), row("Job dir", m.job_dir, "mono"),
      row("Pending reason", job.pending_reason ? `${job.pending_reason.words || job.pending_reason.code}${job.pending_reason.advice ? ` — ${job.pending_reason.advice}` : ""}` : null),
      row("Progress", job.progress ? [job.progress.epoch != null ? `epoch ${job.progress.epoch}/${job.progress.max_epoch ?? "?"} ` : "", job.progress.eta != null ? `eta ${job.progress.eta} ` : "", job.progress.last_message || ""].join("") : null),
      row("KPI", job.progress && job.progress.kpi ? JSON.stringify(job.progress.kpi) : null, "mono")),
      el("div", { class: "message", id: "job-message" }, job.message));
  };
  const loadHistory = async () => {
    try {
      const [a, e] = await Promise.all([call(`/jobs/${id}:attempts`), call(`/jobs/${id}:events`)]);
      attempts.replaceChildren(el("h2", {}, "Attempts"), el("table", {},
        el("thead", {}, el("tr", {}, ["#", "Slurm job", "Host", "State", "Exit", "Nodes", "Class", "Evidence", "Submitted", "Ended"].map((h) => el("th", {}, h)))),
        el("tbody", {}, a.attempts.map((x) => el("tr", {},
          el("td", {}, x.number), el("td", { class: "mono" }, x.slurm_job_id || "–"), el("td", {}, x.login_host || "–"), el("td", {}, x.state || "–"),
          el("td", {}, x.exit_code ?? "–"), el("td", {}, x.node_list || "–"), el("td", {}, x.failure_class || "–"),
          el("td", { class: "small" }, x.evidence.length ? el("ul", { class: "evidence" }, x.evidence.map((l) => el("li", { class: "mono" }, l))) : "–"),
          el("td", { class: "small" }, x.submitted_at || "–"), el("td", { class: "small" }, x.ended_at || "–"))))));
      events.replaceChildren(el("h2", {}, "Events"), el("ol", { class: "events", id: "event-list" },
        e.events.map((x) => el("li", {}, el("span", { class: "muted small" }, `${x.at} `), el("strong", {}, x.kind), " ", x.detail))));
    } catch (e) { /* shown again on the next change */ }
  };
  let kpiCount = -1;
  const loadKpis = async () => {
    try {
      const k = await call(`/jobs/${id}:kpis`);
      if (k.points.length === kpiCount) return;
      kpiCount = k.points.length;
      kpis.replaceChildren(el("h2", {}, "KPIs"), kpiChart(k.points));
    } catch (e) { /* tried again on the next change */ }
  };
  // The chart follows the job live: on each change the stream reports, and every 2 s while it runs.
  const loadGpu = async () => {
    try { keepGpu((await call(`/jobs/${id}`)).gpu); } catch (e) { /* tried again in 2 s */ }
  };
  const kpiTimer = setInterval(() => { if (!job || !["Done", "Error", "Canceled"].includes(job.status)) { loadKpis(); loadGpu(); } }, 2000);
  const append = (pre, text) => {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(document.createTextNode(text));
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  };
  const stop = stream(`/jobs/${id}:stream`, (name, data) => {
    if (name === "status") { job = data; renderJob(); loadHistory(); loadKpis(); keepGpu(job.gpu); }
    else if (name === "log") append(data.stream === "stderr" ? err : out, data.text);
    else if (name === "attempt") { append(out, `\n--- attempt ${data.attempt} ---\n`); append(err, `\n--- attempt ${data.attempt} ---\n`); }
    else if (name === "end") { document.getElementById("log-state").textContent = `the job is ${job ? job.status : "gone"}; every log line was read`; return false; }
  }, setLive);
  return { stop: () => { stop(); clearInterval(kpiTimer); } };
}

function alertText(text) {
  confirmDialog("Something went wrong", text, "OK", "Close");
}

function clustersView() {
  const main = document.getElementById("main");
  const cards = el("div", { class: "cards" });
  main.replaceChildren(el("div", { class: "title" }, el("h1", {}, "Clusters"), el("span", { class: "muted" }, "Preflight checks and free GPUs per partition (cached for a minute)")), cards);
  for (const w of workspaces) {
    const d = w.cloud_specific_details;
    const body = el("div", { class: "cluster-body" }, el("div", { class: "muted" }, "Checking…"));
    const check = async (refresh) => {
      body.replaceChildren(el("div", { class: "muted" }, "Checking…"));
      try { renderCluster(body, await call(`/workspaces/${encodeURIComponent(w.id)}:cluster${refresh ? "?refresh=true" : ""}`)); }
      catch (e) { body.replaceChildren(el("div", { class: "error-text" }, e.message)); }
    };
    cards.append(el("div", { class: "panel", "data-workspace": w.id },
      el("div", { class: "title" }, el("h2", { style: "margin:0" }, w.id), el("span", { class: "muted small" }, `${d.slurm_user || "?"}@${d.slurm_hostname.join(", ")}`), el("span", { class: "spacer" }),
        el("button", { class: "secondary", onclick: () => check(true) }, "Check now")),
      el("div", { class: "grid", style: "margin-bottom:12px" },
        ...[["Base results dir", d.base_results_dir], ["Partition", d.partition], ["Account", d.account], ["GPUs per node", d.max_gpus_per_node], ["Wall time", `${d.time_hours} h`], ["Retries", d.max_job_retries]]
          .map(([k, v]) => el("div", {}, el("div", { class: "k" }, k), el("div", { class: "v" }, v ?? "–")))),
      body));
    check(false);
  }
  return null;
}

// replaceChildren turns null into the text "null": leave the empty parts out.
function children(...parts) {
  return parts.flat().filter((p) => p !== null && p !== undefined && p !== false);
}

function renderCluster(body, c) {
  const minutes = (m) => (m === null || m === undefined ? "unlimited" : m >= 60 ? `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ""}` : `${m} min`);
  body.replaceChildren(...children(
    el("div", { class: "small muted" }, `checked ${c.checked_at}`),
    el("table", { class: "partitions", style: "margin:8px 0 14px" },
      el("thead", {}, el("tr", {}, ["Partition", "State", "Max time", "Nodes usable", "GPUs free", "GPUs in use", "CPUs idle"].map((h) => el("th", {}, h)))),
      el("tbody", {}, c.partitions.map((p) => el("tr", {},
        el("td", {}, el("strong", {}, p.name), p.is_default ? el("span", { class: "muted small" }, " default") : null),
        el("td", {}, el("span", { class: `pill ${p.state === "UP" ? "ok" : "fail"}` }, p.state)),
        el("td", {}, minutes(p.max_time_minutes)), el("td", {}, `${p.nodes_usable} / ${p.nodes}`),
        el("td", { class: "gpus-free" }, el("strong", {}, p.gpus_free), ` of ${p.gpus_total}`), el("td", {}, p.gpus_used), el("td", {}, `${p.cpus_idle} / ${p.cpus_total}`))))),
    c.partitions_error ? el("div", { class: "error-text" }, c.partitions_error) : null,
    el("h2", {}, c.ok ? "Preflight: all required checks pass" : "Preflight: some checks fail"),
    el("div", {}, c.checks.map((k) => el("div", { class: "check" },
      el("span", { class: `pill ${k.ok ? "ok" : k.required ? "fail" : "warn"}` }, k.ok ? "ok" : k.required ? "fail" : "warn"),
      el("div", {}, el("strong", {}, k.name), k.host ? el("span", { class: "muted" }, ` on ${k.host}`) : null, el("div", { class: "small muted" }, k.detail),
        k.remediation && !k.ok ? el("div", { class: "small" }, k.remediation) : null))))));
}

function route() {
  if (!auth) return showLogin();
  stopView();
  document.getElementById("nav").hidden = false;
  document.getElementById("signout").hidden = false;
  document.getElementById("who").textContent = auth.person ? `${auth.person} · org ${auth.org}` : `org ${auth.org}`;
  const hash = location.hash || "#/";
  const m = hash.match(/^#\/jobs\/([0-9a-fA-F-]+)$/);
  document.getElementById("nav-jobs").className = m || hash === "#/" ? "active" : "";
  document.getElementById("nav-clusters").className = hash === "#/clusters" ? "active" : "";
  if (m) view = jobView(m[1]);
  else if (hash === "#/clusters") view = clustersView();
  else view = jobsView();
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("signout").addEventListener("click", () => signOut());
  try { auth = JSON.parse(localStorage.getItem(STORE_KEY) || "null"); } catch (e) { auth = null; }
  // Back from the identity provider: the service left the person's token in a cookie only this
  // page's own request can take, once (nothing in the address: a link sets no session).
  if (location.hash === "#signed-in") {
    history.replaceState(null, "", "/");
    try {
      const r = await fetch("/auth/session", { method: "POST", credentials: "same-origin" });
      if (r.ok) {
        const got = await r.json();
        auth = { org: String(got.org), token: String(got.token), person: String(got.person) };
        localStorage.setItem(STORE_KEY, JSON.stringify(auth));
      }
    } catch (e) { /* the session stays as it was */ }
  }
  if (!auth) return showLogin();
  try { await loadWorkspaces(); route(); } catch (e) { if (auth) showLogin(`Cannot reach the service: ${e.message}`); }
});
