// Writes a checkpoint's tensors into safetensors shards of bounded size, with an index when sharded.
#pragma once

#include "lmx/core/tensor.h"

#include <string>
#include <utility>
#include <vector>

namespace lmx {

// Tensors are added one at a time; a shard is flushed to disk once it would exceed `shard_bytes`,
// so memory stays bounded by one shard. finish() names the files model.safetensors (one shard) or
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json. Errors name the file.
class ShardedWriter {
 public:
  ShardedWriter(std::string dir, size_t shard_bytes = size_t{2} << 30);
  ~ShardedWriter();
  ShardedWriter(const ShardedWriter&) = delete;
  ShardedWriter& operator=(const ShardedWriter&) = delete;

  void add(const std::string& name, Tensor tensor);
  void finish();

 private:
  void flush();
  std::string dir_;
  size_t shard_bytes_;
  size_t pending_bytes_ = 0;
  std::vector<std::pair<std::string, Tensor>> pending_;
  std::vector<std::vector<std::string>> shard_names_;  // tensor names per flushed shard
  bool finished_ = false;
};

}  // namespace lmx
