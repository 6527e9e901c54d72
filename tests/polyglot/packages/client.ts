// A Node program that knows omni-grpc only as the npm package: typed imports
// from "omni-grpc" (its .d.ts, through the package's exports), Connect's gRPC
// transport. Prints one JSON line: the session, what streamed, the listing,
// and the exact reference JSON the server sent for the run and the history
// (include_json).
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService, ApprovalMode, type RunResponse } from "omni-grpc";
import { Role } from "omni-grpc/omni/v1/omni_pb";

declare const process: { argv: string[] };

function kindOf(response: RunResponse): string {
  if (response.kind.case === "message") return String(response.kind.value.payload.case);
  return "@" + String(response.kind.value?.kind.case);
}

const client = createClient(
  AgentService,
  createGrpcTransport({ baseUrl: `http://${process.argv[2]}` }),
);
let session = "";
const kinds: string[] = [];
const runJson: string[] = [];
let assistantTexts = 0;
const request = { prompt: "hi from npm", approvalMode: ApprovalMode.ALLOW_ALL, includeJson: true };
for await (const response of client.run(request)) {
  session = response.sessionId;
  runJson.push(response.json);
  kinds.push(kindOf(response));
  const payload = response.kind.case === "message" ? response.kind.value.payload : undefined;
  if (payload?.case === "text" && payload.value.role === Role.ASSISTANT) assistantTexts += 1;
}
const listed = await client.listSessions({});
const historyJson: string[] = [];
for await (const response of client.getHistory({ sessionId: session, includeJson: true })) {
  historyJson.push(response.json);
}
const withoutJson: string[] = [];
for await (const response of client.getHistory({ sessionId: session })) {
  withoutJson.push(response.json);
}
console.log(
  JSON.stringify({
    session,
    kinds,
    assistantTexts,
    listed: listed.sessions.map((s) => s.sessionId),
    runJson,
    historyJson,
    withoutJson,
  }),
);
