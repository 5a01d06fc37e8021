/* merkat dashboard: plain JS over the REST API (/api/v1) and its event stream.
 *
 * The API key typed in the form is kept in sessionStorage (this tab only) and sent as
 * "Authorization: Bearer KEY" on every call; the page shows exactly what the API shows the key's
 * user. Live updates: the server-sent event stream /api/v1/events/stream is read with fetch()
 * (EventSource cannot send an Authorization header); each event is appended to the log and
 * triggers one coalesced refresh of prices, platforms and nodes.
 *
 * Text from the API is inserted with textContent only (never innerHTML).
 */
"use strict";

const API = "/api/v1";
const KEY = "merkat.apiKey";
const MAX_EVENTS = 300;
const state = {
  key: null, lastEvent: 0, prices: [[], [], []], lastPriceTime: 0, chart: null,
  refreshTimer: null, stream: null, loaded: false, details: {},
};
window.merkatDashboard = state; // read by the browser tests

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path) {
  const r = await fetch(API + path, { headers: { Authorization: "Bearer " + state.key } });
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new ApiError(r.status, `${r.status} ${detail}`);
  }
  return r.json();
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "-";
  if (typeof x !== "number") return String(x);
  if (x !== 0 && Math.abs(x) < 1e-3) return x.toExponential(2);
  return Math.abs(x) >= 1000 ? x.toLocaleString("en", { maximumFractionDigits: 0 })
    : Number(x.toPrecision(digits)).toString();
}

function bar(fraction, late) {
  const b = el("span", null, late ? "bar late" : "bar");
  const fill = el("span");
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  b.appendChild(fill);
  return b;
}

function setStatus(text) { $("status").textContent = text; }

/* ---------------------------------------------------------------- sign in / out --- */

async function signIn(key) {
  state.key = key;
  // Who the key is, and the data, in parallel (the data calls fail the same way on a bad key).
  const data = Promise.all([refreshAll(), loadEvents()]);
  data.catch(() => {}); // reported through `me` when the key is bad
  const me = await api("/users/me");
  sessionStorage.setItem(KEY, key);
  $("who").textContent = me.admin ? `${me.name} (admin)` : me.name;
  $("login-view").hidden = true;
  $("dash").hidden = false;
  $("logout").hidden = false;
  await data;
  if (state.chart) state.chart.setSize(chartSize());
  state.loaded = true;
  setStatus("live");
  startStream();
}

function signOut() {
  sessionStorage.removeItem(KEY);
  if (state.stream) state.stream.abort();
  location.reload();
}

$("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("login-error").textContent = "";
  try {
    await signIn($("key").value.trim());
  } catch (e) {
    state.key = null;
    $("login-error").textContent = e.status === 401 ? "This API key is not valid." : e.message;
  }
});
$("logout").addEventListener("click", signOut);

/* ---------------------------------------------------------------------- prices --- */

function chartSize() {
  // The box may still be hidden on the first load: fall back to the page's width.
  const w = $("price-chart").clientWidth || document.body.clientWidth - 64;
  return { width: Math.max(320, w - 8), height: 260 };
}

function priceChart() {
  const box = $("price-chart");
  const opts = {
    ...chartSize(),
    scales: { x: { time: true }, cpu: { auto: true }, mem: { auto: true } },
    series: [
      {},
      { label: "cpu (credits / core / period)", scale: "cpu", stroke: "#2f5fb3", width: 2 },
      { label: "memory (credits / MiB / period)", scale: "mem", stroke: "#c0392b", width: 2 },
    ],
    axes: [{}, { scale: "cpu", label: "cpu", size: 60, values: (u, vs) => vs.map((v) => fmt(v)) },
      { scale: "mem", side: 1, label: "memory", size: 60, grid: { show: false },
        values: (u, vs) => vs.map((v) => fmt(v)) }],
  };
  state.chart = new uPlot(opts, state.prices, box);
  window.addEventListener("resize", () => state.chart.setSize(chartSize()));
}

async function refreshPrices() {
  const since = state.lastPriceTime;
  const rows = (await api(`/prices/history?since=${since}&limit=100000`)).items;
  for (const p of rows) {
    if (p.time <= state.lastPriceTime) continue;
    state.prices[0].push(p.time);
    state.prices[1].push(p.cpu);
    state.prices[2].push(p.memory);
    state.lastPriceTime = p.time;
  }
  if (!state.chart) priceChart(); else state.chart.setData(state.prices);
  const n = state.prices[0].length;
  $("price-now").textContent = n
    ? `now: cpu ${fmt(state.prices[1][n - 1])}, memory ${fmt(state.prices[2][n - 1])}` : "";
}

/* ------------------------------------------------------------- platforms, nodes --- */

function sumBy(items, key, field) {
  const out = {};
  for (const it of items) {
    const o = out[it[key]] || (out[it[key]] = { vms: 0, bid: { cpu: 0, memory: 0 },
      allocation: { cpu: 0, memory: 0 }, node: {} });
    o.vms += 1;
    for (const r of ["cpu", "memory"]) {
      o.bid[r] += (it.bid && it.bid[r]) || 0;
      o.allocation[r] += (it.allocation && it.allocation[r]) || 0;
    }
    if (field) o.node[it[field]] = (o.node[it[field]] || 0) + 1;
  }
  return out;
}

function sloCell(detail) {
  const td = el("td");
  const slo = detail && detail.slo;
  if (!slo || slo.progress === undefined || slo.progress === null) { td.textContent = "-"; return td; }
  td.appendChild(bar(slo.progress, slo.on_track === false));
  td.appendChild(el("span", `${Math.round(100 * slo.progress)} %`));
  if (slo.deadline) td.title = `deadline ${new Date(slo.deadline * 1000).toLocaleTimeString()}`;
  return td;
}

function renderPlatforms(platforms, perPlatform, balances) {
  const body = $("platforms").tBodies[0];
  body.replaceChildren();
  for (const p of platforms) {
    const a = perPlatform[p.name] || { vms: 0, bid: {}, allocation: {} };
    const d = state.details[p.name];
    const tr = el("tr");
    tr.dataset.platform = p.name;
    const stateCell = el("td", p.state, `state-${p.state}`);
    if (p.outcome) stateCell.title = p.outcome; // met, missed by N s, running: on track...
    tr.append(el("td", p.name), el("td", p.owner), stateCell,
      el("td", a.vms, "num"), el("td", fmt(a.bid.cpu), "num"), el("td", fmt(a.bid.memory), "num"),
      el("td", fmt(a.allocation.cpu), "num"), el("td", fmt(a.allocation.memory), "num"),
      sloCell(d), el("td", balances[p.account || `app:${p.name}`] ?? "-", "num"),
      el("td", d && d.spent !== undefined ? fmt(d.spent) : "-", "num"));
    body.appendChild(tr);
  }
  const active = platforms.filter((p) => !["finished", "stopped", "failed"].includes(p.state));
  $("platform-count").textContent = `${active.length} active, ${platforms.length} in all`;
}

function renderNodes(nodes, vmsPerNode) {
  const body = $("nodes").tBodies[0];
  body.replaceChildren();
  for (const n of nodes.items) {
    const cores = n.cores || n.cpus || 0;
    const alloc = n.allocated || { cpu: 0, memory: 0 };
    const tr = el("tr");
    tr.dataset.node = n.name;
    const load = el("td");
    load.append(bar(cores ? alloc.cpu / cores : 0), el("span", `${fmt(alloc.cpu)} / ${fmt(cores)}`));
    const mem = el("td");
    mem.append(bar(n.memory ? alloc.memory / n.memory : 0),
      el("span", `${fmt(alloc.memory)} / ${fmt(n.memory)} MiB`));
    tr.append(el("td", n.name), el("td", vmsPerNode[n.name] || 0, "num"), load, mem);
    body.appendChild(tr);
  }
  $("node-warning").textContent = nodes.warning || "";
}

async function refreshDetails(platforms) {
  // Spending and SLO progress come with each platform's detail: fetched after the first
  // render (the tables do not wait for them), at most 8 at a time.
  const todo = platforms.filter((p) => !["finished", "stopped", "failed"].includes(p.state)
    || !state.details[p.name]).map((p) => p.name);
  const worker = async () => {
    while (todo.length) {
      const name = todo.shift();
      try { state.details[name] = await api(`/platforms/${encodeURIComponent(name)}`); }
      catch (e) { if (e.status !== 404) throw e; }
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

async function refreshTables() {
  const [platforms, allocations, nodes, accounts] = await Promise.all([
    api("/platforms"), api("/allocations"), api("/nodes"), api("/accounts")]);
  const perPlatform = sumBy(allocations.items, "platform");
  const perNode = {};
  for (const it of allocations.items) {
    if (it.node && it.state !== "suspended") perNode[it.node] = (perNode[it.node] || 0) + 1;
  }
  const balances = {};
  for (const a of accounts.items) balances[a.name] = a.balance;
  renderPlatforms(platforms.items, perPlatform, balances);
  renderNodes(nodes, perNode);
  state.lastTables = { platforms: platforms.items, perPlatform, balances };
  refreshDetails(platforms.items).then(() => {
    const t = state.lastTables;
    renderPlatforms(t.platforms, t.perPlatform, t.balances);
  }).catch((e) => setStatus(`error: ${e.message}`));
}

async function refreshAll() {
  await Promise.all([refreshPrices(), refreshTables()]);
}

function scheduleRefresh() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(async () => {
    state.refreshTimer = null;
    try { await refreshAll(); } catch (e) { setStatus(`error: ${e.message}`); }
  }, 300);
}

/* ---------------------------------------------------------------------- events --- */

function addEvent(e) {
  const list = $("events");
  const li = el("li");
  li.dataset.kind = e.kind;
  li.dataset.id = e.id;
  const t = el("time", new Date(e.time * 1000).toLocaleTimeString());
  li.append(t, el("span", e.kind, "kind"), el("span", e.message));
  list.insertBefore(li, list.firstChild);
  while (list.children.length > MAX_EVENTS) list.removeChild(list.lastChild);
  state.lastEvent = Math.max(state.lastEvent, e.id);
}

async function loadEvents() {
  // The newest MAX_EVENTS events; the stream continues after the last of them.
  const page = await api(`/events?tail=${MAX_EVENTS}`);
  page.items.forEach(addEvent);
  state.lastEvent = Math.max(state.lastEvent, page.next);
}

async function startStream() {
  // Server-sent events over fetch; reconnects with the last id after an error.
  for (;;) {
    const ctl = new AbortController();
    state.stream = ctl;
    try {
      const r = await fetch(`${API}/events/stream?after=${state.lastEvent}`, {
        headers: { Authorization: "Bearer " + state.key, Accept: "text/event-stream" },
        signal: ctl.signal,
      });
      if (r.status === 401) { signOut(); return; }
      if (!r.ok || !r.body) throw new Error(`stream: ${r.status}`);
      $("stream-state").textContent = "live";
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).trimStart()).join("\n");
          if (!data) continue;
          const e = JSON.parse(data);
          if (e.id > state.lastEvent) { addEvent(e); scheduleRefresh(); }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    $("stream-state").textContent = "reconnecting…";
    await new Promise((res) => setTimeout(res, 1000));
  }
}

/* ------------------------------------------------------------------------ start --- */

// Prices change every period even without events: a slow poll keeps the chart moving.
setInterval(() => { if (state.loaded) scheduleRefresh(); }, 5000);

const saved = sessionStorage.getItem(KEY);
if (saved) {
  signIn(saved).catch(() => { sessionStorage.removeItem(KEY); state.key = null; });
}
