// Tokenizer benchmark: load time of a tokenizer.json and encode/decode throughput on mixed text.
//
//   bench_tokenizer_bench MODEL_DIR [--text FILE] [--make-text FILE] [--min-mb N] [--repeats N]
//
// The text is a list of documents separated by U+001E (record separator). Without --text it is
// built from Debian's license and copyright texts plus the tokenizer test corpus (English, code,
// CJK, emoji, ...), at least --min-mb MB (default 10); --make-text writes it to FILE so that
// tools/bench_tokenizer_js.mjs can run transformers.js on exactly the same input.
#include "lmx/text/tokenizer.h"
#include "lmx/text/tokenizer_unicode.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string source_dir() {
  // bench/tokenizer_bench.cpp -> repository root
  return std::filesystem::path(__FILE__).parent_path().parent_path().string();
}

// Deterministic mixed text: license texts, then copyright files in path order, with a corpus entry
// after every eighth file, until `min_bytes`.
std::vector<std::string> make_documents(size_t min_bytes) {
  std::vector<std::string> corpus;
  {
    std::istringstream lines(read_file(source_dir() + "/tests/data/tokenizer/corpus.jsonl"));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      if (j.contains("text") && !j["text"].get<std::string>().empty()) corpus.push_back(j["text"].get<std::string>());
    }
  }
  std::vector<std::string> paths;
  for (const char* root : {"/usr/share/common-licenses", "/usr/share/doc"}) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec); !ec && it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::string path = it->path().string();
      const std::string name = it->path().filename().string();
      if (std::string(root) == "/usr/share/doc" && name != "copyright") continue;
      paths.push_back(path);
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> docs;
  size_t total = 0, corpus_next = 0;
  for (size_t round = 0; total < min_bytes && round < 100; ++round) {
    for (size_t i = 0; i < paths.size() && total < min_bytes; ++i) {
      std::string doc = lmx::text::to_valid_utf8(read_file(paths[i]));
      std::replace(doc.begin(), doc.end(), '\x1e', ' ');
      if (doc.empty()) continue;
      total += doc.size();
      docs.push_back(std::move(doc));
      if (i % 8 == 7 && !corpus.empty()) {
        docs.push_back(corpus[corpus_next++ % corpus.size()]);
        total += docs.back().size();
      }
    }
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--text FILE] [--make-text FILE] [--min-mb N] [--repeats N]\n", argv[0]);
    return 2;
  }
  const std::string model_dir = argv[1];
  std::string text_file, make_text;
  double min_mb = 10;
  int repeats = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--text") text_file = argv[i + 1];
    else if (flag == "--make-text") make_text = argv[i + 1];
    else if (flag == "--min-mb") min_mb = std::stod(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::max(1, std::stoi(argv[i + 1]));
  }

  std::vector<std::string> docs;
  if (!text_file.empty()) {
    const std::string all = read_file(text_file);
    size_t start = 0;
    while (start <= all.size()) {
      const size_t sep = all.find('\x1e', start);
      docs.push_back(all.substr(start, sep == std::string::npos ? std::string::npos : sep - start));
      if (sep == std::string::npos) break;
      start = sep + 1;
    }
  } else {
    docs = make_documents(static_cast<size_t>(min_mb * 1e6));
  }
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  if (!make_text.empty()) {
    std::ofstream out(make_text, std::ios::binary);
    for (size_t i = 0; i < docs.size(); ++i) {
      if (i) out << '\x1e';
      out << docs[i];
    }
  }

  // Load: best and median of `repeats` loads (the first one also warms the page cache).
  std::vector<double> load_ms;
  lmx::Tokenizer tokenizer = lmx::Tokenizer::load(model_dir);
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    tokenizer = lmx::Tokenizer::load(model_dir);
    load_ms.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(load_ms.begin(), load_ms.end());
  std::error_code size_ec;
  const auto json_size = std::filesystem::file_size(model_dir + "/tokenizer.json", size_ec);

  // Encode documents one call each; the first pass starts with a cold word cache.
  std::vector<double> encode_s;
  size_t tokens = 0;
  std::vector<std::vector<int32_t>> encoded(docs.size());
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    tokens = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      encoded[i] = tokenizer.encode(docs[i], false);
      tokens += encoded[i].size();
    }
    encode_s.push_back(seconds_since(t0));
  }

  // The whole text as one call (one huge BPE word for split-free tokenizers like Gemma).
  std::string joined;
  joined.reserve(bytes + docs.size());
  for (const auto& d : docs) joined += d, joined += '\n';
  const auto t_one = Clock::now();
  const auto one_ids = tokenizer.encode(joined, false);
  const double one_s = seconds_since(t_one);

  const auto t_dec = Clock::now();
  size_t decoded_bytes = 0;
  for (const auto& ids : encoded) decoded_bytes += tokenizer.decode(ids).size();
  const double decode_s = seconds_since(t_dec);

  // FNV-1a over all ids, to compare with tools/bench_tokenizer_js.mjs on the same text.
  uint32_t checksum = 2166136261u;
  for (const auto& ids : encoded) {
    for (const int32_t id : ids) checksum = (checksum ^ static_cast<uint32_t>(id)) * 16777619u;
  }

  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("tokenizer: %s (tokenizer.json %.1f MB)\n", model_dir.c_str(), static_cast<double>(json_size) / 1e6);
  std::printf("text: %zu documents, %.2f MB, %zu tokens (%.2f bytes/token), ids checksum %08x\n", docs.size(), mb, tokens,
              static_cast<double>(bytes) / static_cast<double>(tokens), checksum);
  std::printf("%-34s %12s\n", "measure", "value");
  std::printf("%-34s %9.1f ms\n", "load (median)", load_ms[load_ms.size() / 2]);
  std::printf("%-34s %9.1f ms\n", "load (best)", load_ms.front());
  std::printf("%-34s %7.2f MB/s\n", "encode per document (first pass)", mb / encode_s.front());
  std::printf("%-34s %7.2f MB/s\n", "encode per document (best pass)", mb / *std::min_element(encode_s.begin(), encode_s.end()));
  std::printf("%-34s %7.2f MB/s (%zu tokens)\n", "encode whole text in one call", mb / one_s, one_ids.size());
  std::printf("%-34s %7.2f MB/s\n", "decode per document", static_cast<double>(decoded_bytes) / 1e6 / decode_s);
  return 0;
}
