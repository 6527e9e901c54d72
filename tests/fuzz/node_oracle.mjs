// The oracle for tests/fuzz/test_node_oracle.py: what JavaScript makes of a
// JSON text. Each stdin line is a JSON string holding the text x; each stdout
// line is the JSON string of JSON.stringify(JSON.parse(x)), or null when
// JSON.parse refuses x.
import { createInterface } from "node:readline";

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  let out = null;
  try {
    out = JSON.stringify(JSON.parse(JSON.parse(line)));
  } catch {
    out = null;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
