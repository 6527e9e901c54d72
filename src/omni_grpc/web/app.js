// The omni-grpc page: the session list, or one session as a conversation fed
// by its history windows and its live stream (EventSource). All URLs are
// relative so the app works wherever it is mounted. Text from the agent or
// the user only ever reaches the page as text nodes (markdown.js builds its
// nodes the same way).
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("access_token") || "";
const $ = (id) => document.getElementById(id);
const logEl = $("log");

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
let connection = "ok"; // ok | reconnecting | offline
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
  if (token) next.set("access_token", token);
  for (const [key, value] of Object.entries(query)) next.set(key, value);
  const text = next.toString();
  return text ? "?" + text : location.pathname;
}

// ---- following the stream -------------------------------------------------

// The view follows the conversation while the reader is at its end; once they
// scroll up it stays where they are, and "Latest" brings them back. Whatever
// grows (a new card, a streamed word, an approval's buttons) goes through the
// observer below.
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
new MutationObserver(() => {
  // The reader may have scrolled up since the last pin, before their scroll
  // event arrived: growth never lowers scrollTop, so that says it (content
  // that shrank, a thought folding up, lowers only the highest scrollTop).
  const highest = logEl.scrollHeight - logEl.clientHeight;
  if (following && logEl.scrollTop < Math.min(pinnedAt, highest) - 2) following = false;
  if (following) pin();
  else if (document.body.dataset.view === "session" && !atEnd()) $("latest").hidden = false;
}).observe(logEl, { childList: true, subtree: true, characterData: true });
// A narrower window (a phone turned, a resized pane) rewraps everything: keep the end in view.
new ResizeObserver(() => {
  if (following) pin();
}).observe(logEl);
$("latest").addEventListener("click", () => {
  following = true;
  pin();
  $("latest").hidden = true;
});

function add(node) {
  sink.appendChild(node);
  return node;
}

function note(text, kind) {
  return add(el("div", kind ? "note " + kind : "note", text));
}

// ---- the server -------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

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
    throw new ApiError(0, "unreachable", "Cannot reach the omni-grpc server. Is it running?");
  }
  if (!response.ok) {
    let code = "http_" + response.status;
    let message = response.status + " " + response.statusText;
    // Errors are {"error": {code, message}}, as the reference server writes them.
    try {
      const error = (await response.json()).error;
      code = error.code || code;
      message = error.message || message;
    } catch (_) { /* not JSON: a proxy's page */ }
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
    return;
  }
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

// ---- the header ---------------------------------------------------------------

const STATUS_WORDS = {
  idle: "Ready", running: "Running…", waiting: "Approval needed",
  reconnecting: "Reconnecting…", offline: "Offline",
};

function showStatus() {
  const waiting = runState === "running" && logEl.querySelector(".tool .ask") !== null;
  const state = connection !== "ok" ? connection : waiting ? "waiting" : runState;
  const status = $("status");
  status.textContent = STATUS_WORDS[state] || state;
  status.className = "status " + state;
  document.body.dataset.state = connection !== "ok" ? connection : runState;
  logEl.setAttribute("aria-busy", runState === "running" ? "true" : "false");
  $("send").disabled = runState === "running";
  $("abort").disabled = runState !== "running" || connection !== "ok";
}

function setRunState(state) {
  if (runState === "running" && state !== "running") liveMode = null;
  runState = state;
  if (state !== "running") {
    for (const kind of ["text", "thinking"]) finishOpen(kind);
  }
  showStatus();
}

function setConnection(state) {
  connection = state;
  if (state === "ok") banner(null);
  else if (state === "reconnecting") banner("Connection lost. Reconnecting…", "warn");
  else banner("The server is not answering. Retrying…", "error");
  showStatus();
}

function showMeta(info) {
  const parts = [];
  if (info && info.modelId) parts.push(info.provider ? `${info.provider} · ${info.modelId}` : info.modelId);
  if (sessionTokens) parts.push(`${sessionTokens.toLocaleString("en")} tokens`);
  if (info) $("meta").dataset.base = parts[0] || "";
  else if ($("meta").dataset.base) parts.unshift($("meta").dataset.base);
  $("meta").textContent = parts.join(" · ");
}

function setTitle(text) {
  const title = text ? clip(text, TITLE_LENGTH) : "New session";
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

let paintPending = new Set();
function paint(node) {
  // Re-rendering Markdown on every delta is wasted work: once per frame is enough.
  if (paintPending.has(node)) return;
  paintPending.add(node);
  setTimeout(() => {
    paintPending.delete(node);
    paintNow(node);
  }, 40);
}

function paintNow(node) {
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

function setOutput(card, text, images) {
  foldable(card.querySelector(".output"), text);
  const state = card.querySelector(".state");
  if (!card.querySelector(".decision.deny, .decision.forbidden")) state.textContent = "done";
  if (images && images.length) {
    card.querySelector(".images").replaceChildren(...images.map((url, k) => image(url, `tool image ${k + 1}`)));
  }
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
  const ask = card.querySelector(".ask");
  if (ask) ask.remove();
  const head = card.querySelector(".head");
  if (!head.querySelector(".decision")) {
    const id = card.dataset.callId;
    if (byYou || deciding.has(id)) rememberMode(id, "you");
    else if (modeOfThisRun()) rememberMode(id, modeOfThisRun());
    head.append(el("span", "decision " + decision, decisionLabel(decision, id)));
  }
  if (decision !== "allow") card.querySelector(".state").textContent = "not run";
  showStatus();
}

function startTurn() {
  turnStats = null;
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
      setOutput(toolCard(p.tool_call_id), p.output, p.images);
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
  if (card.querySelector(".ask") || card.querySelector(".decision")) return;
  card.querySelector(".state").textContent = "waiting";
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
        if (error.code === "approval_not_found") {
          ask.remove();
          showStatus();
        } else note("The approval was not sent: " + error.message, "error");
      } finally {
        deciding.delete(p.tool_call_id);
      }
    };
    buttons.append(button);
  }
  ask.append(buttons);
  card.querySelector(".args-box").after(ask); // the question under what it is about
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
    refreshList().then(() => banner(null)).catch(listError)
      .finally(() => setTimeout(again, LIST_REFRESH_MS));
  };
  setTimeout(again, LIST_REFRESH_MS); // also retries a list that could not load
  await refreshList();
}

function listError(error) {
  if (error.code === "unreachable") banner(error.message + " Retrying…", "error");
  else banner("The sessions could not be listed: " + error.message, "error");
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
    banner("This session does not exist on this server.", "error",
      [["See all sessions", link({})], ["Start a new one", link({ new: "1" })]]);
    document.body.dataset.state = "unknown";
    $("composer").hidden = true;
  } else if (error.code === "unreachable") {
    setConnection("offline");
  } else {
    banner(error.message, "error");
  }
}

function openStream(after) {
  if (source) source.close();
  const query = new URLSearchParams();
  if (token) query.set("access_token", token);
  if (after) query.set("lastEventId", after);
  const text = query.toString();
  source = new EventSource(`api/sessions/${sessionId}/stream${text ? "?" + text : ""}`);
  const seen = (e) => { if (e.lastEventId) lastEventId = e.lastEventId; };
  source.onmessage = (e) => { seen(e); renderMessage(JSON.parse(e.data), e.data); };
  source.addEventListener("server_event", (e) => { seen(e); renderServerEvent(JSON.parse(e.data)); });
  source.onopen = () => setConnection("ok");
  source.onerror = () => {
    if (source.readyState === EventSource.CONNECTING) {
      setConnection("reconnecting");
      return;
    }
    // Closed for good (the server answered with an error, or gave up): retry ourselves.
    setConnection("offline");
    setTimeout(reconnect, 2000);
  };
  return new Promise((resolve, reject) => {
    const onOpen = () => { source.removeEventListener("open", onOpen); resolve(); };
    source.addEventListener("open", onOpen);
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) reject(new ApiError(0, "unreachable", "no stream"));
    }, { once: true });
  });
}

async function reconnect() {
  try {
    await api("GET", `api/sessions/${sessionId}`);
  } catch (error) {
    if (error.code === "session_not_found") return showLoadError(error);
    setTimeout(reconnect, 2000);
    return;
  }
  // The server answers again; its stream says (resync_required) if the gap is lost.
  openStream(lastEventId).catch(() => {});
}

async function openSession() {
  document.body.dataset.view = "session";
  $("back").hidden = false;
  $("back").href = link({});
  $("status").hidden = false;
  $("new").href = link({ new: "1" });
  setTitle("");
  const { session } = await api("GET", `api/sessions/${sessionId}`);
  document.body.dataset.session = sessionId;
  // The selector shows the mode this session runs with, not the page's default.
  const select = $("mode");
  const word = MODE_WORDS[session.approvalMode] || session.approvalMode;
  if ([...select.options].some((option) => option.value === word)) select.value = word;
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
      logEl.replaceChildren(); // the list gives way to the new conversation
      const { session } = await api("POST", "api/sessions", {});
      sessionId = session.sessionId;
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
  // One send at a time: the run's "running" state arrives over the stream, after the POST.
  if (!text || runState === "running" || sending) return;
  sending = true;
  try {
    await connect();
    if (!$("title").title) setTitle(text);
    // Set before the POST: a run in "allow all" may decide before the answer comes back.
    liveMode = $("mode").value;
    await api("POST", `api/sessions/${sessionId}/tasks`, { input: [{ type: "text", text }], approvalMode: liveMode });
    $("prompt").value = "";
    following = true; // their own prompt brings the reader back to the end
    pin();
  } catch (error) {
    if (runState !== "running") liveMode = null;
    if (error.code === "unreachable") banner(error.message, "error");
    else if (error.code !== "session_not_found") note(error.message, "error");
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
