// A .binpb reader built from the generated stubs and protobuf-es alone, as a
// third party would write one: sizeDelimitedDecodeStream with its defaults.
// None of the examples' helper code (no inflating); it follows
// docs/traces.md for base64Values. Output as tests/polyglot/stubonly/reader.go
// describes: "record N ARM", "b64 N PATH TEXT"; a record it cannot parse gives
// "record N: ERROR" on stderr and exit 3, a placeholder that names no entry
// or the wrong bytes "record N PATH: ERROR" and exit 4. Run from a directory
// holding the compiled stubs (dist/gen) and node_modules.
import { crc32 } from "node:zlib";
import { sizeDelimitedDecodeStream } from "@bufbuild/protobuf/wire";
import { OmniMessageSchema } from "./dist/gen/omni/v1/omni_pb.js";

const MARK = "\u0000base64:";
const FIDELITY = new Set(["text", "thinking", "inlineThinking", "inlineData", "toolCall"]);
const snake = (name) => name.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());

// The strings a placeholder may stand in, with their JSON Pointers
// (protobuf-es gives a Struct as a plain JSON object).
function slots(m) {
  const out = [];
  const { case: arm, value } = m.payload;
  if (arm === "imageUrl") out.push(["/payload/image_url", value.imageUrl]);
  if (arm === "inlineData" || arm === "inlineThinking") out.push(["/payload/data", value.data]);
  if (arm === "toolCallOutput") value.images.forEach((s, i) => out.push([`/payload/images/${i}`, s]));
  const walk = (v, path) => {
    if (typeof v === "string") out.push([path, v]);
    else if (Array.isArray(v)) v.forEach((item, i) => walk(item, `${path}/${i}`));
    else if (v !== null && typeof v === "object") {
      for (const key of Object.keys(v).sort()) {
        walk(v[key], `${path}/${key.replaceAll("~", "~0").replaceAll("/", "~1")}`);
      }
    }
  };
  if (FIDELITY.has(arm) && value.fidelity !== undefined) walk(value.fidelity, "/payload/fidelity");
  return out;
}

function resolve(placeholder, hints) {
  const parts = placeholder.slice(MARK.length).split(":");
  if (parts.length !== 2 || !/^(0|[1-9][0-9]*)$/.test(parts[0])) throw new Error("malformed placeholder");
  const h = hints[Number(parts[0])];
  if (h === undefined) throw new Error("placeholder names no entry");
  if ((crc32(h.data) >>> 0).toString(16).padStart(8, "0") !== parts[1]) {
    throw new Error("placeholder's CRC is not its entry's");
  }
  const text = Buffer.from(h.data).toString("base64");
  return h.prefix + (h.urlSafe ? text.replaceAll("+", "-").replaceAll("/", "_") : text);
}

let n = 0;
const lines = [];
try {
  for await (const m of sizeDelimitedDecodeStream(OmniMessageSchema, process.stdin)) {
    n += 1;
    lines.push(`record\t${n}\t${m.payload.case === undefined ? "none" : snake(m.payload.case)}\n`);
    for (const [path, text] of slots(m)) {
      if (!text.startsWith(MARK)) continue;
      let back;
      try {
        back = resolve(text, m.base64Values);
      } catch (err) {
        process.stdout.write(lines.join(""));
        process.stderr.write(`record ${n} ${path}: ${err.message}\n`);
        process.exit(4);
      }
      lines.push(`b64\t${n}\t${path}\t${back}\n`);
    }
  }
} catch (err) {
  process.stdout.write(lines.join(""));
  process.stderr.write(`record ${n + 1}: ${err}\n`);
  process.exit(3);
}
process.stdout.write(lines.join(""));
