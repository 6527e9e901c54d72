// Run and Attach as async iterables that stop cleanly.
//
// Connect cancels a server stream only through an AbortSignal: breaking out
// of a bare `for await (... of client.attach(...))` leaves the HTTP/2 stream
// open, so Node never exits. These helpers give each call its own
// AbortController, aborted when the caller's `signal` fires or when the caller
// stops iterating (break, return, throw), so the stream is cancelled either
// way. A stop the caller asked for ends the loop quietly; any other failure is
// thrown as Connect's ConnectError.
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  AgentService,
  AttachRequestSchema,
  RunRequestSchema,
  SessionState,
  type AttachResponse,
  type RunResponse,
} from "./omni/v1/agent_service_pb.js";

export type AgentClient = Client<typeof AgentService>;

export interface FollowOptions {
  /** Aborting it cancels the call and ends the loop without an error. */
  signal?: AbortSignal;
  /** Extra request headers (e.g. `authorization: Bearer ...`). */
  headers?: Record<string, string>;
}

/** The codes a stream that broke on the way ends with: Unavailable from a
 * lost connection or a replica going away, Internal from nginx's RST_STREAM
 * when its upstream died, Unknown from a stream reset mid-message. Any other
 * code is the server's answer, and asking again would get it again. */
export const RESUMABLE_CODES: ReadonlySet<Code> = new Set([
  Code.Unavailable,
  Code.Internal,
  Code.Unknown,
]);

export interface ResumeOptions {
  /** Re-attaches in a row without an event before the error is thrown (8). */
  attempts?: number;
  /** Called before each re-attach, with the error and the id it resumes after. */
  onResume?: (error: ConnectError, attempt: number, lastEventId: string) => void;
}

/** The server event that closes a task: `task_state` with state IDLE. */
export function isTaskEnd(response: RunResponse | AttachResponse): boolean {
  if (response.kind.case !== "event") return false;
  const event = response.kind.value.kind;
  return event.case === "taskState" && event.value.state === SessionState.IDLE;
}

async function* follow<T>(
  open: (signal: AbortSignal) => AsyncIterable<T>,
  options: FollowOptions,
  last: (item: T) => boolean,
): AsyncGenerator<T, void, undefined> {
  const controller = new AbortController();
  const outer = options.signal;
  const relay = () => controller.abort(outer?.reason);
  if (outer?.aborted) relay();
  else outer?.addEventListener("abort", relay, { once: true });
  try {
    for await (const item of open(controller.signal)) {
      yield item;
      if (last(item)) return;
    }
  } catch (error) {
    if (!outer?.aborted) throw error;
  } finally {
    outer?.removeEventListener("abort", relay);
    controller.abort();
  }
}

/** One task, from its first response to its closing `task_state` IDLE.
 *
 * The closing IDLE is handed out only once the call has ended well. A run the
 * server had to stop (its trace could not be written) also closes with IDLE,
 * and only the call's status after it says so: in that case the loop throws
 * the ConnectError instead of yielding IDLE, so a caller that breaks at
 * `isTaskEnd` cannot take the failure for success. */
export async function* run(
  client: AgentClient,
  request: MessageInitShape<typeof RunRequestSchema>,
  options: FollowOptions = {},
): AsyncGenerator<RunResponse, void, undefined> {
  let held: RunResponse | undefined;
  // The server ends a Run call right after the task's IDLE: read to the end.
  for await (const response of follow(
    (signal) => client.run(request, { signal, headers: options.headers }),
    options,
    () => false,
  )) {
    if (held !== undefined) {
      yield held;
      held = undefined;
    }
    if (isTaskEnd(response)) held = response;
    else yield response;
  }
  if (held !== undefined) yield held;
}

/** A session's events across tasks; it ends when you stop reading or abort
 * `signal` (or with `untilTaskEnd`, at the end of the current task).
 *
 * With `resume`, a stream that breaks with one of `RESUMABLE_CODES` (or is
 * Canceled without the caller's `signal`: a lost connection) is attached again after the last event id received (0.25 s doubling up to 4 s
 * apart), so nothing is lost or repeated while the server still buffers the
 * gap; after `attempts` tries in a row without an event the error is thrown. */
export function attach(
  client: AgentClient,
  request: MessageInitShape<typeof AttachRequestSchema>,
  options: FollowOptions & { untilTaskEnd?: boolean; resume?: boolean | ResumeOptions } = {},
): AsyncGenerator<AttachResponse, void, undefined> {
  const once = (after: string) =>
    follow(
      (signal) =>
        client.attach({ ...request, afterEventId: after }, { signal, headers: options.headers }),
      options,
      (response) => options.untilTaskEnd === true && isTaskEnd(response),
    );
  if (!options.resume) return once(request.afterEventId ?? "");
  const resume = options.resume === true ? {} : options.resume;
  return resuming(once, request.afterEventId ?? "", resume, options.signal);
}

async function* resuming(
  once: (after: string) => AsyncGenerator<AttachResponse, void, undefined>,
  after: string,
  resume: ResumeOptions,
  signal: AbortSignal | undefined,
): AsyncGenerator<AttachResponse, void, undefined> {
  const attempts = resume.attempts ?? 8;
  let last = after;
  let failed = 0;
  let pause = 250;
  for (;;) {
    try {
      for await (const response of once(last)) {
        failed = 0;
        pause = 250;
        if (response.eventId) last = response.eventId;
        yield response;
      }
      return;
    } catch (error) {
      const broken = ConnectError.from(error);
      // connect-node reports the connection under the stream lost as Canceled
      // (an HTTP/2 CANCEL): one the caller did not ask for is a broken stream.
      const lost = broken.code === Code.Canceled && !signal?.aborted;
      const resumable = RESUMABLE_CODES.has(broken.code) || lost;
      if (!resumable || failed >= attempts || signal?.aborted) throw error;
      failed += 1;
      resume.onResume?.(broken, failed, last);
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, 4000);
    }
  }
}
