// The page's AgentService client, apart from the page: which transport a
// protocol name means, and how a run is followed to its end across dropped
// connections (Run, then Attach after the last event id).
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import {
  AgentService,
  ApprovalMode,
  SessionState,
  type AttachResponse,
  type RunResponse,
} from "./gen/omni/v1/agent_service_pb.js";
import type { OmniMessage, ToolCall } from "./gen/omni/v1/omni_pb.js";

export type Agent = Client<typeof AgentService>;
export const PROTOCOLS = ["connect", "connect-json", "grpc-web"] as const;
export type Protocol = (typeof PROTOCOLS)[number];

// snippet:start browser-transport
// A browser speaks Connect or gRPC-Web to the server's HTTP port (the page's
// origin must be in the server's --cors-origin); the bearer token goes in a
// header on every call, which CORS lets through for allowed origins only.
export function connectAgent(protocol: Protocol, baseUrl: string, token: string): Agent {
  const bearer: Interceptor = (next) => (req) => {
    if (token) req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
  const options = { baseUrl, interceptors: [bearer] };
  let transport: Transport;
  switch (protocol) {
    case "connect":
      transport = createConnectTransport({ ...options, useBinaryFormat: true });
      break;
    case "connect-json":
      transport = createConnectTransport({ ...options, useBinaryFormat: false });
      break;
    case "grpc-web":
      transport = createGrpcWebTransport(options);
      break;
  }
  return createClient(AgentService, transport);
}
// snippet:end browser-transport

// What a followed run tells the page, as it happens.
export interface RunEvents {
  session(id: string): void;
  // Every event as it arrives (messages, approval requests, task states): the
  // id a re-attach resumes after.
  event(eventId: string): void;
  // A whole or partial message; json is its exact trace line (include_json).
  message(m: OmniMessage, json: string, eventId: string): void;
  // A tool call waits for Approve. Sent again after a re-attach while it still waits.
  approval(call: ToolCall): void;
  state(state: SessionState): void;
  reconnecting(afterEventId: string, attempt: number): void;
}

// Connections re-made in a row without an event in between before the page
// gives up on the run (the server keeps it going; the page can Attach later).
const MAX_ATTEMPTS = 5;

// A lost connection, not an answer from the server. fetch() reports a
// dropped connection as a TypeError, which Connect turns into Unknown; a
// stream cut before its end-of-stream message is Unknown too. The server
// itself never answers Unknown, so retrying it repeats no refused call.
function lostConnection(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return code === Code.Unavailable || code === Code.Unknown;
}

// Runs a prompt (in a new session, or the one named) and follows the task to its end (resolves on task_state
// idle, throws when the server refused or ended the call with an error).
// signal stops following: the run goes on on the server (detach_on_cancel).
export async function followRun(
  agent: Agent,
  run: { prompt: string; mode: ApprovalMode; sessionId?: string },
  events: RunEvents,
  signal: AbortSignal,
): Promise<string> {
  let sessionId = "";
  let lastEventId = "";
  let over = false; // the task_state IDLE closing the task arrived
  let attempts = 0;

  const handle = (r: RunResponse | AttachResponse): boolean => {
    if (!sessionId) events.session(r.sessionId);
    sessionId = r.sessionId;
    if (r.eventId) {
      lastEventId = r.eventId;
      events.event(r.eventId);
    }
    attempts = 0;
    if (r.kind.case === "message") {
      events.message(r.kind.value, r.json, r.eventId);
      return false;
    }
    const event = r.kind.value?.kind;
    if (event?.case === "approvalRequest") {
      const call = event.value.toolCall?.payload;
      if (call?.case === "toolCall") events.approval(call.value);
    } else if (event?.case === "taskState") {
      events.state(event.value.state);
      return event.value.state === SessionState.IDLE;
    }
    return false;
  };

  // snippet:start browser-run
  let call = new AbortController();
  const stop = () => call.abort();
  signal.addEventListener("abort", stop);
  try {
    // detachOnCancel keeps the task alive when this connection drops, so the
    // page can re-attach; includeJson adds each message's trace bytes.
    let stream: AsyncIterable<RunResponse | AttachResponse> = agent.run(
      {
        prompt: run.prompt,
        sessionId: run.sessionId ?? "",
        approvalMode: run.mode,
        detachOnCancel: true,
        includeJson: true,
      },
      { signal: call.signal },
    );
    let attached = false;
    for (;;) {
      try {
        for await (const r of stream) {
          if (handle(r)) {
            over = true;
            // An Attach stream stays open for the session's next task: leave it.
            if (attached) return sessionId;
          }
        }
        return sessionId; // the Run call ended well after the task's end
      } catch (err) {
        if (signal.aborted || over || !sessionId || !lostConnection(err)) throw err;
        if (++attempts > MAX_ATTEMPTS) throw err;
      }
      events.reconnecting(lastEventId, attempts);
      await new Promise((done) => setTimeout(done, 200 * 2 ** (attempts - 1)));
      call = new AbortController();
      stream = agent.attach(
        { sessionId, afterEventId: lastEventId, includeJson: true },
        { signal: call.signal },
      );
      attached = true;
    }
  } finally {
    signal.removeEventListener("abort", stop);
    call.abort(); // closes an Attach left open, a no-op on an ended call
  }
  // snippet:end browser-run
}
