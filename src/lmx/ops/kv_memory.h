// Where a backend keeps KV cache blocks: the memory interface kv/'s block pool allocates from.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace lmx {

// Where a backend keeps KV bytes. Not thread-safe; used by one engine thread.
class KvMemory {
 public:
  virtual ~KvMemory() = default;
  // Storage for one block of `bytes`, or nullptr when the backend has no memory left. Contents are
  // unspecified (a block is written before any query reads it).
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* block, size_t bytes) = 0;
  // Copies `bytes` from block src to block dst, ordered before every later read of dst by the backend.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Copies `bytes` of block src into host memory; returns when they are there (after every earlier write).
  virtual void read(void* host, const void* src, size_t bytes) = 0;
  // Copies `bytes` of host memory into block dst, ordered before every later read of dst by the backend;
  // `host` may be reused when it returns.
  virtual void write(void* dst, const void* host, size_t bytes) = 0;
  // "host", "cuda:0": for messages.
  virtual std::string name() const = 0;
  // Bytes the backend could still hand out (for the default budget); 0 when unknown.
  virtual size_t available_bytes() const = 0;
};

// Host memory (64-byte aligned allocations); available_bytes() is the free RAM.
std::shared_ptr<KvMemory> host_kv_memory();

}  // namespace lmx
