// KvBlockPool: the fixed-size KV blocks of one backend under one byte budget, with reference counts so
// that sequences can share blocks (prefix reuse, forks). Metadata only lives here; the bytes live in a
// KvMemory (host memory, or device memory from the CUDA backend).
#pragma once

#include "lmx/core/error.h"
#include "lmx/ops/kv_memory.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

// The pool cannot hold what a step asks for: the caller may wait, preempt a sequence or refuse the
// request. Nothing was changed when this is thrown.
class KvPoolExhausted : public Error {
 public:
  KvPoolExhausted(size_t needed_bytes, size_t budget_bytes, std::string what);
  size_t needed_bytes() const { return needed_bytes_; }
  size_t budget_bytes() const { return budget_bytes_; }

 private:
  size_t needed_bytes_, budget_bytes_;
};

using KvBlockId = int32_t;

class KvBlockPool {
 public:
  // Groups are numbered 0..N-1; a block of group g has group_block_bytes[g] bytes. budget_bytes caps the
  // bytes of every block held (in use or kept for reuse).
  KvBlockPool(std::vector<size_t> group_block_bytes, size_t budget_bytes, std::shared_ptr<KvMemory> memory);
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  // Whether `blocks[g]` new blocks of each group g could be allocated now (the budget and the blocks
  // kept for reuse decide; a device that runs out earlier is only found by allocate).
  bool can_allocate(std::span<const int64_t> blocks) const;
  // A new block of `group` with reference count 1. Reuses a free block of the group, else takes new
  // memory, giving free blocks of other groups back first when the budget requires. Throws
  // KvPoolExhausted when neither works.
  KvBlockId allocate(int group);
  void retain(KvBlockId id);
  // Drops one reference; at zero the block is free (kept for reuse by its group).
  void release(KvBlockId id);
  // A new block of src's group holding a copy of src's bytes (copy-on-write of a shared block).
  KvBlockId duplicate(KvBlockId src);

  int refcount(KvBlockId id) const { return record(id).refcount; }
  int group_of(KvBlockId id) const { return record(id).group; }
  void* data(KvBlockId id) const { return record(id).data; }

  int num_groups() const { return static_cast<int>(block_bytes_.size()); }
  size_t block_bytes(int group) const { return block_bytes_.at(static_cast<size_t>(group)); }
  size_t budget_bytes() const { return budget_bytes_; }
  // Bytes of blocks held from the memory (in use or free for reuse).
  size_t held_bytes() const { return held_bytes_; }
  // Bytes of blocks some sequence references.
  size_t used_bytes() const;
  int64_t used_blocks(int group) const { return used_blocks_.at(static_cast<size_t>(group)); }
  int64_t free_blocks(int group) const {
    return static_cast<int64_t>(free_.at(static_cast<size_t>(group)).size());
  }
  const KvMemory& memory() const { return *memory_; }
  KvMemory& memory() { return *memory_; }

 private:
  struct Record {
    void* data = nullptr;
    int group = -1;
    int refcount = 0;
  };
  const Record& record(KvBlockId id) const;
  Record& record(KvBlockId id);
  // Gives free blocks of groups other than `keep` back to the memory until `bytes` more fit the budget
  // (or none are left); returns whether they fit.
  bool make_room(size_t bytes, int keep);
  void give_back(KvBlockId id);

  std::vector<size_t> block_bytes_;
  size_t budget_bytes_;
  std::shared_ptr<KvMemory> memory_;
  std::vector<Record> records_;
  std::vector<KvBlockId> unused_records_;
  std::vector<std::vector<KvBlockId>> free_;  // per group: refcount-0 blocks that still hold memory
  std::vector<int64_t> used_blocks_;
  size_t held_bytes_ = 0;
};

}  // namespace lmx
