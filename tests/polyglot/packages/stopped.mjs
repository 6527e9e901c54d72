// The npm package's run() against a server whose trace fills up mid-run: the
// call ends with RESOURCE_EXHAUSTED after the task's IDLE. Prints one JSON
// line: whether the loop threw, the code, and whether IDLE was handed out.
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService, isTaskEnd, run } from "omni-grpc";

const client = createClient(
  AgentService,
  createGrpcTransport({ baseUrl: `http://${process.argv[2]}` }),
);
const kinds = [];
let idle = false;
try {
  for await (const response of run(client, { prompt: "fill it" })) {
    kinds.push(response.kind.case === "message" ? response.kind.value.payload.case : "@event");
    if (isTaskEnd(response)) {
      idle = true;
      break; // a caller that stops at the task end
    }
  }
  console.log(JSON.stringify({ threw: false, idle, kinds }));
} catch (error) {
  console.log(JSON.stringify({ threw: true, idle, kinds, code: error.code, message: error.rawMessage }));
}
