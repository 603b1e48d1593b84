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

// File content as it is shown: like `shown`, but a tab stays a tab (content is laid out
// with them); other control characters and the bidi marks as escapes.
function content(s) {
  return String(s).replace(/[\u0000-\u0008\u000a-\u001f\u007f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) =>
    "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
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

// A table cell with a time: the day (hidden where the table is narrow) and the time of
// day; the whole in its title.
function timeCell(ns) {
  const t = utc(ns);
  return el("td", { title: t }, el("span", { class: "day" }, t.slice(0, 11)), t.slice(11));
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
  if (name === "activity") loadActivity();
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
// Oldest at the top, newest at the bottom, as `scratchfs log` prints it: a change that
// streams in is appended below the rows shown, so nothing a reader looks at moves (no
// layout shift); a box scrolled to its end follows the new rows, one scrolled up stays.
let filters = {};
let next = null;
const shownKeys = new Set();

function processOf(e) {
  if (e.transport) return e.transport + (e.client ? ": " + e.client : "");
  const exe = (e.exe || "").split("/").pop();
  return e.tgid + " " + exe;
}

// A row's identity: an event by its id, a version by its lineage's path, number and time.
function entryKey(e) {
  return e.kind === "event" ? "e" + e.event : "v" + e.time_ns + "/" + (e.path_hex || e.path) + "@" + e.version;
}

function eventRow(e) {
  const name = e.new_path !== null && e.new_path !== undefined ? shown(e.path) + " → " + shown(e.new_path) : shown(e.path);
  const file = el("button", { class: "link", title: name, onclick: () => openFile(e, "path") }, name);
  const reason = e.reason ? (e.errno ? "errno " + e.errno + ": " : "") + shown(e.reason) : "";
  return el("tr", { class: e.op === "rejected" ? "rejected" : "", tabindex: "-1" },
    timeCell(e.time_ns),
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

// Whether box `b` is scrolled to its end (then it follows rows appended).
const atEnd = (b) => b.scrollTop + b.clientHeight >= b.scrollHeight - 4;
const toEnd = (b) => { b.scrollTop = b.scrollHeight; };

// `how`: "first" (the newest page, from scratch), "older" (the page before the oldest
// row shown, above it), "newer" (rows committed since, below).
async function loadTimeline(how) {
  const body = document.querySelector("#events tbody");
  const box = document.getElementById("events-box");
  const page = await api("/api/timeline?" + query(how === "older" ? { before: next } : {}));
  if (how === "newer") {
    const fresh = [];
    for (const e of page.entries) {
      if (shownKeys.has(entryKey(e))) break;
      fresh.push(e);
    }
    // Rows meet the ones shown: append what is new. Else (more new rows than a page, or
    // nothing shown yet) start again from the newest page.
    if (fresh.length < page.entries.length) {
      const follow = atEnd(box);
      fresh.reverse();
      for (const e of fresh) shownKeys.add(entryKey(e));
      body.append(...fresh.map(eventRow));
      if (follow) toEnd(box);
      return;
    }
  }
  const rows = page.entries.slice().reverse();
  if (how === "older") {
    // The rows shown stay where they are on the screen; the older ones go above.
    const h = box.scrollHeight;
    body.prepend(...rows.map(eventRow));
    box.scrollTop += box.scrollHeight - h;
  } else {
    shownKeys.clear();
    body.replaceChildren(...rows.map(eventRow));
    toEnd(box);
  }
  for (const e of rows) shownKeys.add(entryKey(e));
  next = page.next;
  document.getElementById("older").hidden = !next;
}

document.getElementById("older").addEventListener("click", () => loadTimeline("older").catch((e) => say(e.message)));
document.getElementById("filters").addEventListener("submit", (ev) => {
  ev.preventDefault();
  filters = Object.fromEntries(new FormData(ev.target).entries());
  loadTimeline("first").catch((e) => say(e.message));
});
document.getElementById("filters").addEventListener("reset", () => {
  filters = {};
  setTimeout(() => loadTimeline("first").catch((e) => say(e.message)), 0);
});
// j / k move through the timeline's rows (j: on, newer; k: back, older), Enter opens the
// row's file.
document.addEventListener("keydown", (ev) => {
  if (ev.target.closest("input, textarea, select")) return;
  if (ev.key !== "j" && ev.key !== "k" && ev.key !== "Enter") return;
  const rows = [...document.querySelectorAll("#events tbody tr")];
  if (!rows.length) return;
  let i = rows.findIndex((r) => r.classList.contains("selected"));
  if (ev.key === "Enter") { if (i >= 0) rows[i].querySelector("button.link")?.click(); return; }
  if (i >= 0) rows[i].classList.remove("selected");
  else i = rows.length;
  i = ev.key === "j" ? Math.min(i + 1, rows.length - 1) : Math.max(i - 1, 0);
  rows[i].classList.add("selected");
  rows[i].focus();
});

// ---- refusals, checkpoints ----
// Refusals oldest first, as the timeline; each with the content it kept (secrets
// redacted), on request.
async function loadRefusals() {
  const page = await api("/api/timeline?rejected=1&limit=200").catch((e) => { say(e.message); return { entries: [] }; });
  const box = document.getElementById("refused-box");
  const follow = atEnd(box);
  document.querySelector("#refused tbody").replaceChildren(...page.entries.slice().reverse().map((e) =>
    el("tr", { class: "rejected" },
      timeCell(e.time_ns),
      el("td", {}, el("button", { class: "link", title: shown(e.path), onclick: () => openFile(e, "path") }, shown(e.path))),
      el("td", { title: shown(e.writer) }, shown(e.writer)), el("td", {}, e.step === null ? "" : e.step),
      el("td", {}, shown(processOf(e))), el("td", {}, e.errno === null ? "" : e.errno),
      el("td", { class: "reason" }, shown(e.reason)),
      // A refusal with a size kept the content it refused (a refusal at open, of a
      // rename or an attribute kept none).
      el("td", {}, e.size === null ? "" : el("button", { class: "link content", onclick: () => refusedContent(e) }, "content")))));
  if (follow) toEnd(box);
}

async function refusedContent(e) {
  const out = document.getElementById("refused-content");
  try {
    const c = await api("/api/refused?event=" + e.event);
    out.replaceChildren(el("h3", {}, "Refused content of " + shown(e.path) + " (" + c.size + " bytes, by " + shown(e.writer) + ")"),
      c.text !== undefined ? el("pre", { class: "diff", id: "refused-text" }, ...c.text.split("\n").map((l) => el("span", {}, content(l))))
        : el("p", {}, shown(c.not_text)));
    say("");
  } catch (err) {
    out.replaceChildren(el("p", { id: "refused-text" }, shown(err.message)));
  }
}

let checkpointNames = [];

async function loadCheckpoints() {
  const cps = await api("/api/checkpoints").catch((e) => { say(e.message); return []; });
  document.getElementById("take").hidden = !csrf;
  document.querySelector("#cps tbody").replaceChildren(...cps.map((c) =>
    el("tr", {}, el("td", {}, shown(c.name), c.auto ? el("span", { class: "safety" }, " (safety, taken by a rollback)") : null),
      timeCell(c.point.time_ns), el("td", {}, shown(c.writer)), el("td", { class: "reason" }, shown(c.note)),
      el("td", {},
        el("button", { class: "link", onclick: () => compare(c.name, "now") }, "compare with now"), " ",
        csrf ? el("button", { class: "link", onclick: () => rollback(c.name) }, "roll back") : null))));
  // Any two points: the checkpoints, oldest first, and now.
  const names = cps.map((c) => c.name);
  if (names.join("\0") !== checkpointNames.join("\0")) {
    checkpointNames = names;
    for (const [id, pick] of [["cmp-from", names[0]], ["cmp-to", "now"]]) {
      const sel = document.getElementById(id);
      const was = sel.value;
      sel.replaceChildren(...names.map((n) => el("option", { value: n }, shown(n))), el("option", { value: "now" }, "now"));
      sel.value = names.includes(was) || was === "now" ? was : pick || "now";
    }
  }
}

document.getElementById("compare-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  compare(document.getElementById("cmp-from").value, document.getElementById("cmp-to").value);
});

// The files that differ between two points (checkpoint names or "now"), each changed
// file with a button for its diff.
async function compare(from, to) {
  try {
    const c = await api("/api/compare?from=" + encodeURIComponent(from) + "&to=" + encodeURIComponent(to));
    const out = document.getElementById("compare");
    const diffOf = (x) => async () => {
      try {
        const d = await api("/api/diff?" + pathArgs(x, "path") + "&a=" + x.from + "&b=" + x.to);
        document.getElementById("compare-diff").replaceChildren(el("p", {}, shown(d.a) + " → " + shown(d.b)),
          el("pre", { class: "diff" }, ...diffLines(d.diff)));
      } catch (err) { say(err.message); }
    };
    const items = c.changed.map((x) => el("li", {}, "changed: " + shown(x.path) + " v" + x.from + " → v" + x.to + " ",
      x.same_lineage && x.from !== null && x.to !== null ? el("button", { class: "link", onclick: diffOf(x) }, "diff") : null))
      .concat(c.added.map((x) => el("li", {}, "added: " + shown(x.path))))
      .concat(c.removed.map((x) => el("li", {}, "removed: " + shown(x.path))));
    out.replaceChildren(el("h3", {}, shown(from) + " → " + shown(to)),
      items.length ? el("ul", { id: "compare-list" }, ...items) : el("p", {}, "no file changed"),
      el("div", { id: "compare-diff" }));
  } catch (e) { say(e.message); }
}

async function rollback(name) {
  let c;
  try { c = await api("/api/compare?from=" + encodeURIComponent(name) + "&to=now"); } catch (e) { say(e.message); return; }
  confirmThen("Roll back to checkpoint " + shown(name) + "? What changes (the state now is kept as a checkpoint):", changesOf(c), async () => {
    await act("rollback", { name: name });
    await loadCheckpoints();
    await loadTimeline("first");
  });
}

document.getElementById("take").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = Object.fromEntries(new FormData(ev.target).entries());
  try { await act("checkpoint", f); ev.target.reset(); await loadCheckpoints(); say(""); } catch (e) { say(e.message); }
});

// ---- activity: plots of the run ----
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function humanBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 || n >= 10 ? Math.round(n) : n.toFixed(1)) + " " + units[i];
}

// A round number of bytes at or above `x` (1, 2, 5 times a power of 1,024 units).
function niceBytes(x) {
  let unit = 1;
  while (x / unit >= 1024 && unit < Math.pow(1024, 4)) unit *= 1024;
  return nice(x / unit) * unit;
}

// A span's width as a person reads it (ns).
function widthText(ns) {
  for (const [u, name] of [[864e11, "d"], [36e11, "h"], [6e10, "min"], [1e9, "s"], [1e6, "ms"]]) if (ns >= u && ns % u === 0) return ns / u + " " + name;
  return ns + " ns";
}

// A round number at or above `x` (1, 2, 5 times a power of ten).
function nice(x) {
  if (x <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

// A plot is drawn at the width it is shown (its text stays 11 px), 300 to 900 px.
let PLOT_W = 640;
const PLOT_L = 64, PLOT_R = 8, PLOT_T = 8, PLOT_B = 22;

// The frame of a plot: its y scale's top label and the run's first and last time.
function frame(h, top, a) {
  const end = a.from_ns + a.spans * a.span_ns;
  return [
    svg("line", { x1: PLOT_L, y1: h - PLOT_B, x2: PLOT_W - PLOT_R, y2: h - PLOT_B, class: "axis" }),
    svg("line", { x1: PLOT_L, y1: PLOT_T, x2: PLOT_L, y2: h - PLOT_B, class: "axis" }),
    svg("text", { x: PLOT_L - 4, y: PLOT_T + 10, "text-anchor": "end", class: "tick" }, top),
    svg("text", { x: PLOT_L - 4, y: h - PLOT_B, "text-anchor": "end", class: "tick" }, "0"),
    svg("text", { x: PLOT_L, y: h - 6, class: "tick" }, utc(a.from_ns)),
    svg("text", { x: PLOT_W - PLOT_R, y: h - 6, "text-anchor": "end", class: "tick" }, utc(end)),
  ];
}

const SERIES = 8;

function ratePlot(a) {
  const h = 180, n = a.spans, perMin = 60e9 / a.span_ns;
  // The seven busiest writers by name, the rest as one (the server sums them).
  const ws = a.writers.slice(0, SERIES - 1).map((w, i) => ({ name: shown(w.writer), per: w.per_span, cls: "s" + i }));
  if (a.other_writers) ws.push({ name: a.other_writers.writers + " other writers", per: a.other_writers.per_span, cls: "s" + (SERIES - 1) });
  let max = 0;
  for (let i = 0; i < n; i++) max = Math.max(max, ws.reduce((t, w) => t + w.per[i], 0) * perMin);
  const top = nice(max);
  const bw = (PLOT_W - PLOT_L - PLOT_R) / n, ph = h - PLOT_T - PLOT_B;
  const bars = [];
  for (let i = 0; i < n; i++) {
    let y = h - PLOT_B;
    for (const w of ws) {
      const c = w.per[i];
      if (!c) continue;
      const bh = (c * perMin / top) * ph;
      y -= bh;
      bars.push(svg("rect", { x: PLOT_L + i * bw, y, width: Math.max(bw - 1, 1), height: bh, class: w.cls },
        svg("title", {}, w.name + ": " + c + " version" + (c === 1 ? "" : "s") + " from " + utc(a.from_ns + i * a.span_ns))));
    }
  }
  const label = (top < 10 ? top : Math.round(top)) + "/min";
  document.getElementById("rate-note").textContent = n + " spans of " + widthText(a.span_ns) + " (a span's versions as a rate per minute)";
  document.getElementById("rate-plot").replaceChildren(svg("svg", { viewBox: "0 0 " + PLOT_W + " " + h, width: PLOT_W, height: h, role: "img", id: "rate-svg",
    "aria-label": "versions per minute by writer over the run, at most " + label }, ...frame(h, label, a), ...bars));
  document.getElementById("rate-legend").replaceChildren(...ws.map((w) =>
    el("li", {}, el("span", { class: "swatch " + w.cls }), w.name + " (" + w.per.reduce((t, c) => t + c, 0) + ")")));
}

function bytesPlot(a) {
  const h = 150, n = a.spans;
  const series = [["live", "b0"], ["history", "b1"], ["archive", "b2"]];
  let max = 0;
  for (const [k] of series) for (const v of a.bytes[k]) max = Math.max(max, v);
  const top = niceBytes(max);
  const bw = (PLOT_W - PLOT_L - PLOT_R) / n, ph = h - PLOT_T - PLOT_B;
  const lines = series.map(([k, cls]) => {
    // A step line: each span's value from its start to its end.
    const pts = [];
    a.bytes[k].forEach((v, i) => {
      const y = h - PLOT_B - (v / top) * ph;
      pts.push((PLOT_L + i * bw) + "," + y, (PLOT_L + (i + 1) * bw) + "," + y);
    });
    return svg("polyline", { points: pts.join(" "), class: "line " + cls }, svg("title", {}, k + ": " + humanBytes(a.bytes[k][n - 1] || 0) + " at the end"));
  });
  document.getElementById("bytes-plot").replaceChildren(svg("svg", { viewBox: "0 0 " + PLOT_W + " " + h, width: PLOT_W, height: h, role: "img", id: "bytes-svg",
    "aria-label": "bytes live, in history and archived over the run" }, ...frame(h, humanBytes(top), a), ...lines));
  document.getElementById("bytes-legend").replaceChildren(...series.map(([k, cls]) =>
    el("li", {}, el("span", { class: "swatch " + cls }), k + " " + humanBytes(a.bytes[k][n - 1] || 0))));
}

function sparkline(per) {
  const w = 160, h = 24, n = per.length, max = Math.max(1, ...per);
  const pts = per.map((c, i) => (n === 1 ? w / 2 : (i * (w - 2)) / (n - 1) + 1) + "," + (h - 2 - (c / max) * (h - 4)));
  return svg("svg", { viewBox: "0 0 " + w + " " + h, width: w, height: h, class: "spark", role: "img",
    "aria-label": "versions per span, at most " + max }, svg("polyline", { points: pts.join(" "), class: "line s0" }));
}

// The plots again after a change, at most once a second (a replay reads every version:
// 0.5 s at 1,000,000 on SQLite, docs/web.md).
let activityTimer = null;
function activitySoon() {
  if (activityTimer) return;
  activityTimer = setTimeout(async () => { await loadActivity(); activityTimer = null; }, 1000);
}

// The plots' width: taken when first drawn and when the window's width changes, not at
// each redraw (a redraw at another width would change their height: a layout shift).
let plotWidthOf = 0;
addEventListener("resize", () => { if (innerWidth !== plotWidthOf) { plotWidthOf = 0; if (!document.getElementById("activity").hidden) loadActivity(); } });

async function loadActivity() {
  if (!plotWidthOf) {
    plotWidthOf = innerWidth;
    PLOT_W = Math.max(300, Math.min(900, document.getElementById("rate-plot").clientWidth || 640));
  }
  let a;
  try { a = await api("/api/activity?spans=60"); } catch (e) { say(e.message); return; }
  if (!a.spans) {
    document.getElementById("rate-plot").replaceChildren(el("p", {}, "nothing recorded yet"));
    return;
  }
  ratePlot(a);
  bytesPlot(a);
  document.querySelector("#busiest tbody").replaceChildren(...a.files.map((f) => el("tr", {},
    el("td", {}, el("button", { class: "link", title: shown(f.path), onclick: () => openFile(f, "path") }, shown(f.path))),
    el("td", {}, f.versions), el("td", {}, sparkline(f.per_span)))));
}

// ---- a file: versions, diff, keys, why ----
let current = null;

async function openFile(e, key) {
  current = { args: pathArgs(e, key), name: e[key], hex: e[key + "_hex"] };
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
  toEnd(document.getElementById("versions-box"));
  const keys = h.keys || [];
  document.getElementById("keys-title").hidden = document.getElementById("keys").hidden = keys.length === 0;
  // A key is credited as why credits it: through a rollback or restore to the version
  // that set the value, through an adopt to the fork (`credited`); the last change here
  // is in the title.
  document.querySelector("#keys tbody").replaceChildren(...keys.map((k) => {
    const c = k.credited;
    const last = "last changed here in v" + k.version + " by " + shown(k.writer);
    return el("tr", {},
    el("td", { title: shown(k.key) }, shown(k.key)),
    el("td", { title: last }, c ? "v" + c.version + (c.source ? " in " + shown(c.source.split("/").pop()) : "") : "v" + k.version),
    el("td", { title: c ? shown(c.via) + "; " + last : last }, c ? shown(c.writer) + " (" + shown(c.via) + ")" : shown(k.writer)),
    el("td", {}, (c ? c.step : k.step) === null ? "" : (c ? c.step : k.step)),
    el("td", {}, el("button", { class: "link", onclick: () => why(current.name + ":" + k.key) }, "why")));
  }));
}

// Rows of versions, oldest first; with `newest`, A and B start on the last two.
function versionRows(vs, newest) {
  return vs.map((v, i) => el("tr", {},
    el("td", {}, el("input", { type: "radio", name: "a", value: v.version, "aria-label": "A v" + v.version, checked: newest && i === vs.length - 2 ? "" : null })),
    el("td", {}, el("input", { type: "radio", name: "b", value: v.version, "aria-label": "B v" + v.version, checked: newest && i === vs.length - 1 ? "" : null })),
    el("td", {}, "v" + v.version), el("td", {}, v.op), el("td", { title: shown(v.writer) }, shown(v.writer)),
    el("td", {}, v.step === null ? "" : v.step), timeCell(v.time_ns), el("td", {}, v.size),
    el("td", {}, csrf ? el("button", { class: "link restore", onclick: () => restore(v) }, "restore") : null)));
}

function restore(v) {
  const name = current.name;
  confirmThen("Restore " + shown(name) + " to v" + v.version + "? A new version with the bytes of v" + v.version + " (by " + shown(v.writer) + ") becomes current, recorded as this page's action.", [], async () => {
    // A name that is not UTF-8 goes as its exact bytes.
    const hex = current.hex;
    await act("restore", hex ? { path_hex: hex, n: v.version } : { path: name, n: v.version });
    await openFile(hex ? { path: name, path_hex: hex } : { path: name }, "path");
  });
}

// The open file's newest versions again (a change streamed in), keeping the A and B picked.
async function refreshVersions() {
  const h = await api("/api/history?" + current.args).catch(() => null);
  if (!h) return;
  const a = document.querySelector("#versions input[name=a]:checked")?.value;
  const b = document.querySelector("#versions input[name=b]:checked")?.value;
  const box = document.getElementById("versions-box");
  const follow = atEnd(box);
  document.querySelector("#versions tbody").replaceChildren(...versionRows(h.versions, !a));
  if (follow) toEnd(box);
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
    const box = document.getElementById("versions-box");
    const was = box.scrollHeight;
    document.querySelector("#versions tbody").prepend(...versionRows(h.versions, false));
    box.scrollTop += box.scrollHeight - was;
    current.next = h.next;
    document.getElementById("versions-older").hidden = h.next === null;
  } catch (err) { say(err.message); }
});

document.getElementById("file-why").addEventListener("click", () => { if (current) why(current.name); });
document.getElementById("file-close").addEventListener("click", () => { document.getElementById("file").hidden = true; });

function diffLines(text) {
  return text.split("\n").map((l) => el("span", {
    class: l.startsWith("@@") ? "hunk" : l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : "",
  }, content(l)));
}

function sideBySide(text) {
  const left = [], right = [];
  for (const l of text.split("\n")) {
    if (l.startsWith("---") || l.startsWith("+++")) continue;
    if (l.startsWith("-")) left.push(el("span", { class: "del" }, content(l.slice(1))));
    else if (l.startsWith("+")) right.push(el("span", { class: "add" }, content(l.slice(1))));
    else {
      while (left.length < right.length) left.push(el("span", {}, ""));
      while (right.length < left.length) right.push(el("span", {}, ""));
      const cls = l.startsWith("@@") ? "hunk" : "";
      left.push(el("span", { class: cls }, content(l.startsWith("@@") ? l : l.slice(1))));
      right.push(el("span", { class: cls }, content(l.startsWith("@@") ? l : l.slice(1))));
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

// `foreign`: a version of the scratchpad a file was adopted from, named but not opened
// (this page shows this scratchpad's files).
function whyNode(n, foreign) {
  const arrow = n.via === "rename" ? "← renamed from " : n.via === "restore" ? "← brought back from " : n.via ? "← read " : "";
  const li = el("li", {}, arrow, foreign ? el("span", {}, describe(n.version))
    : el("button", { class: "link", onclick: () => openFile(n.version, "path") }, describe(n.version)));
  if (n.keys && n.keys.length) {
    li.append(el("ul", { class: "why" }, ...n.keys.map((k) => el("li", {}, shown(k.key) + " = " + shown(k.value) + "  (" +
      (k.set_by.id === n.version.id ? "here" : "set in v" + k.set_by.version + " by " + shown(k.set_by.writer) + (k.set_by.step === null ? "" : " step " + k.set_by.step)) +
      (k.brought_back_by.length ? ", brought back by " + k.brought_back_by[0].op + " v" + k.brought_back_by[0].version : "") + ")"))));
  }
  const kids = (n.inputs || []).map((i) => whyNode(i, foreign)).concat((n.truncated || []).map((t) => el("li", {}, "← " + t)));
  // A version adopted from another scratchpad: the same question asked there.
  const o = n.version.origin;
  if (o) {
    const from = "← adopted from " + shown(o.source) + ": " + shown(o.path) + "@" + o.version + " by " + shown(o.writer);
    if (n.adopted) kids.unshift(el("li", { class: "adopted" }, from + "; there set by", el("ul", { class: "why" }, whyNode(n.adopted.lineage, true))));
    else kids.unshift(el("li", { class: "adopted" }, from + (n.adopted_not_followed ? " (not followed: " + shown(n.adopted_not_followed) + ")" : "")));
  }
  if (kids.length) li.append(el("ul", { class: "why" }, ...kids));
  return li;
}

// why drawn as a graph: what was read on the left, the version in question (and, for a
// key, the key) on the right; an arrow per input, labelled with how it came (read,
// renamed from, brought back from). Each version once, in the column of its shortest
// path to the answer; the nested list below says the same in words.
const NODE_W = 210, NODE_H = 38, COL_GAP = 96, ROW_GAP = 12;

function clip(t, n) { return t.length > n ? t.slice(0, n - 1) + "…" : t; }

function whyGraph(w, target) {
  const nodes = new Map();
  const edges = [];
  // A version is one node per scratchpad (`scope`: "" here, the source for an adopted one).
  let scope = "";
  const keyOf = (v) => scope + "|" + v.file_id + "@" + v.version;
  const add = (v, depth, label, sub) => {
    const k = v ? keyOf(v) : label;
    const had = nodes.get(k);
    if (had) { had.depth = Math.max(had.depth, depth); return had; }
    const n = { k, v, depth, foreign: scope !== "", label: label || shown(v.path) + "@" + v.version, sub: sub || (v.op + " by " + shown(v.writer) + (v.step === null ? "" : ", step " + v.step)) };
    nodes.set(k, n);
    return n;
  };
  // Columns count from the right: the answer is column 0.
  let right = 0;
  if (w.key !== null && w.key !== undefined) right += 1 + (w.brought_back_by.length ? 1 : 0);
  const root = add(w.lineage.version, right);
  if (w.key !== null && w.key !== undefined) {
    const key = add(null, 0, shown(w.key) + " = " + clip(shown(w.value), 40), "key of " + shown(w.path));
    let from = root;
    for (const v of w.brought_back_by) {
      const b = add(v, 1);
      edges.push({ from, to: b, via: "brought back" });
      from = b;
    }
    edges.push({ from, to: key, via: "sets" });
  }
  const walk = (n, node, depth) => {
    for (const c of n.inputs || []) {
      const child = add(c.version, depth + 1);
      edges.push({ from: child, to: node, via: c.via === "rename" ? "renamed from" : c.via === "restore" ? "brought back from" : "read" });
      walk(c, child, depth + 1);
    }
    // Adopted: the version there that set it, and its own lineage there.
    if (n.adopted) {
      const was = scope;
      scope = n.version.origin.source;
      const there = add(n.adopted.lineage.version, depth + 1, null, "in " + clip(shown(scope.split("/").pop()), 16) + ": " + n.adopted.lineage.version.op + " by " + shown(n.adopted.lineage.version.writer));
      edges.push({ from: there, to: node, via: "adopted from" });
      walk(n.adopted.lineage, there, depth + 1);
      scope = was;
    }
  };
  walk(w.lineage, root, right);
  const cols = Math.max(...[...nodes.values()].map((n) => n.depth)) + 1;
  const byCol = Array.from({ length: cols }, () => []);
  for (const n of nodes.values()) byCol[n.depth].push(n);
  const rowsMax = Math.max(...byCol.map((c) => c.length));
  const width = cols * (NODE_W + COL_GAP) - COL_GAP + 2, height = rowsMax * (NODE_H + ROW_GAP) - ROW_GAP + 2;
  byCol.forEach((col, d) => col.forEach((n, i) => {
    n.x = 1 + (cols - 1 - d) * (NODE_W + COL_GAP);
    n.y = 1 + i * (NODE_H + ROW_GAP) + ((rowsMax - col.length) * (NODE_H + ROW_GAP)) / 2;
  }));
  const drawn = [];
  for (const e of edges) {
    const x1 = e.from.x + NODE_W, y1 = e.from.y + NODE_H / 2, x2 = e.to.x, y2 = e.to.y + NODE_H / 2, mx = (x1 + x2) / 2;
    drawn.push(svg("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 4},${y2}`, class: "edge", "marker-end": "url(#arrow)" }),
      svg("text", { x: mx, y: (y1 + y2) / 2 - 3, "text-anchor": "middle", class: "edge-label" }, e.via));
  }
  for (const n of nodes.values()) {
    const g = svg("g", { class: n.v ? (n.foreign ? "node version foreign" : "node version") : "node key", transform: `translate(${n.x},${n.y})` },
      svg("title", {}, n.v ? describe(n.v) : n.label),
      svg("rect", { width: NODE_W, height: NODE_H, rx: 4 }),
      svg("text", { x: 6, y: 15, class: "node-title" }, clip(n.label, 30)),
      svg("text", { x: 6, y: 31, class: "node-sub" }, clip(n.sub, 34)));
    if (n.v && !n.foreign) g.addEventListener("click", () => openFile(n.v, "path"));
    drawn.push(g);
  }
  const defs = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 8, markerHeight: 8, orient: "auto" },
    svg("path", { d: "M0,0 L8,4 L0,8 z", class: "arrow" })));
  return el("div", { class: "graph" }, svg("svg", { id: "why-graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "why " + shown(target) + ": " + nodes.size + " nodes, " + edges.length + " arrows" }, defs, ...drawn));
}

async function why(target) {
  try {
    const w = await api("/api/why?target=" + encodeURIComponent(target));
    const out = document.getElementById("why");
    const head = el("p", {}, shown(target) + (w.value !== null ? " = " + shown(w.value) : ""));
    const steps = (w.brought_back_by || []).map((v) => el("li", {}, "brought back by " + describe(v)));
    const alone = !(w.lineage.inputs || []).length && !(w.lineage.truncated || []).length && !w.lineage.version.origin
      ? el("p", { class: "muted" }, "(its writer had read nothing on the mount before)") : null;
    const graph = whyGraph(w, target);
    out.replaceChildren(el("h3", {}, "Why"), head, graph, el("ul", { class: "why", id: "why-tree" }, whyNode(w.lineage), ...steps), alone);
    // The answer is at the right: show it first.
    graph.scrollLeft = graph.scrollWidth;
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
        shown(s.source.path) + (s.source.key ? " " + shown(s.source.key) + " = " + shown(s.source.text) : ":" + s.source.line) + " v" + s.source.version + " by " + shown(s.source.writer) + (s.source.brought_back_by ? ", brought back by " + shown(s.source.brought_back_by) : "") + (s.source.adopted_from ? ", " + shown(s.source.adopted_from) : "")) : "";
      const more = f.sources.length > 1 ? " (+" + (f.sources.length - 1) + " more)" : "";
      return el("tr", {}, el("td", {}, shown(f.token.text)), el("td", { class: cls }, status), el("td", { class: "reason" }, src, more));
    });
    // The verdict, as `scratchfs ground` sums it up.
    const count = (st) => g.tokens.filter((f) => f.status === st).length;
    const summary = g.tokens.length + " tokens: " + count("sourced") + " sourced, " + count("asserted_by_model") + " asserted by a model, " +
      count("unsourced") + " unsourced" + (g.exit ? "; a number is unsourced or only asserted by a model" : "; every number is sourced");
    document.getElementById("ground-out").replaceChildren(el("p", { id: "ground-summary", class: g.exit ? "status-unsourced" : "status-sourced" }, summary),
      el("table", { class: "events", id: "ground-table" }, el("tbody", {}, ...rows)));
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
          // A change: the rows committed since, below the ones shown.
          if (ev.startsWith("event: change")) {
            await loadTimeline("newer").catch(() => {});
            if (!document.getElementById("refusals").hidden) loadRefusals();
            if (!document.getElementById("activity").hidden) activitySoon();
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
  await loadTimeline("first").catch((e) => say(e.message));
  live();
})();
