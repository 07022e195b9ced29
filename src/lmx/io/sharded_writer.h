// Writes a checkpoint's tensors into safetensors shards of bounded size, with an index when sharded.
#pragma once

#include "lmx/core/tensor.h"

#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lmx {

// Tensors are added one at a time; a shard is flushed to disk once it would exceed `shard_bytes`.
// A full shard is written by a background thread while the next one fills (one write at a time), so
// memory stays bounded by two shards. finish() waits for the writes and names the files
// model.safetensors (one shard) or model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
// Errors name the file; a background write's error is rethrown by the next add() that flushes or by
// finish().
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
  void wait_for_write();  // joins the background write; rethrows its error
  std::string dir_;
  size_t shard_bytes_;
  size_t pending_bytes_ = 0;
  std::vector<std::pair<std::string, Tensor>> pending_;
  std::vector<std::vector<std::string>> shard_names_;  // tensor names per flushed shard
  bool finished_ = false;
  std::thread writing_;
  std::exception_ptr write_error_;
};

}  // namespace lmx
