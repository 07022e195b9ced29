// Open-addressing hash tables for the tokenizer's hot lookups: token string -> id (keys are views
// into storage the owner keeps alive) and 64-bit key -> 64-bit value (BPE merges, char pairs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace lmx::text {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// A fast non-cryptographic hash of a byte string.
inline uint64_t hash_bytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0x100000001B3ULL);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
  }
  return mix64(h);
}

// Maps strings to int32 ids. Keys are views: whoever inserts keeps the bytes alive and unmoved.
// Inserting an existing key replaces its id (as a JSON object with a repeated key does in serde).
class StringIdMap {
 public:
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }

  void insert(std::string_view key, int32_t id) { insert(key, hash_bytes(key), id); }

  // Same, with `h` == hash_bytes(key) computed by the caller.
  void insert(std::string_view key, uint64_t h, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t i = h & (slots_.size() - 1);
    while (true) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{h, key.data(), static_cast<uint32_t>(key.size()), id};
        ++size_;
        return;
      }
      if (s.hash == h && s.length == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) {
        s.id = id;
        return;
      }
      i = (i + 1) & (slots_.size() - 1);
    }
  }

  // The id of `key`, or -1.
  int32_t find(std::string_view key) const { return find(key, hash_bytes(key)); }

  int32_t find(std::string_view key, uint64_t h) const {
    if (slots_.empty()) return -1;
    size_t i = h & (slots_.size() - 1);
    while (true) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && s.length == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) return s.id;
      i = (i + 1) & (slots_.size() - 1);
    }
  }

  // Ids of many keys at once (-1 for absent ones). Overlaps the cache misses of the lookups,
  // which dominate loading a large vocab.
  void find_many(const std::string_view* keys, size_t count, int32_t* ids) const {
    constexpr size_t kBatch = 16;
    uint64_t hashes[kBatch];
    for (size_t start = 0; start < count; start += kBatch) {
      const size_t n = std::min(kBatch, count - start);
      for (size_t k = 0; k < n; ++k) {
        hashes[k] = hash_bytes(keys[start + k]);
        prefetch_slot(hashes[k]);
      }
      for (size_t k = 0; k < n; ++k) {
        if (slots_.empty()) continue;
        // Prefetch the bytes of the first slot with a matching hash for the comparison below.
        size_t i = hashes[k] & (slots_.size() - 1);
        while (slots_[i].id >= 0 && slots_[i].hash != hashes[k]) i = (i + 1) & (slots_.size() - 1);
        if (slots_[i].id >= 0) __builtin_prefetch(slots_[i].data);
      }
      for (size_t k = 0; k < n; ++k) ids[start + k] = find(keys[start + k], hashes[k]);
    }
  }

  void prefetch_slot(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & (slots_.size() - 1)]);
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;
    uint32_t length = 0;
    int32_t id = -1;
  };

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t i = s.hash & (capacity - 1);
      while (slots_[i].id >= 0) i = (i + 1) & (capacity - 1);
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// Maps 64-bit keys to 64-bit values; kEmptyKey may not be used as a key.
class U64Map {
 public:
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }

  // Inserts or replaces.
  void insert(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t i = mix64(key) & (slots_.size() - 1);
    while (true) {
      Slot& s = slots_[i];
      if (s.key == kEmptyKey) {
        s = Slot{key, value};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.value = value;
        return;
      }
      i = (i + 1) & (slots_.size() - 1);
    }
  }

  void prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[mix64(key) & (slots_.size() - 1)]);
  }

  // Pointer to the value of `key`, or null.
  const uint64_t* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t i = mix64(key) & (slots_.size() - 1);
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmptyKey) return nullptr;
      i = (i + 1) & (slots_.size() - 1);
    }
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = kEmptyKey;
    uint64_t value = 0;
  };

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    for (const Slot& s : old) {
      if (s.key == kEmptyKey) continue;
      size_t i = mix64(s.key) & (capacity - 1);
      while (slots_[i].key != kEmptyKey) i = (i + 1) & (capacity - 1);
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace lmx::text
