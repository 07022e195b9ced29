#!/usr/bin/env node
// transformers.js (@lenml/tokenizers) side of the tokenizer benchmark: load time and encode
// throughput on the same text as bench/tokenizer_bench.cpp.
//
// Usage: node tools/bench_tokenizer_js.mjs NAME TEXT_FILE [REPEATS]
//   NAME       fixture name: gemma3 | llama3 | qwen3 (tests/fixtures must be npm-installed)
//   TEXT_FILE  documents separated by U+001E, as written by `bench_tokenizer_bench DIR --make-text FILE`
import fs from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { loadTokenizer } from "./make_tokenizer_goldens.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const [name, textFile, repeatsArg] = process.argv.slice(2);
if (!name || !textFile) {
  console.error("usage: node tools/bench_tokenizer_js.mjs NAME TEXT_FILE [REPEATS]");
  process.exit(2);
}
const repeats = Number(repeatsArg ?? 3);
const docs = fs.readFileSync(textFile, "utf8").split("\x1e");
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, "utf8"), 0);

// Load = reading and parsing tokenizer.json + tokenizer_config.json and building the tokenizer.
const loads = [];
let tok;
for (let r = 0; r < repeats; ++r) {
  const t0 = performance.now();
  tok = loadTokenizer(name);
  loads.push(performance.now() - t0);
}
loads.sort((a, b) => a - b);

const passes = [];
let tokens = 0;
let checksum = 0;
for (let r = 0; r < repeats; ++r) {
  const t0 = performance.now();
  tokens = 0;
  const all = [];
  for (const d of docs) {
    const ids = tok.encode(d, { add_special_tokens: false });
    tokens += ids.length;
    all.push(ids);
  }
  passes.push((performance.now() - t0) / 1e3);
  // FNV-1a over all ids, as bench/tokenizer_bench.cpp prints it.
  checksum = 2166136261;
  for (const ids of all) for (const id of ids) checksum = Math.imul(checksum ^ id, 16777619) >>> 0;
}
const mb = bytes / 1e6;
console.log(`tokenizer: ${name} via transformers.js (${path.relative(root, textFile)})`);
console.log(`text: ${docs.length} documents, ${mb.toFixed(2)} MB, ${tokens} tokens, ids checksum ${checksum.toString(16).padStart(8, "0")}`);
console.log(`load (median)                      ${loads[Math.floor(loads.length / 2)].toFixed(1)} ms`);
console.log(`load (best)                        ${loads[0].toFixed(1)} ms`);
console.log(`encode per document (first pass)   ${(mb / passes[0]).toFixed(2)} MB/s`);
console.log(`encode per document (best pass)    ${(mb / Math.min(...passes)).toFixed(2)} MB/s`);
