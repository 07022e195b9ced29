// Tests for ShardedWriter: shard boundaries and the index, background writes, and write errors.
#include "io_test_helpers.h"
#include "lmx/io/safetensors.h"
#include "lmx/io/sharded_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace lmx {
namespace {

using test::expect_error;

TEST(ShardedWriter, SplitsIntoShardsWithAnIndexAndKeepsEveryTensor) {
  // 1 KiB shards and 600-byte tensors: one tensor per shard, each written while the next fills.
  test::TempDir dir;
  std::vector<std::pair<std::string, Tensor>> written;
  {
    ShardedWriter shards(dir.path(), 1024);
    for (int i = 0; i < 5; ++i) {
      std::string name = "t";
      name += std::to_string(i);  // (not "t" + …: GCC 12 warns falsely about it, -Wrestrict)
      written.emplace_back(name, test::random_tensor({150}, DType::kF32));
      shards.add(written.back().first, written.back().second);
    }
    shards.finish();
  }
  for (int i = 1; i <= 5; ++i)
    EXPECT_TRUE(test::exists(dir.file(fmt::format("model-{:05d}-of-00005.safetensors", i)))) << i;
  EXPECT_TRUE(test::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(test::exists(dir.file("model-partial-00000.safetensors")));
  Checkpoint checkpoint = Checkpoint::open_dir(dir.path());
  for (const auto& [name, tensor] : written) {
    const Tensor got = checkpoint.tensor(name);
    ASSERT_EQ(got.shape(), tensor.shape()) << name;
    EXPECT_EQ(std::memcmp(got.raw_data(), tensor.raw_data(), tensor.nbytes()), 0) << name;
  }
}

TEST(ShardedWriter, OneShardIsModelSafetensors) {
  test::TempDir dir;
  {
    ShardedWriter shards(dir.path());
    shards.add("a", test::random_tensor({4, 4}, DType::kBF16));
    shards.finish();
  }
  EXPECT_TRUE(test::exists(dir.file("model.safetensors")));
  EXPECT_FALSE(test::exists(dir.file("model.safetensors.index.json")));
}

TEST(ShardedWriter, ABackgroundWriteErrorSurfacesAndLeavesNoShards) {
  // The directory disappears after the first shard is handed to the writer thread: its write fails,
  // and the error (naming the file) comes out of the next flush or finish(); nothing is left behind.
  test::TempDir dir;
  const std::string out = dir.file("out");
  {
    ShardedWriter shards(out, 1024);
    shards.add("a", test::random_tensor({150}, DType::kF32));
    test::remove_path(out);
    expect_error<IoError>(
        [&] {
          shards.add("b", test::random_tensor({150}, DType::kF32));  // flushes "a" in the background
          shards.add("c", test::random_tensor({150}, DType::kF32));  // waits for it: rethrows
          shards.finish();
        },
        {"model-partial-0000"});
  }
  EXPECT_FALSE(test::exists(out + "/model.safetensors"));
}

}  // namespace
}  // namespace lmx
