// The paged KV cache: block tables per sequence and group, sliding release, forks, copy-on-write.
#include "lmx/kv/kv_cache.h"

#include "lmx/core/error.h"
#include "lmx/core/half.h"
#include "lmx/core/tensor.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace lmx {

// What a cache and its sequences share: a layout and the pool (kept alive by every sequence). Under a
// quantization start, the cache has two (the bf16 start layout and the configured one) over one pool, the
// start layout's groups numbered after the configured one's.
struct KvSequence::Shared {
  Shared(KvLayout l, std::shared_ptr<KvBlockPool> p, int base, int64_t start, bool before)
      : layout(std::move(l)),
        pool(std::move(p)),
        group_base(base),
        quant_start(start),
        before_quant_start(before) {}
  KvLayout layout;
  std::shared_ptr<KvBlockPool> pool;
  int group_base = 0;  // the pool group of the layout's group 0
  int64_t quant_start = 0;
  bool before_quant_start = false;

  int pool_group(int g) const { return group_base + g; }
  // Per pool group, `blocks` of this layout's groups (zeros for the other layout's).
  std::vector<int64_t> pool_counts(std::span<const int64_t> blocks) const {
    std::vector<int64_t> all(static_cast<size_t>(pool->num_groups()), 0);
    for (size_t g = 0; g < blocks.size(); ++g) all[static_cast<size_t>(group_base) + g] = blocks[g];
    return all;
  }
  size_t bytes_of(std::span<const int64_t> blocks) const {
    size_t bytes = 0;
    for (size_t g = 0; g < blocks.size(); ++g)
      bytes += static_cast<size_t>(blocks[g]) * layout.group(static_cast<int>(g)).block_bytes;
    return bytes;
  }
};

namespace {
size_t default_budget(const KvLayout& layout, const KvMemory& memory) {
  size_t one_of_each = 0;
  for (int g = 0; g < layout.num_groups(); ++g) one_of_each += layout.group(g).block_bytes;
  const auto share = static_cast<size_t>(static_cast<double>(memory.available_bytes()) * kDefaultBudgetShare);
  return std::max(share, one_of_each);
}

void append_group_block_bytes(const KvLayout& layout, std::vector<size_t>& bytes) {
  for (int g = 0; g < layout.num_groups(); ++g) bytes.push_back(layout.group(g).block_bytes);
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
  for (size_t i = from; i < blocks.size(); ++i) shared_->pool->release(blocks[i]);
  blocks.resize(std::min(from, blocks.size()));
}

int64_t KvSequence::first_stored_position(int group) const {
  return first_block(group) * shared_->layout.block_tokens();
}

bool KvSequence::before_quant_start() const {
  return shared_->before_quant_start;
}

int64_t KvSequence::min_reusable_offset() const {
  return shared_->quant_start > 0 && !shared_->before_quant_start ? shared_->quant_start : 0;
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
  if (new_length < min_reusable_offset())
    return fmt::format(
        "cannot rewind to {}: the KV below position {} was converted from bf16 to {} at the quantization "
        "start, and a sequence of {} tokens would hold it in bf16 (minimum reusable offset {})",
        new_length, min_reusable_offset(), shared_->layout.codec_description(), new_length,
        min_reusable_offset());
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
  LMX_REQUIRE(InvalidArgument, options.quant_start >= 0, "KV quantization start must be ≥ 0, got {}",
              options.quant_start);
  KvLayout layout(model_layers, options.codec, options.block_tokens, options.sliding_codec,
                  options.layer_codecs);
  std::optional<KvLayout> start;
  if (options.quant_start > 0) {
    bool quantized = false;
    for (int l = 0; l < layout.num_cache_layers(); ++l) quantized |= layout.layer(l).codec.quantized();
    LMX_REQUIRE(InvalidArgument, quantized,
                "a KV quantization start ({} tokens) needs a quantized KV codec; the cache is {}",
                options.quant_start, layout.codec_description());
    start.emplace(model_layers, KvCodec(KvCodecKind::kBf16), options.block_tokens);
  }
  const size_t budget = options.budget_bytes > 0 ? options.budget_bytes : default_budget(layout, *memory);
  std::vector<size_t> bytes;
  append_group_block_bytes(layout, bytes);
  if (start) append_group_block_bytes(*start, bytes);
  auto pool = std::make_shared<KvBlockPool>(std::move(bytes), budget, std::move(memory));
  const int groups = layout.num_groups();
  quant_start_ = options.quant_start;
  shared_ = std::make_shared<KvSequence::Shared>(std::move(layout), pool, 0, quant_start_, false);
  if (start)
    start_ = std::make_shared<KvSequence::Shared>(std::move(*start), pool, groups, quant_start_, true);
  const size_t prefix_bytes = options.prefix_cache_bytes.value_or(budget);
  if (prefix_bytes > 0) {
    prefix_ = std::make_unique<KvPrefixCache>(shared_->layout, *pool, prefix_bytes);
    if (start_) start_prefix_ = std::make_unique<KvPrefixCache>(start_->layout, *pool, prefix_bytes);
  }
}

KvCache::~KvCache() = default;

const KvLayout& KvCache::layout() const {
  return shared_->layout;
}
const KvLayout* KvCache::start_layout() const {
  return start_ ? &start_->layout : nullptr;
}
const KvLayout& KvCache::layout_of(const KvSequence& sequence) const {
  return sequence.shared_->layout;
}
std::string KvCache::codec_description() const {
  std::string d = layout().codec_description();
  if (quant_start_ > 0) d += fmt::format(", bf16 below {} tokens", quant_start_);
  return d;
}
const KvBlockPool& KvCache::pool() const {
  return *shared_->pool;
}
KvBlockPool& KvCache::pool() {
  return *shared_->pool;
}

size_t KvCache::sequence_bytes(int64_t tokens, int64_t step_tokens) const {
  if (!start_) return layout().sequence_bytes(tokens, step_tokens);
  if (tokens < quant_start_) return start_->layout.sequence_bytes(tokens, step_tokens);
  // Converting holds both layouts' blocks of the first quant_start positions.
  const size_t converting = start_->layout.sequence_bytes(quant_start_, step_tokens) +
                            layout().sequence_bytes(quant_start_, step_tokens);
  return std::max(layout().sequence_bytes(tokens, step_tokens), converting);
}

int64_t KvCache::step_limit(const KvSequence& sequence) const {
  if (!sequence.before_quant_start() || sequence.length() >= quant_start_)
    return std::numeric_limits<int64_t>::max();
  return quant_start_ - sequence.length();
}

int KvCache::step_phase(const KvSequence& sequence) const {
  return sequence.before_quant_start() && sequence.length() < quant_start_ ? 0 : 1;
}

KvPrefixCache* KvCache::prefix_of(const KvSequence::Shared& shared) const {
  return &shared == start_.get() ? start_prefix_.get() : prefix_.get();
}

KvPrefixStats KvCache::prefix_stats() const {
  KvPrefixStats total = prefix_ ? prefix_->stats() : KvPrefixStats{};
  if (start_prefix_) {
    const KvPrefixStats& s = start_prefix_->stats();  // under a quantization start every lookup counts here
    total.lookups += s.lookups;
    total.hits += s.hits;
    total.looked_up_tokens += s.looked_up_tokens;
    total.reused_tokens += s.reused_tokens;
    total.cached_blocks += s.cached_blocks;
    total.cached_bytes += s.cached_bytes;
    total.evicted_blocks += s.evicted_blocks;
  }
  return total;
}

std::unique_ptr<KvSequence> KvCache::new_sequence() const {
  return std::unique_ptr<KvSequence>(new KvSequence(start_ ? start_ : shared_));
}

KvSequence& KvCache::own(Sequence* sequence) const {
  auto* kv = dynamic_cast<KvSequence*>(sequence);
  LMX_REQUIRE(InvalidArgument, kv != nullptr && (kv->shared_ == shared_ || (start_ && kv->shared_ == start_)),
              "the sequence belongs to another model or backend");
  return *kv;
}

std::unique_ptr<KvSequence> KvCache::fork(const KvSequence& source, int64_t length) const {
  KvSequence& from_seq = own(const_cast<KvSequence*>(&source));
  const std::string refusal = source.truncate_refusal(length);
  LMX_REQUIRE(InvalidArgument, refusal.empty(), "fork at {}: {}", length, refusal);
  auto seq = std::unique_ptr<KvSequence>(new KvSequence(from_seq.shared_));
  const KvLayout& lay = layout_of(source);
  const int64_t block_tokens = lay.block_tokens();
  for (int g = 0; g < lay.num_groups(); ++g) {
    const KvSequence::Table& from = source.tables_[static_cast<size_t>(g)];
    KvSequence::Table& to = seq->tables_[static_cast<size_t>(g)];
    const int64_t end_block = ceil_div(length, block_tokens);
    to.first_block = std::min(from.first_block, length / block_tokens);
    for (int64_t b = to.first_block; b < end_block; ++b) {
      const KvBlockId id = from.blocks[static_cast<size_t>(b - from.first_block)];
      seq->shared_->pool->retain(id);
      to.blocks.push_back(id);
    }
  }
  seq->length_ = length;
  seq->prefix_keys_.assign(source.prefix_keys_.begin(),
                           source.prefix_keys_.begin() +
                               static_cast<std::ptrdiff_t>(std::min(
                                   source.prefix_keys_.size(), static_cast<size_t>(length / block_tokens))));
  return seq;
}

std::unique_ptr<KvSequence> KvCache::reuse_prefix(std::span<const int32_t> tokens, int64_t max_tokens) {
  if (!prefix_) return nullptr;
  std::shared_ptr<KvSequence::Shared> shared = shared_;
  KvPrefixCache::Match match;
  if (!start_) {
    match = prefix_->find(tokens, max_tokens);
  } else {
    // A converted prefix serves only from the quantization start on; below it, the bf16 one.
    const int64_t offered = std::clamp<int64_t>(max_tokens, 0, static_cast<int64_t>(tokens.size()));
    if (offered >= quant_start_) match = prefix_->find(tokens, max_tokens, /*count=*/false);
    if (match.tokens < quant_start_) {
      match = start_prefix_->find(tokens, std::min(max_tokens, quant_start_), /*count=*/false);
      shared = start_;
    }
    start_prefix_->count_lookup(offered, match.tokens);
  }
  if (match.tokens == 0) return nullptr;
  auto seq = std::unique_ptr<KvSequence>(new KvSequence(shared));
  for (int g = 0; g < shared->layout.num_groups(); ++g) {
    KvSequence::Table& t = seq->tables_[static_cast<size_t>(g)];
    t.first_block = match.first_block[static_cast<size_t>(g)];
    t.blocks = std::move(match.tables[static_cast<size_t>(g)]);
    for (KvBlockId id : t.blocks) shared->pool->retain(id);
  }
  seq->length_ = match.tokens;
  seq->prefix_keys_ = std::move(match.keys);
  return seq;
}

void KvCache::cache_prefix(KvSequence& sequence, std::span<const int32_t> tokens, bool finished) {
  own(&sequence);
  KvPrefixCache* prefix = prefix_of(*sequence.shared_);
  if (!prefix) return;
  prefix->insert(sequence, tokens, finished);
  trim_prefix_caches();
}

void KvCache::trim_prefix_caches() {
  if (!prefix_) return;
  if (start_prefix_) {
    // One cap for both: the bf16 blocks go first.
    const size_t cap = prefix_->max_unreferenced_bytes(), main = prefix_->unreferenced_bytes();
    start_prefix_->trim(cap > main ? cap - main : 0);
  }
  prefix_->trim();
}

void KvCache::clear_prefix_cache() {
  if (prefix_) prefix_->clear();
  if (start_prefix_) start_prefix_->clear();
}

size_t KvCache::missing_bytes(const KvSequence::Shared& shared, std::span<const int64_t> blocks) {
  const std::vector<int64_t> counts = shared.pool_counts(blocks);
  KvBlockPool& pool = *shared.pool;
  auto fits = [&] { return pool.can_allocate(counts); };
  if (!fits() && start_prefix_) start_prefix_->evict_until(fits);
  if (!fits() && prefix_) prefix_->evict_until(fits);
  return fits() ? 0 : std::max<size_t>(shared.bytes_of(blocks), 1);
}

std::unique_ptr<KvSequence> KvCache::restore_sequence(
    int64_t length, std::span<const int64_t> first_block,
    const std::function<void(int, int64_t, std::span<std::byte>)>& fill, bool start_layout) {
  LMX_REQUIRE(InvalidArgument, !start_layout || start_,
              "restore: KV held before a quantization start, but this cache has none");
  const std::shared_ptr<KvSequence::Shared>& shared = start_layout ? start_ : shared_;
  const KvLayout& lay = shared->layout;
  const int64_t block_tokens = lay.block_tokens();
  LMX_REQUIRE(InvalidArgument, length >= 0, "restore: negative length {}", length);
  LMX_REQUIRE(InvalidArgument, !start_layout || length <= quant_start_,
              "restore: {} positions of bf16 KV, past the quantization start {}", length, quant_start_);
  LMX_REQUIRE(InvalidArgument, start_layout || !start_ || length >= quant_start_,
              "restore: {} positions of converted KV, below the quantization start {}", length, quant_start_);
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
  KvBlockPool& pool = *shared->pool;
  if (const size_t missing = missing_bytes(*shared, needed); missing > 0)
    throw KvPoolExhausted(
        missing, pool.budget_bytes(),
        fmt::format("KV cache full: restoring {} positions needs {} bytes of blocks ({} of {} "
                    "bytes in use on {})",
                    length, missing, pool.used_bytes(), pool.budget_bytes(), pool.memory().name()));
  auto seq = std::unique_ptr<KvSequence>(new KvSequence(shared));
  std::vector<std::byte> staging;
  for (int g = 0; g < lay.num_groups(); ++g) {
    KvSequence::Table& t = seq->tables_[static_cast<size_t>(g)];
    t.first_block = first_block[static_cast<size_t>(g)];
    staging.resize(lay.group(g).block_bytes);
    for (int64_t b = t.first_block; b < end_block; ++b) {
      t.blocks.push_back(pool.allocate(shared->pool_group(g)));
      fill(g, b, staging);
      pool.memory().write(pool.data(t.blocks.back()), staging.data(), staging.size());
    }
  }
  seq->length_ = length;
  return seq;
}

size_t KvCache::convert_or_missing(KvSequence& seq) {
  const KvLayout& from = start_->layout;
  const KvLayout& to = shared_->layout;
  KvBlockPool& pool = *shared_->pool;
  KvMemory& memory = pool.memory();
  const int groups = to.num_groups();
  const int64_t block_tokens = to.block_tokens(), length = seq.length_;
  std::vector<int64_t> blocks(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g)
    blocks[static_cast<size_t>(g)] = static_cast<int64_t>(seq.blocks(g).size());
  if (const size_t missing = missing_bytes(*shared_, blocks); missing > 0) return missing;
  // The stored bf16 blocks on the host, and the converted blocks built there.
  std::vector<std::vector<std::byte>> source(static_cast<size_t>(groups)),
      target(static_cast<size_t>(groups));
  std::vector<std::vector<const void*>> target_table(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    const auto gi = static_cast<size_t>(g);
    const size_t in_bytes = from.group(g).block_bytes, out_bytes = to.group(g).block_bytes;
    source[gi].resize(in_bytes * static_cast<size_t>(blocks[gi]));
    target[gi].assign(out_bytes * static_cast<size_t>(blocks[gi]), std::byte{0});
    for (int64_t b = 0; b < blocks[gi]; ++b) {
      memory.read(source[gi].data() + in_bytes * static_cast<size_t>(b),
                  pool.data(seq.blocks(g)[static_cast<size_t>(b)]), in_bytes);
      target_table[gi].push_back(target[gi].data() + out_bytes * static_cast<size_t>(b));
    }
  }
  // Each cache layer's stored positions, widened to f32, appended through the host kernels (the reference
  // encoding of every codec).
  for (int l = 0; l < to.num_cache_layers(); ++l) {
    const KvCacheLayer& in = from.layer(l);
    const KvCacheLayer& out = to.layer(l);
    const auto gi = static_cast<size_t>(out.group);
    const int32_t first_block = static_cast<int32_t>(seq.first_block(out.group));
    const int64_t first = first_block * block_tokens, count = length - first;
    if (count <= 0) continue;
    const int64_t width = static_cast<int64_t>(in.num_kv_heads) * in.head_dim;
    Tensor k = Tensor::zeros({count, width}, DType::kF32), v = Tensor::zeros({count, width}, DType::kF32);
    std::vector<int32_t> positions(static_cast<size_t>(count)), rows(static_cast<size_t>(count), 0);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t p = first + i, b = p / block_tokens - first_block, slot = p % block_tokens;
      const std::byte* block = source[gi].data() + from.group(in.group).block_bytes * static_cast<size_t>(b);
      const auto* ks = reinterpret_cast<const uint16_t*>(block + in.k_offset) + slot * width;
      const auto* vs = reinterpret_cast<const uint16_t*>(block + in.v_offset) + slot * width;
      float* kd = k.data<float>() + i * width;
      float* vd = v.data<float>() + i * width;
      for (int64_t j = 0; j < width; ++j) {
        kd[j] = bf16_to_f32(ks[j]);
        vd[j] = bf16_to_f32(vs[j]);
      }
      positions[static_cast<size_t>(i)] = static_cast<int32_t>(p);
    }
    const int32_t kv_len = static_cast<int32_t>(length);
    PagedKvStep step;
    step.tokens = count;
    step.rows = 1;
    step.q_pos = positions.data();
    step.q_row = rows.data();
    step.kv_len = &kv_len;
    step.max_kv_len = length;
    step.block_tokens = static_cast<int>(block_tokens);
    const PagedKvTables tables{target_table[gi].data(), static_cast<int64_t>(target_table[gi].size()),
                               &first_block};
    ops::paged_kv_append(step, to.view(l, tables), k, v);
  }
  // The converted blocks replace the bf16 ones (which stay in the start layout's prefix cache if cached).
  std::vector<KvSequence::Table> tables(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    const auto gi = static_cast<size_t>(g);
    tables[gi].first_block = seq.first_block(g);
    for (int64_t b = 0; b < blocks[gi]; ++b) {
      const KvBlockId id = pool.allocate(shared_->pool_group(g));
      memory.write(pool.data(id), target_table[gi][static_cast<size_t>(b)], to.group(g).block_bytes);
      tables[gi].blocks.push_back(id);
    }
    seq.release_blocks(g, 0);
  }
  seq.tables_ = std::move(tables);
  seq.shared_ = shared_;
  seq.prefix_keys_.clear();
  return 0;
}

void KvCache::prepare(std::span<const KvRow> rows) {
  const size_t missing = prepare_or_missing(rows);
  if (missing == 0) return;
  const KvBlockPool& pool = *shared_->pool;
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
    LMX_REQUIRE(InvalidArgument, rows[r].sequence != nullptr, "step row {} has no sequence", r);
    own(rows[r].sequence);
    LMX_REQUIRE(InvalidArgument, rows[r].new_tokens > 0, "step row {} has no tokens", r);
    LMX_REQUIRE(InvalidArgument, seen.insert(rows[r].sequence).second,
                "step row {}: its sequence is in two rows", r);
    LMX_REQUIRE(InvalidArgument, rows[r].new_tokens <= step_limit(*rows[r].sequence),
                "step row {}: {} tokens after {} cross the KV quantization start {} (split the step there)",
                r, rows[r].new_tokens, rows[r].sequence->length(), quant_start_);
    LMX_REQUIRE(InvalidArgument, step_phase(*rows[r].sequence) == step_phase(*rows[0].sequence),
                "step rows 0 and {}: one is before the KV quantization start and one after; a step's rows "
                "share one KV layout",
                r);
  }
  // Rows at the quantization start convert first.
  for (const KvRow& row : rows)
    if (row.sequence->before_quant_start() && row.sequence->length() >= quant_start_)
      if (const size_t missing = convert_or_missing(*row.sequence); missing > 0) return missing;
  if (rows.empty()) return 0;
  const KvSequence::Shared& shared = *rows[0].sequence->shared_;
  const KvLayout& lay = shared.layout;
  KvBlockPool& pool = *shared.pool;
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
  if (const size_t missing = missing_bytes(shared, needed); missing > 0) return missing;
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
          t.blocks.push_back(pool.allocate(shared.pool_group(g)));
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
