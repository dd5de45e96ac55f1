// The status page: it draws the state the server pushes on /events.
// Everything shown is set as text, never as HTML: node names, targets and
// reasons come from the network.
"use strict";

const MB = 1e6;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function bytes(n) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function mbps(rate) { return rate > 0 ? (rate / MB).toFixed(1) : ""; }

function duration(s) {
  if (!(s >= 0) || !isFinite(s)) return "";
  s = Math.round(s);
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

// stateOf is a node's state as the page colours it.
function stateOf(n) {
  if (n.verified) return "verified";
  if (n.status === "done" || n.status === "failed") return n.status;
  if (n.status === "casting") return "casting";
  return "waiting";
}

function render(st) {
  // Lists the server has none of come as null.
  for (const k of ["joined", "nodes", "log", "casts"]) st[k] = st[k] || [];
  const size = st.image ? st.image.bytes : 0;
  const phase = { waiting: "Waiting for nodes", casting: "Casting", over: "Cast over" }[st.phase] || st.phase;
  document.getElementById("phase").textContent = phase +
    (st.phase === "waiting" ? ` (${st.joined.length}${st.image && st.image.nodes ? " of " + st.image.nodes : ""} joined)` : "");
  document.getElementById("image").textContent = st.image ?
    `image ${st.image.path} (${bytes(st.image.bytes)}, ${st.image.encoding}), nodes connect to ${st.image.listen}` : "";
  document.getElementById("plan").textContent = st.plan ? "plan: " + st.plan.plan : "";
  const verified = st.nodes.filter(n => n.verified).length;
  const failed = st.nodes.filter(n => stateOf(n) === "failed").length;
  let totals = "";
  if (st.nodes.length > 0) {
    totals = `${verified} of ${st.nodes.length} verified` + (failed ? `, ${failed} failed` : "");
    const p = st.summary && st.summary.plan;
    if (p && p.measured_mbps) {
      totals += (p.predicted_mbps ? `; predicted ${p.predicted_mbps.toFixed(1)} MB/s,` : ";") +
        ` measured ${p.measured_mbps.toFixed(1)} MB/s`;
    }
  }
  document.getElementById("totals").textContent = totals;
  drawPicture(st);
  drawNodes(st.phase === "waiting" ? st.joined.map(name => ({ name, status: "joined", written: 0 })) : st.nodes, size);
  drawPreview(st.plan);
  drawLog(st.log);
  drawCasts(st.casts);
}

function drawNodes(nodes, size) {
  const body = document.querySelector("#nodes tbody");
  const rows = nodes.map(n => {
    const state = stateOf(n);
    const pct = size > 0 ? Math.min(100, 100 * n.written / size) : 0;
    const left = n.rate_bytes_per_sec > 0 && size > n.written ? (size - n.written) / n.rate_bytes_per_sec : NaN;
    const label = state === "verified" ? "VERIFIED" : state.toUpperCase();
    return el("tr", { class: "state-" + state, "data-node": n.name },
      el("td", {}, n.name),
      el("td", {}, n.target || ""),
      el("td", {}, (n.upstream || "") + (n.apart ? " (apart)" : "")),
      el("td", { class: "state" }, label),
      el("td", {}, el("div", { class: "bar", title: pct.toFixed(1) + "%" }, el("span", { style: `width:${pct.toFixed(1)}%` }))),
      el("td", { class: "num written", "data-bytes": String(n.written) }, bytes(n.written)),
      el("td", { class: "num" }, mbps(n.rate_bytes_per_sec)),
      el("td", { class: "num" }, mbps(n.predicted_bytes_per_sec)),
      el("td", { class: "num" }, state === "casting" ? duration(left) : ""),
      el("td", { class: "note" }, n.reason || ""));
  });
  body.replaceChildren(...rows);
}

function drawPreview(plan) {
  const body = document.querySelector("#preview tbody");
  const notes = document.getElementById("notes");
  notes.replaceChildren(...(plan && plan.notes || []).map(n => el("li", {}, "note: " + n)));
  body.replaceChildren(...(plan && plan.preview || []).map((r, i) => el("tr", { class: i === plan.chosen ? "chosen" : "" },
    el("td", {}, i === plan.chosen ? "▶" : ""),
    el("td", {}, r.plan),
    el("td", {}, r.compression),
    el("td", { class: "num" }, r.predicted_mbps.toFixed(1)),
    el("td", { class: "num" }, duration(r.eta_seconds)),
    el("td", {}, r.bottleneck))));
}

function drawLog(log) {
  const list = document.getElementById("log");
  list.replaceChildren(...log.map(l => el("li", { class: l.type },
    el("time", {}, new Date(l.time).toLocaleTimeString()), l.text)));
  list.scrollTop = list.scrollHeight;
}

function drawCasts(casts) {
  const body = document.querySelector("#casts tbody");
  body.replaceChildren(...casts.map(c => el("tr", {},
    el("td", {}, c.image),
    el("td", {}, c.plan && c.plan.topology ? `${c.plan.topology}, ${c.plan.compression}` : ""),
    el("td", { class: "num" }, c.started ? `${c.verified} of ${(c.nodes || []).length}` : "did not start"),
    el("td", { class: "num" }, c.started ? duration(c.elapsed_seconds) : ""),
    el("td", { class: "num" }, c.plan && c.plan.predicted_mbps ? c.plan.predicted_mbps.toFixed(1) : ""),
    el("td", { class: "num" }, c.plan && c.plan.measured_mbps ? c.plan.measured_mbps.toFixed(1) : ""))));
}

// drawPicture draws the tree the stream runs on: the source on top, each
// node below the one that sends to it, coloured by its state.
function drawPicture(st) {
  const box = document.getElementById("picture");
  if (!st.plan || st.nodes.length === 0) {
    box.replaceChildren(el("p", { class: "empty" }, "No plan yet: nodes are joining."));
    return;
  }
  const source = "dolly-server";
  const byName = new Map(st.nodes.map(n => [n.name, n]));
  const kids = new Map([[source, []]]);
  const orphans = [];
  for (const n of st.nodes) {
    kids.set(n.name, kids.get(n.name) || []);
  }
  for (const n of st.nodes) {
    if (n.upstream && kids.has(n.upstream)) kids.get(n.upstream).push(n.name);
    else orphans.push(n.name); // out of the tree: failed, or not placed yet
  }
  // Leaves take the next column; a parent sits over its children.
  const pos = new Map();
  let column = 0, depth = 0;
  const seen = new Set();
  function place(name, d) {
    seen.add(name);
    depth = Math.max(depth, d);
    const cs = (kids.get(name) || []).filter(c => !seen.has(c));
    if (cs.length === 0) {
      pos.set(name, { x: column++, y: d });
      return;
    }
    for (const c of cs) place(c, d + 1);
    const xs = cs.map(c => pos.get(c).x);
    pos.set(name, { x: (Math.min(...xs) + Math.max(...xs)) / 2, y: d });
  }
  place(source, 0);
  for (const o of orphans) {
    if (!seen.has(o)) { depth = Math.max(depth, 1); pos.set(o, { x: column++, y: 1 }); seen.add(o); }
  }
  const W = 104, H = 46, bw = 92, bh = 30;
  const width = Math.max(1, column) * W + 8, height = (depth + 1) * H + 8;
  const pic = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "the plan" });
  const at = name => { const p = pos.get(name); return { x: 4 + p.x * W + (W - bw) / 2, y: 4 + p.y * H }; };
  for (const n of st.nodes) {
    if (!n.upstream || !pos.has(n.upstream) || !pos.has(n.name)) continue;
    const a = at(n.upstream), b = at(n.name);
    pic.append(svg("path", { class: "edge" + (n.apart ? " apart" : ""),
      d: `M${a.x + bw / 2},${a.y + bh} C${a.x + bw / 2},${a.y + bh + 10} ${b.x + bw / 2},${b.y - 10} ${b.x + bw / 2},${b.y}` }));
  }
  for (const [name, p] of pos) {
    const n = byName.get(name);
    const state = n ? stateOf(n) : "source";
    const g = svg("g", { class: "node " + (n ? "state-" + state : "source"), "data-node": name });
    const a = at(name);
    g.append(svg("rect", { x: a.x, y: a.y, width: bw, height: bh, rx: 4 }));
    const label = name.length > 13 ? name.slice(0, 12) + "…" : name;
    g.append(svg("text", { x: a.x + bw / 2, y: a.y + bh / 2 + 4, "text-anchor": "middle" }, label));
    g.append(svg("title", {}, n ? `${name}: ${state}` : name));
    pic.append(g);
  }
  box.replaceChildren(pic);
}

function connect() {
  let last = null;
  const events = new EventSource("/events");
  events.addEventListener("state", e => {
    try {
      last = JSON.parse(e.data);
      render(last);
    } catch (err) {
      // Shown, not swallowed: a page that stops moving must say why.
      document.getElementById("error").textContent = "this page failed to show the state: " + err;
    }
  });
  events.onerror = () => {
    document.getElementById("phase").textContent = last && last.phase === "over" ?
      "Cast over; dolly-server has stopped serving this page" : "connection to dolly-server lost; retrying…";
  };
}

// The service (dolly-server -serve): its queue and library, polled; the
// form queues a cast with the admin token, which stays in this tab.
async function api(path, options) {
  const resp = await fetch(path, options);
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

function token() {
  return document.querySelector('#queue-form [name=token]').value;
}

function drawQueue(casts) {
  const body = document.querySelector("#queue tbody");
  body.replaceChildren(...casts.map(c => {
    const r = c.request;
    let result = c.error || "";
    if (c.summary && c.summary.started) result = `${c.summary.verified} of ${(c.summary.nodes || []).length} verified in ${duration(c.summary.elapsed_seconds)}`;
    const cell = el("td", {});
    if (c.state === "queued" || c.state === "running") {
      const b = el("button", { type: "button" }, c.state === "running" ? "Stop" : "Remove");
      b.addEventListener("click", () => abortCast(c.id));
      cell.append(b);
    }
    return el("tr", { class: "cast-" + c.state, "data-cast": String(c.id) },
      el("td", {}, c.id),
      el("td", {}, r.image),
      el("td", {}, (r.group ? r.group + ", " : "") + r.nodes + " nodes" + (r.plan && r.plan !== "auto" ? ", " + r.plan : "")),
      el("td", { class: "cast-state" }, c.state),
      el("td", {}, new Date(c.queued).toLocaleTimeString()),
      el("td", {}, result),
      cell);
  }));
}

function drawLibrary(images) {
  const body = document.querySelector("#library tbody");
  body.replaceChildren(...images.map(i => el("tr", {},
    el("td", {}, i.name), el("td", {}, i.format), el("td", { class: "num" }, bytes(i.bytes)),
    el("td", {}, new Date(i.captured).toLocaleString()), el("td", {}, i.digest ? i.digest.slice(0, 12) : "after its first cast"))));
}

// fill puts options in a select, keeping the one chosen.
function fill(select, values) {
  const chosen = select.value;
  if (select.options.length === values.length && [...select.options].every((o, i) => o.value === values[i])) return;
  select.replaceChildren(...values.map(v => el("option", { value: v }, v)));
  if (values.includes(chosen)) select.value = chosen;
}

async function pollService() {
  let casts;
  try {
    const resp = await fetch("/api/casts");
    if (resp.status === 404) return; // not a service: a one-shot dolly-server has no queue
    if (!resp.ok) throw new Error(resp.statusText);
    casts = await resp.json();
  } catch (err) {
    setTimeout(pollService, 2000); // the server restarts, or the network blinks
    return;
  }
  document.getElementById("service").hidden = false;
  drawQueue(casts || []);
  try {
    const [images, groups] = await Promise.all([api("/api/images"), api("/api/groups")]);
    drawLibrary(images || []);
    const form = document.getElementById("queue-form");
    fill(form.image, (images || []).map(i => i.name));
    const names = Object.keys(groups || {}).sort();
    document.getElementById("group-label").hidden = names.length === 0;
    fill(form.group, names);
  } catch (err) {
    document.getElementById("error").textContent = "the library cannot be read: " + err.message;
  }
  setTimeout(pollService, 2000);
}

async function queueCast(e) {
  e.preventDefault();
  const form = e.target;
  const out = document.getElementById("queue-result");
  const req = { image: form.image.value, plan: form.plan.value, target: form.target.value };
  if (!document.getElementById("group-label").hidden) req.group = form.group.value;
  if (form.nodes.value) req.nodes = Number(form.nodes.value);
  try {
    const c = await api("/api/casts", { method: "POST", headers: { "Authorization": "Bearer " + token(), "Content-Type": "application/json" }, body: JSON.stringify(req) });
    out.className = "";
    out.textContent = `queued cast ${c.id}`;
    drawQueue(await api("/api/casts"));
  } catch (err) {
    out.className = "error";
    out.textContent = err.message;
  }
}

async function abortCast(id) {
  const out = document.getElementById("queue-result");
  try {
    await api(`/api/casts/${id}/abort`, { method: "POST", headers: { "Authorization": "Bearer " + token() } });
    drawQueue(await api("/api/casts"));
  } catch (err) {
    out.className = "error";
    out.textContent = err.message;
  }
}

document.getElementById("queue-form").addEventListener("submit", queueCast);
connect();
pollService();
