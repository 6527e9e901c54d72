import { createReadStream } from "node:fs";
import { crc32, inflateSync } from "node:zlib";
import type { Readable, Writable } from "node:stream";
import type { JsonObject } from "@bufbuild/protobuf";
import { fromBinary } from "@bufbuild/protobuf";
import { sizeDelimitedEncode, sizeDelimitedPeek } from "@bufbuild/protobuf/wire";
import { OmniMessageSchema, type OmniMessage } from "./gen/omni/v1/omni_pb.js";

// Prints one line per message of a varint-delimited .binpb trace: number,
// timestamp, payload kind (the proto field name), then text and fidelity.
export async function printTrace(path: string): Promise<void> {
  // snippet:start node-trace
  let n = 0;
  for await (const m of readRecords(createReadStream(path))) {
    process.stdout.write(`#${++n} ${m.timestamp} ${describe(m)}\n`);
  }
  // snippet:end node-trace
}

// The records of a .binpb stream. A large record may be stored compressed:
// a 0x00 byte then the zlib stream of the record's bytes (records of tool
// definitions, by default: field number 0, so no message parser reads it by
// mistake), or an OmniMessage holding only zlibRecord (written with
// --compress). Each is inflated and parsed as the record.
// snippet:start node-record
export async function* readRecords(input: AsyncIterable<Uint8Array>): AsyncGenerator<OmniMessage> {
  let buf = new Uint8Array(0);
  for await (const chunk of input) {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    for (;;) {
      const { size, offset } = sizeDelimitedPeek(buf);
      if (size === null || offset === null) break; // the length is not all here yet
      if (size > 64 << 20) throw new Error(`record of ${size} bytes exceeds 64 MiB`);
      if (buf.length < offset + size) break;
      yield record(buf.subarray(offset, offset + size));
      buf = buf.subarray(offset + size);
    }
  }
  if (buf.length > 0) throw new Error(`truncated record: ${buf.length} bytes left over`);
}

function record(body: Uint8Array): OmniMessage {
  const limit = { maxOutputLength: 64 << 20 };
  const m = fromBinary(
    OmniMessageSchema,
    body.length > 0 && body[0] === 0 ? inflateSync(body.subarray(1), limit) : body,
  );
  if (m.zlibRecord.length === 0) return m;
  return fromBinary(OmniMessageSchema, inflateSync(m.zlibRecord, limit));
}
// snippet:end node-record

// Puts back each string a .binpb record stores as bytes (base64Values):
// where the text stood, the string holds a placeholder
// "\u0000base64:INDEX:CRC" naming its entry, whose text is prefix +
// base64(data) (the URL-safe alphabet when urlSafe). The placeholder moves
// with its value under any edit; one that names no entry, or whose CRC-32 is
// not its entry's (copied from another record), is an error.
export function withBase64<T>(view: T, m: OmniMessage): T {
  const mark = "\u0000base64:";
  const put = (v: unknown): unknown => {
    if (typeof v === "string") {
      if (!v.startsWith(mark) || m.base64Values.length === 0) return v;
      const parts = v.slice(mark.length).split(":");
      const h = /^(0|[1-9][0-9]*)$/.test(parts[0]) ? m.base64Values[Number(parts[0])] : undefined;
      if (parts.length !== 2 || h === undefined) {
        throw new Error(`a base64 placeholder names no entry: ${JSON.stringify(v)}`);
      }
      if ((crc32(h.data) >>> 0).toString(16).padStart(8, "0") !== parts[1]) {
        throw new Error(`a base64 placeholder's CRC is not its entry's: ${JSON.stringify(v)}`);
      }
      const text = Buffer.from(h.data).toString("base64");
      return h.prefix + (h.urlSafe ? text.replaceAll("+", "-").replaceAll("/", "_") : text);
    }
    if (Array.isArray(v)) return v.map(put);
    if (v !== null && typeof v === "object") {
      return Object.fromEntries(Object.entries(v).map(([k, item]) => [k, put(item)]));
    }
    return v;
  };
  return put(view) as T;
}

// A default .binpb record stores a fidelity_json once: its Struct holds only
// this key (true) in place of the view that repeated the text.
const ELIDED = "\u0000fidelity_json";

// The Struct view built from fidelity_json (values nested deeper than the
// view's 16 levels read as null, as in the Struct), with the keys a program
// set beside the marker over it.
function fromExactText(text: string, beside: JsonObject): JsonObject {
  if (text === "") throw new Error("fidelity's Struct was left out for fidelity_json, which is empty");
  const cut = (v: unknown, level: number): unknown => {
    if (v === null || typeof v !== "object") return v;
    if (level > 16) return null;
    if (Array.isArray(v)) return v.map((item) => cut(item, level + 1));
    return Object.fromEntries(Object.entries(v).map(([k, item]) => [k, cut(item, level + 1)]));
  };
  const view = cut(JSON.parse(text), 1) as JsonObject;
  for (const [key, value] of Object.entries(beside)) if (key !== ELIDED) view[key] = value;
  return view;
}

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
  if (fidelity !== undefined && Object.hasOwn(fidelity, ELIDED)) {
    fidelity = fromExactText((p.value as { fidelityJson: string }).fidelityJson, fidelity);
  }
  if (fidelity !== undefined) parts.push(`fidelity=${JSON.stringify(withBase64(fidelity, m))}`);
  return parts.join(" ");
}

// Parses every delimited OmniMessage on input and writes it back,
// re-serialized from the typed message.
export async function echo(input: Readable, output: Writable): Promise<void> {
  const chunks: Uint8Array[] = [];
  for await (const m of readRecords(input)) {
    chunks.push(sizeDelimitedEncode(OmniMessageSchema, m));
  }
  await new Promise<void>((resolve, reject) =>
    output.write(Buffer.concat(chunks), (err) => (err ? reject(err) : resolve())),
  );
}
