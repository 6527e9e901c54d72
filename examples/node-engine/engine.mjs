#!/usr/bin/env node
// An omni-grpc engine in plain Node (no dependencies), speaking the command
// engine protocol (docs/engines-real.md): one "run" request line on stdin,
// OmniMessage JSON lines on stdout, "approval" and "abort" lines on stdin.
//
//   omni-grpc serve --engine "command:node examples/node-engine/engine.mjs"
//
// The agent is deliberately tiny but complete: it streams its answer as
// partial_text fragments, and when asked about files it calls a
// list_directory tool, waits for the approval, runs it inside the workspace,
// and answers from the result. Everything a real wrapper needs is here:
// segment discipline, approvals, abort at any point, token usage.

import { readdir } from "node:fs/promises";
import { createInterface } from "node:readline";

const TOOL = {
  name: "list_directory",
  description: "List the session workspace.",
  parameters: { type: "object", properties: {} },
};

// ---- builders (reference key order) ---------------------------------------------

const now = () => new Date().toISOString();
const model = (payload) => ({ timestamp: now(), type: "model_msg", payload });
const event = (payload) => ({ timestamp: now(), type: "event_msg", payload });
const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");

// ---- stdin: the request, then approvals and abort ---------------------------------

let request = null;
let aborted = null; // the abort reason once the host aborts
const waiting = new Map(); // tool_call_id -> resolve(decision)
let wakeAbort = () => {};
const abortPromise = new Promise((resolve) => (wakeAbort = resolve));
let gotRequest;
const requestPromise = new Promise((resolve) => (gotRequest = resolve));

createInterface({ input: process.stdin }).on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.type === "run") {
    request = msg;
    gotRequest(msg);
  } else if (msg.type === "approval") {
    waiting.get(msg.tool_call_id)?.(msg.decision);
    waiting.delete(msg.tool_call_id);
  } else if (msg.type === "abort") {
    aborted = msg.reason ?? "aborted by user";
    wakeAbort();
  }
});

class Aborted extends Error {}

const pace = () => Number(request?.metadata?.delay_ms ?? 0);

async function tick() {
  // Yield to stdin between fragments so an abort line is seen promptly.
  const ms = pace();
  await Promise.race([new Promise((r) => (ms ? setTimeout(r, ms) : setImmediate(r))), abortPromise]);
  if (aborted !== null) throw new Aborted();
}

// ---- streaming helpers ------------------------------------------------------------------

let open = null; // the text fragment currently open: { kind, text }
let requestOpen = false;

async function streamText(text) {
  open = { kind: "text", text: "" };
  send(model({ type: "partial_text", role: "assistant", event_type: "start", text: "", stop_reason: "completed" }));
  for (const word of text.match(/\S+\s*/g) ?? [""]) {
    await tick();
    open.text += word;
    send(model({ type: "partial_text", role: "assistant", event_type: "delta", text: word, stop_reason: "completed" }));
  }
  closeText("completed");
}

function closeText(stopReason) {
  const text = open.text;
  open = null;
  send(model({ type: "partial_text", role: "assistant", event_type: "stop", text: "", stop_reason: stopReason }));
  send(model({ type: "text", role: "assistant", text, stop_reason: stopReason }));
}

async function streamToolCall(id, name, args) {
  const base = { type: "partial_tool_call", role: "assistant" };
  send(model({ ...base, event_type: "start", name, arguments: "", tool_call_id: id, stop_reason: "completed" }));
  await tick();
  send(model({ ...base, event_type: "delta", name, arguments: args, tool_call_id: id, stop_reason: "completed" }));
  send(model({ ...base, event_type: "stop", name, arguments: "", tool_call_id: id, stop_reason: "completed" }));
  const call = model({ type: "tool_call", role: "assistant", name, arguments: args, tool_call_id: id, stop_reason: "completed" });
  send(call);
  return call;
}

let usage = { cache_read: 0, cache_write: 0, output: 0, total: 0 };

function endRequest(promptTokens, outputTokens) {
  const req = { cache_read: 0, cache_write: promptTokens, output: outputTokens, total: promptTokens + outputTokens };
  usage = Object.fromEntries(Object.keys(usage).map((k) => [k, usage[k] + req[k]]));
  send(event({ type: "token_usage", session: usage, request: req }));
  send(event({ type: "request_end", status: "completed" }));
}

function decisionFor(id) {
  return Promise.race([new Promise((resolve) => waiting.set(id, resolve)), abortPromise.then(() => null)]);
}

// ---- the agent ------------------------------------------------------------------------

async function agent(prompt, workspace) {
  send(event({ type: "tool_list_ready", tools: [TOOL] }));
  send(event({ type: "request_begin" }));
  requestOpen = true;
  const wantsFiles = /\b(files?|list|ls|directory)\b/i.test(prompt);
  if (!wantsFiles) {
    await streamText(`You said: ${prompt}`);
    endRequest(prompt.length, prompt.split(/\s+/).length + 2);
    requestOpen = false;
    return;
  }
  await streamText("Let me look at the workspace.");
  const id = "call_" + Math.random().toString(16).slice(2, 10);
  await streamToolCall(id, TOOL.name, "{}");
  const decision = await decisionFor(id);
  if (decision === null) throw new Aborted();
  send(event({ type: "approval_decision", decision, tool_call_id: id }));
  endRequest(prompt.length, 12);
  requestOpen = false;

  let output;
  let names = []; // the listing itself: the placeholder for an empty one is not an entry
  if (decision === "allow") {
    names = (await readdir(workspace, { withFileTypes: true })).map((e) => (e.isDirectory() ? e.name + "/" : e.name)).sort();
    output = names.length ? names.join("\n") : "[empty directory]";
    send(model({ type: "tool_call_output", role: "user", output, tool_call_id: id, stop_reason: "completed" }));
  } else {
    output = decision === "forbidden" ? "Tool call denied by policy." : "Tool call denied by user.";
    send(model({ type: "tool_call_output", role: "user", output, tool_call_id: id, stop_reason: "aborted" }));
  }

  send(event({ type: "request_begin" }));
  requestOpen = true;
  const answer = decision !== "allow"
    ? "Understood, I will not look."
    : names.length === 0
      ? "The workspace is empty."
      : `The workspace holds ${names.length} ${names.length === 1 ? "entry" : "entries"}: ${names.join(", ")}.`;
  await streamText(answer);
  endRequest(prompt.length + output.length, answer.split(/\s+/).length);
  requestOpen = false;
}

async function main() {
  const req = await requestPromise;
  if (req.protocol !== 1) {
    process.stderr.write(`unsupported protocol ${req.protocol}\n`);
    process.exit(2);
  }
  const prompt = req.input
    .filter((m) => m.payload.type === "text")
    .map((m) => m.payload.text)
    .join("\n");
  try {
    await agent(prompt, req.workspace);
  } catch (err) {
    if (!(err instanceof Aborted)) throw err;
    if (open) closeText("aborted");
    if (requestOpen) send(event({ type: "request_end", status: "aborted" }));
    send(event({ type: "abort", reason: aborted }));
  }
  // The run is over: exiting ends it (stdout is flushed first).
  process.stdout.end(() => process.exit(0));
}

main().catch((err) => {
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exit(1);
});
