// A .binpb reader built from the generated stubs and protobuf-es alone, as a
// third party would write one: sizeDelimitedDecodeStream with its defaults.
// None of the examples' helper code (no inflating, no base64Values
// handling). Output as tests/polyglot/stubonly/reader.go describes:
// "record N ARM", "b64 N PATH SEEN TEXT"; a record it cannot parse gives
// "record N: ERROR" on stderr and exit 3. Run from a directory holding the
// compiled stubs (dist/gen) and node_modules.
import { sizeDelimitedDecodeStream } from "@bufbuild/protobuf/wire";
import { OmniMessageSchema } from "./dist/gen/omni/v1/omni_pb.js";

const FIDELITY = new Set(["text", "thinking", "inlineThinking", "inlineData", "toolCall"]);
const snake = (name) => name.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());

// Walks a /payload/fidelity/... JSON Pointer through the fidelity Struct
// (protobuf-es gives a Struct as a plain JSON object).
function seen(m, path) {
  const prefix = "/payload/fidelity/";
  const fidelity = FIDELITY.has(m.payload.case) ? m.payload.value.fidelity : undefined;
  if (fidelity === undefined || !path.startsWith(prefix)) return "MISSING";
  let value = fidelity;
  for (const raw of path.slice(prefix.length).split("/")) {
    const part = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(value)) {
      if (!/^(0|[1-9][0-9]*)$/.test(part) || Number(part) >= value.length) return "MISSING";
      value = value[Number(part)];
    } else if (value !== null && typeof value === "object") {
      if (!Object.hasOwn(value, part)) return "MISSING";
      value = value[part];
    } else {
      return "MISSING";
    }
  }
  return typeof value === "string" ? "=" + value : "MISSING";
}

let n = 0;
const lines = [];
try {
  for await (const m of sizeDelimitedDecodeStream(OmniMessageSchema, process.stdin)) {
    n += 1;
    lines.push(`record\t${n}\t${m.payload.case === undefined ? "none" : snake(m.payload.case)}\n`);
    for (const h of m.base64Values) {
      const text = Buffer.from(h.data).toString("base64");
      lines.push(`b64\t${n}\t${h.path}\t${seen(m, h.path)}\t${text}\n`);
    }
  }
} catch (err) {
  process.stdout.write(lines.join(""));
  process.stderr.write(`record ${n + 1}: ${err}\n`);
  process.exit(3);
}
process.stdout.write(lines.join(""));
