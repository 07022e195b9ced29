// A per-thread cache of merged BPE words: word bytes -> token ids, in flat arenas, cleared
// whenever it fills (HF tokenizers caches words the same way, bounded, per thread).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::text {

class BpeWordCache {
 public:
  // Capacity in words; the table is cleared when half full or when the arenas grow too large.
  static constexpr size_t kSlots = size_t{1} << 17;
  static constexpr size_t kMaxArenaBytes = size_t{32} << 20;

  // Appends the cached ids of `word` (hash `h`) to `ids` and returns true, or returns false.
  bool find(std::string_view word, uint64_t h, std::vector<int32_t>& ids) const {
    if (slots_.empty()) return false;
    size_t i = h & (kSlots - 1);
    while (true) {
      const Slot& s = slots_[i];
      if (s.ids_count == kEmpty) return false;
      if (s.hash == h && s.key_length == word.size() && std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
        ids.insert(ids.end(), ids_.begin() + s.ids_offset, ids_.begin() + s.ids_offset + s.ids_count);
        return true;
      }
      i = (i + 1) & (kSlots - 1);
    }
  }

  void insert(std::string_view word, uint64_t h, const int32_t* ids, size_t count) {
    if (slots_.empty()) slots_.assign(kSlots, Slot{});
    if (size_ * 2 >= kSlots || keys_.size() + ids_.size() * sizeof(int32_t) > kMaxArenaBytes) clear();
    size_t i = h & (kSlots - 1);
    while (slots_[i].ids_count != kEmpty) i = (i + 1) & (kSlots - 1);
    slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
    keys_.append(word);
    ids_.insert(ids_.end(), ids, ids + count);
    ++size_;
  }

  void clear() {
    if (!slots_.empty()) slots_.assign(kSlots, Slot{});
    keys_.clear();
    ids_.clear();
    size_ = 0;
  }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_length = 0;
    uint32_t ids_offset = 0;
    uint32_t ids_count = kEmpty;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t size_ = 0;
};

}  // namespace lmx::text
