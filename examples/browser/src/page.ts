// The page: a prompt, the streamed reply, the run's events, a card per tool
// call that waits for approval, and Abort. Where to connect comes from the
// query string: ?server=http://127.0.0.1:8080&protocol=connect&token=...
// (protocol: connect, connect-json or grpc-web; token: the server's bearer token).
import { ConnectError } from "@connectrpc/connect";
import { ApprovalMode, SessionState } from "./gen/omni/v1/agent_service_pb.js";
import { Decision, Role, type OmniMessage, type ToolCall } from "./gen/omni/v1/omni_pb.js";
import { PROTOCOLS, connectAgent, followRun, type Protocol } from "./agent.js";

const params = new URLSearchParams(location.search);
const server = params.get("server") ?? "http://127.0.0.1:8080";
const protocol = (params.get("protocol") ?? "connect") as Protocol;
if (!PROTOCOLS.includes(protocol)) throw new Error(`protocol must be one of ${PROTOCOLS.join(", ")}`);
const agent = connectAgent(protocol, server, params.get("token") ?? "");

// What the page received, in order, for a look from the devtools console:
// each message's event id and exact trace line (include_json).
interface Received {
  eventId: string;
  json: string;
}
declare global {
  interface Window {
    omniReceived: Received[];
  }
}
window.omniReceived = [];

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const body = document.body.dataset;
const reply = $<HTMLDivElement>("reply");
const approvals = $<HTMLDivElement>("approvals");
const abortButton = $<HTMLButtonElement>("abort");
const sendButton = $<HTMLButtonElement>("send");
$("server").textContent = server;
$("protocol").textContent = protocol;

function logEvent(text: string): void {
  const item = document.createElement("li");
  item.textContent = text;
  $("events").append(item);
}

// A card with Approve and Deny for a tool call the server holds back.
// Re-sent requests (after a re-attach) find their card already there.
function showApproval(sessionId: string, call: ToolCall): void {
  if (approvals.querySelector(`[data-call="${CSS.escape(call.toolCallId)}"]`)) return;
  const card = document.createElement("div");
  card.className = "approval";
  card.dataset.call = call.toolCallId;
  const name = document.createElement("strong");
  name.textContent = call.name;
  const args = document.createElement("code");
  args.textContent = call.arguments;
  card.append(name, args);
  for (const [label, decision] of [
    ["Approve", Decision.ALLOW],
    ["Deny", Decision.DENY],
  ] as const) {
    const button = document.createElement("button");
    button.textContent = label;
    button.className = label.toLowerCase();
    button.addEventListener("click", async () => {
      card.querySelectorAll("button").forEach((b) => (b.disabled = true));
      // snippet:start browser-approve
      await agent.approve({ sessionId, toolCallId: call.toolCallId, decision });
      // snippet:end browser-approve
    });
    card.append(button);
  }
  approvals.append(card);
}

function showMessage(m: OmniMessage): void {
  if (m.origin.length > 0) return; // a subagent's message
  const p = m.payload;
  switch (p.case) {
    case "partialText":
      if (p.value.role === Role.ASSISTANT) reply.textContent += p.value.text;
      return;
    case "text":
      if (p.value.role !== Role.ASSISTANT) return;
      // The whole message replaces what streamed in, so a reply that streamed
      // partly before a dropped connection still ends up whole.
      reply.textContent = p.value.text;
      logEvent(`text: ${p.value.text}`);
      reply.dataset.done = "true";
      return;
    case "toolCall":
      logEvent(`tool_call: ${p.value.name} ${p.value.arguments}`);
      return;
    case "toolCallOutput":
      logEvent(`tool_output: ${p.value.output}`);
      return;
    case "approvalDecision":
      approvals.querySelector(`[data-call="${CSS.escape(p.value.toolCallId)}"]`)?.remove();
      logEvent(`decision: ${Decision[p.value.decision]} ${p.value.toolCallId}`);
      return;
    case "abort":
      body.aborted = "true";
      logEvent(`aborted: ${p.value.reason ?? ""}`);
      return;
  }
}

let sessionId = "";
let following: AbortController | null = null;

$<HTMLFormElement>("run").addEventListener("submit", async (e) => {
  e.preventDefault();
  if (following) return;
  const prompt = $<HTMLInputElement>("prompt").value;
  const mode = $<HTMLInputElement>("ask").checked ? ApprovalMode.ASK : ApprovalMode.ALLOW_ALL;
  following = new AbortController();
  reply.textContent = "";
  delete reply.dataset.done;
  delete body.error;
  delete body.aborted;
  body.state = "running";
  sendButton.disabled = true;
  abortButton.disabled = false;
  try {
    // A later prompt goes on in the same session (the conversation so far).
    await followRun(
      agent,
      { prompt, mode, sessionId },
      {
        session(id) {
          sessionId = id;
          body.session = id;
        },
        event(eventId) {
          body.lastEvent = eventId;
        },
        message(m, json, eventId) {
          // Partial messages stream the text; no trace records them.
          if (!m.payload.case?.startsWith("partial")) window.omniReceived.push({ eventId, json });
          showMessage(m);
        },
        approval: (call) => showApproval(sessionId, call),
        state(state) {
          if (state === SessionState.IDLE) body.state = "idle";
        },
        reconnecting(after, attempt) {
          body.reconnects = String(Number(body.reconnects ?? 0) + 1);
          logEvent(`reconnecting (attempt ${attempt}) after event ${after}`);
        },
      },
      following.signal,
    );
  } catch (err) {
    body.state = "failed";
    body.error = ConnectError.from(err).message;
    logEvent(`error: ${body.error}`);
  } finally {
    following = null;
    sendButton.disabled = false;
    abortButton.disabled = true;
  }
});

abortButton.addEventListener("click", async () => {
  if (!sessionId) return;
  abortButton.disabled = true;
  // snippet:start browser-abort
  const res = await agent.abort({ sessionId, reason: "stopped in the browser" });
  // snippet:end browser-abort
  logEvent(`abort requested, was running: ${res.wasRunning}`);
});
