// KvPrefixCache: chained block keys, lookup with window-aware matching, LRU eviction of unreferenced blocks.
#include "lmx/kv/prefix_cache.h"

#include "lmx/kv/kv_cache.h"

#include <algorithm>

namespace lmx {

namespace {
// splitmix64's finalizer: a bijective 64-bit mix.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t hash_bytes(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) h = mix(h ^ c);
  return h;
}
}  // namespace

uint64_t prefix_chain_seed(const KvLayout& layout) {
  uint64_t h = mix(0x6c6d782d70726566ULL ^ static_cast<uint64_t>(layout.block_tokens()));  // "lmx-pref"
  for (int l = 0; l < layout.num_cache_layers(); ++l) h = hash_bytes(h, layout.signature(l));
  return h;
}

uint64_t prefix_chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return mix(h ^ tokens.size());
}

KvPrefixCache::KvPrefixCache(const KvLayout& layout, KvBlockPool& pool, size_t max_unreferenced_bytes)
    : layout_(layout),
      pool_(pool),
      max_unreferenced_bytes_(max_unreferenced_bytes),
      seed_(prefix_chain_seed(layout)) {}

KvPrefixCache::~KvPrefixCache() {
  for (const Slot& s : lru_) pool_.release(s.block);
}

const KvPrefixCache::Entry* KvPrefixCache::entry(uint64_t key, uint64_t parent,
                                                 std::span<const int32_t> tokens) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  // Keys are 64-bit hashes: the parent and the tokens make a match exact.
  if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()))
    return nullptr;
  return &e;
}

void KvPrefixCache::touch(SlotList::iterator slot) {
  lru_.splice(lru_.end(), lru_, slot);
}

KvPrefixCache::SlotList::iterator KvPrefixCache::drop(SlotList::iterator slot) {
  entries_.at(slot->key).slots[static_cast<size_t>(slot->group)] = lru_.end();
  forget_if_empty(slot->key);
  pool_.release(slot->block);
  --stats_.cached_blocks;
  stats_.cached_bytes -= layout_.group(slot->group).block_bytes;
  ++stats_.evicted_blocks;
  return lru_.erase(slot);
}

void KvPrefixCache::count_lookup(int64_t offered, int64_t reused) {
  ++stats_.lookups;
  stats_.looked_up_tokens += offered;
  if (reused > 0) {
    ++stats_.hits;
    stats_.reused_tokens += reused;
  }
}

KvPrefixCache::Match KvPrefixCache::find(std::span<const int32_t> tokens, int64_t max_tokens, bool count) {
  const int64_t block_tokens = layout_.block_tokens();
  const int64_t offered = std::clamp<int64_t>(max_tokens, 0, static_cast<int64_t>(tokens.size()));
  if (count) count_lookup(offered, 0);
  // The chain of full blocks the cache knows, from the start.
  std::vector<uint64_t> keys;
  std::vector<const Entry*> found;
  uint64_t parent = seed_;
  for (int64_t b = 0; b < offered / block_tokens; ++b) {
    const auto block =
        tokens.subspan(static_cast<size_t>(b * block_tokens), static_cast<size_t>(block_tokens));
    const uint64_t key = prefix_chain_hash(parent, block);
    const Entry* e = entry(key, parent, block);
    if (e == nullptr) break;
    keys.push_back(key);
    found.push_back(e);
    parent = key;
  }
  const int groups = layout_.num_groups();
  // The first block a sequence of `length` tokens still needs in group g.
  auto first_needed = [&](int64_t length, int g) -> int64_t {
    const int window = layout_.group(g).window;
    return window <= 0 ? 0 : std::max<int64_t>(0, length - window + 1) / block_tokens;
  };
  // Whether the cache holds what a sequence of k full blocks, then the first `partial` tokens of block
  // `tail` (when given), needs.
  auto holds = [&](int64_t k, const Entry* tail, int64_t partial) {
    const int64_t length = k * block_tokens + partial;
    for (int g = 0; g < groups; ++g) {
      if (tail && tail->slots[static_cast<size_t>(g)] == lru_.end()) return false;
      for (int64_t b = first_needed(length, g); b < k; ++b)
        if (found[static_cast<size_t>(b)]->slots[static_cast<size_t>(g)] == lru_.end()) return false;
    }
    return true;
  };
  // Past the last whole block found, the cached block after it (a tail, or a full block) that shares
  // the most of the remaining tokens serves for those; else whole blocks, the most that serve.
  auto k = static_cast<int64_t>(found.size());
  const Entry* tail = nullptr;
  int64_t partial = 0;
  const auto rest =
      tokens.subspan(static_cast<size_t>(k * block_tokens), static_cast<size_t>(offered - k * block_tokens));
  auto [first, last] = children_.equal_range(parent);
  for (auto c = first; c != last; ++c) {
    const Entry& e = entries_.at(c->second);
    const auto n = std::min(e.tokens.size(), rest.size());
    const auto common = static_cast<int64_t>(
        std::mismatch(e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(n), rest.begin())
            .first -
        e.tokens.begin());
    if (common > partial && holds(k, &e, common)) {
      tail = &e;
      partial = common;
    }
  }
  if (!tail)
    while (k > 0 && !holds(k, nullptr, 0)) --k;
  Match m;
  if (k == 0 && !tail) return m;
  m.tokens = k * block_tokens + partial;
  m.keys.assign(keys.begin(), keys.begin() + k);
  m.first_block.resize(static_cast<size_t>(groups));
  m.tables.resize(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    const auto gi = static_cast<size_t>(g);
    m.first_block[gi] = first_needed(m.tokens, g);
    for (int64_t b = m.first_block[gi]; b < k; ++b)
      m.tables[gi].push_back(found[static_cast<size_t>(b)]->slots[gi]->block);
    if (tail) m.tables[gi].push_back(tail->slots[gi]->block);
  }
  // Later blocks become less recently used than earlier ones: eviction takes a chain from its end.
  for (int g = 0; g < groups; ++g)
    if (tail) touch(tail->slots[static_cast<size_t>(g)]);
  for (int64_t b = k - 1; b >= 0; --b)
    for (int g = 0; g < groups; ++g)
      if (b >= first_needed(m.tokens, g)) touch(found[static_cast<size_t>(b)]->slots[static_cast<size_t>(g)]);
  if (count) {
    ++stats_.hits;
    stats_.reused_tokens += m.tokens;
  }
  return m;
}

KvPrefixCache::Entry* KvPrefixCache::entry_for(uint64_t key, uint64_t parent,
                                               std::span<const int32_t> tokens) {
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (inserted) {
    e.parent = parent;
    e.tokens.assign(tokens.begin(), tokens.end());
    e.slots.assign(static_cast<size_t>(layout_.num_groups()), lru_.end());
    children_.emplace(parent, key);
    return &e;
  }
  if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()))
    return nullptr;
  return &e;
}

void KvPrefixCache::cache_slot(Entry& e, uint64_t key, size_t g, KvBlockId id, const Entry* previous) {
  pool_.retain(id);
  const SlotList::iterator at =
      previous != nullptr && previous->slots[g] != lru_.end() ? previous->slots[g] : lru_.end();
  e.slots[g] = lru_.insert(at, Slot{key, static_cast<int>(g), id});
  ++stats_.cached_blocks;
  stats_.cached_bytes += layout_.group(static_cast<int>(g)).block_bytes;
}

void KvPrefixCache::insert(KvSequence& sequence, std::span<const int32_t> tokens, bool tail) {
  const int64_t block_tokens = layout_.block_tokens();
  const int64_t length = std::min<int64_t>(sequence.length(), static_cast<int64_t>(tokens.size()));
  std::vector<uint64_t>& keys = sequence.prefix_keys_;
  const auto groups = static_cast<size_t>(layout_.num_groups());
  // The entry of the block before the first new one: a block goes just before its parent in LRU order, so
  // that eviction takes a chain from its end.
  const Entry* previous = nullptr;
  if (!keys.empty())
    if (auto it = entries_.find(keys.back()); it != entries_.end()) previous = &it->second;
  // Block b (a tail when shorter than a block): cache each group's block the sequence still stores. A tail
  // block someone else also holds is left out: it is another sequence's partial block, or already cached as
  // a longer tail this sequence reused without writing into it — a second entry would hold the block twice,
  // and eviction (which takes only blocks the cache alone holds) could never give it back.
  auto add = [&](int64_t b, Entry& e, uint64_t key, bool is_tail) {
    for (size_t g = 0; g < groups; ++g) {
      const KvSequence::Table& t = sequence.tables_[g];
      const int64_t i = b - t.first_block;
      if (e.slots[g] != lru_.end() || i < 0 || i >= static_cast<int64_t>(t.blocks.size())) continue;
      const KvBlockId id = t.blocks[static_cast<size_t>(i)];
      if (is_tail && pool_.refcount(id) > 1) continue;
      cache_slot(e, key, g, id, previous);
    }
  };
  for (auto b = static_cast<int64_t>(keys.size()); b < length / block_tokens; ++b) {
    const uint64_t parent = b == 0 ? seed_ : keys.back();
    const auto block =
        tokens.subspan(static_cast<size_t>(b * block_tokens), static_cast<size_t>(block_tokens));
    const uint64_t key = prefix_chain_hash(parent, block);
    keys.push_back(key);
    Entry* e = entry_for(key, parent, block);
    if (e != nullptr) add(b, *e, key, false);
    previous = e;
    forget_if_empty(key);
  }
  const int64_t full = length / block_tokens;
  if (!tail || length % block_tokens == 0 || static_cast<int64_t>(keys.size()) != full) return;
  const uint64_t parent = full == 0 ? seed_ : keys.back();
  const auto rest =
      tokens.subspan(static_cast<size_t>(full * block_tokens), static_cast<size_t>(length % block_tokens));
  const uint64_t key = prefix_chain_hash(parent, rest);
  if (Entry* e = entry_for(key, parent, rest)) add(full, *e, key, true);
  forget_if_empty(key);
}

void KvPrefixCache::forget_if_empty(uint64_t key) {
  auto e = entries_.find(key);
  if (e == entries_.end() || std::any_of(e->second.slots.begin(), e->second.slots.end(),
                                         [&](const SlotList::iterator& s) { return s != lru_.end(); }))
    return;
  auto [first, last] = children_.equal_range(e->second.parent);
  for (auto c = first; c != last; ++c)
    if (c->second == key) {
      children_.erase(c);
      break;
    }
  entries_.erase(e);
}

size_t KvPrefixCache::unreferenced_bytes() const {
  size_t bytes = 0;
  for (const Slot& s : lru_)
    if (pool_.refcount(s.block) == 1) bytes += layout_.group(s.group).block_bytes;
  return bytes;
}

void KvPrefixCache::trim(size_t max_bytes) {
  if (stats_.cached_bytes <= max_bytes) return;
  size_t excess = unreferenced_bytes();
  if (excess <= max_bytes) return;
  for (auto it = lru_.begin(); it != lru_.end() && excess > max_bytes;) {
    if (pool_.refcount(it->block) > 1) {
      ++it;
      continue;
    }
    excess -= layout_.group(it->group).block_bytes;
    it = drop(it);
  }
}

void KvPrefixCache::clear() {
  evict_until([] { return false; });
}

}  // namespace lmx
