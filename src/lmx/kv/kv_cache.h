// The paged KV cache: per sequence and cache group a block table over a KvBlockPool, sliding-window
// groups releasing blocks that left the window, KV-sharing layers reading their donor's table, and
// refcounted block sharing between sequences (fork) with copy-on-write of a shared partial block.
// Backend-neutral: the bytes live in the pool's KvMemory; backends read them through step tables
// (kv_step.h) with their own kernels.
//
// Quantization start (KvCacheOptions::quant_start = N > 0): a sequence starts in bf16 blocks (the "start"
// layout: every layer bf16) and is re-encoded into the configured codecs once it holds exactly N positions
// (KvCache::prepare converts it before its next step; a step never crosses N). Its positions below N then
// hold the configured codec's encoding of their bf16 values, which a sequence quantized from the start
// would not: N is its minimum reusable offset, and nothing rewinds, forks or reuses a prefix below it. The
// two layouts share one block pool (their groups side by side) and each has its own prefix cache.
#pragma once

#include "lmx/kv/block_pool.h"
#include "lmx/kv/kv_layout.h"
#include "lmx/kv/prefix_cache.h"
#include "lmx/kv/sequence.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

struct KvCacheOptions {
  KvCodec codec;
  std::optional<KvCodec> sliding_codec;  // the sliding-window layers' codec, when it differs
  std::map<int, KvCodec> layer_codecs;   // model layers with codecs of their own (kv_config.json)
  int block_tokens = 64;
  // 0: the default, kDefaultBudgetShare of what the memory reports available (at least one block of
  // every group).
  size_t budget_bytes = 0;
  // The prefix cache (prefix_cache.h) keeps at most this many bytes of blocks no sequence references
  // (evicting least recently used ones first; the pool also evicts them when it needs room). Unset: up to
  // the whole budget. 0: no prefix cache.
  std::optional<size_t> prefix_cache_bytes;
  // > 0: sequences hold bf16 KV until they hold this many positions, then convert (above). Needs a
  // quantized codec in some layer.
  int64_t quant_start = 0;
};

// The share of available memory a default budget takes (the host's free RAM, the GPU's free memory
// after the weights are loaded).
constexpr double kDefaultBudgetShare = 0.9;

class KvCache;

// One sequence's KV. Created by a KvCache (new_sequence, fork) and used only with it; keeps the
// cache's blocks alive. Not thread-safe; a sequence belongs to one engine step at a time.
class KvSequence final : public Sequence {
 public:
  ~KvSequence() override;
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  int64_t length() const override { return length_; }
  bool can_truncate(int64_t new_length) const override { return truncate_refusal(new_length).empty(); }
  // Drops every position >= new_length, releasing the blocks past it. Throws InvalidArgument with
  // truncate_refusal's reason when it cannot.
  void truncate(int64_t new_length) override;
  // Why truncate(new_length) cannot work (a sliding group already released keys a query at
  // new_length attends to; new_length outside [0, length]), or "" when it can.
  std::string truncate_refusal(int64_t new_length) const;

  // Bytes of the blocks this sequence references (a block shared with others counts fully).
  size_t bytes() const;
  // Group g's table: blocks()[i] holds positions [(first_block + i) * block_tokens, ... + block_tokens).
  std::span<const KvBlockId> blocks(int group) const { return tables_.at(static_cast<size_t>(group)).blocks; }
  int64_t first_block(int group) const { return tables_.at(static_cast<size_t>(group)).first_block; }
  // The first position group g still stores (sliding groups release older ones).
  int64_t first_stored_position(int group) const;
  // Whether the sequence still holds bf16 KV below its cache's quantization start (false without one).
  bool before_quant_start() const;
  // The lowest length it may be rewound, forked or reused at: the quantization start once converted, else 0.
  int64_t min_reusable_offset() const;

 private:
  friend class KvCache;
  friend class KvPrefixCache;
  struct Shared;
  struct Table {
    std::vector<KvBlockId> blocks;
    int64_t first_block = 0;
  };
  explicit KvSequence(std::shared_ptr<Shared> shared);
  void release_blocks(int group, size_t from);  // drops blocks()[from ..]

  std::shared_ptr<Shared> shared_;
  std::vector<Table> tables_;
  int64_t length_ = 0;
  // The prefix cache's chain keys of this sequence's leading full blocks (as far as it has cached them).
  std::vector<uint64_t> prefix_keys_;
};

// A row of one engine step: a sequence and the number of new tokens it brings. Its new tokens take
// positions [length, length + new_tokens) until commit().
struct KvRow {
  KvSequence* sequence = nullptr;
  int64_t new_tokens = 0;
};

class KvCache {
 public:
  // InvalidArgument for a malformed geometry (KvLayout) or options.
  KvCache(std::span<const KvLayerGeometry> model_layers, const KvCacheOptions& options,
          std::shared_ptr<KvMemory> memory);
  ~KvCache();

  // The configured codecs' layout (what every sequence holds without a quantization start, and after it).
  const KvLayout& layout() const;
  // The layout of `sequence`'s blocks: layout(), or the bf16 start layout before the quantization start.
  const KvLayout& layout_of(const KvSequence& sequence) const;
  // layout().codec_description(), with ", bf16 below N tokens" under a quantization start.
  std::string codec_description() const;
  int64_t quant_start() const { return quant_start_; }
  // The most bytes of blocks one sequence holds while it grows to `tokens` positions in steps of at most
  // `step_tokens` (KvLayout::sequence_bytes; under a quantization start, the conversion's peak too).
  size_t sequence_bytes(int64_t tokens, int64_t step_tokens) const;
  // How many tokens `sequence`'s next step may append: up to the quantization start while it is before it
  // (0 when it is there: prepare converts it first), else unlimited (INT64_MAX).
  int64_t step_limit(const KvSequence& sequence) const;
  // 1 when `sequence`'s next step reads the configured layout (after converting it if due), 0 when the start
  // layout. A step's rows share one phase (prepare refuses others).
  int step_phase(const KvSequence& sequence) const;
  const KvBlockPool& pool() const;
  KvBlockPool& pool();

  std::unique_ptr<KvSequence> new_sequence() const;
  // A new sequence holding the first `length` positions of `source`, sharing its blocks (a partial last
  // block is copied by whichever sequence writes into it first). InvalidArgument when `source` belongs to
  // another cache, `length` is outside [0, source.length()], or a sliding group of source has released
  // keys a query at `length` attends to.
  std::unique_ptr<KvSequence> fork(const KvSequence& source, int64_t length) const;

  // Makes positions [length, length + new_tokens) of every row writable in every group before a step:
  // converts rows at the quantization start, releases blocks of sliding groups that no query of the step
  // sees, copies shared blocks the step writes into, allocates missing blocks. Throws KvPoolExhausted when
  // the pool cannot hold the step: then no block was allocated or copied (out-of-window blocks may have been
  // released, rows converted). Throws InvalidArgument for a row of another cache, an empty row, a sequence
  // in two rows, a row crossing the quantization start, or rows of both phases.
  void prepare(std::span<const KvRow> rows);
  // prepare() that returns false instead of throwing KvPoolExhausted (nothing allocated or copied then):
  // how a scheduler reserves a row's blocks before its step.
  bool try_prepare(std::span<const KvRow> rows);
  // Advances each row's length by its new tokens. Call once per step after every layer.
  static void commit(std::span<const KvRow> rows);

  // `sequence` as a sequence of this cache: InvalidArgument when another cache or backend made it.
  KvSequence& own(Sequence* sequence) const;

  // Prefix reuse across sequences (a no-op without a prefix cache). A new sequence holding the longest
  // cached prefix of `tokens` of at most `max_tokens` tokens (whole blocks), or null when none is cached.
  // Under a quantization start N, a converted prefix of at least N tokens, else a bf16 one of at most N.
  std::unique_ptr<KvSequence> reuse_prefix(std::span<const int32_t> tokens, int64_t max_tokens);
  // Caches the full blocks of `sequence`, which holds the KV of tokens[0, sequence.length()) — and its
  // partial last block when `finished` (it writes no more) — then keeps the unreferenced cached bytes
  // under the cap.
  void cache_prefix(KvSequence& sequence, std::span<const int32_t> tokens, bool finished = false);
  bool has_prefix_cache() const { return prefix_ != nullptr; }
  // Lookups, hits and cached bytes so far (zeros without a prefix cache).
  KvPrefixStats prefix_stats() const;
  // Gives back every cached block no sequence references.
  void clear_prefix_cache();

  // A new sequence of `length` positions whose group g stores the blocks from first_block[g] on, each
  // written by fill(group, block index, host bytes out) through KvMemory::write (snapshots). Cached
  // blocks no sequence uses make room first. InvalidArgument when a first_block lies past what a query at
  // `length` reads; KvPoolExhausted when the blocks do not fit (nothing held then).
  // `start_layout`: restore into the bf16 start layout (a sequence saved before the quantization start;
  // InvalidArgument without one, or for a length past it); otherwise a length below the quantization start
  // is refused.
  std::unique_ptr<KvSequence> restore_sequence(
      int64_t length, std::span<const int64_t> first_block,
      const std::function<void(int group, int64_t block, std::span<std::byte> bytes)>& fill,
      bool start_layout = false);
  // The start layout (bf16), or null without a quantization start.
  const KvLayout* start_layout() const;

 private:
  // prepare(): 0 when done, else the bytes of blocks the pool could not provide (nothing changed).
  size_t prepare_or_missing(std::span<const KvRow> rows);
  // Re-encodes a sequence at the quantization start into the configured layout, in place: 0 when done, else
  // the bytes of blocks the pool could not provide (nothing changed).
  size_t convert_or_missing(KvSequence& sequence);
  // Whether `blocks[g]` new blocks of each group g of `shared` fit, evicting unreferenced cached blocks
  // when needed; else the bytes they take.
  size_t missing_bytes(const KvSequence::Shared& shared, std::span<const int64_t> blocks);
  KvPrefixCache* prefix_of(const KvSequence::Shared& shared) const;
  void trim_prefix_caches();

  std::shared_ptr<KvSequence::Shared> shared_;
  std::shared_ptr<KvSequence::Shared> start_;  // the bf16 layout before the quantization start, or null
  int64_t quant_start_ = 0;
  // After shared_ and start_: released before the pool goes.
  std::unique_ptr<KvPrefixCache> prefix_, start_prefix_;
  KvPrefixStats start_lookups_;  // lookups under a quantization start (both caches are probed per lookup)
};

}  // namespace lmx
