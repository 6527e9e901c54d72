// How a Node service uses the omni-grpc stubs (protobuf-es v2 + Connect):
//
//   node dist/client.js run [--addr HOST:PORT] [--protocol P] [--tls-ca FILE] [--approve]
//                           [--abort-after N] [--drop-after N] [--print-json] [--print-ids] PROMPT
//     --protocol grpc (HTTP/2, the gRPC port; the default), connect (proto),
//     connect-json or grpc-web (HTTP/1.1, the HTTP port); --tls-ca FILE: over TLS,
//     trusting that CA (a load balancer's)
//   node dist/client.js trace FILE.binpb   # print a trace written by `omni-grpc convert`
//   node dist/client.js echo               # delimited OmniMessages: stdin -> parse -> stdout
//
// run prints the streamed assistant text on stdout and what happens around
// it (session, tool calls, approvals, reconnects, abort) on stderr.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createClient } from "@connectrpc/connect";
import type { Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { AgentService } from "./gen/omni/v1/agent_service_pb.js";
import { runPrompt } from "./run.js";
import { echo, printTrace } from "./trace.js";

// A reader that stops early (`client.js trace X.binpb | head`) closes the pipe;
// that ends the output, not an error worth a stack trace. Node ignores
// SIGPIPE, so the write fails with EPIPE instead: exit quietly, as cat(1) would.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code === "EPIPE") process.exit(0);
  throw err;
});

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === "trace" && rest.length === 1) {
    return printTrace(rest[0]);
  }
  if (command === "echo") {
    return echo(process.stdin, process.stdout);
  }
  if (command !== "run") {
    throw new Error("usage: client.js run [options] PROMPT | trace FILE | echo");
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      addr: { type: "string", default: "127.0.0.1:50051" },
      approve: { type: "boolean", default: false },
      "abort-after": { type: "string", default: "0" },
      "drop-after": { type: "string", default: "0" },
      protocol: { type: "string", default: "grpc" },
      "print-json": { type: "boolean", default: false },
      "print-ids": { type: "boolean", default: false },
      "tls-ca": { type: "string" },
    },
  });
  if (positionals.length !== 1) {
    throw new Error("run needs exactly one PROMPT");
  }
  // snippet:start node-client
  // Connect's gRPC transport speaks HTTP/2 (h2c on loopback).
  const ca = values["tls-ca"] === undefined ? undefined : readFileSync(values["tls-ca"]);
  const baseUrl = `${ca === undefined ? "http" : "https"}://${values.addr}`;
  const transport = transportFor(values.protocol ?? "grpc", baseUrl, ca);
  await runPrompt(createClient(AgentService, transport), positionals[0], {
  // snippet:end node-client
    approve: values.approve ?? false,
    printJson: values["print-json"] ?? false,
    printIds: values["print-ids"] ?? false,
    abortAfter: Number(values["abort-after"]),
    dropAfter: Number(values["drop-after"]),
  });
}

// snippet:start node-transports
// The same client over any of the server's protocols: gRPC on the gRPC port,
// Connect or gRPC-Web on the HTTP port (HTTP/1.1, as from a browser or a proxy
// that strips HTTP/2 trailers).
// The server's message size limit (2 x the 64 MiB record limit + 1 MiB).
const maxBytes = { readMaxBytes: 129 * 1024 * 1024, writeMaxBytes: 129 * 1024 * 1024 };

function transportFor(protocol: string, baseUrl: string, ca?: Buffer): Transport {
  const options = { baseUrl, ...maxBytes, ...(ca === undefined ? {} : { nodeOptions: { ca } }) };
  switch (protocol) {
    case "grpc":
      return createGrpcTransport(options);
    case "connect":
      return createConnectTransport({ ...options, httpVersion: "1.1", useBinaryFormat: true });
    case "connect-json":
      return createConnectTransport({ ...options, httpVersion: "1.1", useBinaryFormat: false });
    case "grpc-web":
      return createGrpcWebTransport({ ...options, httpVersion: "1.1" });
  }
  throw new Error(`--protocol must be grpc, connect, connect-json or grpc-web, not ${protocol}`);
}
// snippet:end node-transports

main(process.argv.slice(2)).catch((err: unknown) => {
  console.error("client.js:", err instanceof Error ? err.message : err);
  process.exit(1);
});
