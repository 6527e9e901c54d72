// Writes protocol-shaped lines the way JavaScript does: corpus messages whose
// leaves are swapped for awkward values of the same JSON type, with unknown
// keys, shuffled keys and random fidelity objects, all through JSON.stringify.
// Usage: node mutate_corpus.mjs SEED COUNT < corpus.jsonl > lines.jsonl
import { readFileSync } from "node:fs";

const [seed, count] = process.argv.slice(2).map(Number);
let state = seed >>> 0;
const rand = () => {
  // mulberry32: small, seeded, good enough to pick cases
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (xs) => xs[Math.floor(rand() * xs.length)];

const NUMBERS = [0, -0, 1, -1, 1.5, 0.1, 1.5e-7, 1e-7, 1e-6, 1e21, 1e20, 123456789012345680000,
  2 ** 53, 2 ** 53 + 2, -(2 ** 63), 2 ** 64, 5e-324, 1.7976931348623157e308, 42, 1000000];
const STRINGS = ["", "plain", "é😀", "\u0000\u001f\u007f", "line\nbreak\t\"q\"\\", "\ud800",
  "a\udc00b", "\u2028\u2029", "<script>", "{\"json\":1}", "日本語"];
const randomNumber = () => {
  if (rand() < 0.6) return pick(NUMBERS);
  const bits = new DataView(new ArrayBuffer(8));
  bits.setUint32(0, Math.floor(rand() * 2 ** 32));
  bits.setUint32(4, Math.floor(rand() * 2 ** 32));
  const x = bits.getFloat64(0);
  return Number.isFinite(x) ? x : 3.25;
};
const randomString = () => pick(STRINGS) + (rand() < 0.3 ? pick(STRINGS) : "");
const randomValue = (depth = 0) => {
  const r = rand();
  if (depth > 2 || r < 0.5) return pick([null, true, false, randomNumber(), randomString()]);
  if (r < 0.75) return Array.from({ length: Math.floor(rand() * 4) }, () => randomValue(depth + 1));
  const o = {};
  for (let i = Math.floor(rand() * 4); i > 0; i--) o[randomString() + i] = randomValue(depth + 1);
  return o;
};
const shuffle = (o) => {
  const keys = Object.keys(o);
  for (let i = keys.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [keys[i], keys[j]] = [keys[j], keys[i]];
  }
  return Object.fromEntries(keys.map((k) => [k, o[k]]));
};
// Keep the discriminators ("type") and the integer-ness of nothing: any
// number is a JS number. Strings stay strings, numbers stay numbers.
const mutate = (value, key) => {
  if (key === "type") return value;
  if (typeof value === "string") return rand() < 0.3 ? randomString() : value;
  if (typeof value === "number") return rand() < 0.5 ? randomNumber() : value;
  if (Array.isArray(value)) return value.map((v) => mutate(v, ""));
  if (value && typeof value === "object") {
    let o = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, mutate(v, k)]));
    if (rand() < 0.15) o["x_" + randomString()] = randomValue();
    if (rand() < 0.2) o = shuffle(o);
    return o;
  }
  return value;
};

const corpus = readFileSync(0, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const out = [];
for (let i = 0; i < count; i++) {
  const msg = mutate(structuredClone(pick(corpus)), "");
  const p = msg.payload;
  if (p && ["text", "thinking", "tool_call", "inline_data"].includes(p.type) && rand() < 0.5) {
    p.fidelity = randomValue(1) ?? {};
    if (typeof p.fidelity !== "object" || Array.isArray(p.fidelity)) p.fidelity = { v: p.fidelity };
  }
  if (rand() < 0.05) msg.payload = { type: "future_kind_" + i, data: randomValue() };
  out.push(JSON.stringify(msg));
}
process.stdout.write(out.join("\n") + "\n");
