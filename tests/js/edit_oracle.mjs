// What JavaScript gives for an edit of a message: reads one JSON object per
// line on stdin, {"line": <the JSONL line>, "ops": [...]}, applies the ops to
// JSON.parse(line) as a program editing the object would, and writes
// {"out": JSON.stringify(result)} per line (tests/test_trace_binpb_edits.py).
// An op names a container by its keys and indexes from the payload:
//   ["remove", path, i]       splice out item i of the array at path
//   ["insert", path, i, v]    splice v in before item i
//   ["move", path, i, j]      take item i out, put it back before item j
//   ["rename", path, a, b]    the object's key a renamed to b (delete, assign)
//   ["delete", path, k]       delete key k
//   ["copy", from, path, k]   the value at from, copied to key k
//   ["set", path, k, v]       assign v to key k
import { createInterface } from "node:readline";

const at = (root, path) => path.reduce((node, part) => node[part], root);

function apply(payload, op) {
  const [kind, path] = op;
  const node = at(payload, kind === "copy" ? op[2] : path);
  switch (kind) {
    case "remove":
      node.splice(op[2], 1);
      break;
    case "insert":
      node.splice(op[2], 0, op[3]);
      break;
    case "move": {
      const [item] = node.splice(op[2], 1);
      node.splice(op[3], 0, item);
      break;
    }
    case "rename": {
      const value = node[op[2]];
      delete node[op[2]];
      node[op[3]] = value;
      break;
    }
    case "delete":
      delete node[op[2]];
      break;
    case "copy":
      node[op[3]] = structuredClone(at(payload, op[1]));
      break;
    case "set":
      node[op[2]] = op[3];
      break;
    default:
      throw new Error(`unknown op ${kind}`);
  }
}

for await (const text of createInterface({ input: process.stdin })) {
  const { line, ops } = JSON.parse(text);
  const obj = JSON.parse(line);
  for (const op of ops) apply(obj.payload, op);
  process.stdout.write(JSON.stringify({ out: JSON.stringify(obj) }) + "\n");
}
