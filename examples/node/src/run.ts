import { Code, ConnectError, type Client } from "@connectrpc/connect";
import {
  AgentService,
  ApprovalMode,
  SessionState,
  type AttachResponse,
  type RunResponse,
} from "./gen/omni/v1/agent_service_pb.js";
import { Decision, Role, type OmniMessage } from "./gen/omni/v1/omni_pb.js";

export interface RunOptions {
  approve: boolean;
  abortAfter: number; // call Abort after this many responses (0: never)
  dropAfter: number; // drop the call after this many responses, then Attach
  printJson?: boolean; // print each message's exact JSON (include_json) instead of its text
  printIds?: boolean; // print each response's event id instead of the text
}

const dropped = new Error("connection dropped on purpose");

// Re-attaches in a row that bring nothing new before giving up.
const maxAttempts = 8;

// Tells a broken path from the server's answer. A proxy reports its
// upstream's death as INTERNAL (nginx resets the stream: RST_STREAM
// INTERNAL_ERROR), and having no upstream as UNAVAILABLE (502, 503, 504) or
// UNKNOWN (another HTTP status); the server says UNAVAILABLE while its store
// is away. Any other code is the server's answer, which a retry would not
// change. Attach only reads, so retrying a server's own INTERNAL is harmless,
// and maxAttempts ends a retry that keeps failing. connect-node reports a
// connection reset under the stream as CANCELED (an HTTP/2 CANCEL): one the
// call's own signal did not ask for is a broken path too.
export function resumable(err: unknown, signal?: AbortSignal): boolean {
  if (err === dropped) return true;
  if (!(err instanceof ConnectError)) return false;
  if (err.code === Code.Canceled) return signal !== undefined && !signal.aborted;
  return err.code === Code.Unavailable || err.code === Code.Internal || err.code === Code.Unknown;
}

// Waits before the next attempt: not at all after the first break, then
// 0.25 s doubling up to 4 s, so a replica restarting is not flooded.
const pause = (failed: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, failed === 0 ? 0 : Math.min(250 * 2 ** (failed - 1), 4000)));

// Runs a prompt and follows the task to its end, re-attaching from the last
// event id when the call breaks.
export async function runPrompt(
  client: Client<typeof AgentService>,
  prompt: string,
  options: RunOptions,
): Promise<void> {
  let sessionId = "";
  let lastEventId = "";
  let received = 0;
  let aborting = false;
  let streamedText = false;
  const approved = new Set<string>();

  // Prints or answers one response; true once the task is over.
  const handle = async (r: RunResponse | AttachResponse): Promise<boolean> => {
    if (!sessionId) console.error(`[session] ${r.sessionId}`);
    sessionId = r.sessionId;
    if (r.eventId) lastEventId = r.eventId;
    if (options.printIds) process.stdout.write(`${r.eventId} ${r.kind.case}\n`);
    if (r.kind.case === "message") {
      if (options.printIds) return false;
      if (options.printJson) process.stdout.write(`${r.json}\n`);
      else streamedText = print(r.kind.value, streamedText);
      return false;
    }
    const event = r.kind.value?.kind;
    if (event?.case === "approvalRequest") {
      // snippet:start node-approve
      const call = event.value.toolCall?.payload;
      if (call?.case !== "toolCall") return false;
      const id = call.value.toolCallId;
      // Pending requests are re-sent on Attach; answer each call once.
      if (!options.approve || aborting || approved.has(id)) return false;
      approved.add(id);
      console.error(`[approve] ${call.value.name} ${id}`);
      await client.approve({ sessionId, toolCallId: id, decision: Decision.ALLOW });
      // snippet:end node-approve
    } else if (event?.case === "resyncRequired") {
      console.error("[resync] the event id is gone; GetHistory has the recorded messages");
    } else if (event?.case === "taskState") {
      return event.value.state === SessionState.IDLE;
    }
    return false;
  };

  let over = false; // the task_state IDLE closing the task arrived
  // Reads a Run call to its end: its status, after the task end, tells a
  // failed run (the server could not write the trace) from a finished one.
  // An Attach stream (stopAtIdle) stays open across tasks: leave it there.
  const follow = async (
    stream: AsyncIterable<RunResponse | AttachResponse>,
    drop: AbortController,
    stopAtIdle: boolean,
  ): Promise<void> => {
    for await (const r of stream) {
      if (await handle(r)) {
        over = true;
        if (!stopAtIdle) continue;
        drop.abort();
        return;
      }
      received++;
      if (options.dropAfter > 0 && received === options.dropAfter) {
        drop.abort(dropped);
        throw dropped;
      }
      if (options.abortAfter > 0 && received === options.abortAfter) {
        aborting = true;
        // snippet:start node-abort
        const res = await client.abort({ sessionId, reason: "stopped by omni-client" });
        console.error(`[abort] requested, was running: ${res.wasRunning}`);
        // snippet:end node-abort
      }
    }
  };

  const mode = options.approve || options.abortAfter > 0 ? ApprovalMode.ASK : ApprovalMode.ALLOW_ALL;
  // snippet:start node-run
  let call = new AbortController();
  let attached = false;
  // detachOnCancel keeps the task alive when this call breaks, so it can be re-attached.
  let stream: AsyncIterable<RunResponse | AttachResponse> = client.run(
    { prompt, approvalMode: mode, detachOnCancel: true, includeJson: options.printJson },
    { signal: call.signal },
  );
  for (let failed = 0; ; failed++) {
    const before = received;
    try {
      await follow(stream, call, attached);
      return;
    } catch (err) {
      if (received > before) failed = 0; // it got further: a later break starts the count again
      // After the task end an error is how the run ended, not a lost connection.
      if (!resumable(err, call.signal) || !sessionId || over || failed === maxAttempts) throw err;
      console.error(`[reconnect] attach after ${lastEventId}: ${(err as Error).message}`);
    }
    await pause(failed);
    options.dropAfter = 0;
    call = new AbortController();
    stream = client.attach(
      { sessionId, afterEventId: lastEventId, includeJson: options.printJson },
      { signal: call.signal },
    );
    attached = true;
  }
  // snippet:end node-run
}

// Streamed text goes to stdout as it arrives; complete messages end the line
// or are logged. Returns whether text of the current segment was streamed.
function print(m: OmniMessage, streamedText: boolean): boolean {
  if (m.origin.length > 0) return streamedText; // a subagent's message
  const p = m.payload;
  switch (p.case) {
    case "partialText":
      if (p.value.role !== Role.ASSISTANT) return streamedText;
      process.stdout.write(p.value.text);
      return true;
    case "text":
      if (p.value.role !== Role.ASSISTANT) return streamedText;
      process.stdout.write(streamedText ? "\n" : `${p.value.text}\n`);
      return false;
    case "toolCall":
      console.error(`[tool_call] ${p.value.name} ${p.value.arguments}`);
      break;
    case "approvalDecision":
      console.error(`[decision] ${Decision[p.value.decision]} ${p.value.toolCallId}`);
      break;
    case "toolCallOutput":
      console.error(`[tool_output] ${p.value.output}`);
      break;
    case "abort":
      console.error(`[aborted] ${p.value.reason ?? null}`);
      break;
  }
  return streamedText;
}
