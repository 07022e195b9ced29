// Writes a checkpoint's tensors into safetensors shards of bounded size, with an index when sharded.
#include "lmx/io/sharded_writer.h"

#include "lmx/core/error.h"
#include "lmx/io/output_file.h"
#include "lmx/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace lmx {
namespace {
std::string temp_shard_name(size_t index) { return fmt::format("model-partial-{:05d}.safetensors", index); }
}  // namespace

ShardedWriter::ShardedWriter(std::string dir, size_t shard_bytes) : dir_(std::move(dir)), shard_bytes_(shard_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw IoError(fmt::format("cannot create directory {}: {}", dir_, ec.message()));
}

ShardedWriter::~ShardedWriter() {
  if (writing_.joinable()) writing_.join();
  if (finished_) return;
  std::error_code ec;  // an unfinished write leaves no partial shards behind
  for (size_t i = 0; i < shard_names_.size(); ++i) std::filesystem::remove(dir_ + "/" + temp_shard_name(i), ec);
}

void ShardedWriter::add(const std::string& name, Tensor tensor) {
  if (pending_bytes_ > 0 && pending_bytes_ + tensor.nbytes() > shard_bytes_) flush();
  pending_bytes_ += tensor.nbytes();
  pending_.emplace_back(name, std::move(tensor));
}

void ShardedWriter::wait_for_write() {
  if (writing_.joinable()) writing_.join();
  if (write_error_) std::rethrow_exception(std::exchange(write_error_, nullptr));
}

void ShardedWriter::flush() {
  if (pending_.empty()) return;
  wait_for_write();
  std::vector<std::string> names;
  for (const auto& [name, t] : pending_) names.push_back(name);
  const std::string path = dir_ + "/" + temp_shard_name(shard_names_.size());
  shard_names_.push_back(std::move(names));
  writing_ = std::thread([this, path, tensors = std::move(pending_)] {
    try {
      write_safetensors(path, tensors, {{"format", "pt"}});
    } catch (...) {
      write_error_ = std::current_exception();
    }
  });
  pending_.clear();
  pending_bytes_ = 0;
}

void ShardedWriter::finish() {
  flush();
  wait_for_write();
  const size_t count = shard_names_.size();
  auto rename = [&](size_t i, const std::string& final_name) {
    std::error_code ec;
    std::filesystem::rename(dir_ + "/" + temp_shard_name(i), dir_ + "/" + final_name, ec);
    if (ec) throw IoError(fmt::format("cannot rename shard into {}/{}: {}", dir_, final_name, ec.message()));
  };
  if (count <= 1) {
    if (count == 1) rename(0, "model.safetensors");
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < count; ++i) {
      std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, count);
      rename(i, file);
      for (const auto& name : shard_names_[i]) weight_map[name] = file;
    }
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}};
    write_text_file(dir_ + "/model.safetensors.index.json", index.dump(2) + "\n");
  }
  finished_ = true;
}

}  // namespace lmx
