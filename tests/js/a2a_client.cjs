// The official A2A JavaScript SDK (@a2a-js/sdk) as a client of omni-grpc:
// node a2a_client.cjs BASE_URL BINDING EXTENSION_URI
// Resolves the card, streams a message up to its approval request, drops the
// stream, resubscribes, answers the approval, reads the task back, lists the
// context's tasks, then starts a second task and cancels it. Prints one JSON
// object per step on stdout (the Python test checks them).
const { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, RestTransportFactory } =
  require("@a2a-js/sdk/client");
const { GrpcTransportFactory } = require("@a2a-js/sdk/client/grpc");
const {
  CancelTaskRequest,
  GetTaskRequest,
  ListTasksRequest,
  ListTasksResponse,
  SendMessageRequest,
  StreamResponse,
  SubscribeToTaskRequest,
  Task,
} = require("@a2a-js/sdk");

const [base, binding, extension] = process.argv.slice(2);
const lossless = { serviceParameters: { "A2A-Extensions": extension } };
const say = (step, value) => console.log(JSON.stringify({ step, ...value }));
const json = (ev) => StreamResponse.toJSON(ev);
const stateOf = (ev) => {
  const j = json(ev);
  return (j.task || j.statusUpdate || {}).status?.state;
};

async function main() {
  const transports = {
    JSONRPC: new JsonRpcTransportFactory(),
    "HTTP+JSON": new RestTransportFactory(),
    GRPC: new GrpcTransportFactory(),
  };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [transports[binding]],
      preferredTransports: [binding],
    }),
  );
  const client = await factory.createFromUrl(base);
  say("card", { card: await client.getAgentCard() });

  const ask = SendMessageRequest.fromJSON({
    message: { messageId: "js-1", role: "ROLE_USER", parts: [{ text: "list my files" }] },
  });
  const seen = [];
  for await (const ev of client.sendMessageStream(ask, lossless)) {
    seen.push(json(ev));
    if (stateOf(ev) === "TASK_STATE_INPUT_REQUIRED") break; // the connection drops here
  }
  const taskId = seen[0].task.id;
  const contextId = seen[0].task.contextId;
  say("asked", { events: seen });

  const resumed = [];
  const stream = client.resubscribeTask(SubscribeToTaskRequest.fromJSON({ id: taskId }), lossless);
  const first = await stream.next();
  resumed.push(json(first.value));
  const answer = SendMessageRequest.fromJSON({
    message: {
      messageId: "js-answer",
      role: "ROLE_USER",
      taskId,
      parts: [{ data: { decision: "allow" } }],
    },
  });
  const answered = client.sendMessage(answer);
  for await (const ev of stream) resumed.push(json(ev));
  const done = await answered;
  say("resumed", { events: resumed, answered: "task" in done ? Task.toJSON(done) : done });

  const got = await client.getTask(GetTaskRequest.fromJSON({ id: taskId }), lossless);
  say("got", { task: Task.toJSON(got) });
  const listed = await client.listTasks(ListTasksRequest.fromJSON({ contextId, pageSize: 10 }));
  say("listed", { response: ListTasksResponse.toJSON(listed) });

  const again = SendMessageRequest.fromJSON({
    message: { messageId: "js-2", role: "ROLE_USER", contextId, parts: [{ text: "again" }] },
  });
  let second;
  for await (const ev of client.sendMessageStream(again)) {
    second = second || json(ev).task.id;
    if (stateOf(ev) === "TASK_STATE_INPUT_REQUIRED") break;
  }
  const canceled = await client.cancelTask(CancelTaskRequest.fromJSON({ id: second }));
  say("canceled", { task: Task.toJSON(canceled) });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
