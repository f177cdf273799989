// The live view: loads sandboxes, lockdown and recent denials from the
// control API, then follows /v1/events/stream. Read-only: it only GETs.
"use strict";
const api = "/v1";
const maxDenials = 200;
let lockState = { all: null, sandboxes: [] };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

async function getJSON(path) {
  const r = await fetch(api + path, { headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

function blocked(id) {
  return lockState.all != null || (lockState.sandboxes || []).some(s => s.sandbox === id);
}

let sandboxes = [];
function renderSandboxes() {
  const tb = document.querySelector("#sandboxes tbody");
  tb.replaceChildren(...sandboxes.map(s => el("tr", { "data-sandbox": s.id },
    el("td", {}, s.id), el("td", { class: "state" }, s.state || ""), el("td", {}, s.image || ""),
    el("td", {}, s.policy || ""), el("td", {}, s.address || ""),
    blocked(s.id) ? el("td", { class: "cut" }, "cut (lockdown)") : el("td", {}, "through the proxy"),
    el("td", {}, el("a", { href: "/ui/report/" + encodeURIComponent(s.id) }, "report")))));
  document.getElementById("sandbox-count").textContent = "(" + sandboxes.length + ")";
}

async function loadSandboxes() {
  sandboxes = (await getJSON("/sandboxes")).sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  renderSandboxes();
}

function renderLockdown() {
  const box = document.getElementById("lockdown");
  const on = lockState.all != null || (lockState.sandboxes || []).length > 0;
  box.className = "lockdown " + (on ? "on" : "off");
  box.dataset.lockdown = lockState.all ? "all" : on ? "some" : "off";
  const a = lockState.all;
  document.getElementById("lockdown-title").textContent =
    a ? "LOCKDOWN: every sandbox is cut off" : on ? "Lockdown: some sandboxes are cut off" : "Lockdown: off";
  document.getElementById("lockdown-detail").textContent =
    a ? " by " + a.by + " since " + a.since + " — " + a.reason : "";
  document.getElementById("lockdown-sandboxes").replaceChildren(...(lockState.sandboxes || []).map(s =>
    el("li", {}, s.sandbox + " by " + s.by + " since " + s.since + " — " + s.reason)));
  renderSandboxes();
}

async function loadLockdown() {
  try { lockState = await getJSON("/lockdown"); } catch (e) { lockState = { all: null, sandboxes: [] }; }
  renderLockdown();
}

function destination(e) {
  if (e.http) return e.http.method + " " + e.http.host + e.http.path;
  if (e.flow) return e.flow.host || e.flow.sni || e.flow.orig_dst || "";
  if (e.dns) return e.dns.qname + " " + e.dns.qtype;
  if (e.drop) return e.drop.protocol + " " + e.drop.dest + (e.drop.port ? ":" + e.drop.port : "");
  if (e.approval) return e.approval.destination;
  return "";
}

function isDenial(e) {
  return e.verdict === "deny" || e.would_deny === true;
}

function addDenial(e, live) {
  const tb = document.querySelector("#denials tbody");
  const tr = el("tr", { "data-seq": e.seq || "", "data-live": live ? "1" : "0", class: live ? "new" : "" },
    el("td", {}, (e.time || "").replace("T", " ").replace(/\.\d+Z$/, "Z")), el("td", {}, e.sandbox || ""),
    el("td", {}, e.kind + (e.would_deny ? " (would deny)" : "")), el("td", { class: "dest" }, destination(e)),
    el("td", { class: "rule" }, e.rule || ""), el("td", { class: "reason" }, e.reason || ""));
  tb.prepend(tr);
  while (tb.rows.length > maxDenials) tb.deleteRow(tb.rows.length - 1);
}

// /v1/logs answers NDJSON, oldest first.
async function loadDenials() {
  const r = await fetch(api + "/logs?verdict=deny&newest=true&limit=" + maxDenials);
  if (!r.ok) return; // no store: only live denials
  for (const line of (await r.text()).split("\n")) {
    if (!line.trim()) continue;
    const e = JSON.parse(line);
    if (e.kind) addDenial(e, false);
  }
}

function follow() {
  const conn = document.getElementById("conn");
  const es = new EventSource(api + "/events/stream");
  es.onopen = () => { conn.textContent = "live"; conn.className = "pill live"; document.body.dataset.stream = "open"; };
  es.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "pill down"; };
  es.addEventListener("audit", m => {
    const e = JSON.parse(m.data);
    if (isDenial(e)) addDenial(e, true);
    if (e.kind === "lifecycle") loadSandboxes().catch(() => {});
    if (e.kind === "lockdown") loadLockdown();
  });
}

async function main() {
  try {
    await Promise.all([loadSandboxes(), loadLockdown(), loadDenials()]);
    document.body.dataset.state = "loaded";
  } catch (err) {
    document.body.dataset.state = "error";
    document.getElementById("conn").textContent = "error: " + err.message;
  }
  follow();
}
main();
