// The review page of `scratchfs web` (docs/web.md). Every piece of the scratchpad's data
// reaches the document as text (textContent, never innerHTML): a file named
// `<script>` is a name, not markup. The token comes in the link's fragment, is kept in
// this tab's sessionStorage, and goes out as `Authorization: Bearer` on every request.
"use strict";

const TOKEN_KEY = "scratchfs-web-token";
(function takeToken() {
  const m = /(?:^#|&)token=([0-9A-Za-z._~-]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, m[1]);
    history.replaceState(null, "", location.pathname + location.search);
  }
})();
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Text from the scratchpad as it is shown: control characters and the marks that
// reorder text (bidi overrides and isolates) as escapes, so that a name can neither break
// a line nor pass for another name (U+202E "gnp.md" would read "dm.png").
function shown(s) {
  if (s === null || s === undefined) return "";
  return String(s).replace(/[\u0000-\u001f\u007f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) =>
    c === "\n" ? "\\n" : c === "\t" ? "\\t" : "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

function say(text) {
  const m = document.getElementById("message");
  m.textContent = text || "";
  m.hidden = !text;
}

async function api(path, options) {
  const opts = Object.assign({ headers: {} }, options || {});
  opts.headers.Authorization = "Bearer " + token();
  const r = await fetch(path, opts);
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) {
    if (r.status === 401) say("Not authorized: open the link scratchfs web printed (it carries the token).");
    throw new Error(body.error || r.statusText);
  }
  return body;
}

// Times are UTC, as the command line prints them.
function utc(ns) {
  if (ns === null || ns === undefined) return "";
  const d = new Date(Math.floor(ns / 1e6));
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function pathArgs(e, key) {
  const hex = e[key + "_hex"];
  return hex ? "path_hex=" + encodeURIComponent(hex) : "path=" + encodeURIComponent(e[key]);
}

// ---- actions (scratchfs web --allow-actions): each confirmed first, naming what changes ----
let csrf = null;

async function act(what, fields) {
  return api("/api/" + what, {
    method: "POST",
    headers: { "X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(fields).toString(),
  });
}

// Shows `text` and `items`, runs `then` on Confirm.
function confirmThen(text, items, then) {
  const box = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-list").replaceChildren(...items.map((i) => el("li", {}, i)));
  box.hidden = false;
  const yes = document.getElementById("confirm-yes");
  const no = document.getElementById("confirm-no");
  const done = () => { box.hidden = true; yes.onclick = no.onclick = null; };
  yes.onclick = async () => { done(); try { await then(); say(""); } catch (e) { say(e.message); } };
  no.onclick = done;
  yes.focus();
}

function changesOf(c) {
  return c.changed.map((x) => "changed: " + shown(x.path) + " (v" + x.to + " → v" + x.from + ")")
    .concat(c.added.map((x) => "removed (added since): " + shown(x.path)))
    .concat(c.removed.map((x) => "brought back: " + shown(x.path)));
}

// ---- tabs ----
const tabs = document.querySelectorAll("#tabs button");
function show(name) {
  for (const b of tabs) {
    const on = b.dataset.tab === name;
    b.setAttribute("aria-selected", on ? "true" : "false");
    b.tabIndex = on ? 0 : -1;
    document.getElementById(b.dataset.tab).hidden = !on;
  }
  if (name === "refusals") loadRefusals();
  if (name === "checkpoints") loadCheckpoints();
}
for (const b of tabs) b.addEventListener("click", () => show(b.dataset.tab));
document.getElementById("tabs").addEventListener("keydown", (ev) => {
  const list = [...tabs];
  const i = list.indexOf(document.activeElement);
  if (i < 0) return;
  const j = ev.key === "ArrowRight" ? (i + 1) % list.length : ev.key === "ArrowLeft" ? (i + list.length - 1) % list.length : -1;
  if (j >= 0) { list[j].focus(); show(list[j].dataset.tab); ev.preventDefault(); }
});

// ---- timeline ----
let filters = {};
let next = null;

function processOf(e) {
  if (e.transport) return e.transport + (e.client ? ": " + e.client : "");
  const exe = (e.exe || "").split("/").pop();
  return e.tgid + " " + exe;
}

function eventRow(e) {
  const name = e.new_path !== null && e.new_path !== undefined ? shown(e.path) + " → " + shown(e.new_path) : shown(e.path);
  const file = el("button", { class: "link", title: name, onclick: () => openFile(e, "path") }, name);
  const reason = e.reason ? (e.errno ? "errno " + e.errno + ": " : "") + shown(e.reason) : "";
  return el("tr", { class: e.op === "rejected" ? "rejected" : "", tabindex: "-1" },
    el("td", {}, utc(e.time_ns)),
    el("td", {}, e.op),
    el("td", {}, e.path === "" ? "" : file),
    el("td", {}, e.version === null ? "" : "v" + e.version),
    el("td", { title: shown(e.writer) }, shown(e.writer)),
    el("td", {}, e.step === null ? "" : e.step),
    el("td", { title: shown(e.exe) }, shown(processOf(e))),
    el("td", { class: "reason" }, reason));
}

function query(extra) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(Object.assign({}, filters, extra || {}))) if (v !== "" && v !== undefined) q.set(k, v);
  return q.toString();
}

async function loadTimeline(older) {
  const body = document.querySelector("#events tbody");
  const page = await api("/api/timeline?" + query(older ? { before: next } : {}));
  const rows = page.entries.map(eventRow);
  if (older) body.append(...rows);
  else body.replaceChildren(...rows);
  next = page.next;
  document.getElementById("older").hidden = !next;
}

document.getElementById("older").addEventListener("click", () => loadTimeline(true).catch((e) => say(e.message)));
document.getElementById("filters").addEventListener("submit", (ev) => {
  ev.preventDefault();
  filters = Object.fromEntries(new FormData(ev.target).entries());
  loadTimeline(false).catch((e) => say(e.message));
});
document.getElementById("filters").addEventListener("reset", () => {
  filters = {};
  setTimeout(() => loadTimeline(false).catch((e) => say(e.message)), 0);
});
// j / k move through the timeline's rows, Enter opens the row's file.
document.addEventListener("keydown", (ev) => {
  if (ev.target.closest("input, textarea")) return;
  if (ev.key !== "j" && ev.key !== "k" && ev.key !== "Enter") return;
  const rows = [...document.querySelectorAll("#events tbody tr")];
  if (!rows.length) return;
  let i = rows.findIndex((r) => r.classList.contains("selected"));
  if (ev.key === "Enter") { if (i >= 0) rows[i].querySelector("button.link")?.click(); return; }
  if (i >= 0) rows[i].classList.remove("selected");
  i = ev.key === "j" ? Math.min(i + 1, rows.length - 1) : Math.max(i - 1, 0);
  rows[i].classList.add("selected");
  rows[i].focus();
});

// ---- refusals, checkpoints ----
async function loadRefusals() {
  const page = await api("/api/timeline?rejected=1&limit=200").catch((e) => { say(e.message); return { entries: [] }; });
  document.querySelector("#refused tbody").replaceChildren(...page.entries.map((e) =>
    el("tr", { class: "rejected" },
      el("td", {}, utc(e.time_ns)),
      el("td", {}, el("button", { class: "link", onclick: () => openFile(e, "path") }, shown(e.path))),
      el("td", {}, shown(e.writer)), el("td", {}, e.step === null ? "" : e.step),
      el("td", {}, shown(processOf(e))), el("td", {}, e.errno === null ? "" : e.errno),
      el("td", { class: "reason" }, shown(e.reason)))));
}

async function loadCheckpoints() {
  const cps = await api("/api/checkpoints").catch((e) => { say(e.message); return []; });
  document.getElementById("take").hidden = !csrf;
  document.querySelector("#cps tbody").replaceChildren(...cps.map((c) =>
    el("tr", {}, el("td", {}, shown(c.name)), el("td", {}, utc(c.point.time_ns)), el("td", {}, shown(c.writer)), el("td", { class: "reason" }, shown(c.note)),
      el("td", {},
        el("button", { class: "link", onclick: () => compare(c.name) }, "compare with now"), " ",
        csrf ? el("button", { class: "link", onclick: () => rollback(c.name) }, "roll back") : null))));
}

async function compare(name) {
  try {
    const c = await api("/api/compare?from=" + encodeURIComponent(name) + "&to=now");
    const items = c.changed.map((x) => el("li", {}, "changed: " + shown(x.path) + " v" + x.from + " → v" + x.to + " "))
      .concat(c.added.map((x) => el("li", {}, "added: " + shown(x.path))))
      .concat(c.removed.map((x) => el("li", {}, "removed: " + shown(x.path))));
    document.getElementById("compare").replaceChildren(el("h3", {}, shown(name) + " → now"),
      items.length ? el("ul", { id: "compare-list" }, ...items) : el("p", {}, "no file changed"));
  } catch (e) { say(e.message); }
}

async function rollback(name) {
  let c;
  try { c = await api("/api/compare?from=" + encodeURIComponent(name) + "&to=now"); } catch (e) { say(e.message); return; }
  confirmThen("Roll back to checkpoint " + shown(name) + "? What changes (the state now is kept as a checkpoint):", changesOf(c), async () => {
    await act("rollback", { name: name });
    await loadCheckpoints();
    await loadTimeline(false);
  });
}

document.getElementById("take").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = Object.fromEntries(new FormData(ev.target).entries());
  try { await act("checkpoint", f); ev.target.reset(); await loadCheckpoints(); say(""); } catch (e) { say(e.message); }
});

// ---- a file: versions, diff, keys, why ----
let current = null;

async function openFile(e, key) {
  current = { args: pathArgs(e, key), name: e[key] };
  const aside = document.getElementById("file");
  aside.hidden = false;
  document.getElementById("file-name").textContent = shown(e[key]);
  document.getElementById("diff").replaceChildren();
  document.getElementById("why").replaceChildren();
  let h;
  try { h = await api("/api/history?" + current.args); } catch (err) { say(err.message); return; }
  say("");
  const vs = h.versions;
  current.next = h.next;
  document.getElementById("versions-older").hidden = h.next === null || h.next === undefined;
  const body = document.querySelector("#versions tbody");
  body.replaceChildren(...versionRows(vs, true));
  const keys = h.keys || [];
  document.getElementById("keys-title").hidden = document.getElementById("keys").hidden = keys.length === 0;
  document.querySelector("#keys tbody").replaceChildren(...keys.map((k) => el("tr", {},
    el("td", { title: shown(k.key) }, shown(k.key)), el("td", {}, "v" + k.version), el("td", {}, shown(k.writer)),
    el("td", {}, k.step === null ? "" : k.step),
    el("td", {}, el("button", { class: "link", onclick: () => why(current.name + ":" + k.key) }, "why")))));
}

// Rows of versions, oldest first; with `newest`, A and B start on the last two.
function versionRows(vs, newest) {
  return vs.map((v, i) => el("tr", {},
    el("td", {}, el("input", { type: "radio", name: "a", value: v.version, "aria-label": "A v" + v.version, checked: newest && i === vs.length - 2 ? "" : null })),
    el("td", {}, el("input", { type: "radio", name: "b", value: v.version, "aria-label": "B v" + v.version, checked: newest && i === vs.length - 1 ? "" : null })),
    el("td", {}, "v" + v.version), el("td", {}, v.op), el("td", {}, shown(v.writer)),
    el("td", {}, v.step === null ? "" : v.step), el("td", {}, utc(v.time_ns)), el("td", {}, v.size),
    el("td", {}, csrf ? el("button", { class: "link restore", onclick: () => restore(v) }, "restore") : null)));
}

function restore(v) {
  const name = current.name;
  confirmThen("Restore " + shown(name) + " to v" + v.version + "? A new version with the bytes of v" + v.version + " (by " + shown(v.writer) + ") becomes current, recorded as this page's action.", [], async () => {
    await act("restore", { path: name, n: v.version });
    await openFile({ path: name }, "path");
  });
}

// The open file's newest versions again (a change streamed in), keeping the A and B picked.
async function refreshVersions() {
  const h = await api("/api/history?" + current.args).catch(() => null);
  if (!h) return;
  const a = document.querySelector("#versions input[name=a]:checked")?.value;
  const b = document.querySelector("#versions input[name=b]:checked")?.value;
  document.querySelector("#versions tbody").replaceChildren(...versionRows(h.versions, !a));
  for (const [n, v] of [["a", a], ["b", b]]) {
    const r = v && document.querySelector("#versions input[name=" + n + "][value='" + v + "']");
    if (r) r.checked = true;
  }
  current.next = h.next;
  document.getElementById("versions-older").hidden = h.next === null;
}

document.getElementById("versions-older").addEventListener("click", async () => {
  if (!current || current.next === null) return;
  try {
    const h = await api("/api/history?" + current.args + "&before=" + current.next);
    document.querySelector("#versions tbody").prepend(...versionRows(h.versions, false));
    current.next = h.next;
    document.getElementById("versions-older").hidden = h.next === null;
  } catch (err) { say(err.message); }
});

document.getElementById("file-close").addEventListener("click", () => { document.getElementById("file").hidden = true; });

function diffLines(text) {
  return text.split("\n").map((l) => el("span", {
    class: l.startsWith("@@") ? "hunk" : l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : "",
  }, l));
}

function sideBySide(text) {
  const left = [], right = [];
  for (const l of text.split("\n")) {
    if (l.startsWith("---") || l.startsWith("+++")) continue;
    if (l.startsWith("-")) left.push(el("span", { class: "del" }, l.slice(1)));
    else if (l.startsWith("+")) right.push(el("span", { class: "add" }, l.slice(1)));
    else {
      while (left.length < right.length) left.push(el("span", {}, ""));
      while (right.length < left.length) right.push(el("span", {}, ""));
      const cls = l.startsWith("@@") ? "hunk" : "";
      left.push(el("span", { class: cls }, l.startsWith("@@") ? l : l.slice(1)));
      right.push(el("span", { class: cls }, l.startsWith("@@") ? l : l.slice(1)));
    }
  }
  return el("div", { class: "side" }, el("pre", { class: "diff" }, ...left), el("pre", { class: "diff" }, ...right));
}

document.getElementById("diff-run").addEventListener("click", async () => {
  const a = document.querySelector("#versions input[name=a]:checked");
  const b = document.querySelector("#versions input[name=b]:checked");
  if (!current || !a || !b) return;
  try {
    const d = await api("/api/diff?" + current.args + "&a=" + a.value + "&b=" + b.value);
    const out = document.getElementById("diff");
    const head = el("p", {}, shown(d.a) + " → " + shown(d.b) + (d.diff === "" ? ": no difference" : ""));
    out.replaceChildren(head, document.getElementById("side").checked ? sideBySide(d.diff) : el("pre", { class: "diff", id: "unified" }, ...diffLines(d.diff)));
    say("");
  } catch (err) { say(err.message); }
});

function describe(v) {
  const exe = (v.exe || "").split("/").pop();
  return shown(v.path) + "@" + v.version + " (" + v.op + " by " + shown(v.writer) + (v.step === null ? "" : ", step " + v.step) + ", " + v.tgid + " " + shown(exe) + ", " + utc(v.time_ns) + ")";
}

function whyNode(n) {
  const arrow = n.via === "rename" ? "← renamed from " : n.via === "restore" ? "← brought back from " : n.via ? "← read " : "";
  const li = el("li", {}, arrow, el("button", { class: "link", onclick: () => openFile(n.version, "path") }, describe(n.version)));
  if (n.keys && n.keys.length) {
    li.append(el("ul", { class: "why" }, ...n.keys.map((k) => el("li", {}, shown(k.key) + " = " + shown(k.value) + "  (set in v" + k.set_by.version + " by " + shown(k.set_by.writer) + (k.brought_back_by.length ? ", brought back by " + k.brought_back_by[0].op + " v" + k.brought_back_by[0].version : "") + ")"))));
  }
  const kids = (n.inputs || []).map(whyNode).concat((n.truncated || []).map((t) => el("li", {}, "← " + t)));
  if (kids.length) li.append(el("ul", { class: "why" }, ...kids));
  return li;
}

async function why(target) {
  try {
    const w = await api("/api/why?target=" + encodeURIComponent(target));
    const out = document.getElementById("why");
    const head = el("p", {}, shown(target) + (w.value !== null ? " = " + shown(w.value) : ""));
    const steps = (w.brought_back_by || []).map((v) => el("li", {}, "brought back by " + describe(v)));
    out.replaceChildren(el("h3", {}, "Why"), head, el("ul", { class: "why", id: "why-tree" }, whyNode(w.lineage), ...steps));
    say("");
  } catch (err) { say(err.message); }
}

// ---- ground ----
document.getElementById("ground-run").addEventListener("click", async () => {
  try {
    const g = await api("/api/ground", { method: "POST", body: document.getElementById("reply").value });
    const rows = g.tokens.map((f) => {
      const s = f.sources[0];
      const status = f.status === "sourced" ? "sourced" : f.status === "asserted_by_model" ? "asserted by model" : "UNSOURCED";
      const cls = f.status === "sourced" ? "status-sourced" : f.status === "asserted_by_model" ? "status-asserted" : "status-unsourced";
      const src = s ? el("button", { class: "link source", onclick: () => openFile({ path: s.source.path }, "path") },
        shown(s.source.path) + (s.source.key ? " " + shown(s.source.key) + " = " + shown(s.source.text) : ":" + s.source.line) + " v" + s.source.version + " by " + shown(s.source.writer) + (s.source.brought_back_by ? ", brought back by " + shown(s.source.brought_back_by) : "")) : "";
      return el("tr", {}, el("td", {}, shown(f.token.text)), el("td", { class: cls }, status), el("td", {}, src));
    });
    document.getElementById("ground-out").replaceChildren(el("table", { class: "events", id: "ground-table" }, el("tbody", {}, ...rows)));
    say("");
  } catch (err) { say(err.message); }
});

// ---- live ----
async function live() {
  const mark = document.getElementById("live");
  for (;;) {
    try {
      const r = await fetch("/api/live", { headers: { Authorization: "Bearer " + token() } });
      if (r.status === 401) { mark.textContent = "not authorized"; say("Not authorized: open the link scratchfs web printed (it carries the token)."); return; }
      mark.textContent = "live"; mark.classList.add("on");
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          // A change: the first page again, unless the reader is paging back.
          if (ev.startsWith("event: change") && !document.querySelector("#events tbody tr.selected")) {
            await loadTimeline(false).catch(() => {});
            if (!document.getElementById("refusals").hidden) loadRefusals();
            if (current && !document.getElementById("file").hidden) refreshVersions();
          }
        }
      }
    } catch (e) { /* reconnect below */ }
    mark.textContent = "reconnecting"; mark.classList.remove("on");
    await new Promise((res) => setTimeout(res, 1000));
  }
}

(async function start() {
  try {
    const info = await api("/api/info");
    document.getElementById("db").textContent = info.database;
    csrf = info.csrf || null;
  } catch (e) { say(e.message); return; }
  await loadTimeline(false).catch((e) => say(e.message));
  live();
})();
