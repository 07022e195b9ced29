// KvBlockPool: block records, reference counts, reuse per group and the byte budget.
#include "lmx/kv/block_pool.h"

#include <cstdlib>
#include <cstring>

namespace lmx {

KvPoolExhausted::KvPoolExhausted(size_t needed_bytes, size_t budget_bytes, std::string what)
    : Error(std::move(what)), needed_bytes_(needed_bytes), budget_bytes_(budget_bytes) {}

KvBlockPool::KvBlockPool(std::vector<size_t> group_block_bytes, size_t budget_bytes,
                         std::shared_ptr<KvMemory> memory)
    : block_bytes_(std::move(group_block_bytes)), budget_bytes_(budget_bytes), memory_(std::move(memory)) {
  LMX_REQUIRE(InvalidArgument, memory_ != nullptr, "KV block pool: no memory");
  for (size_t g = 0; g < block_bytes_.size(); ++g)
    LMX_REQUIRE(InvalidArgument, block_bytes_[g] > 0, "KV block pool: group {} has empty blocks", g);
  free_.resize(block_bytes_.size());
  used_blocks_.assign(block_bytes_.size(), 0);
}

KvBlockPool::~KvBlockPool() {
  for (auto& r : records_)
    if (r.data != nullptr) memory_->free(r.data, block_bytes_[static_cast<size_t>(r.group)]);
}

const KvBlockPool::Record& KvBlockPool::record(KvBlockId id) const {
  LMX_REQUIRE(InvalidArgument,
              id >= 0 && static_cast<size_t>(id) < records_.size() && records_[id].data != nullptr,
              "KV block {} does not exist", id);
  return records_[static_cast<size_t>(id)];
}

KvBlockPool::Record& KvBlockPool::record(KvBlockId id) {
  return const_cast<Record&>(static_cast<const KvBlockPool*>(this)->record(id));
}

size_t KvBlockPool::used_bytes() const {
  size_t total = 0;
  for (size_t g = 0; g < block_bytes_.size(); ++g)
    total += static_cast<size_t>(used_blocks_[g]) * block_bytes_[g];
  return total;
}

bool KvBlockPool::can_allocate(std::span<const int64_t> blocks) const {
  LMX_REQUIRE(InvalidArgument, blocks.size() == block_bytes_.size(),
              "KV block pool: {} group counts for {} groups", blocks.size(), block_bytes_.size());
  size_t needed = 0, reclaimable = 0;
  for (size_t g = 0; g < blocks.size(); ++g) {
    const int64_t reuse = std::min<int64_t>(blocks[g], static_cast<int64_t>(free_[g].size()));
    needed += static_cast<size_t>(blocks[g] - reuse) * block_bytes_[g];
    reclaimable += (free_[g].size() - static_cast<size_t>(reuse)) * block_bytes_[g];
  }
  return needed <= budget_bytes_ - std::min(budget_bytes_, held_bytes_) + reclaimable;
}

void KvBlockPool::give_back(KvBlockId id) {
  Record& r = records_[static_cast<size_t>(id)];
  memory_->free(r.data, block_bytes_[static_cast<size_t>(r.group)]);
  held_bytes_ -= block_bytes_[static_cast<size_t>(r.group)];
  r = Record{};
  unused_records_.push_back(id);
}

bool KvBlockPool::make_room(size_t bytes, int keep) {
  for (size_t g = 0; g < free_.size() && held_bytes_ + bytes > budget_bytes_; ++g) {
    if (static_cast<int>(g) == keep) continue;
    while (!free_[g].empty() && held_bytes_ + bytes > budget_bytes_) {
      give_back(free_[g].back());
      free_[g].pop_back();
    }
  }
  return held_bytes_ + bytes <= budget_bytes_;
}

KvBlockId KvBlockPool::allocate(int group) {
  LMX_REQUIRE(InvalidArgument, group >= 0 && group < num_groups(), "KV block pool: no group {}", group);
  const size_t g = static_cast<size_t>(group);
  KvBlockId id;
  if (!free_[g].empty()) {
    id = free_[g].back();
    free_[g].pop_back();
  } else {
    const size_t bytes = block_bytes_[g];
    auto exhausted = [&] {
      return KvPoolExhausted(
          bytes, budget_bytes_,
          fmt::format("KV cache full: a {}-byte block does not fit ({} of {} bytes in use on {})", bytes,
                      used_bytes(), budget_bytes_, memory_->name()));
    };
    if (!make_room(bytes, group)) throw exhausted();
    void* data = memory_->allocate(bytes);
    if (data == nullptr) {
      // The backend ran out before the budget: give every other free block back and try once more.
      make_room(budget_bytes_ + 1, group);
      data = memory_->allocate(bytes);
      if (data == nullptr) throw exhausted();
    }
    if (!unused_records_.empty()) {
      id = unused_records_.back();
      unused_records_.pop_back();
    } else {
      id = static_cast<KvBlockId>(records_.size());
      records_.emplace_back();
    }
    records_[static_cast<size_t>(id)] = Record{data, group, 0};
    held_bytes_ += bytes;
  }
  records_[static_cast<size_t>(id)].refcount = 1;
  ++used_blocks_[g];
  return id;
}

void KvBlockPool::retain(KvBlockId id) {
  Record& r = record(id);
  LMX_REQUIRE(InvalidArgument, r.refcount > 0, "KV block {} is free", id);
  ++r.refcount;
}

void KvBlockPool::release(KvBlockId id) {
  Record& r = record(id);
  LMX_REQUIRE(InvalidArgument, r.refcount > 0, "KV block {} released while free", id);
  if (--r.refcount > 0) return;
  --used_blocks_[static_cast<size_t>(r.group)];
  free_[static_cast<size_t>(r.group)].push_back(id);
}

KvBlockId KvBlockPool::duplicate(KvBlockId src) {
  const int group = group_of(src);
  const KvBlockId copy = allocate(group);
  memory_->copy(data(copy), data(src), block_bytes_[static_cast<size_t>(group)]);
  return copy;
}

}  // namespace lmx
