// The omni-grpc page: one session, its live stream over EventSource, and a
// composer. All URLs are relative so the app works wherever it is mounted.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("access_token") || "";
const $ = (id) => document.getElementById(id);
const logEl = $("log");

let sessionId = params.get("session");
let source = null;
let ready = null; // the promise of a connected stream
// Elements still being streamed into, and tool cards by tool_call_id.
const open = { text: null, thinking: null };
const tools = new Map();
// Complete messages already shown (exact JSON), so a reconnect never doubles them.
const shown = new Set();

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

// The view follows the conversation while the reader is at its end; once they
// scroll up it stays where they are. Whatever grows (a new card, a streamed
// word, an approval's buttons) goes through the observer below.
let following = true;
const FOLLOW_SLACK = 48; // px from the end that still count as "at the end"

logEl.addEventListener("scroll", () => {
  following = logEl.scrollHeight - logEl.scrollTop - logEl.clientHeight <= FOLLOW_SLACK;
});
new MutationObserver(() => {
  if (following) logEl.scrollTop = logEl.scrollHeight;
}).observe(logEl, { childList: true, subtree: true, characterData: true });

function add(node) {
  logEl.appendChild(node);
  return node;
}

function note(text, error) {
  add(el("div", error ? "note error" : "note", text));
}

async function api(method, path, body) {
  const headers = body === undefined ? {} : { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    // Errors are {"error": {code, message}}, as the reference server writes them.
    try { message = (await response.json()).error.message || message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  if (response.status === 204) return null;
  return response.json().catch(() => null);
}

function setStatus(state) {
  const status = $("status");
  status.textContent = state;
  status.className = state;
  document.body.dataset.state = state;
  $("send").disabled = state === "running";
  $("abort").disabled = state !== "running";
}

// ---- rendering one OmniMessage -------------------------------------------

function toolCard(id, name) {
  let card = tools.get(id);
  if (!card) {
    card = el("div", "tool");
    card.dataset.callId = id;
    const head = el("div", "head");
    head.append(el("span", "name", name || "tool"), " ", el("span", "args"));
    card.append(head, el("pre", "output"));
    tools.set(id, card);
    add(card);
  }
  if (name) card.querySelector(".name").textContent = name;
  return card;
}

function streamInto(kind, cls, chunk) {
  if (!open[kind]) open[kind] = add(el("div", cls + " streaming", ""));
  open[kind].textContent += chunk;
}

function complete(kind, cls, text) {
  const node = open[kind] || add(el("div", cls, ""));
  node.textContent = text;
  node.classList.remove("streaming");
  open[kind] = null;
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
      if (p.role === "user") add(el("div", "user", p.text));
      else complete("text", "assistant", p.text);
      break;
    case "image_url":
      add(el("div", "user", "[image] " + p.image_url.slice(0, 60)));
      break;
    case "partial_text":
      if (p.role === "assistant" && p.event_type !== "stop") streamInto("text", "assistant", p.text);
      break;
    case "partial_thinking":
      if (p.event_type !== "stop") streamInto("thinking", "thinking", p.thinking);
      break;
    case "thinking":
      if (p.thinking || open.thinking) complete("thinking", "thinking", p.thinking);
      break;
    case "partial_tool_call": {
      const card = toolCard(p.tool_call_id, p.name);
      card.querySelector(".args").textContent += p.arguments;
      break;
    }
    case "tool_call":
      toolCard(p.tool_call_id, p.name).querySelector(".args").textContent = p.arguments;
      break;
    case "partial_tool_call_output":
      toolCard(p.tool_call_id).querySelector(".output").textContent += p.output;
      break;
    case "tool_call_output":
      toolCard(p.tool_call_id).querySelector(".output").textContent = p.output;
      break;
    case "approval_decision": {
      const card = toolCard(p.tool_call_id);
      const ask = card.querySelector(".ask");
      if (ask) ask.remove();
      const head = card.querySelector(".head");
      if (!head.querySelector(".decision")) head.append(el("span", "decision " + p.decision, p.decision));
      break;
    }
    case "request_end":
      if (p.status !== "completed" && p.status !== "aborted") {
        const retry = p.retry_in_ms ? ` (retrying in ${Math.round(p.retry_in_ms / 1000)} s)` : "";
        note(`model request ${p.status}: ${p.error_message || p.message || ""}${retry}`, true);
      }
      break;
    case "abort":
      for (const kind of ["text", "thinking"]) if (open[kind]) open[kind].classList.remove("streaming");
      open.text = open.thinking = null;
      note("stopped" + (p.reason ? ": " + p.reason : ""));
      break;
    case "compaction_begin":
      note("compacting the context…");
      break;
    default:
      break; // token usage, tool lists and the like are not shown
  }
}

// ---- control events ------------------------------------------------------

function askApproval(toolCall) {
  const p = toolCall.payload;
  const card = toolCard(p.tool_call_id, p.name);
  card.querySelector(".args").textContent = p.arguments;
  if (card.querySelector(".ask") || card.querySelector(".decision")) return;
  const ask = el("div", "ask", "Run this tool?");
  for (const decision of ["allow", "deny"]) {
    const button = el("button", decision === "allow" ? "approve" : "deny",
      decision === "allow" ? "Approve" : "Deny");
    button.type = "button";
    button.onclick = async () => {
      ask.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      try {
        await api("POST", `api/sessions/${sessionId}/approvals/${encodeURIComponent(p.tool_call_id)}`, { decision });
      } catch (error) {
        note("approval failed: " + error.message, true);
      }
    };
    ask.append(" ", button);
  }
  card.append(ask);
}

async function renderHistory() {
  const history = await api("GET", `api/sessions/${sessionId}/messages`);
  for (const { tracePosition, ...msg } of history.messages) {
    // The stream's copy has no tracePosition: keyed without it, the two match.
    renderMessage(msg, JSON.stringify(msg));
  }
}

function renderServerEvent(event) {
  if (event.type === "task_state") setStatus(event.state);
  else if (event.type === "approval_request") askApproval(event.toolCall);
  else if (event.type === "resync_required") {
    // The gap is gone from the server's buffer: rebuild from the history.
    logEl.replaceChildren();
    tools.clear();
    shown.clear();
    open.text = open.thinking = null;
    renderHistory().catch((error) => note("history: " + error.message, true));
  }
}

// ---- the sessions, when no ?session= names one ----------------------------

// Session bodies spell modes as the reference does; the selector uses ours.
const MODE_WORDS = { "always-ask": "ask" };

function showMode(mode) {
  const select = $("mode");
  const word = MODE_WORDS[mode] || mode;
  if ([...select.options].some((option) => option.value === word)) select.value = word;
}

function sessionHref(id) {
  const next = new URLSearchParams(params);
  next.set("session", id);
  return "?" + next.toString();
}

async function listSessions() {
  const { sessions } = await api("GET", "api/sessions");
  // Newest first; ISO-8601 UTC times sort as strings.
  sessions.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
  const list = el("nav", "sessions");
  list.append(el("h2", "", sessions.length ? "Sessions" : "No sessions yet: ask something to start one."));
  for (const s of sessions) {
    const link = el("a", "session-link");
    link.href = sessionHref(s.sessionId);
    link.dataset.sessionId = s.sessionId;
    link.append(
      el("span", "id", s.sessionId), " ",
      el("span", "state " + s.status, s.status), " ",
      el("span", "when", s.lastActiveAt || s.createdAt),
    );
    list.append(link);
  }
  logEl.replaceChildren(list);
}

// ---- the session and its stream ------------------------------------------

function connect() {
  if (ready) return ready;
  ready = (async () => {
    if (!sessionId) {
      logEl.replaceChildren(); // the session list gives way to the new conversation
      sessionId = (await api("POST", "api/sessions", {})).session.sessionId;
      params.set("session", sessionId);
      history.replaceState(null, "", "?" + params.toString());
    } else {
      // The selector shows the mode this session runs with, not the page's default.
      showMode((await api("GET", `api/sessions/${sessionId}`)).session.approvalMode);
      await renderHistory();
    }
    $("session").textContent = sessionId;
    document.body.dataset.session = sessionId;
    const query = token ? "?access_token=" + encodeURIComponent(token) : "";
    source = new EventSource(`api/sessions/${sessionId}/stream${query}`);
    source.onmessage = (e) => renderMessage(JSON.parse(e.data), e.data);
    source.addEventListener("server_event", (e) => renderServerEvent(JSON.parse(e.data)));
    source.onerror = () => setStatus(source.readyState === EventSource.CLOSED ? "offline" : "reconnecting");
    await new Promise((resolve) => { source.onopen = resolve; });
  })();
  ready.catch((error) => { ready = null; note("cannot connect: " + error.message, true); setStatus("offline"); });
  return ready;
}

$("composer").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text) return;
  try {
    await connect();
    await api("POST", `api/sessions/${sessionId}/tasks`, {
      input: [{ type: "text", text }],
      approvalMode: $("mode").value,
    });
    $("prompt").value = "";
  } catch (error) {
    note(error.message, true);
  }
});

$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});

$("abort").addEventListener("click", () => {
  api("POST", `api/sessions/${sessionId}/abort`, {}).catch((error) => note(error.message, true));
});

if (sessionId) connect();
else listSessions().catch((error) => note("sessions: " + error.message, true));
