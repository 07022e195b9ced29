// BPE model: loading of vocab/merges from tokenizer.json and HF-exact word merging with a cache.
#include "lmx/text/bpe.h"

#include "lmx/text/bpe_word_cache.h"

#include "lmx/core/error.h"
#include "lmx/io/json_input.h"
#include "lmx/text/tokenizer_json.h"
#include "lmx/text/tokenizer_unicode.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <queue>
#include <string>
#include <thread>

namespace lmx::text {

namespace {

constexpr int32_t kMaxTokenId = (1 << 26) - 1;  // refuses absurd ids that would blow up tables
constexpr size_t kCacheMaxWordBytes = 256;      // HF's MAX_LENGTH for cached words
constexpr size_t kHeapThreshold = 64;  // symbols from which the heap merge beats rescans
constexpr uint32_t kNoMerge = ~uint32_t{0};

std::atomic<uint64_t> next_instance_id{1};

// The calling thread's word cache, emptied when it last served another model instance.
BpeWordCache& thread_word_cache(uint64_t owner) {
  thread_local BpeWordCache cache;
  thread_local uint64_t cache_owner = 0;
  if (cache_owner != owner) {
    cache.clear();
    cache_owner = owner;
  }
  return cache;
}

bool json_bool(std::string_view raw, std::string_view field) {
  if (raw == "true") return true;
  if (raw == "false" || raw == "null") return false;
  throw FormatError(fmt::format("tokenizer.json: model.{} must be a boolean, got {}", field, raw));
}

// Optional string field: null or a string.
std::optional<std::string> optional_string(JsonScanner& json, std::string_view field) {
  if (json.consume_null()) return std::nullopt;
  if (json.peek() != '"') {
    throw FormatError(fmt::format("tokenizer.json: model.{} must be a string or null", field));
  }
  std::string scratch;
  return std::string(json.read_string(scratch));
}

bool is_single_code_point(std::string_view s) {
  return !s.empty() && utf8_length(static_cast<unsigned char>(s[0])) == s.size();
}

}  // namespace

std::string_view BpeModel::store(std::string_view token) {
  if (blocks_.empty() || block_used_ + token.size() > block_size_) {
    block_size_ = std::max<size_t>(1 << 20, token.size());
    blocks_.push_back(std::make_unique<char[]>(block_size_));
    block_used_ = 0;
  }
  char* dst = blocks_.back().get() + block_used_;
  if (!token.empty()) std::memcpy(dst, token.data(), token.size());
  block_used_ += token.size();
  return {dst, token.size()};
}

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(tokens_.size()) || tokens_[id].data() == nullptr) return std::nullopt;
  return tokens_[id];
}

std::unique_ptr<BpeModel> BpeModel::parse(JsonScanner& json) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  model->instance_id_ = next_instance_id.fetch_add(1);
  std::optional<std::string_view> deferred_merges;
  bool has_vocab = false, has_merges = false;
  std::string type = "BPE";
  std::string scratch;
  std::string_view key;
  json.begin_object();
  while (json.next_member(key, scratch)) {
    const std::string field(key);
    if (field == "type") {
      std::string s;
      type = std::string(json.read_string(s));
      if (type == "WordPiece" || type == "WordLevel" || type == "Unigram") {
        throw Unsupported(fmt::format("tokenizer.json: model type '{}' is not supported (only BPE)", type));
      }
      LMX_REQUIRE(FormatError, type == "BPE", "tokenizer.json: unknown model type '{}'", type);
    } else if (field == "dropout") {
      const std::string raw(json.skip_value());
      if (raw != "null") {
        double dropout = 0;
        try {
          dropout = parse_json(raw, "tokenizer.json model.dropout").get<double>();
        } catch (const std::exception&) {
          throw FormatError(fmt::format("tokenizer.json: model.dropout must be a number or null, got {}", raw));
        }
        LMX_REQUIRE(Unsupported, dropout == 0.0, "tokenizer.json: BPE dropout {} is not supported (must be null)", dropout);
      }
    } else if (field == "unk_token") {
      model->unk_token_ = optional_string(json, field);
    } else if (field == "continuing_subword_prefix") {
      model->continuing_subword_prefix_ = optional_string(json, field).value_or("");
    } else if (field == "end_of_word_suffix") {
      model->end_of_word_suffix_ = optional_string(json, field).value_or("");
    } else if (field == "fuse_unk") {
      model->fuse_unk_ = json_bool(json.skip_value(), field);
    } else if (field == "byte_fallback") {
      model->byte_fallback_ = json_bool(json.skip_value(), field);
    } else if (field == "ignore_merges") {
      model->ignore_merges_ = json_bool(json.skip_value(), field);
    } else if (field == "vocab") {
      model->parse_vocab(json);
      has_vocab = true;
    } else if (field == "merges") {
      has_merges = true;
      if (has_vocab) model->parse_merges(json);
      else deferred_merges = json.skip_value();
    } else {
      json.skip_value();
    }
  }
  LMX_REQUIRE(FormatError, has_vocab, "tokenizer.json: model (BPE) has no vocab");
  LMX_REQUIRE(FormatError, has_merges, "tokenizer.json: model (BPE) has no merges");
  if (deferred_merges) {
    JsonScanner merges_json(*deferred_merges, json.file());
    model->parse_merges(merges_json);
  }
  model->finish_setup();
  return model;
}

void BpeModel::parse_vocab(JsonScanner& json) {
  LMX_REQUIRE(FormatError, json.peek() == '{', "tokenizer.json: model.vocab must be an object of token -> id");
  // Scan first, then insert in batches so that the hash-table cache misses overlap.
  std::vector<std::pair<std::string_view, int32_t>> entries;
  std::string scratch;
  std::string_view token;
  int32_t max_id = -1;
  json.begin_object();
  while (json.next_member(token, scratch)) {
    const auto id = static_cast<int32_t>(json.read_integer(0, kMaxTokenId));
    entries.emplace_back(store(token), id);
    max_id = std::max(max_id, id);
  }
  vocab_.reserve(vocab_.size() + entries.size());
  if (max_id >= static_cast<int32_t>(tokens_.size())) tokens_.resize(static_cast<size_t>(max_id) + 1);
  constexpr size_t kBatch = 16;
  uint64_t hashes[kBatch];
  for (size_t start = 0; start < entries.size(); start += kBatch) {
    const size_t n = std::min(kBatch, entries.size() - start);
    for (size_t k = 0; k < n; ++k) {
      hashes[k] = hash_bytes(entries[start + k].first);
      vocab_.prefetch_slot(hashes[k]);
    }
    for (size_t k = 0; k < n; ++k) {
      const auto& [stored, id] = entries[start + k];
      vocab_.insert(stored, hashes[k], id);
      tokens_[id] = stored;
    }
  }
}

void BpeModel::parse_merges(JsonScanner& json) {
  LMX_REQUIRE(FormatError, json.peek() == '[', "tokenizer.json: model.merges must be an array");
  // 1. Scan the parts of every merge. Views point into the JSON text, or into `escaped` for the
  // rare parts written with escapes.
  struct Parts {
    std::string_view a, b;
    uint32_t index;  // position in the JSON array, for errors
  };
  std::vector<Parts> parts;
  std::vector<std::unique_ptr<std::string>> escaped;
  const auto keep = [&](std::string_view v, const std::string& scratch) -> std::string_view {
    if (v.data() != scratch.data()) return v;
    escaped.push_back(std::make_unique<std::string>(v));
    return *escaped.back();
  };
  std::string scratch_a, scratch_b;
  uint32_t index = 0;
  json.begin_array();
  while (json.next_element()) {
    if (json.peek() == '"') {
      const std::string_view line = keep(json.read_string(scratch_a), scratch_a);
      if (line.starts_with("#version")) {
        ++index;
        continue;
      }
      const size_t space = line.find(' ');
      LMX_REQUIRE(FormatError, space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos,
                           "tokenizer.json: model.merges[{}] '{}' is not two tokens separated by one space", index, line);
      parts.push_back({line.substr(0, space), line.substr(space + 1), index});
    } else if (json.peek() == '[') {
      json.begin_array();
      LMX_REQUIRE(FormatError, json.next_element() && json.peek() == '"', "tokenizer.json: model.merges[{}] must be a pair of tokens", index);
      const std::string_view a = keep(json.read_string(scratch_a), scratch_a);
      LMX_REQUIRE(FormatError, json.next_element() && json.peek() == '"', "tokenizer.json: model.merges[{}] must be a pair of tokens", index);
      const std::string_view b = keep(json.read_string(scratch_b), scratch_b);
      LMX_REQUIRE(FormatError, !json.next_element(), "tokenizer.json: model.merges[{}] must be a pair of tokens", index);
      parts.push_back({a, b, index});
    } else {
      throw FormatError(fmt::format("tokenizer.json: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", index));
    }
    ++index;
  }

  // 2. Resolve the ids of both parts and of their concatenation (-1 when absent), in batches and,
  // for large files, on several threads: the vocab lookups dominate loading.
  const size_t prefix_length = continuing_subword_prefix_.size();
  const size_t count = parts.size();
  std::vector<int32_t> a_ids(count), b_ids(count), new_ids(count);
  const auto resolve = [&](size_t begin, size_t end) {
    constexpr size_t kBatch = 256;
    std::vector<std::string_view> keys(kBatch);
    std::vector<size_t> offsets(kBatch + 1);
    std::string merged;
    for (size_t start = begin; start < end; start += kBatch) {
      const size_t n = std::min(kBatch, end - start);
      for (size_t k = 0; k < n; ++k) keys[k] = parts[start + k].a;
      vocab_.find_many(keys.data(), n, a_ids.data() + start);
      for (size_t k = 0; k < n; ++k) keys[k] = parts[start + k].b;
      vocab_.find_many(keys.data(), n, b_ids.data() + start);
      merged.clear();
      for (size_t k = 0; k < n; ++k) {
        const Parts& p = parts[start + k];
        offsets[k] = merged.size();
        merged.append(p.a).append(p.b.substr(std::min(prefix_length, p.b.size())));
      }
      offsets[n] = merged.size();
      for (size_t k = 0; k < n; ++k) keys[k] = std::string_view(merged).substr(offsets[k], offsets[k + 1] - offsets[k]);
      vocab_.find_many(keys.data(), n, new_ids.data() + start);
    }
  };
  const size_t threads = count < (size_t{1} << 17) ? 1 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(resolve, count * t / threads, count * (t + 1) / threads);
  resolve(0, count / threads);
  for (auto& w : workers) w.join();

  std::vector<uint64_t> merge_keys, merge_values;
  merge_keys.reserve(count);
  merge_values.reserve(count);
  merge_pairs_.reserve(merge_pairs_.size() + count);
  junctions_.reserve(4096);
  std::string merged;
  for (size_t k = 0; k < count; ++k) {
    const Parts& p = parts[k];
    LMX_REQUIRE(FormatError, a_ids[k] >= 0, "tokenizer.json: model.merges[{}]: token '{}' is not in the vocab", p.index, p.a);
    LMX_REQUIRE(FormatError, b_ids[k] >= 0, "tokenizer.json: model.merges[{}]: token '{}' is not in the vocab", p.index, p.b);
    LMX_REQUIRE(FormatError, p.b.size() >= prefix_length,
                         "tokenizer.json: model.merges[{}]: token '{}' is shorter than the subword prefix", p.index, p.b);
    if (new_ids[k] < 0) {
      merged.assign(p.a).append(p.b.substr(prefix_length));
      throw FormatError(fmt::format("tokenizer.json: model.merges[{}]: merged token '{}' is not in the vocab", p.index, merged));
    }
    const auto rank = static_cast<uint32_t>(merge_keys.size());
    merge_keys.push_back(static_cast<uint64_t>(static_cast<uint32_t>(a_ids[k])) << 32 | static_cast<uint32_t>(b_ids[k]));
    merge_values.push_back(static_cast<uint64_t>(rank) << 32 | static_cast<uint32_t>(new_ids[k]));
    merge_pairs_.emplace_back(a_ids[k], b_ids[k]);
    // The characters a merge joins: the last of its left part and the first of its right part.
    if (p.a.empty() || p.b.empty()) {
      merge_with_empty_part_ = true;
      continue;
    }
    size_t last = p.a.size() - 1;
    while (last > 0 && (static_cast<unsigned char>(p.a[last]) & 0xC0) == 0x80) --last;
    size_t pos = 0;
    const char32_t left_cp = next_code_point(p.a.substr(last), pos);
    pos = 0;
    const char32_t right_cp = next_code_point(p.b, pos);
    junctions_.insert(static_cast<uint64_t>(left_cp) << 21 | right_cp, 1);
  }

  // 3. The merge table; a pair listed twice keeps its last rank, as HF's HashMap collect does.
  merges_.reserve(merge_keys.size());
  constexpr size_t kAhead = 32;
  for (size_t i = 0; i < merge_keys.size(); ++i) {
    if (i + kAhead < merge_keys.size()) merges_.prefetch(merge_keys[i + kAhead]);
    merges_.insert(merge_keys[i], merge_values[i]);
  }
}

void BpeModel::finish_setup() {
  char_ids_.assign(0x110000, -1);
  for (int32_t id = 0; id < static_cast<int32_t>(tokens_.size()); ++id) {
    const std::string_view t = tokens_[id];
    if (t.data() == nullptr || !is_single_code_point(t)) continue;
    size_t pos = 0;
    const char32_t cp = next_code_point(t, pos);
    // The vocab map decides which id a duplicated string has; keep the table consistent with it.
    if (cp < 0x110000) char_ids_[cp] = vocab_.find(t);
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = byte_fallback_ ? vocab_.find(fmt::format("<0x{:02X}>", b)) : -1;
  }

  // Chunking needs every merge part to be the literal text of its characters: no subword
  // prefix/suffix, and no merge involving the unk token or a byte-fallback token.
  chunking_ = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  std::vector<bool> symbolic(tokens_.size(), false);
  if (unk_token_) {
    const int32_t unk_id = vocab_.find(*unk_token_);
    if (unk_id >= 0) symbolic[unk_id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    if (byte_ids_[b] >= 0) symbolic[byte_ids_[b]] = true;
  }
  if (merge_with_empty_part_) chunking_ = false;
  for (const auto& [left, right] : merge_pairs_) {
    if (!chunking_) break;
    if (symbolic[left] || symbolic[right]) chunking_ = false;
  }
  if (!chunking_) junctions_ = U64Map{};
  merge_pairs_.clear();
  merge_pairs_.shrink_to_fit();
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (!chunking_ || word.size() <= kCacheMaxWordBytes) {
    const uint64_t h = hash_bytes(word);
    if (ignore_merges_) {
      const int32_t id = vocab_.find(word, h);
      if (id >= 0) {
        ids.push_back(id);
        return;
      }
    }
    merge_word_cached(word, h, ids);
    return;
  }
  if (ignore_merges_) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  // Cut between characters a|b where a is a vocab character and no merge joins a to b.
  size_t chunk_start = 0;
  size_t pos = 0;
  char32_t previous = next_code_point(word, pos);
  while (pos < word.size()) {
    const size_t boundary = pos;
    const char32_t current = next_code_point(word, pos);
    if (char_ids_[previous] >= 0 && junctions_.find(static_cast<uint64_t>(previous) << 21 | current) == nullptr) {
      const std::string_view chunk = word.substr(chunk_start, boundary - chunk_start);
      merge_word_cached(chunk, hash_bytes(chunk), ids);
      chunk_start = boundary;
    }
    previous = current;
  }
  const std::string_view chunk = word.substr(chunk_start);
  merge_word_cached(chunk, hash_bytes(chunk), ids);
}

void BpeModel::merge_word_cached(std::string_view word, uint64_t h, std::vector<int32_t>& ids) const {
  if (word.size() > kCacheMaxWordBytes) {
    merge_word(word, ids);
    return;
  }
  BpeWordCache& cache = thread_word_cache(instance_id_);
  if (cache.find(word, h, ids)) return;
  const size_t first = ids.size();
  merge_word(word, ids);
  cache.insert(word, h, ids.data() + first, ids.size() - first);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  thread_local std::vector<int32_t> symbols;
  thread_local std::string symbol;
  symbols.clear();
  const bool plain = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  int32_t pending_unk = -1;  // an unk symbol not yet emitted (HF fuses consecutive ones)
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    const char32_t cp = next_code_point(word, pos);
    std::string_view text = word.substr(start, pos - start);
    int32_t id;
    if (plain) {
      id = char_ids_[cp];
    } else {
      symbol.clear();
      if (start != 0) symbol += continuing_subword_prefix_;
      symbol.append(text);
      if (pos == word.size()) symbol += end_of_word_suffix_;
      text = symbol;
      id = vocab_.find(text);
    }
    if (id >= 0) {
      if (pending_unk >= 0) {
        symbols.push_back(pending_unk);
        pending_unk = -1;
      }
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (const char c : text) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // As HF, a pending unk is not flushed before byte tokens.
        for (const char c : text) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_token_) {
      const int32_t unk_id = vocab_.find(*unk_token_);
      LMX_REQUIRE(InvalidArgument, unk_id >= 0, "tokenizer: unk token '{}' is not in the vocab", *unk_token_);
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = unk_id;
    }
    // Without an unk token an unknown character produces nothing, as in HF.
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
  apply_merges(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

void BpeModel::apply_merges(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2 || merges_.size() == 0) return;
  if (symbols.size() > kHeapThreshold) {
    apply_merges_heap(symbols);
    return;
  }
  // ranks[i] / merged[i]: the merge of the pair (symbols[i], symbols[i + 1]).
  uint32_t ranks[kHeapThreshold];
  int32_t merged[kHeapThreshold];
  size_t n = symbols.size();
  const auto set_pair = [&](size_t i) {
    const uint64_t* m = find_merge(symbols[i], symbols[i + 1]);
    ranks[i] = m ? static_cast<uint32_t>(*m >> 32) : kNoMerge;
    merged[i] = m ? static_cast<int32_t>(static_cast<uint32_t>(*m)) : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) set_pair(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoMerge) break;
    symbols[best] = merged[best];
    // Remove symbol best + 1 and the pair that started at it.
    for (size_t i = best + 1; i + 1 < n; ++i) symbols[i] = symbols[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) set_pair(best - 1);
    if (best + 1 < n) set_pair(best);
  }
  symbols.resize(n);
}

void BpeModel::apply_merges_heap(std::vector<int32_t>& symbols) const {
  // HF's Word::merge_all: a min-heap of (rank, position) candidates; stale ones are skipped when
  // their pair no longer has that rank.
  const size_t n = symbols.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::vector<uint64_t> heap;
  heap.reserve(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const uint64_t* m = find_merge(symbols[i], symbols[i + 1])) heap.push_back((*m >> 32) << 32 | i);
  }
  const auto greater = std::greater<uint64_t>();
  std::make_heap(heap.begin(), heap.end(), greater);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto pos = static_cast<size_t>(static_cast<uint32_t>(top));
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<size_t>(next[pos]);
    const uint64_t* m = find_merge(symbols[pos], symbols[right]);
    if (m == nullptr || static_cast<uint32_t>(*m >> 32) != rank) continue;
    symbols[pos] = static_cast<int32_t>(static_cast<uint32_t>(*m));
    alive[right] = false;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = static_cast<int32_t>(pos);
    if (prev[pos] >= 0) {
      const auto p = static_cast<size_t>(prev[pos]);
      if (const uint64_t* pm = find_merge(symbols[p], symbols[pos])) {
        heap.push_back((*pm >> 32) << 32 | p);
        std::push_heap(heap.begin(), heap.end(), greater);
      }
    }
    if (next[pos] >= 0) {
      if (const uint64_t* nm = find_merge(symbols[pos], symbols[next[pos]])) {
        heap.push_back((*nm >> 32) << 32 | pos);
        std::push_heap(heap.begin(), heap.end(), greater);
      }
    }
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

}  // namespace lmx::text
