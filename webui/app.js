// linecite's page. Every string from a document, a file name or an error goes into the page
// as text (textContent, createTextNode, setAttribute): never as HTML.
"use strict";

const state = { csrf: null, overview: null, sourcesOffset: 0, sourcesNext: null, hit: null };
const TOKEN_KEY = "linecite-token";
const SVG = "http://www.w3.org/2000/svg";

// -- small DOM helpers -------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function $(selector) { return document.querySelector(selector); }

function say(message, isError) {
  const status = $("#status");
  status.textContent = message || "";
  status.classList.toggle("error", Boolean(isError));
}

// -- the API -----------------------------------------------------------------------------
function headers() {
  const out = { "Content-Type": "application/json" };
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) out["Authorization"] = "Bearer " + token;
  if (state.csrf) out["X-Linecite-Csrf"] = state.csrf;
  return out;
}

async function api(name, args, post) {
  let url = "/api/" + name;
  const init = { headers: headers(), method: post ? "POST" : "GET", credentials: "omit" };
  if (post) init.body = JSON.stringify(args || {});
  else if (args) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(args)) {
      if (Array.isArray(value)) value.forEach((v) => query.append(key, v));
      else if (value !== undefined && value !== null && value !== "") query.append(key, value);
    }
    url += "?" + query.toString();
  }
  const response = await fetch(url, init);
  let body = {};
  try { body = await response.json(); } catch (err) { body = { error: response.statusText }; }
  if (response.status === 401) askToken();
  if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
  return body;
}

function askToken() {
  $("#token-box").hidden = false;
  $("#token-input").focus();
}

async function startSession() {
  const response = await fetch("/api/session", { headers: headers(), credentials: "omit" });
  if (response.status === 401) { askToken(); return false; }
  state.csrf = (await response.json()).csrf;
  $("#token-box").hidden = true;
  return true;
}

// -- knowledge bases ---------------------------------------------------------------------
let pollTimer = null;

async function refresh() {
  clearTimeout(pollTimer);
  let busy = false;
  try {
    state.overview = await api("overview");
    renderOverview(state.overview);
    busy = state.overview.knowledge_bases.some((kb) => kb.index &&
      ["running", "queued"].includes(kb.index.status));
    $("#freshness").textContent = busy ? "indexing…" : "up to date " + new Date().toLocaleTimeString();
  } catch (err) {
    say(err.message, true);
  }
  pollTimer = setTimeout(refresh, busy ? 1000 : 5000);
}

const cards = new Map();  // kb id -> its card: forms made once (typing survives a refresh)

function renderOverview(data) {
  const list = $("#kb-list");
  const shown = data.knowledge_bases.map((kb) => kbCard(kb, data.allowed));
  const same = shown.length === list.children.length && shown.every((c, i) => list.children[i] === c);
  if (!same) list.replaceChildren(...shown);
  if (!data.knowledge_bases.length) {
    list.replaceChildren(el("p", { class: "muted" }, "No knowledge base yet: create one below."));
  }
  renderQueue(data.queue);
  fillKbSelects(data.knowledge_bases);
  const modes = $("#mode-select");
  if (!modes.options.length) data.allowed.modes.forEach((m) => modes.append(el("option", { value: m }, m)));
  drawCharts(data.knowledge_bases);
}

function kbCard(kb, allowed) {
  const usable = kb.status !== "error" && kb.status !== "damaged";
  let entry = cards.get(kb.id);
  if (!entry || entry.usable !== usable) {
    const live = el("div", { class: "live" });
    const card = el("article", { class: "card kb", "data-kb": kb.id }, live);
    if (usable) card.append(addFolderForm(kb), settingsPart(kb, allowed), reindexPart(kb, allowed));
    entry = { card, live, usable, drawn: null };
    cards.set(kb.id, entry);
  }
  const drawn = JSON.stringify(kb);
  if (entry.drawn !== drawn) {
    entry.live.replaceChildren(...liveParts(kb));
    entry.drawn = drawn;
  }
  return entry.card;
}

function liveParts(kb) {
  const index = kb.index || {};
  const status = index.status === "running" ? "running" : kb.status;
  const parts = [el("h2", {}, kb.name || kb.id, el("span", { class: "badge " + status }, status),
    el("span", { class: "muted" }, "id " + kb.id))];
  if (kb.error) parts.push(el("p", { class: "error-text" }, kb.error));
  if (kb.info_error) parts.push(el("p", { class: "error-text" }, kb.info_error));
  const counts = kb.counts || {};
  parts.push(el("div", { class: "counts" },
    ["sources", "pages", "chunks", "embedded", "pending"].map((key) =>
      el("span", { "data-count": key }, el("b", {}, String(counts[key] ?? 0)), key)),
    el("span", {}, el("b", {}, kb.embedder || "?"), "embedder"),
    el("span", {}, el("b", {}, kb.fusion || "?"), "fusion")));
  if (index.status) parts.push(runPart(kb, index));
  (index.warnings || []).forEach((w) => parts.push(el("p", { class: "muted" }, "⚠ " + w)));
  if (kb.status !== "error" && kb.status !== "damaged") parts.push(el("h3", {}, "Folders"), folderList(kb));
  return parts;
}

function runPart(kb, index) {
  const part = el("div", { class: "run" });
  const progress = index.progress;
  if (index.status === "running") {
    const done = progress ? progress.current : 0, total = progress ? progress.total : 0;
    const within = progress && progress.part;  // how far the file in hand is: its own line
    part.append(el("p", {}, "Indexing now", index.started_by ? " (by " + index.started_by + ")" : "",
      total ? ": " + done + " of " + total + " files done" : "",
      progress && progress.file && !within ? " — " + progress.file : ""),
      el("progress", { max: total || 1, value: total ? done : 0, class: "kb-progress" }));
    if (within) {
      part.append(el("p", { class: "within" }, within.name + " — " + within.stage +
        (within.detail ? " " + within.detail : "") + ", " + within.percent + "%"),
      el("progress", { max: 100, value: within.percent, class: "file-progress" }));
    }
  } else if (index.status === "queued") {
    part.append(el("p", {}, "Queued, position " + index.queue_position,
      index.waiting ? " (" + index.waiting + ")" : ""));
  } else if (index.status === "interrupted") {
    part.append(el("p", { class: "error-text" }, index.detail || "interrupted"));
  }
  const last = index.last_run;
  if (last) {
    const c = last.counts || {};
    part.append(el("p", { class: "muted last-run" }, "Last run: " + (last.ok ? "finished" : "failed"),
      last.cancelled ? " (cancelled)" : "", " at ", timeOf(last.finished_at),
      ", " + (c.indexed ?? 0) + " indexed, " + (c.unchanged ?? 0) + " unchanged, " +
      (c.deleted ?? 0) + " deleted, " + (last.errors_total ?? 0) + " failed",
      last.error ? " — " + last.error : ""));
  }
  return part;
}

function folderList(kb) {
  const list = el("ul", { class: "folders" });
  for (const folder of kb.folders || []) {
    list.append(el("li", {}, el("code", {}, folder), " ",
      el("button", { type: "button", class: "remove-folder",
        onclick: () => act("remove_folder", { kb: kb.id, path: folder }, "folder removed") }, "Remove")));
  }
  if (!(kb.folders || []).length) list.append(el("li", { class: "muted" }, "no folder followed yet"));
  return list;
}

function addFolderForm(kb) {
  const input = el("input", { name: "path", placeholder: "Folder to follow (absolute path)", class: "grow" });
  return el("form", { class: "row add-folder", onsubmit: (e) => {
    e.preventDefault();
    act("add_folder", { kb: kb.id, path: input.value }, "folder added: start a reindex to index it")
      .then((ok) => { if (ok) input.value = ""; });
  } }, input, el("button", { type: "submit" }, "Add folder"));
}

function settingsPart(kb, allowed) {
  const embedder = el("select", { name: "embedder" },
    allowed.embedders.map((p) => el("option", { value: p, selected: p === kb.embedder ? "" : null }, p)));
  const model = el("input", { name: "model", placeholder: "model (not for builtin)", value: kb.model || "" });
  const fusion = el("select", { name: "fusion" },
    allowed.fusions.map((f) => el("option", { value: f, selected: f === kb.fusion ? "" : null }, f)));
  return el("form", { class: "row settings", onsubmit: (e) => {
    e.preventDefault();
    act("settings", { kb: kb.id, embedder: embedder.value, model: model.value, fusion: fusion.value },
      "settings saved");
  } }, el("label", {}, "Embedder ", embedder), model, el("label", {}, "Fusion ", fusion),
  el("button", { type: "submit" }, "Save settings"));
}

function reindexPart(kb, allowed) {
  const scope = el("select", { name: "scope" },
    allowed.scopes.map((s) => el("option", { value: s, selected: s === "full" ? "" : null }, s)));
  const force = el("input", { type: "checkbox", name: "force" });
  return el("div", { class: "row" }, el("label", {}, "Scope ", scope), el("label", {}, force, " redo unchanged files"),
    el("button", { type: "button", class: "primary start-reindex",
      onclick: () => act("reindex", { kb: kb.id, scope: scope.value, force: force.checked }, "reindex queued") },
    "Start reindex"),
    el("button", { type: "button", class: "cancel-reindex",
      onclick: () => act("cancel", { kb: kb.id }, "cancel asked") }, "Cancel"));
}

function renderQueue(queue) {
  const box = $("#queue");
  if (!queue.length) { box.replaceChildren(el("p", { class: "muted" }, "Nothing queued.")); return; }
  box.replaceChildren(el("ol", {}, queue.map((e) => el("li", {}, e.kb_id + ": " +
    (e.scopes || [e.scope]).join(", ") + (e.running ? " (running)" : "") + (e.waiting ? " — " + e.waiting : "")))));
}

async function act(name, args, done) {
  try {
    const result = await api(name, args, true);
    say(result.next || done);
    refresh();
    return result;
  } catch (err) {
    say(err.message, true);
    return null;
  }
}

function fillKbSelects(kbs) {
  document.querySelectorAll(".kb-select").forEach((select) => {
    const chosen = select.value;
    select.replaceChildren(...kbs.map((kb) => el("option", { value: kb.id }, kb.name || kb.id)));
    if (chosen && kbs.some((kb) => kb.id === chosen)) select.value = chosen;
  });
}

// -- charts (inline SVG) -----------------------------------------------------------------
const STATE_COLOURS = { ready: "#2e7d32", pending_embedding: "#1f6feb", degraded: "#b26a00",
  failed: "#c62828", needs_action: "#8e24aa", empty: "#757575" };

// A chart's label column is as wide as the page's font draws its longest label, at most
// MAX_LABEL px (a longer label is cut to fit, whole in its tooltip): in a fixed 120 px,
// "pending_embedding" ran into its bar.
const MAX_LABEL = 220;
const ruler = document.createElement("canvas").getContext("2d");

function measure(text, size) {
  ruler.font = size + "px " + getComputedStyle(document.documentElement).fontFamily;
  return ruler.measureText(text).width;
}

function labelColumn(labels, size) {
  return Math.ceil(Math.min(MAX_LABEL, Math.max(0, ...labels.map((t) => measure(t, size))))) + 8;
}

// `text` cut with "…" until it fits `room` px.
function fitted(text, room, size) {
  if (measure(text, size) <= room) return text;
  let cut = text;
  while (cut && measure(cut + "…", size) > room) cut = cut.slice(0, -1);
  return cut + "…";
}

// A row's label in the column of `column` px: `text` (cut to fit), then `after` (a tspan).
function chartLabel(text, y, size, column, after) {
  const room = column - 8 - (after ? measure(after, size) : 0);
  const node = svg("text", { x: 0, y, "font-size": size, class: "label" }, fitted(text, room, size));
  if (after) node.append(svg("tspan", { class: "when" }, after));
  node.append(svg("title", {}, text + (after || "")));
  return node;
}

// An SVG `width` wide for its bars beside the label column: it shrinks to its box, all parts
// alike (viewBox), so a narrow window makes it smaller, never overlapping.
function chartSvg(width, height, extra) {
  return svg("svg", { width, height, viewBox: "0 0 " + width + " " + height, role: "img", ...extra });
}

function barChart(rows, colour) {
  const room = 200, bar = 18, gap = 6, size = 12;
  const label = labelColumn(rows.map((r) => r.label), size);
  const most = Math.max(1, ...rows.map((r) => r.value));
  const chart = chartSvg(label + room + 50, Math.max(1, rows.length) * (bar + gap) + 4);
  rows.forEach((row, i) => {
    const y = i * (bar + gap);
    const length = Math.round(room * row.value / most);
    chart.append(chartLabel(row.label, y + 13, size, label),
      svg("rect", { x: label, y, width: Math.max(length, 1), height: bar, fill: row.colour || colour }),
      svg("text", { x: label + length + 4, y: y + 13, "font-size": size }, String(row.value)));
  });
  return chart;
}

const RUN_COLOURS = { finished: "#2e7d32", cancelled: "#b26a00", failed: "#c62828" };
const TIMELINE_ROWS = 20;

function outcome(run) {
  return !run.ok ? "failed" : run.cancelled ? "cancelled" : "finished";
}

// The one way the page writes a run's time (a KB card and the timeline alike), in the
// browser's language and zone: "Dec 4, 11:18 PM"; "?" for none.
function when(iso) {
  const at = new Date(iso);
  return !iso || isNaN(at) ? "?" : at.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

// when(iso) in a <time> element that carries the exact moment.
function timeOf(iso) {
  return el("time", { datetime: iso || undefined, title: iso || undefined }, when(iso));
}

// A KB's runs, newest first; a KB indexed before run-history.json existed has its last_run.
function runsOf(kb) {
  const index = kb.index || {};
  return (index.recent_runs || []).length ? index.recent_runs : index.last_run ? [index.last_run] : [];
}

// The last runs of every KB, newest first: one row each, its bar as long as the run took.
function timeline(kbs) {
  const runs = kbs.flatMap((kb) => runsOf(kb).map((run) => ({ id: kb.id, run,
    start: Date.parse(run.started_at), seconds: Math.max(0, (Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000 || 0) })))
    .sort((a, b) => (b.start || 0) - (a.start || 0)).slice(0, TIMELINE_ROWS);
  if (!runs.length) return el("p", { class: "muted" }, "No run finished yet.");
  const bars = 100, bar = 14, gap = 6, room = 130, size = 11;
  const label = labelColumn(runs.map((r) => r.id + " " + when(r.run.finished_at)), size);
  const longest = Math.max(1, ...runs.map((r) => r.seconds));
  const chart = chartSvg(label + bars + room, runs.length * (bar + gap) + 4, { class: "timeline" });
  runs.forEach((r, i) => {
    const y = i * (bar + gap), how = outcome(r.run), c = r.run.counts || {};
    const length = Math.max(3, Math.round(bars * r.seconds / longest));
    const rect = svg("rect", { x: label, y, width: length, height: bar, fill: RUN_COLOURS[how], "data-outcome": how });
    rect.append(svg("title", {}, r.id + ": " + how + " (" + (r.run.started_by || "?") + ", " +
      (r.run.scope || "full") + ") " + when(r.run.started_at) + " → " + when(r.run.finished_at) +
      (r.run.error ? " — " + r.run.error : "")));
    chart.append(chartLabel(r.id, y + 11, size, label, " " + when(r.run.finished_at)), rect,
      svg("text", { x: label + length + 4, y: y + 11, "font-size": 11, class: "run-text" },
        how + ", " + Math.round(r.seconds) + " s, " + (c.indexed ?? 0) + " indexed"));
  });
  return chart;
}

function drawCharts(kbs) {
  const states = {};
  kbs.forEach((kb) => Object.entries((kb.index || {}).sources_by_state || {})
    .forEach(([s, n]) => { states[s] = (states[s] || 0) + n; }));
  $("#chart-states").replaceChildren(barChart(Object.entries(states)
    .map(([s, n]) => ({ label: s, value: n, colour: STATE_COLOURS[s] })), "#1f6feb"));
  $("#chart-chunks").replaceChildren(barChart(kbs.map((kb) =>
    ({ label: kb.id, value: (kb.counts || {}).chunks || 0 })), "#1f6feb"));
  $("#chart-runs").replaceChildren(timeline(kbs));
}

// -- sources -----------------------------------------------------------------------------
async function showSources(offset) {
  const form = $("#sources-form");
  const kb = form.kb.value;
  if (!kb) return;
  try {
    const page = await api("sources", { kb, name: form.name.value, offset, limit: 50 });
    state.sourcesOffset = offset;
    state.sourcesNext = page.next_offset ?? null;
    renderSources(page);
    renderProblems(kb);
  } catch (err) { say(err.message, true); }
}

function renderSources(page) {
  const rows = page.sources.map((s) => el("tr", { "data-state": s.state },
    el("td", { class: "name" }, s.name), el("td", {}, el("span", { class: "badge " + s.state }, s.state)),
    el("td", {}, s.parser || ""), el("td", {}, String(s.pages)), el("td", {}, String(s.chunks)),
    el("td", {}, s.error || "", s.warnings ? el("div", { class: "muted" }, String(s.warnings)) : null),
    el("td", {}, removeSourceButton(page.kb_id, s.name))));
  $("#source-table").replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ["Name", "State", "Parser", "Pages", "Chunks", "Error / warnings", ""]
      .map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
  const total = page.total !== undefined ? " of " + page.total : "";
  $("#page-info").textContent = page.sources.length ?
    (page.offset + 1) + "–" + (page.offset + page.sources.length) + total +
    (page.scanned_to ? " (first " + page.scanned_to + " names searched)" : "") : "no source";
  $("#prev-page").disabled = page.offset === 0;
  $("#next-page").disabled = state.sourcesNext === null;
}

// Drop one source from the index (its file stays); one still in a followed folder comes back
// at the next sync, and the status line says so.
function removeSourceButton(kbId, name) {
  return el("button", { type: "button", class: "remove-source", onclick: async () => {
    const result = await act("remove_source", { kb: kbId, source: name }, "removed");
    if (!result) return;
    const back = (result.warnings || []).map((w) => w.warning);
    say(name + " removed from the index" + (back.length ? "; " + back[0] : ""));
    showSources(state.sourcesOffset);
  } }, "Remove");
}

function renderProblems(kbId) {
  const kb = (state.overview.knowledge_bases || []).find((k) => k.id === kbId);
  const groups = (kb && kb.index && kb.index.problem_groups) || [];
  $("#problems").replaceChildren(...groups.map((group) => el("div", { class: "card problem", "data-reason": group.reason },
    el("h3", {}, group.reason + " (" + group.files.length + ")"), el("p", { class: "fix" }, group.fix),
    el("ul", {}, group.files.map((f) => el("li", {}, el("span", { class: "name" }, f.name), " — ",
      el("span", { class: "muted" }, f.error || (f.warnings ? String(f.warnings) : "")), " ",
      problemButton(kbId, group.action, f)))))));
}

function problemButton(kbId, action, file) {
  if (action === "retry") {
    return el("button", { type: "button", class: "retry", onclick: async () => {
      const result = await act("retry", { kb: kbId, source: file.name }, "retried");
      if (!result) return;
      const failed = result.failed || [];
      say(file.name + (failed.length ? " still fails: " + failed[0].reason + ": " + failed[0].detail
        : " is indexed now"), failed.length > 0);
      showSources(state.sourcesOffset);
    } }, "Retry");
  }
  if (action === "reindex") {
    return el("button", { type: "button", onclick: () => act("reindex", { kb: kbId, scope: "full" }, "reindex queued") },
      "Reindex");
  }
  return el("button", { type: "button", onclick: () => copyText(file.name).then((ok) =>
    say(ok ? "name copied: find the file in its folder" : "copy failed")) }, "Copy name");
}

// -- search and read ---------------------------------------------------------------------
function marked(text, words) {
  // the hit's text with the query's words in <mark>: text nodes only
  const pieces = [];
  const wanted = words.filter((w) => w.length > 0).map((w) => w.toLocaleLowerCase());
  const lower = text.toLocaleLowerCase();
  if (lower.length !== text.length) return [text];  // case folding moved the offsets
  let at = 0;
  while (at < text.length) {
    let best = -1, length = 0;
    for (const w of wanted) {
      const found = lower.indexOf(w, at);
      if (found !== -1 && (best === -1 || found < best || (found === best && w.length > length))) {
        best = found; length = w.length;
      }
    }
    if (best === -1) { pieces.push(text.slice(at)); break; }
    if (best > at) pieces.push(text.slice(at, best));
    pieces.push(el("mark", {}, text.slice(best, best + length)));
    at = best + length;
  }
  return pieces;
}

function queryWords(query, mode) {
  if (mode === "exact") return [query];
  return query.split(/[\s\p{P}]+/u).filter((w) => w.length > 1 || /[\p{Script=Han}\p{Script=Hangul}]/u.test(w));
}

async function runSearch(event) {
  event.preventDefault();
  const form = $("#search-form");
  const args = { query: form.query.value, mode: form.mode.value, kb: form.kb.value,
    source: form.source.value, top_k: form.top_k.value, diversity: form.diversity.value,
    case_sensitive: form.case_sensitive.checked ? "true" : "", expand: form.expand.checked ? "" : "false",
    queries: form.queries.value.split("\n").filter((q) => q.trim()) };
  if (args.queries.length) args.queries.unshift(args.query);
  say("searching…");
  try {
    const result = await api("search", args);
    renderHits(result, queryWords(args.query, args.mode));
    say(result.hits.length + " hits" + (result.degraded ? " — " + result.degraded : ""));
  } catch (err) {
    $("#hits").replaceChildren(el("p", { class: "error-text" }, err.message));
    say(err.message, true);
  }
}

function renderHits(result, words) {
  const list = $("#hits");
  if (!result.hits.length) { list.replaceChildren(el("p", { class: "muted" }, "No hit.")); return; }
  list.replaceChildren(...result.hits.map((hit) => {
    const card = el("div", { class: "hit", tabindex: 0 },
      el("div", { class: "where" }, hit.source + ", page " + hit.page + ", lines " + hit.line_start + "-" + hit.line_end),
      el("div", { class: "muted" }, "score " + hit.score + " · " + Object.keys(hit.ranks || {}).join("+")),
      el("pre", {}, marked(hit.text, words)));
    const open = () => openHit(result.kb_id, hit);
    card.addEventListener("click", open);
    card.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    return card;
  }));
}

async function openHit(kbId, hit) {
  try {
    const answer = await api("read", { kb: kbId, source: hit.source, page: hit.page,
      line_start: hit.line_start, line_end: hit.line_end, context: 3 });
    state.hit = { hit, answer };
    $("#reader").hidden = false;
    $("#reader-title").textContent = answer.citation;
    const lines = $("#reader-lines");
    lines.replaceChildren(...answer.lines.map((line) => el("li", {
      value: line.line, class: line.line >= hit.line_start && line.line <= hit.line_end ? "cited" : null }, line.text)));
    $("#citation").value = citation(hit, answer);
    $("#copy-state").textContent = "";
  } catch (err) { say(err.message, true); }
}

function citation(hit, answer) {
  const cited = answer.lines.filter((l) => l.line >= hit.line_start && l.line <= hit.line_end);
  return hit.source + ", page " + hit.page + ", lines " + hit.line_start + "-" + hit.line_end + "\n" +
    cited.map((l) => "> " + l.text).join("\n");
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (err) {
    const area = $("#citation");
    area.value = text;
    area.select();
    return document.execCommand("copy");
  }
}

// -- start -------------------------------------------------------------------------------
function showTab(name) {
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.dataset.tab === name));
  document.querySelectorAll(".panel").forEach((p) => { p.hidden = p.id !== "tab-" + name; });
  if (name === "sources") showSources(0);
}

async function start() {
  document.querySelectorAll(".tab").forEach((t) => t.addEventListener("click", () => showTab(t.dataset.tab)));
  $("#token-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("#token-input").value.trim());
    if (await startSession()) refresh();
  });
  $("#new-kb-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = e.target;
    act("add_folder", { kb: form.kb.value, path: form.path.value, create: true },
      "knowledge base created: start a reindex to index its folder");
  });
  $("#sources-form").addEventListener("submit", (e) => { e.preventDefault(); showSources(0); });
  $("#sources-form").kb.addEventListener("change", () => showSources(0));
  $("#prev-page").addEventListener("click", () => showSources(Math.max(0, state.sourcesOffset - 50)));
  $("#next-page").addEventListener("click", () => showSources(state.sourcesNext));
  $("#search-form").addEventListener("submit", runSearch);
  $("#copy-citation").addEventListener("click", async () => {
    const ok = await copyText($("#citation").value);
    $("#copy-state").textContent = ok ? "Copied" : "Select the text below and copy it";
  });
  if (await startSession()) refresh();
}

start();
