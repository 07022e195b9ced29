// Host memory for KV cache blocks.
#include "lmx/ops/kv_memory.h"

#include <sys/sysinfo.h>

#include <cstdlib>
#include <cstring>

namespace lmx {

namespace {
class HostKvMemory final : public KvMemory {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  void free(void* block, size_t) override { std::free(block); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void read(void* host, const void* src, size_t bytes) override { std::memcpy(host, src, bytes); }
  void write(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  std::string name() const override { return "host"; }
  size_t available_bytes() const override {
    struct sysinfo info {};
    if (sysinfo(&info) != 0) return 0;
    return static_cast<size_t>(info.freeram + info.bufferram) * info.mem_unit;
  }
};
}  // namespace

std::shared_ptr<KvMemory> host_kv_memory() {
  return std::make_shared<HostKvMemory>();
}

}  // namespace lmx
