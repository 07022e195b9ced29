// KvPrefixCache: KV blocks kept across sequences, found again by the tokens they hold. Each full block of
// a sequence is keyed by a hash chained from the sequence's start (the block's tokens and its parent's
// key, seeded with the layout's signatures), so a key names the whole prefix up to the block's end. A
// sequence that ends also leaves its partial last block (a "tail", keyed the same way by the tokens it
// holds). A lookup takes the longest chain of whole blocks, then the first tokens of whichever cached
// block after it (tail or full) shares the most of the rest: the next turn of a conversation reuses every
// token it shares. A sequence reusing part of a block copies it before writing into it (copy-on-write).
// The cache holds one reference per cached block; blocks no sequence references any more are evicted
// least-recently-used first (a chain from its end), when the pool needs room or their bytes pass the cap.
#pragma once

#include "lmx/kv/block_pool.h"
#include "lmx/kv/kv_layout.h"

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace lmx {

class KvSequence;

struct KvPrefixStats {
  int64_t lookups = 0;           // prompts looked up
  int64_t hits = 0;              // lookups that reused at least one block
  int64_t looked_up_tokens = 0;  // tokens those prompts offered for reuse
  int64_t reused_tokens = 0;     // tokens whose KV came from the cache
  int64_t cached_blocks = 0;     // blocks the cache holds now (one per group and position)
  size_t cached_bytes = 0;       // their bytes (blocks also used by sequences included)
  int64_t evicted_blocks = 0;
};

// The start of the chain: a key for the empty prefix of a layout (its block size and signatures).
uint64_t prefix_chain_seed(const KvLayout& layout);
// The key of a block holding `tokens` after the prefix keyed `parent`.
uint64_t prefix_chain_hash(uint64_t parent, std::span<const int32_t> tokens);

class KvPrefixCache {
 public:
  // What find() matched: the first `tokens` tokens of the prompt, the chain keys of its full blocks, and
  // per cache group the first block a sequence at that length needs (sliding groups need only their
  // window) and the block ids from there on (ending with a partly used block when `tokens` is not a
  // multiple of the block size).
  struct Match {
    int64_t tokens = 0;
    std::vector<uint64_t> keys;
    std::vector<int64_t> first_block;
    std::vector<std::vector<KvBlockId>> tables;
  };

  // The layout and pool must outlive the cache. max_unreferenced_bytes caps the bytes of cached blocks no
  // sequence references.
  KvPrefixCache(const KvLayout& layout, KvBlockPool& pool, size_t max_unreferenced_bytes);
  ~KvPrefixCache();
  KvPrefixCache(const KvPrefixCache&) = delete;
  KvPrefixCache& operator=(const KvPrefixCache&) = delete;

  // The longest prefix of `tokens`, at most `max_tokens` long, whose KV the cache holds for every group a
  // query after it reads (all blocks for full-attention groups, the blocks the window spans for sliding
  // ones): leading whole blocks, then possibly the first tokens of one more block. The blocks are not
  // retained: the caller retains what it keeps. Counts the lookup in the statistics unless `count` is false
  // (a caller probing several caches counts the outcome once, with count_lookup).
  Match find(std::span<const int32_t> tokens, int64_t max_tokens, bool count = true);
  // Counts a lookup that offered `offered` tokens and reused `reused` of them.
  void count_lookup(int64_t offered, int64_t reused);
  // Caches the full blocks of `sequence` (which holds tokens[0, sequence.length())) not cached yet, of
  // every group that still stores them, and extends the sequence's own chain of keys; with `tail`, also its
  // partial last block (call it only when the sequence writes no more: a running sequence would copy it).
  void insert(KvSequence& sequence, std::span<const int32_t> tokens, bool tail = false);
  // Gives back cached blocks no sequence references, least recently used first, until `done` says
  // enough or none is left; returns how many it gave back.
  template <class Done>
  int64_t evict_until(Done done) {
    int64_t evicted = 0;
    for (auto it = lru_.begin(); it != lru_.end() && !done();) {
      if (pool_.refcount(it->block) > 1) {
        ++it;
        continue;
      }
      it = drop(it);
      ++evicted;
    }
    return evicted;
  }
  // Evicts unreferenced blocks while their bytes exceed the cap (or `max_bytes`).
  void trim() { trim(max_unreferenced_bytes_); }
  void trim(size_t max_bytes);
  // Bytes of cached blocks no sequence references.
  size_t unreferenced_bytes() const;
  // Gives back every block only the cache holds.
  void clear();

  const KvPrefixStats& stats() const { return stats_; }
  size_t max_unreferenced_bytes() const { return max_unreferenced_bytes_; }

 private:
  struct Slot {
    uint64_t key = 0;
    int group = 0;
    KvBlockId block = -1;
  };
  using SlotList = std::list<Slot>;  // least recently used first
  struct Entry {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;            // the block's tokens (checked on lookup); fewer for a tail
    std::vector<SlotList::iterator> slots;  // per group; lru_.end() when not cached
  };
  const Entry* entry(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) const;
  // The entry keyed `key` for a block of `tokens` after `parent`, created when missing; null when the key
  // belongs to another prefix (a 64-bit collision).
  Entry* entry_for(uint64_t key, uint64_t parent, std::span<const int32_t> tokens);
  // Caches group g's block `id` as entry `e`'s (placed in LRU order just before `previous`'s block).
  void cache_slot(Entry& e, uint64_t key, size_t g, KvBlockId id, const Entry* previous);
  // Erases entry `key` when it caches no block.
  void forget_if_empty(uint64_t key);
  // Moves a slot to the most recently used end.
  void touch(SlotList::iterator slot);
  SlotList::iterator drop(SlotList::iterator slot);

  const KvLayout& layout_;
  KvBlockPool& pool_;
  size_t max_unreferenced_bytes_;
  uint64_t seed_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_multimap<uint64_t, uint64_t> children_;  // parent key → keys of the blocks after it
  SlotList lru_;
  KvPrefixStats stats_;
};

}  // namespace lmx
