// An A2A client of omni-grpc, with the official JavaScript SDK (npm install @a2a-js/sdk).
//
//   node examples/a2a/client.cjs http://127.0.0.1:8080 "What is in my workspace?"
//
// Streams the task, printing the answer as it arrives; when the agent asks to
// approve a tool call (TASK_STATE_INPUT_REQUIRED) it answers "allow" on the task.
const { ClientFactory } = require("@a2a-js/sdk/client");
const { SendMessageRequest, StreamResponse } = require("@a2a-js/sdk");

async function main(url, prompt) {
  const client = await new ClientFactory().createFromUrl(url);
  let request = SendMessageRequest.fromJSON({
    message: { messageId: "prompt-1", role: "ROLE_USER", parts: [{ text: prompt }] },
  });
  while (request) {
    const stream = client.sendMessageStream(request);
    request = undefined;
    for await (const raw of stream) {
      const event = StreamResponse.toJSON(raw);
      const chunk = event.artifactUpdate;
      if (chunk && chunk.artifact.name === "text") {
        process.stdout.write(chunk.artifact.parts.map((p) => p.text).join("") + (chunk.lastChunk ? "\n" : ""));
      }
      const status = event.statusUpdate && event.statusUpdate.status;
      if (status && status.state === "TASK_STATE_INPUT_REQUIRED") {
        console.log("[approving the tool call]");
        request = SendMessageRequest.fromJSON({
          message: {
            messageId: "answer-1",
            role: "ROLE_USER",
            taskId: event.statusUpdate.taskId,
            parts: [{ data: { decision: "allow" } }],
          },
        });
        break; // the answer's own stream goes on with the task
      }
      if (status && ["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"].includes(status.state)) {
        console.log(`[${status.state}]`);
      }
    }
  }
}

main(process.argv[2], process.argv[3] || "hi").catch((err) => {
  console.error(err);
  process.exit(1);
});
