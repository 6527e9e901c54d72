// The omni-grpc page: the session list, or one session as a conversation fed
// by its history windows and its live stream (EventSource). All URLs are
// relative so the app works wherever it is mounted. Text from the agent or
// the user only ever reaches the page as text nodes (markdown.js builds its
// nodes the same way).
"use strict";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const logEl = $("log");
const modeSelect = $("mode");

// The bearer token: from a shared link (?access_token=), else the one typed
// into the page's token field in this tab (sessionStorage: it leaves with the
// tab, and never goes into a URL the page writes).
const TOKEN_KEY = "omni-grpc:token";
const urlToken = params.get("access_token") || "";
const token = urlToken || stored(sessionStorage, TOKEN_KEY) || "";

function stored(area, key) {
  try { return area.getItem(key); } catch (_) { return null; } // storage off
}
function store(area, key, value) {
  try {
    if (value === null) area.removeItem(key);
    else area.setItem(key, value);
  } catch (_) { /* storage full or off: the page works on without it */ }
}

const TAIL_TURNS = 20; // turns a session opens with; earlier ones load on demand
const FOLD_LINES = 8; // tool arguments and outputs longer than this fold
const TITLE_LENGTH = 90;
const MODE_LABELS = { "allow-all": "allow all", ask: "ask me", "read-only": "read-only", "deny-all": "deny all" };
// Session bodies spell modes as the reference does; the selector uses ours.
const MODE_WORDS = { "always-ask": "ask" };
const USER_ABORT = "aborted by user";
const PROMPT_HINT = $("prompt").placeholder;

let sessionId = params.get("session");
let source = null;
let ready = null; // the promise of a connected stream
let lastEventId = null;
let runState = "idle";
let connection = "ok"; // the session's stream: ok | reconnecting
let missing = false; // the session named in the address does not exist
// Tool cards whose question waits for the user: call id -> the question's box.
const asking = new Map();
// Elements still being streamed into, and tool cards by tool_call_id.
const open = { text: null, thinking: null };
const tools = new Map();
// Complete messages already shown (exact JSON), so a reconnect never doubles them.
const shown = new Set();
// Where rendering goes: the log, or an older window being built.
let sink = logEl;
let turnStats = null; // the current turn's token line
let sessionTokens = 0;
let earlier = null; // the "earlier turns" button, with its cursor

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function link(query) {
  const next = new URLSearchParams();
  if (urlToken) next.set("access_token", urlToken);
  for (const [key, value] of Object.entries(query)) next.set(key, value);
  const text = next.toString();
  return text ? "?" + text : location.pathname;
}

// ---- one frame's work ------------------------------------------------------

// The stream's events are queued as they arrive and rendered together once per
// animation frame: one style and layout pass per frame, however many deltas
// came in it, and none of it depends on how long the conversation is. Nothing
// here reads the log's geometry per event; the view is pinned to the end once
// per frame, after the frame's changes.
const queue = []; // [handler, event data] in arrival order
const dirty = new Set(); // assistant bubbles whose Markdown changed this frame
let frameDue = false;
let fallback = null; // the timer that renders if no animation frame comes
let grew = false; // the log changed since the last frame
const HIDDEN_TAB_MS = 250; // a hidden tab gets no animation frames: render anyway

function schedule() {
  if (frameDue) return;
  frameDue = true;
  requestAnimationFrame(frame);
  fallback = setTimeout(frame, HIDDEN_TAB_MS);
}

// Anything that changes the log outside the stream (an approval answered, a
// fold opened, a window loaded) says so, and the next frame keeps the end in view.
function changed() {
  grew = true;
  schedule();
}

function frame() {
  if (!frameDue) return; // the other of rAF and the timeout came first
  frameDue = false;
  clearTimeout(fallback);
  // The reader may have scrolled up since the last pin, before their scroll
  // event arrived: growth never lowers scrollTop, so that says it (content
  // that shrank, a thought folding up, lowers only the highest scrollTop).
  // The layout is the last frame's here, still clean, so the reads cost nothing.
  if (following) {
    const highest = logEl.scrollHeight - logEl.clientHeight;
    if (logEl.scrollTop < Math.min(pinnedAt, highest) - 2) following = false;
  }
  const batch = queue.splice(0, queue.length);
  for (const [handle, data] of batch) handle(data);
  if (batch.length) grew = true;
  for (const node of dirty) paintNow(node);
  dirty.clear();
  showStatus();
  if (!grew) return;
  grew = false;
  if (following) pin();
  else if (document.body.dataset.view === "session") $("latest").hidden = false;
}

// ---- following the stream -------------------------------------------------

// The view follows the conversation while the reader is at its end; once they
// scroll up it stays where they are, and "Latest" brings them back.
let following = true;
const FOLLOW_SLACK = 48; // px from the end that still count as "at the end"

function atEnd() {
  return logEl.scrollHeight - logEl.scrollTop - logEl.clientHeight <= FOLLOW_SLACK;
}

let pinnedAt = 0; // the scrollTop the view was last held at the end with

function pin() {
  logEl.scrollTop = logEl.scrollHeight;
  pinnedAt = logEl.scrollTop;
}

logEl.addEventListener("scroll", () => {
  following = atEnd();
  if (following) {
    pinnedAt = logEl.scrollTop;
    $("latest").hidden = true;
  }
});
// A narrower window (a phone turned, a resized pane) rewraps everything: keep the end in view.
new ResizeObserver(() => {
  if (following) pin();
}).observe(logEl);
$("latest").addEventListener("click", () => {
  following = true;
  pin();
  $("latest").hidden = true;
});

// The log holds one box per turn (a prompt and all that answered it): a new
// event lays out its turn, and the log around it only moves turns along,
// however many there are.
function add(node) {
  let turn = sink.lastElementChild;
  if (!turn || !turn.classList.contains("turn")) turn = sink.appendChild(el("div", "turn"));
  turn.appendChild(node);
  if (sink === logEl) grew = true;
  return node;
}

function note(text, kind) {
  const node = add(el("div", kind ? "note " + kind : "note", text));
  changed();
  return node;
}

// ---- the server -------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const UNREACHABLE = "Cannot reach the omni-grpc server. Is it running?";

async function api(method, path, body) {
  const headers = body === undefined ? {} : { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (_) {
    // fetch rejects only when nothing answered at all.
    serverGone();
    throw new ApiError(0, "unreachable", UNREACHABLE);
  }
  if (server === "unreachable") checkHealth(); // it answers again
  if (!response.ok) {
    let code = "http_" + response.status;
    let message = response.status + " " + response.statusText;
    // Errors are {"error": {code, message}}, as the reference server writes them.
    try {
      const error = (await response.json()).error;
      code = error.code || code;
      message = error.message || message;
    } catch (_) { /* not JSON: a proxy's page */ }
    if (response.status === 401) askToken(message);
    else if (response.status === 503) checkHealth();
    throw new ApiError(response.status, code, message);
  }
  if (response.status === 204) return null;
  return response.json().catch(() => null);
}

function banner(text, kind, actions) {
  const box = $("banner");
  if (!text) {
    box.hidden = true;
    box.replaceChildren();
    delete box.dataset.kind;
    delete box.dataset.server;
    return;
  }
  delete box.dataset.server;
  box.replaceChildren(el("span", "", text));
  for (const [label, href] of actions || []) {
    const a = el("a", "", label);
    a.href = href;
    box.append(" ", a);
  }
  box.dataset.kind = kind;
  box.className = "banner " + kind;
  box.hidden = false;
}

// ---- the token ------------------------------------------------------------------

// A server started with a token answers 401 without it: the page asks for it
// in a field (a password field: it is a secret) rather than leaving the URL
// as the only way in. The token is kept for this tab and the page starts over.
let tokenNeeded = false;

function askToken(message) {
  if (tokenNeeded) return;
  tokenNeeded = true;
  const box = $("token");
  $("token-why").textContent = token
    ? "The server refused this access token (" + message + "). Enter the right one:"
    : "This server needs an access token (the one serve was started with):";
  box.hidden = false;
  $("token-input").focus();
  showStatus();
}

$("token").addEventListener("submit", (event) => {
  event.preventDefault();
  const given = $("token-input").value.trim();
  if (!given) return;
  store(sessionStorage, TOKEN_KEY, given);
  // A token in the address would win over the typed one: take it out, keep the rest.
  const next = new URLSearchParams(location.search);
  next.delete("access_token");
  const query = next.toString();
  history.replaceState(null, "", query ? "?" + query : location.pathname);
  // A prompt typed before the server asked for the token survives the reload.
  store(sessionStorage, DRAFT_KEY, $("prompt").value || null);
  location.reload();
});

const DRAFT_KEY = "omni-grpc:draft";
const draft = stored(sessionStorage, DRAFT_KEY);
if (draft) {
  $("prompt").value = draft;
  store(sessionStorage, DRAFT_KEY, null);
}

// ---- the server's health --------------------------------------------------------

// What the page knows of the server beside its session's stream: "ok",
// "unreachable" (nothing answers), or not serving new runs (GET /healthz is 503:
// draining for a shutdown, or its storage failed), with its problems.
let server = "ok";
let problems = {};
const HEALTH_EVERY_MS = 4000; // while the page is open
const RETRY_EVERY_MS = 2000; // while the server does not answer
let healthTimer = null;

function serverGone() {
  if (server === "unreachable") return;
  server = "unreachable";
  showServer();
  watchHealth(RETRY_EVERY_MS);
}

function watchHealth(delay) {
  clearTimeout(healthTimer);
  healthTimer = setTimeout(checkHealth, delay);
}

async function checkHealth() {
  clearTimeout(healthTimer);
  const was = server;
  try {
    const response = await fetch("healthz", { cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    server = response.ok ? "ok" : "not-serving";
    problems = response.ok ? {} : body.problems || {};
  } catch (_) {
    server = "unreachable";
  }
  showServer();
  if (was === "unreachable" && server !== "unreachable") serverBack();
  watchHealth(server === "unreachable" ? RETRY_EVERY_MS : HEALTH_EVERY_MS);
}

// The server answers again: the list reloads, a session's stream resumes.
function serverBack() {
  if (document.body.dataset.view === "list") refreshList().catch(listError);
  else if (sessionId && (!source || source.readyState === EventSource.CLOSED)) reconnect();
}

function showServer() {
  if (!tokenNeeded) {
    let text = null;
    let kind = "warn";
    if (server === "unreachable") {
      text = "Cannot reach the server: it may be stopped or restarting. Sending is off until it answers; retrying…";
      kind = "error";
    } else if (server === "not-serving") text = notServing();
    else if (connection === "reconnecting") text = "Connection lost. Reconnecting…";
    const box = $("banner");
    // The banner says the server's state until it is well again; a banner
    // about something else (an unknown session, a refused request) stays.
    if (text) {
      banner(text, kind);
      box.dataset.server = "1";
    } else if (box.dataset.server) banner(null);
  }
  showStatus();
}

function draining() {
  return server === "not-serving" && "draining" in problems;
}

function notServing() {
  if (draining()) {
    const waiting = asking.size ? " Answer the waiting approval before it stops." : "";
    return "The server is shutting down: it finishes the running task and takes no new ones." + waiting;
  }
  const why = Object.values(problems).join("; ");
  return "The server takes no new runs now" + (why ? ": " + why : ".");
}

// ---- the header ---------------------------------------------------------------

const STATUS_WORDS = {
  idle: "Ready", running: "Running…", waiting: "Approval needed",
  reconnecting: "Reconnecting…", offline: "Offline", "not-serving": "Shutting down",
  unknown: "Not found", token: "Token needed",
};

function showStatus() {
  const waiting = runState === "running" && asking.size > 0;
  let state = waiting ? "waiting" : runState;
  if (tokenNeeded) state = "token";
  else if (missing) state = "unknown";
  else if (server === "unreachable") state = "offline";
  // Draining, a run going on is still the news; after it, or once its stream
  // is cut (the shutdown came), the server stopping is.
  else if (draining() && (connection !== "ok" || runState !== "running")) state = "not-serving";
  else if (connection !== "ok") state = connection;
  // Called every frame: each write only when its value changes, so an
  // unchanged header invalidates no style.
  const status = $("status");
  const word = STATUS_WORDS[state] || state;
  if (status.textContent !== word) status.textContent = word;
  if (status.className !== "status " + state) status.className = "status " + state;
  const bodyState = state === "waiting" ? runState : state;
  if (document.body.dataset.state !== bodyState) document.body.dataset.state = bodyState;
  const busy = runState === "running" ? "true" : "false";
  if (logEl.getAttribute("aria-busy") !== busy) logEl.setAttribute("aria-busy", busy);
  // Send only what the server can take now: never while it is unreachable,
  // shutting down, or without a token, and one run at a time.
  const reachable = server === "ok" && connection === "ok" && !tokenNeeded;
  const send = $("send");
  const sendOff = runState === "running" || !reachable || missing;
  if (send.disabled !== sendOff) send.disabled = sendOff;
  const why = reachable ? "" : "The server cannot take a new run now";
  if (send.title !== why) send.title = why;
  const abortOff = runState !== "running" || connection !== "ok" || server === "unreachable";
  if ($("abort").disabled !== abortOff) $("abort").disabled = abortOff;
  // An approval cannot be answered while nothing answers (or while it is being sent).
  for (const [id, ask] of asking) {
    for (const button of ask.querySelectorAll("button")) {
      button.disabled = server === "unreachable" || deciding.has(id);
    }
  }
}

function setRunState(state) {
  if (runState === "running" && state !== "running") liveMode = null;
  runState = state;
  if (state !== "running") {
    for (const kind of ["text", "thinking"]) finishOpen(kind);
    endTools();
  }
  showStatus();
}

function setConnection(state) {
  connection = state;
  showServer();
}

function showMeta(info) {
  const parts = [];
  if (info && info.modelId) parts.push(info.provider ? `${info.provider} · ${info.modelId}` : info.modelId);
  if (sessionTokens) parts.push(`${sessionTokens.toLocaleString("en")} tokens`);
  if (info) $("meta").dataset.base = parts[0] || "";
  else if ($("meta").dataset.base) parts.unshift($("meta").dataset.base);
  $("meta").textContent = parts.join(" · ");
}

function setTitle(text, fallback = "New session") {
  const title = text ? clip(text, TITLE_LENGTH) : fallback;
  $("title").textContent = title;
  $("title").title = text || "";
  document.title = title + " · omni-grpc";
}

function clip(text, n) {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > n ? line.slice(0, n - 1) + "…" : line;
}

// ---- folding ------------------------------------------------------------------

function foldable(pre, text) {
  pre.textContent = text;
  const box = pre.parentElement;
  let toggle = box.querySelector(":scope > .fold");
  const lines = text.split("\n").length;
  if (lines <= FOLD_LINES && text.length <= FOLD_LINES * 160) {
    pre.classList.remove("folded");
    if (toggle) toggle.remove();
    return;
  }
  if (!toggle) {
    toggle = el("button", "fold");
    toggle.type = "button";
    toggle.setAttribute("aria-expanded", "false");
    pre.classList.add("folded");
    box.append(toggle);
  }
  toggle.dataset.lines = String(lines);
  toggle.textContent = pre.classList.contains("folded") ? `Show all ${lines} lines` : "Show less";
}

logEl.addEventListener("click", (event) => {
  const toggle = event.target.closest("button.fold");
  if (toggle) {
    const pre = toggle.parentElement.querySelector(":scope > pre");
    const folded = pre.classList.toggle("folded");
    toggle.setAttribute("aria-expanded", folded ? "false" : "true");
    toggle.textContent = folded ? `Show all ${toggle.dataset.lines} lines` : "Show less";
    return;
  }
  const copy = event.target.closest("button.copy");
  if (copy) copyCode(copy);
});

async function copyCode(button) {
  const code = button.closest(".code").querySelector("code");
  let ok = false;
  try {
    await navigator.clipboard.writeText(code.textContent);
    ok = true;
  } catch (_) {
    // No clipboard API (a page served over plain http to another host): select and copy.
    const range = document.createRange();
    range.selectNodeContents(code);
    const selection = getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    ok = document.execCommand("copy");
  }
  button.textContent = ok ? "Copied" : "Press Ctrl+C";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}

// ---- images -----------------------------------------------------------------

const DATA_URL = /^data:(image\/[\w.+-]+);base64,([A-Za-z0-9+/=\s]*)$/;

// The CSP lets images come from the page's own blobs only: a data: URL is
// decoded here, and a web URL is shown as a link (nothing loads from elsewhere).
function image(url, alt) {
  const m = DATA_URL.exec(url);
  if (!m) {
    const a = el("a", "image-link", alt + ": " + clip(url, 80));
    if (/^https?:\/\//i.test(url)) {
      a.href = url;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
    return a;
  }
  const bytes = Uint8Array.from(atob(m[2].replace(/\s+/g, "")), (c) => c.charCodeAt(0));
  const img = el("img", "image");
  img.alt = alt;
  img.src = URL.createObjectURL(new Blob([bytes], { type: m[1] }));
  return img;
}

// ---- rendering one OmniMessage -----------------------------------------------

function bubble(kind) {
  if (kind === "text") {
    const node = el("div", "msg assistant");
    node.append(el("div", "body"));
    node.markdown = "";
    return node;
  }
  const node = el("details", "thinking");
  node.append(el("summary", "", "Thinking"), el("div", "body"));
  return node;
}

// Re-rendering Markdown on every delta is wasted work: once per frame is enough.
function paint(node) {
  dirty.add(node);
}

function paintNow(node) {
  dirty.delete(node);
  if (node.classList.contains("assistant")) {
    node.querySelector(".body").replaceChildren(window.renderMarkdown(node.markdown));
  }
}

function streamInto(kind, chunk) {
  // A bubble appears with its first character: a run stopped before any text leaves none.
  if (!chunk && !open[kind]) return;
  if (!open[kind]) {
    open[kind] = add(bubble(kind));
    open[kind].classList.add("streaming");
    if (kind === "thinking") open[kind].open = true;
  }
  const node = open[kind];
  if (kind === "text") {
    node.markdown += chunk;
    paint(node);
  } else {
    node.querySelector(".body").textContent += chunk;
  }
}

function complete(kind, text) {
  let node = open[kind];
  open[kind] = null;
  if (!text) {
    if (node) node.remove();
    return;
  }
  if (!node) node = add(bubble(kind));
  node.classList.remove("streaming");
  if (kind === "text") {
    node.markdown = text;
    paintNow(node);
  } else {
    node.querySelector(".body").textContent = text;
    node.open = false;
    const summary = node.querySelector("summary");
    summary.replaceChildren(el("b", "", "Thought "), clip(text, 90));
  }
}

function finishOpen(kind) {
  const node = open[kind];
  if (!node) return;
  open[kind] = null;
  node.classList.remove("streaming");
  const empty = kind === "text" ? !node.markdown : !node.querySelector(".body").textContent;
  if (empty) node.remove();
  else if (kind === "text") paintNow(node);
}

function pretty(args) {
  if (!args) return "";
  try {
    const value = JSON.parse(args);
    if (value && typeof value === "object" && Object.keys(value).length === 0) return "";
    const indented = JSON.stringify(value, null, 2);
    // A short call reads best on one line: { "path": "." }.
    const flat = JSON.stringify(value, null, 1).replace(/\n\s*/g, " ");
    return flat.length <= 72 ? flat : indented;
  } catch (_) {
    return args; // still streaming, or not JSON: as it came
  }
}

function toolCard(id, name) {
  let card = tools.get(id);
  if (!card) {
    card = el("section", "tool");
    card.dataset.callId = id;
    card.setAttribute("aria-label", "tool call " + (name || ""));
    const head = el("div", "head");
    head.append(el("span", "name", name || "tool"), el("span", "state", "running"));
    const args = el("div", "args-box");
    args.append(el("pre", "args"));
    const out = el("div", "output-box");
    out.append(el("pre", "output"));
    card.append(head, args, out, el("div", "images"));
    card.rawArgs = "";
    tools.set(id, card);
    unfinished.add(card);
    add(card);
  }
  if (name) {
    card.querySelector(".name").textContent = name;
    card.setAttribute("aria-label", "tool call " + name);
  }
  return card;
}

function setArgs(card, raw) {
  card.rawArgs = raw;
  card.querySelector(".args").dataset.raw = raw;
  foldable(card.querySelector(".args"), pretty(raw));
}

// Cards whose call has neither an output nor a refusal yet: when their run
// ends they did not run, or were cut off (endTools).
const unfinished = new Set();

function setState(card, word) {
  const state = card.querySelector(".state");
  state.textContent = word;
  state.className = "state " + word.replace(" ", "-");
  card.dataset.state = word;
}

function allowed(card) {
  return card.querySelector(".decision.allow") !== null;
}

function closeAsk(card) {
  const ask = asking.get(card.dataset.callId);
  if (!ask) return;
  ask.remove();
  asking.delete(card.dataset.callId);
}

// ``stopReason`` is the complete output's (undefined while it streams): an
// aborted or timed-out output is a call that never ran (nobody approved it
// before the run stopped, or the wait ran out), or, once allowed, one cut off.
function setOutput(card, text, images, stopReason) {
  foldable(card.querySelector(".output"), text);
  closeAsk(card);
  const refused = card.querySelector(".decision.deny, .decision.forbidden") !== null;
  if (stopReason !== undefined) {
    unfinished.delete(card);
    if (refused) setState(card, "not run");
    else if (stopReason === "aborted" || stopReason === "timeout") {
      setState(card, allowed(card) ? "interrupted" : "not run");
    } else setState(card, "done");
  } else if (!refused) setState(card, "running");
  if (images && images.length) {
    card.querySelector(".images").replaceChildren(...images.map((url, k) => image(url, `tool image ${k + 1}`)));
  }
}

// The run ended (it finished, was stopped, or the server shut down): a call
// still without output never ran, or ran and never finished.
function endTools() {
  for (const card of unfinished) {
    closeAsk(card);
    setState(card, allowed(card) ? "interrupted" : "not run");
  }
  unfinished.clear();
}

const DECISION_WORDS = { allow: "allowed", deny: "denied", forbidden: "blocked" };
let liveMode = null; // the approval mode of the run this page started, while it runs

// A trace does not record which mode decided a call; the tab remembers the
// modes of the runs it started, so a reload shows the same words.
function modeKey() { return "omni-grpc:modes:" + sessionId; }
function modes() {
  try { return JSON.parse(sessionStorage.getItem(modeKey()) || "{}"); } catch (_) { return {}; }
}
function rememberMode(callId, mode) {
  const known = modes();
  known[callId] = mode;
  try { sessionStorage.setItem(modeKey(), JSON.stringify(known)); } catch (_) { /* storage full or off */ }
}
function modeOf(callId) { return modes()[callId] || null; }
// The approval mode a decision shown now was made under: known only for a run
// this page started and is showing live.
function modeOfThisRun() { return liveMode && sink === logEl ? liveMode : null; }

// Call ids whose decision this tab is sending: the server's approval_decision can
// arrive over the stream before the POST's answer, and is still the user's own.
const deciding = new Set();

function decisionLabel(decision, id) {
  const word = DECISION_WORDS[decision] || decision;
  const mode = modeOf(id);
  if (mode === "you") return word + " by you";
  if (mode) return `${word} (${MODE_LABELS[mode] || mode})`;
  return word;
}

function decide(card, decision, byYou) {
  closeAsk(card);
  const head = card.querySelector(".head");
  if (!head.querySelector(".decision")) {
    const id = card.dataset.callId;
    if (byYou || deciding.has(id)) rememberMode(id, "you");
    else if (modeOfThisRun()) rememberMode(id, modeOfThisRun());
    head.append(el("span", "decision " + decision, decisionLabel(decision, id)));
  }
  if (decision !== "allow") {
    setState(card, "not run");
    unfinished.delete(card);
  } else if (unfinished.has(card)) setState(card, "running");
  showStatus();
}

function startTurn() {
  turnStats = null;
  sink.appendChild(el("div", "turn"));
}

function usage(p) {
  const request = (p.request && p.request.total) || 0;
  if (p.session && p.session.total) sessionTokens = p.session.total;
  if (!turnStats) turnStats = el("div", "stats");
  turnStats.tokens = (turnStats.tokens || 0) + request;
  turnStats.textContent = `${turnStats.tokens.toLocaleString("en")} tokens this turn`;
  add(turnStats); // (re)placed after what the turn has shown so far
  if (sink === logEl) showMeta(null);
}

function renderMessage(msg, raw) {
  const p = msg.payload || {};
  const partial = typeof p.type === "string" && p.type.startsWith("partial_");
  if (!partial && raw !== undefined) {
    if (shown.has(raw)) return;
    shown.add(raw);
  }
  if (msg.origin) return; // sub-agent traffic stays out of the main view
  switch (p.type) {
    case "text":
      if (p.role === "user") {
        finishOpen("text");
        finishOpen("thinking");
        startTurn();
        add(el("div", "msg user", p.text));
      } else complete("text", p.text);
      break;
    case "image_url":
      if (p.role === "user") {
        const node = add(el("div", "msg user image-msg"));
        node.append(image(p.image_url, "image"));
      }
      break;
    case "partial_text":
      if (p.role === "assistant" && p.event_type !== "stop") streamInto("text", p.text || "");
      break;
    case "partial_thinking":
      if (p.event_type !== "stop") streamInto("thinking", p.thinking || "");
      break;
    case "thinking":
      complete("thinking", p.thinking);
      break;
    case "partial_tool_call": {
      const card = toolCard(p.tool_call_id, p.name);
      setArgs(card, card.rawArgs + (p.arguments || ""));
      break;
    }
    case "tool_call":
      setArgs(toolCard(p.tool_call_id, p.name), p.arguments || "");
      break;
    case "partial_tool_call_output": {
      const card = toolCard(p.tool_call_id);
      setOutput(card, card.querySelector(".output").textContent + (p.output || ""), p.images);
      break;
    }
    case "tool_call_output":
      setOutput(toolCard(p.tool_call_id), p.output, p.images, p.stop_reason || "completed");
      break;
    case "approval_decision":
      decide(toolCard(p.tool_call_id), p.decision, false);
      break;
    case "token_usage":
      usage(p);
      break;
    case "request_end":
      if (p.status !== "completed" && p.status !== "aborted") {
        const retry = p.retry_in_ms ? ` Retrying in ${Math.round(p.retry_in_ms / 1000)} s.` : "";
        const why = p.error_message || p.message || "";
        note(`The model request ${p.status === "failed" ? "failed" : "ended: " + p.status}${why ? ": " + why : "."}${retry}`, "error");
      }
      break;
    case "abort": {
      finishOpen("text");
      finishOpen("thinking");
      const reason = p.reason || USER_ABORT;
      if (reason === USER_ABORT) note("Stopped.", "stopped");
      else if (reason === "client disconnected" || reason === "server shutting down") note("Stopped: " + reason + ".", "stopped");
      else note("The run failed: " + reason, "error failed");
      break;
    }
    case "compaction_begin":
      note("Compacting the context…");
      break;
    default:
      break; // tool lists, session_meta and the like are not shown
  }
}

// ---- control events ------------------------------------------------------------

function askApproval(toolCall) {
  const p = toolCall.payload;
  const card = toolCard(p.tool_call_id, p.name);
  setArgs(card, p.arguments || "");
  if (asking.has(p.tool_call_id) || card.querySelector(".decision") || !unfinished.has(card)) return;
  setState(card, "waiting");
  const ask = el("div", "ask");
  ask.append(el("span", "question", `Run ${p.name}? You asked to approve each tool call (approval mode “ask me”).`));
  const buttons = el("div", "answers");
  for (const decision of ["allow", "deny"]) {
    const button = el("button", decision === "allow" ? "approve" : "deny", decision === "allow" ? "Approve" : "Deny");
    button.type = "button";
    button.onclick = async () => {
      buttons.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      deciding.add(p.tool_call_id);
      const modeNow = modeOfThisRun() || "";
      try {
        await api("POST", `api/sessions/${sessionId}/approvals/${encodeURIComponent(p.tool_call_id)}`, { decision });
        decide(card, decision, true);
      } catch (error) {
        // Refused: whatever decision the stream showed meanwhile was not this tab's.
        const shown = card.querySelector(".head .decision");
        if (shown) {
          rememberMode(p.tool_call_id, modeNow);
          shown.textContent = decisionLabel(shown.classList[1], p.tool_call_id);
        }
        buttons.querySelectorAll("button").forEach((b) => { b.disabled = false; });
        if (error.code === "approval_not_found") closeAsk(card);
        else note("The approval was not sent: " + error.message, "error");
      } finally {
        deciding.delete(p.tool_call_id);
        showStatus();
      }
    };
    buttons.append(button);
  }
  ask.append(buttons);
  card.querySelector(".args-box").after(ask); // the question under what it is about
  asking.set(p.tool_call_id, ask);
  if (sink === logEl) changed();
  if (server === "not-serving") showServer(); // the banner says to answer it now
  showStatus();
}

function renderServerEvent(event) {
  if (event.type === "task_state") setRunState(event.state);
  else if (event.type === "approval_request") {
    if (!event.origin || event.origin.length === 0) askApproval(event.toolCall);
  } else if (event.type === "resync_required") {
    // The gap is gone from the server's buffer (or the server restarted): rebuild.
    loadTail().catch(showLoadError);
  }
}

// ---- history windows ---------------------------------------------------------------

function reset() {
  logEl.replaceChildren();
  tools.clear();
  unfinished.clear();
  asking.clear();
  dirty.clear();
  shown.clear();
  open.text = open.thinking = null;
  turnStats = null;
  earlier = null;
}

function renderWindow(messages) {
  for (const { tracePosition, ...msg } of messages) {
    // The stream's copy has no tracePosition: keyed without it, the two match.
    renderMessage(msg, JSON.stringify(msg));
  }
}

function earlierButton(page) {
  if (!page || !page.before) return null;
  const button = el("button", "earlier");
  button.type = "button";
  const n = page.earlierTurns;
  button.textContent = `Show ${n} earlier turn${n === 1 ? "" : "s"}`;
  button.cursor = page.before;
  button.addEventListener("click", loadEarlier);
  return button;
}

// The newest turns, and the live tail of a run in progress; returns the
// stream position to resume from.
async function loadTail() {
  const history = await api("GET", `api/sessions/${sessionId}/messages?tailLimit=${TAIL_TURNS}`);
  reset();
  earlier = earlierButton(history.page);
  if (earlier) logEl.append(earlier);
  if (history.page && history.page.prior) sessionTokens = history.page.prior.sessionTokens || 0;
  renderWindow(history.messages);
  if (history.live) {
    // A run in progress: paint what it has streamed so far, then follow from its cursor.
    for (const fragment of history.live.fragments) renderMessage(fragment);
  }
  showMeta(null);
  following = true;
  pin();
  showStatus();
  return history;
}

async function loadEarlier() {
  const button = earlier;
  button.disabled = true;
  button.textContent = "Loading…";
  try {
    const page = await api("GET", `api/sessions/${sessionId}/messages?before=${encodeURIComponent(button.cursor)}&limit=${TAIL_TURNS}`);
    const older = document.createDocumentFragment();
    const saved = { turnStats, text: open.text, thinking: open.thinking };
    sink = older;
    open.text = open.thinking = null;
    turnStats = null;
    try {
      const next = earlierButton(page.page);
      if (next) older.append(next);
      renderWindow(page.messages);
      earlier = next;
    } finally {
      sink = logEl;
      ({ turnStats } = saved);
      open.text = saved.text;
      open.thinking = saved.thinking;
    }
    // Keep what the reader was looking at in place while the older turns go above it.
    const fromEnd = logEl.scrollHeight - logEl.scrollTop;
    following = false;
    button.replaceWith(older);
    logEl.scrollTop = logEl.scrollHeight - fromEnd;
    const focusTarget = earlier || logEl.querySelector(".msg");
    if (focusTarget && focusTarget.focus) focusTarget.focus({ preventScroll: true });
  } catch (error) {
    button.disabled = false;
    button.textContent = "Could not load earlier turns: " + error.message + " (try again)";
  }
}

async function loadTitle(id, firstWindow) {
  // The first prompt names a session. A window that reaches the start has it;
  // otherwise the records before ordinal 6 of the first shard do (a window of
  // them is whole: a few records cannot hold more than 1000 turns).
  const first = (messages) => {
    for (const m of messages) {
      const p = m.payload || {};
      if (p.type === "text" && p.role === "user" && !m.origin) return p.text;
    }
    return "";
  };
  if (firstWindow) return first(firstWindow);
  for (const end of [6, 64]) { // the prompt is nearly always record 1; a wider look if not
    const { messages } = await api("GET", `api/sessions/${id}/messages?before=1:${end}&limit=1000`);
    const text = first(messages);
    if (text || messages.length < end) return text;
  }
  return "";
}

// ---- the sessions, when no ?session= names one -------------------------------------

function relativeTime(iso) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return "";
  const s = Math.round((Date.now() - then) / 1000);
  if (s < 45) return "just now";
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 24) return `${h} h ago`;
  const d = Math.round(h / 24);
  if (d === 1) return "yesterday";
  if (d < 30) return `${d} days ago`;
  return new Date(then).toLocaleDateString();
}

function stateWord(s) {
  if (s.pendingApprovalCount > 0) return ["waiting", "needs approval"];
  return [s.status, s.status];
}

const LIST_REFRESH_MS = 5000; // the list's states and counts stay current while it is open
const titles = new Map(); // session id -> its first prompt ("" while it has none)

async function listSessions() {
  document.body.dataset.view = "list";
  $("back").hidden = true;
  $("status").hidden = true;
  $("title").textContent = "Sessions";
  document.title = "Sessions · omni-grpc";
  $("new").href = link({ new: "1" });
  $("prompt").placeholder = "Ask something to start a new session…";
  const again = () => {
    if (document.body.dataset.view !== "list") return; // a prompt opened a session
    refreshList().then(() => { if (!$("banner").dataset.server) banner(null); }).catch(listError)
      .finally(() => setTimeout(again, LIST_REFRESH_MS));
  };
  setTimeout(again, LIST_REFRESH_MS); // also retries a list that could not load
  await refreshList();
}

function listError(error) {
  // An unreachable server or a missing token is said already (showServer, askToken).
  if (error.code !== "unreachable" && error.code !== "unauthenticated") {
    banner("The sessions could not be listed: " + error.message, "error");
  }
}

async function refreshList() {
  const { sessions } = await api("GET", "api/sessions");
  if (document.body.dataset.view !== "list") return;
  // Most recently active first; ISO-8601 UTC times sort as strings.
  const when = (s) => s.lastActiveAt || s.createdAt || "";
  sessions.sort((a, b) => (when(a) < when(b) ? 1 : when(a) > when(b) ? -1 : 0));
  $("meta").textContent = sessions.length ? `${sessions.length} session${sessions.length === 1 ? "" : "s"}` : "";
  const list = el("nav", "sessions");
  list.setAttribute("aria-label", "Sessions");
  if (!sessions.length) {
    list.append(el("p", "empty", "No sessions yet. Ask something below to start one."));
  }
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.sessionId : undefined;
  const untitled = [];
  for (const s of sessions) {
    const row = el("a", "session-link");
    row.href = link({ session: s.sessionId });
    row.dataset.sessionId = s.sessionId;
    const title = el("span", "title pending", "…");
    const [state, word] = stateWord(s);
    const sub = el("span", "sub");
    const time = el("time", "when", relativeTime(when(s)));
    time.dateTime = when(s);
    time.title = new Date(when(s)).toLocaleString();
    sub.append(
      el("span", "state " + state, word),
      el("span", "count", `${s.messageCount} message${s.messageCount === 1 ? "" : "s"}`),
      time,
    );
    row.append(title, sub);
    list.append(row);
    if (titles.get(s.sessionId)) showTitle(title, titles.get(s.sessionId));
    else untitled.push([s, title]);
  }
  logEl.replaceChildren(list);
  // A refresh must not take the keyboard focus away from the row it was on.
  if (focused) {
    const row = list.querySelector(`[data-session-id="${CSS.escape(focused)}"]`);
    if (row) row.focus();
  }
  // Titles come one small window each, a few at a time, and are kept.
  let next = 0;
  const worker = async () => {
    while (next < untitled.length) {
      const [s, title] = untitled[next++];
      let text = "";
      try { text = s.messageCount ? await loadTitle(s.sessionId) : ""; } catch (_) { /* untitled */ }
      titles.set(s.sessionId, text);
      showTitle(title, text);
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  document.body.dataset.titles = "loaded";
}

function showTitle(title, text) {
  title.classList.remove("pending");
  title.textContent = text ? clip(text, TITLE_LENGTH) : "Untitled session";
  title.classList.toggle("untitled", !text);
  title.title = text;
}

// ---- the session and its stream ----------------------------------------------------

function showLoadError(error) {
  if (error.code === "session_not_found") {
    missing = true;
    banner("This session does not exist on this server.", "error",
      [["See all sessions", link({})], ["Start a new one", link({ new: "1" })]]);
    setTitle("", "Session not found");
    $("status").hidden = false;
    $("meta").textContent = "";
    $("composer").hidden = true;
    if (source) source.close();
    showStatus();
  } else if (error.code === "unreachable" || error.code === "unauthenticated") {
    // Said already: the banner (and the health checks until it answers), or the token field.
  } else {
    banner(error.message, "error");
  }
}

// Stream events go through the frame queue; their ids are noted at once, so
// a reconnect resumes after the newest one received.
function openStream(after) {
  if (source) source.close();
  const query = new URLSearchParams();
  if (token) query.set("access_token", token);
  if (after) query.set("lastEventId", after);
  const text = query.toString();
  const stream = new EventSource(`api/sessions/${sessionId}/stream${text ? "?" + text : ""}`);
  source = stream;
  const seen = (e) => { if (e.lastEventId) lastEventId = e.lastEventId; };
  stream.onmessage = (e) => {
    seen(e);
    queue.push([(data) => renderMessage(JSON.parse(data), data), e.data]);
    schedule();
  };
  stream.addEventListener("server_event", (e) => {
    seen(e);
    queue.push([(data) => renderServerEvent(JSON.parse(data)), e.data]);
    schedule();
  });
  stream.onopen = () => {
    if (server === "unreachable") server = "ok";
    setConnection("ok");
  };
  stream.onerror = () => {
    if (stream !== source) return;
    // Whether the server is gone or only this connection: /healthz tells.
    checkHealth();
    if (stream.readyState === EventSource.CONNECTING) {
      setConnection("reconnecting"); // the browser tries again by itself
      return;
    }
    // Closed for good (the server answered with an error): ask it why, and retry.
    setConnection("reconnecting");
    setTimeout(reconnect, RETRY_EVERY_MS);
  };
  return new Promise((resolve, reject) => {
    const onOpen = () => { stream.removeEventListener("open", onOpen); resolve(); };
    stream.addEventListener("open", onOpen);
    stream.addEventListener("error", () => {
      if (stream.readyState === EventSource.CLOSED) reject(new ApiError(0, "unreachable", "no stream"));
    }, { once: true });
  });
}

let reconnecting = false;

async function reconnect() {
  if (reconnecting || missing || tokenNeeded) return;
  reconnecting = true;
  try {
    await api("GET", `api/sessions/${sessionId}`);
  } catch (error) {
    reconnecting = false;
    if (error.code === "session_not_found") return showLoadError(error);
    if (error.code !== "unauthenticated") setTimeout(reconnect, RETRY_EVERY_MS);
    return;
  }
  reconnecting = false;
  // The server answers again; its stream says (resync_required) if the gap is lost.
  openStream(lastEventId).catch(() => {});
}

// ---- the approval mode -----------------------------------------------------------

// The mode belongs to the session (the server keeps it, as the reference
// does): the selector shows the open session's, and changing it changes the
// session's (PATCH), which a running task applies from its next tool call.
// A new session starts with the user's last choice, kept in localStorage.
const MODE_CHOICE_KEY = "omni-grpc:approval-mode";
let sessionMode = null; // the open session's mode, as the server last said it
let modeChange = Promise.resolve();

function offered(mode) {
  return [...modeSelect.options].some((option) => option.value === mode);
}

function showMode(session) {
  const word = MODE_WORDS[session.approvalMode] || session.approvalMode;
  sessionMode = word;
  if (offered(word)) modeSelect.value = word;
  modeSelect.dataset.session = word; // what the session has, for a reader or a test
}

// Makes the session's mode the selector's; refused, the selector goes back to
// the session's and the refusal is shown.
async function applyMode() {
  const wanted = modeSelect.value;
  if (!sessionId || wanted === sessionMode) return;
  try {
    const { session } = await api("PATCH", `api/sessions/${sessionId}`, { approvalMode: wanted });
    showMode(session);
    if (runState === "running" && liveMode) liveMode = sessionMode;
  } catch (error) {
    if (sessionMode && offered(sessionMode)) modeSelect.value = sessionMode;
    if (error.code !== "unreachable" && error.code !== "unauthenticated") {
      note("The approval mode was not changed: " + error.message, "error");
    }
    throw error;
  }
}

modeSelect.addEventListener("change", () => {
  store(localStorage, MODE_CHOICE_KEY, modeSelect.value);
  if (sessionId && ready) modeChange = ready.then(applyMode).catch(() => {});
});

// ---- the session and its stream ----------------------------------------------------

async function openSession() {
  document.body.dataset.view = "session";
  $("back").hidden = false;
  $("back").href = link({});
  $("status").hidden = false;
  $("new").href = link({ new: "1" });
  setTitle("");
  const { session } = await api("GET", `api/sessions/${sessionId}`);
  document.body.dataset.session = sessionId;
  showMode(session); // the mode this session runs with, not the page's default
  showMeta(session);
  const history = await loadTail();
  loadTitle(sessionId, history.page && history.page.before ? null : history.messages)
    .then(setTitle).catch(() => {});
  const after = history.live ? history.live.cursor : session.lastEventId;
  await openStream(after);
}

function connect() {
  if (ready) return ready;
  ready = (async () => {
    if (!sessionId) {
      // The session is born with the mode the selector shows.
      const { session } = await api("POST", "api/sessions", { approvalMode: modeSelect.value });
      logEl.replaceChildren(); // the list gives way to the new conversation
      sessionId = session.sessionId;
      showMode(session);
      $("prompt").placeholder = PROMPT_HINT;
      history.replaceState(null, "", link({ session: sessionId }));
      document.body.dataset.view = "session";
      document.body.dataset.session = sessionId;
      $("back").hidden = false;
      $("back").href = link({});
      $("status").hidden = false;
      showMeta(session);
      await openStream(null);
    } else {
      await openSession();
    }
  })();
  ready.catch((error) => { ready = null; showLoadError(error); });
  return ready;
}

let sending = false;

async function send() {
  const text = $("prompt").value.trim();
  // One send at a time: the run's "running" state arrives over the stream, after
  // the POST. A disabled Send says why (the banner); the prompt stays for later.
  if (!text || $("send").disabled || sending) return;
  sending = true;
  try {
    await connect();
    if (!$("title").title) setTitle(text);
    await modeChange;
    await applyMode(); // a mode picked before the session answered, or set by a script
    // Set before the POST: a run in "allow all" may decide before the answer comes back.
    liveMode = sessionMode;
    await api("POST", `api/sessions/${sessionId}/tasks`, { input: [{ type: "text", text }] });
    $("prompt").value = "";
    following = true; // their own prompt brings the reader back to the end
    changed();
  } catch (error) {
    if (runState !== "running") liveMode = null;
    if (!["unreachable", "unauthenticated", "session_not_found"].includes(error.code)) {
      note(error.message, "error");
    }
  } finally {
    sending = false;
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});

function stop() {
  if (!sessionId || runState !== "running") return;
  api("POST", `api/sessions/${sessionId}/abort`, {}).catch((error) => note(error.message, "error"));
}

$("abort").addEventListener("click", stop);
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && runState === "running") {
    event.preventDefault();
    stop();
  }
});

// Relative times age while the list is open.
setInterval(() => {
  for (const time of document.querySelectorAll("time.when")) time.textContent = relativeTime(time.dateTime);
}, 60000);

// A new session starts from the user's last choice of mode, if this server offers it.
const lastChoice = stored(localStorage, MODE_CHOICE_KEY);
if (!sessionId && lastChoice && offered(lastChoice)) modeSelect.value = lastChoice;
checkHealth();

if (sessionId) {
  connect();
} else if (params.has("new")) {
  document.body.dataset.view = "session";
  $("back").hidden = false;
  $("back").href = link({});
  setTitle("");
  logEl.append(el("p", "empty", "A new session: ask the agent anything."));
  $("prompt").focus();
} else {
  listSessions().catch(listError);
}
