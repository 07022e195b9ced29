// The paged KV cache: block tables per sequence and group, sliding release, forks, copy-on-write.
#include "lmx/kv/kv_cache.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <unordered_set>

namespace lmx {

// What a cache and its sequences share: the layout and the pool (kept alive by every sequence).
struct KvSequence::Shared {
  Shared(KvLayout l, std::vector<size_t> block_bytes, size_t budget, std::shared_ptr<KvMemory> memory)
      : layout(std::move(l)), pool(std::move(block_bytes), budget, std::move(memory)) {}
  KvLayout layout;
  KvBlockPool pool;
};

namespace {
size_t default_budget(const KvLayout& layout, const KvMemory& memory) {
  size_t one_of_each = 0;
  for (int g = 0; g < layout.num_groups(); ++g) one_of_each += layout.group(g).block_bytes;
  const auto share = static_cast<size_t>(static_cast<double>(memory.available_bytes()) * kDefaultBudgetShare);
  return std::max(share, one_of_each);
}

std::vector<size_t> group_block_bytes(const KvLayout& layout) {
  std::vector<size_t> bytes;
  for (int g = 0; g < layout.num_groups(); ++g) bytes.push_back(layout.group(g).block_bytes);
  return bytes;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
}  // namespace

// ---- KvSequence --------------------------------------------------------------------------------------

KvSequence::KvSequence(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {
  tables_.resize(static_cast<size_t>(shared_->layout.num_groups()));
}

KvSequence::~KvSequence() {
  for (int g = 0; g < static_cast<int>(tables_.size()); ++g) release_blocks(g, 0);
}

void KvSequence::release_blocks(int group, size_t from) {
  auto& blocks = tables_[static_cast<size_t>(group)].blocks;
  for (size_t i = from; i < blocks.size(); ++i) shared_->pool.release(blocks[i]);
  blocks.resize(std::min(from, blocks.size()));
}

int64_t KvSequence::first_stored_position(int group) const {
  return first_block(group) * shared_->layout.block_tokens();
}

size_t KvSequence::bytes() const {
  size_t total = 0;
  for (int g = 0; g < static_cast<int>(tables_.size()); ++g)
    total += tables_[static_cast<size_t>(g)].blocks.size() * shared_->layout.group(g).block_bytes;
  return total;
}

std::string KvSequence::truncate_refusal(int64_t new_length) const {
  if (new_length < 0 || new_length > length_)
    return fmt::format("cannot rewind to {}: the sequence holds {} tokens", new_length, length_);
  if (new_length == 0) return {};
  const KvLayout& layout = shared_->layout;
  for (int g = 0; g < layout.num_groups(); ++g) {
    const int window = layout.group(g).window;
    if (window <= 0) continue;
    // The next query (at new_length) sees keys from new_length - window + 1 on.
    const int64_t needed_from = std::max<int64_t>(0, new_length - window + 1);
    if (first_stored_position(g) > needed_from)
      return fmt::format(
          "cannot rewind to {}: the layers of window {} (e.g. layer {}) released positions before {}, "
          "and a query at {} attends to positions from {}",
          new_length, window, layout.layer(layout.group(g).layers.front()).model_layer,
          first_stored_position(g), new_length, needed_from);
  }
  return {};
}

void KvSequence::truncate(int64_t new_length) {
  const std::string refusal = truncate_refusal(new_length);
  LMX_REQUIRE(InvalidArgument, refusal.empty(), "{}", refusal);
  const int64_t block_tokens = shared_->layout.block_tokens();
  for (int g = 0; g < static_cast<int>(tables_.size()); ++g) {
    Table& t = tables_[static_cast<size_t>(g)];
    const int64_t keep_blocks = std::max<int64_t>(0, ceil_div(new_length, block_tokens) - t.first_block);
    release_blocks(g, static_cast<size_t>(keep_blocks));
    if (t.blocks.empty()) t.first_block = new_length / block_tokens;
  }
  length_ = new_length;
  prefix_keys_.resize(std::min(prefix_keys_.size(), static_cast<size_t>(new_length / block_tokens)));
}

// ---- KvCache -----------------------------------------------------------------------------------------

KvCache::KvCache(std::span<const KvLayerGeometry> model_layers, const KvCacheOptions& options,
                 std::shared_ptr<KvMemory> memory) {
  LMX_REQUIRE(InvalidArgument, memory != nullptr, "KV cache: no memory");
  KvLayout layout(model_layers, options.codec, options.block_tokens, options.sliding_codec, options.layer_codecs);
  const size_t budget = options.budget_bytes > 0 ? options.budget_bytes : default_budget(layout, *memory);
  std::vector<size_t> bytes = group_block_bytes(layout);
  shared_ =
      std::make_shared<KvSequence::Shared>(std::move(layout), std::move(bytes), budget, std::move(memory));
  const size_t prefix_bytes = options.prefix_cache_bytes.value_or(budget);
  if (prefix_bytes > 0) prefix_ = std::make_unique<KvPrefixCache>(shared_->layout, shared_->pool, prefix_bytes);
}

KvCache::~KvCache() = default;

const KvLayout& KvCache::layout() const {
  return shared_->layout;
}
const KvBlockPool& KvCache::pool() const {
  return shared_->pool;
}
KvBlockPool& KvCache::pool() {
  return shared_->pool;
}

std::unique_ptr<KvSequence> KvCache::new_sequence() const {
  return std::unique_ptr<KvSequence>(new KvSequence(shared_));
}

KvSequence& KvCache::own(Sequence* sequence) const {
  auto* kv = dynamic_cast<KvSequence*>(sequence);
  LMX_REQUIRE(InvalidArgument, kv != nullptr && kv->shared_ == shared_,
              "the sequence belongs to another model or backend");
  return *kv;
}

std::unique_ptr<KvSequence> KvCache::fork(const KvSequence& source, int64_t length) const {
  LMX_REQUIRE(InvalidArgument, source.shared_ == shared_,
              "fork: the sequence belongs to another model or backend");
  const std::string refusal = source.truncate_refusal(length);
  LMX_REQUIRE(InvalidArgument, refusal.empty(), "fork at {}: {}", length, refusal);
  auto seq = new_sequence();
  const int64_t block_tokens = layout().block_tokens();
  for (int g = 0; g < layout().num_groups(); ++g) {
    const KvSequence::Table& from = source.tables_[static_cast<size_t>(g)];
    KvSequence::Table& to = seq->tables_[static_cast<size_t>(g)];
    const int64_t end_block = ceil_div(length, block_tokens);
    to.first_block = std::min(from.first_block, length / block_tokens);
    for (int64_t b = to.first_block; b < end_block; ++b) {
      const KvBlockId id = from.blocks[static_cast<size_t>(b - from.first_block)];
      shared_->pool.retain(id);
      to.blocks.push_back(id);
    }
  }
  seq->length_ = length;
  seq->prefix_keys_.assign(
      source.prefix_keys_.begin(),
      source.prefix_keys_.begin() +
          static_cast<std::ptrdiff_t>(std::min(source.prefix_keys_.size(), static_cast<size_t>(length / block_tokens))));
  return seq;
}

std::unique_ptr<KvSequence> KvCache::reuse_prefix(std::span<const int32_t> tokens, int64_t max_tokens) {
  if (!prefix_) return nullptr;
  KvPrefixCache::Match match = prefix_->find(tokens, max_tokens);
  if (match.tokens == 0) return nullptr;
  auto seq = new_sequence();
  for (int g = 0; g < layout().num_groups(); ++g) {
    KvSequence::Table& t = seq->tables_[static_cast<size_t>(g)];
    t.first_block = match.first_block[static_cast<size_t>(g)];
    t.blocks = std::move(match.tables[static_cast<size_t>(g)]);
    for (KvBlockId id : t.blocks) shared_->pool.retain(id);
  }
  seq->length_ = match.tokens;
  seq->prefix_keys_ = std::move(match.keys);
  return seq;
}

void KvCache::cache_prefix(KvSequence& sequence, std::span<const int32_t> tokens, bool finished) {
  LMX_REQUIRE(InvalidArgument, sequence.shared_ == shared_,
              "cache_prefix: the sequence belongs to another model or backend");
  if (!prefix_) return;
  prefix_->insert(sequence, tokens, finished);
  prefix_->trim();
}

void KvCache::clear_prefix_cache() {
  if (prefix_) prefix_->clear();
}

std::unique_ptr<KvSequence> KvCache::restore_sequence(
    int64_t length, std::span<const int64_t> first_block,
    const std::function<void(int, int64_t, std::span<std::byte>)>& fill) {
  const KvLayout& lay = layout();
  const int64_t block_tokens = lay.block_tokens();
  LMX_REQUIRE(InvalidArgument, length >= 0, "restore: negative length {}", length);
  LMX_REQUIRE(InvalidArgument, first_block.size() == static_cast<size_t>(lay.num_groups()),
              "restore: {} block tables for {} cache groups", first_block.size(), lay.num_groups());
  const int64_t end_block = ceil_div(length, block_tokens);
  std::vector<int64_t> needed(first_block.size());
  for (int g = 0; g < lay.num_groups(); ++g) {
    const int window = lay.group(g).window;
    const int64_t needed_from = window > 0 ? std::max<int64_t>(0, length - window + 1) / block_tokens : 0;
    const int64_t first = first_block[static_cast<size_t>(g)];
    LMX_REQUIRE(InvalidArgument, first >= 0 && first <= std::min(needed_from, end_block),
                "restore: cache group {} starts at block {}, but a query at {} reads from block {}", g, first,
                length, needed_from);
    needed[static_cast<size_t>(g)] = end_block - first;
  }
  KvBlockPool& pool = shared_->pool;
  if (!pool.can_allocate(needed) && prefix_) prefix_->evict_until([&] { return pool.can_allocate(needed); });
  if (!pool.can_allocate(needed)) {
    size_t bytes = 0;
    for (int g = 0; g < lay.num_groups(); ++g) bytes += static_cast<size_t>(needed[static_cast<size_t>(g)]) * lay.group(g).block_bytes;
    throw KvPoolExhausted(bytes, pool.budget_bytes(),
                          fmt::format("KV cache full: restoring {} positions needs {} bytes of blocks ({} of {} "
                                      "bytes in use on {})",
                                      length, bytes, pool.used_bytes(), pool.budget_bytes(), pool.memory().name()));
  }
  auto seq = new_sequence();
  std::vector<std::byte> staging;
  for (int g = 0; g < lay.num_groups(); ++g) {
    KvSequence::Table& t = seq->tables_[static_cast<size_t>(g)];
    t.first_block = first_block[static_cast<size_t>(g)];
    staging.resize(lay.group(g).block_bytes);
    for (int64_t b = t.first_block; b < end_block; ++b) {
      t.blocks.push_back(pool.allocate(g));
      fill(g, b, staging);
      pool.memory().write(pool.data(t.blocks.back()), staging.data(), staging.size());
    }
  }
  seq->length_ = length;
  return seq;
}

void KvCache::prepare(std::span<const KvRow> rows) {
  const size_t missing = prepare_or_missing(rows);
  if (missing == 0) return;
  const KvBlockPool& pool = shared_->pool;
  throw KvPoolExhausted(
      missing, pool.budget_bytes(),
      fmt::format("KV cache full: the step needs {} more bytes of blocks ({} of {} bytes in use on {})",
                  missing, pool.used_bytes(), pool.budget_bytes(), pool.memory().name()));
}

bool KvCache::try_prepare(std::span<const KvRow> rows) {
  return prepare_or_missing(rows) == 0;
}

size_t KvCache::prepare_or_missing(std::span<const KvRow> rows) {
  std::unordered_set<const KvSequence*> seen;
  for (size_t r = 0; r < rows.size(); ++r) {
    LMX_REQUIRE(InvalidArgument, rows[r].sequence != nullptr && rows[r].sequence->shared_ == shared_,
                "step row {}: the sequence belongs to another model or backend", r);
    LMX_REQUIRE(InvalidArgument, rows[r].new_tokens > 0, "step row {} has no tokens", r);
    LMX_REQUIRE(InvalidArgument, seen.insert(rows[r].sequence).second,
                "step row {}: its sequence is in two rows", r);
  }
  const KvLayout& lay = layout();
  KvBlockPool& pool = shared_->pool;
  const int64_t block_tokens = lay.block_tokens();
  // Sliding groups first give back the blocks every query of the step is past: the earliest query (at
  // the row's length) sees keys from length - window + 1 on.
  for (const KvRow& row : rows) {
    KvSequence& seq = *row.sequence;
    for (int g = 0; g < lay.num_groups(); ++g) {
      const int window = lay.group(g).window;
      KvSequence::Table& t = seq.tables_[static_cast<size_t>(g)];
      if (window <= 0 || t.blocks.empty()) continue;
      const int64_t keep_from_block = std::max<int64_t>(0, seq.length_ - window + 1) / block_tokens;
      const int64_t drop =
          std::clamp<int64_t>(keep_from_block - t.first_block, 0, static_cast<int64_t>(t.blocks.size()));
      for (int64_t i = 0; i < drop; ++i) pool.release(t.blocks[static_cast<size_t>(i)]);
      t.blocks.erase(t.blocks.begin(), t.blocks.begin() + drop);
      t.first_block += drop;
    }
  }
  // What the step needs per group: blocks past each table's end, and shared blocks it writes into.
  std::vector<int64_t> needed(static_cast<size_t>(lay.num_groups()), 0);
  for (const KvRow& row : rows) {
    const KvSequence& seq = *row.sequence;
    const int64_t first = seq.length_ / block_tokens,
                  end = ceil_div(seq.length_ + row.new_tokens, block_tokens);
    for (int g = 0; g < lay.num_groups(); ++g) {
      const KvSequence::Table& t = seq.tables_[static_cast<size_t>(g)];
      const int64_t have_end =
          t.blocks.empty() ? first : t.first_block + static_cast<int64_t>(t.blocks.size());
      needed[static_cast<size_t>(g)] += std::max<int64_t>(0, end - std::max(have_end, first));
      for (int64_t b = std::max(first, t.first_block); b < std::min(end, have_end); ++b)
        if (pool.refcount(t.blocks[static_cast<size_t>(b - t.first_block)]) > 1)
          ++needed[static_cast<size_t>(g)];
    }
  }
  // Cached blocks no sequence uses make room first.
  if (!pool.can_allocate(needed) && prefix_) prefix_->evict_until([&] { return pool.can_allocate(needed); });
  if (!pool.can_allocate(needed)) {
    size_t bytes = 0;
    for (int g = 0; g < lay.num_groups(); ++g)
      bytes += static_cast<size_t>(needed[static_cast<size_t>(g)]) * lay.group(g).block_bytes;
    return std::max<size_t>(bytes, 1);
  }
  for (const KvRow& row : rows) {
    KvSequence& seq = *row.sequence;
    const int64_t first = seq.length_ / block_tokens,
                  end = ceil_div(seq.length_ + row.new_tokens, block_tokens);
    for (int g = 0; g < lay.num_groups(); ++g) {
      KvSequence::Table& t = seq.tables_[static_cast<size_t>(g)];
      if (t.blocks.empty()) t.first_block = first;
      for (int64_t b = std::max(first, t.first_block); b < end; ++b) {
        const size_t i = static_cast<size_t>(b - t.first_block);
        if (i == t.blocks.size()) {
          t.blocks.push_back(pool.allocate(g));
        } else if (pool.refcount(t.blocks[i]) > 1) {
          const KvBlockId copy = pool.duplicate(t.blocks[i]);
          pool.release(t.blocks[i]);
          t.blocks[i] = copy;
        }
      }
    }
  }
  return 0;
}

void KvCache::commit(std::span<const KvRow> rows) {
  for (const KvRow& r : rows) r.sequence->length_ += r.new_tokens;
}

}  // namespace lmx
