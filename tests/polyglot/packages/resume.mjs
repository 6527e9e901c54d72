// The npm package's attach() with `resume` through a link the test drops:
// one JSON line per event ({"id", "kind"}) and per re-attach ({"resumed"}),
// flushed as they come, so the test can act between them; then {"done"}.
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService, attach } from "omni-grpc";

const [target, sessionId] = process.argv.slice(2);
const client = createClient(AgentService, createGrpcTransport({ baseUrl: `http://${target}` }));
const say = (line) => process.stdout.write(JSON.stringify(line) + "\n");
const resume = {
  onResume: (error, attempt, last) => say({ resumed: error.code, attempt, last }),
};
for await (const response of attach(client, { sessionId }, { untilTaskEnd: true, resume })) {
  const kind = response.kind.case === "message" ? response.kind.value.payload.case : `@${response.kind.value.kind.case}`;
  say({ id: response.eventId, kind });
}
say({ done: true });
