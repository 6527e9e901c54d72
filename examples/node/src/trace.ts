import { createReadStream } from "node:fs";
import { inflateSync } from "node:zlib";
import type { Readable, Writable } from "node:stream";
import type { JsonObject } from "@bufbuild/protobuf";
import { fromBinary } from "@bufbuild/protobuf";
import { sizeDelimitedDecodeStream, sizeDelimitedEncode } from "@bufbuild/protobuf/wire";
import { OmniMessageSchema, type OmniMessage } from "./gen/omni/v1/omni_pb.js";

// Prints one line per message of a varint-delimited .binpb trace: number,
// timestamp, payload kind (the proto field name), then text and fidelity.
export async function printTrace(path: string): Promise<void> {
  // snippet:start node-trace
  let n = 0;
  for await (const r of sizeDelimitedDecodeStream(OmniMessageSchema, createReadStream(path))) {
    const m = inflated(r);
    process.stdout.write(`#${++n} ${m.timestamp} ${describe(m)}\n`);
  }
  // snippet:end node-trace
}

// A large record may be stored compressed: an OmniMessage holding only
// zlibRecord, the zlib stream of the record's bytes. This gives the record.
// snippet:start node-record
export function inflated(m: OmniMessage): OmniMessage {
  if (m.zlibRecord.length === 0) return m;
  const record = inflateSync(m.zlibRecord, { maxOutputLength: 64 << 20 });
  return fromBinary(OmniMessageSchema, record);
}
// snippet:end node-record

function describe(m: OmniMessage): string {
  const p = m.payload;
  if (p.case === undefined) throw new Error(`message ${m.timestamp} has no payload`);
  // The oneof case is the field's localName (camelCase); show the proto name.
  const parts = [OmniMessageSchema.fields.find((f) => f.localName === p.case)!.name];
  let fidelity: JsonObject | undefined;
  switch (p.case) {
    case "text":
      parts.push(`text=${JSON.stringify(p.value.text)}`);
      fidelity = p.value.fidelity;
      break;
    case "toolCall":
      parts.push(`name=${JSON.stringify(p.value.name)}`);
      fidelity = p.value.fidelity;
      break;
    case "thinking":
    case "inlineData":
    case "inlineThinking":
      fidelity = p.value.fidelity;
      break;
    case "unknown":
      parts.push(`type=${JSON.stringify(p.value.type)}`);
      break;
  }
  // protobuf-es v2 gives google.protobuf.Struct as a plain JsonObject.
  if (fidelity !== undefined) parts.push(`fidelity=${JSON.stringify(fidelity)}`);
  return parts.join(" ");
}

// Parses every delimited OmniMessage on input and writes it back,
// re-serialized from the typed message.
export async function echo(input: Readable, output: Writable): Promise<void> {
  const chunks: Uint8Array[] = [];
  for await (const m of sizeDelimitedDecodeStream(OmniMessageSchema, input)) {
    chunks.push(sizeDelimitedEncode(OmniMessageSchema, inflated(m)));
  }
  await new Promise<void>((resolve, reject) =>
    output.write(Buffer.concat(chunks), (err) => (err ? reject(err) : resolve())),
  );
}
