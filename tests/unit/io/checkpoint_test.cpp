// Tests for Checkpoint: single-file, indexed-shard and glob model directories, and their errors.
#include "io_test_helpers.h"
#include "lmx/io/output_file.h"
#include "lmx/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

using test::expect_error;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = test::random_tensor({4, 8}, DType::kBF16);
    b_ = test::random_tensor({8}, DType::kF32);
    c_ = test::random_any_tensor({3, 2}, DType::kU32);
  }
  // Writes two shards and an index mapping a, b -> shard 1 and c -> shard 2.
  void write_sharded(const std::string& index_json) {
    write_safetensors(dir_.file("model-00001-of-00002.safetensors"), {{"a", a_}, {"b", b_}});
    write_safetensors(dir_.file("model-00002-of-00002.safetensors"), {{"c", c_}});
    write_text_file(dir_.file("model.safetensors.index.json"), index_json);
  }
  static constexpr const char* kIndex = R"({"metadata": {"total_size": 100}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})";
  test::TempDir dir_;
  Tensor a_, b_, c_;
};

TEST_F(CheckpointTest, SingleFile) {
  write_safetensors(dir_.file("model.safetensors"), {{"b", b_}, {"a", a_}});
  Checkpoint ck = Checkpoint::open_dir(dir_.path());
  EXPECT_EQ(ck.dir(), dir_.path());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(same_bytes(ck.tensor("a"), a_));
  EXPECT_EQ(ck.info("b").shape, b_.shape());
  EXPECT_EQ(ck.total_bytes(), a_.nbytes() + b_.nbytes());
  EXPECT_EQ(ck.file_of("a"), dir_.file("model.safetensors"));
}

TEST_F(CheckpointTest, ShardedWithIndex) {
  write_sharded(kIndex);
  // A stray file that the index does not mention is ignored.
  write_safetensors(dir_.file("stray.safetensors"), {{"a", a_}});
  Checkpoint ck = Checkpoint::open_dir(dir_.path());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_TRUE(same_bytes(ck.tensor("a"), a_));
  EXPECT_TRUE(same_bytes(ck.tensor("b"), b_));
  EXPECT_TRUE(same_bytes(ck.tensor("c"), c_));
  EXPECT_EQ(ck.file_of("c"), dir_.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck.total_bytes(), a_.nbytes() + b_.nbytes() + c_.nbytes());
  EXPECT_TRUE(ck.contains("c"));
  EXPECT_FALSE(ck.contains("d"));
  expect_error<FormatError>([&] { ck.tensor("d"); }, {dir_.path(), "'d'"});
}

TEST_F(CheckpointTest, IndexNamingAMissingShard) {
  write_sharded(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "z": "model-00003-of-00003.safetensors"}})");
  expect_error<FormatError>(
      [&] { Checkpoint::open_dir(dir_.path()); },
      {"model.safetensors.index.json", "'model-00003-of-00003.safetensors'", "'z'", "does not exist"});
}

TEST_F(CheckpointTest, IndexNamingATensorMissingFromItsShard) {
  write_sharded(
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})");
  expect_error<FormatError>(
      [&] { Checkpoint::open_dir(dir_.path()); },
      {"model.safetensors.index.json", "tensor 'c'", "model-00001-of-00002.safetensors", "does not contain"});
}

TEST_F(CheckpointTest, IndexMalformed) {
  write_sharded("{\"weight_map\": ");
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); },
                            {"model.safetensors.index.json", "JSON"});
  write_text_file(dir_.file("model.safetensors.index.json"), R"({"metadata": {}})");
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); }, {"weight_map"});
  write_text_file(dir_.file("model.safetensors.index.json"), R"({"weight_map": {"a": 3}})");
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); }, {"tensor 'a'"});
  write_text_file(dir_.file("model.safetensors.index.json"),
                  R"({"weight_map": {"a": "../outside.safetensors"}})");
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); }, {"'../outside.safetensors'"});
  write_text_file(dir_.file("model.safetensors.index.json"), R"({"weight_map": {"a": "/etc/passwd"}})");
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); }, {"'/etc/passwd'"});
}

TEST_F(CheckpointTest, MalformedShardNamesTheShard) {
  write_sharded(kIndex);
  write_text_file(dir_.file("model-00002-of-00002.safetensors"), "garbage");
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); }, {"model-00002-of-00002.safetensors"});
}

TEST_F(CheckpointTest, GlobOfAllSafetensorsSorted) {
  write_safetensors(dir_.file("b-part.safetensors"), {{"c", c_}});
  write_safetensors(dir_.file("a-part.safetensors"), {{"a", a_}, {"b", b_}});
  write_text_file(dir_.file("notes.txt"), "not weights");
  Checkpoint ck = Checkpoint::open_dir(dir_.path());
  ASSERT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.files()[0]->path(), dir_.file("a-part.safetensors"));
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(same_bytes(ck.tensor("c"), c_));
}

TEST_F(CheckpointTest, DuplicateTensorAcrossFiles) {
  write_safetensors(dir_.file("one.safetensors"), {{"a", a_}});
  write_safetensors(dir_.file("two.safetensors"), {{"a", a_}});
  expect_error<FormatError>([&] { Checkpoint::open_dir(dir_.path()); },
                            {"tensor 'a'", "one.safetensors", "two.safetensors"});
}

TEST_F(CheckpointTest, NoWeightsOrNoDirectory) {
  expect_error<IoError>([&] { Checkpoint::open_dir(dir_.path()); }, {dir_.path(), "no model.safetensors"});
  expect_error<IoError>([&] { Checkpoint::open_dir(dir_.file("absent")); },
                        {"absent", "No such file or directory"});
}

}  // namespace
}  // namespace lmx
