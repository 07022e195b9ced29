// KV snapshots on a real model: a sequence saved after its prompt and loaded into another instance of the
// model continues with bit-identical logits; fingerprints tell models and tokenizers apart.
#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/fingerprint.h"
#include "lmx/kv/snapshot.h"
#include "lmx/model/language_model.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace lmx {
namespace {

TEST(KvSnapshotModel, ALoadedSequenceContinuesBitForBit) {
  // The committed tiny E2B (head_dim 32, so the quantized codecs apply).
  const std::string dir = test::source_path("tests/data/models/tiny-e2b");
  for (const char* codec : {"f32", "bf16", "affine8:g32", "turbo"}) {
    SCOPED_TRACE(codec);
    ModelOptions options;
    options.kv_codec = KvCodec::parse(codec);
    options.kv_block_tokens = 4;
    auto a = test::load_model(dir, Device::cpu(), options);
    auto b = test::load_model(dir, Device::cpu(), options);
    const KvSnapshotIdentity identity{model_fingerprint(dir), tokenizer_fingerprint(dir)};
    std::vector<int32_t> prompt(27);
    for (auto& t : prompt) t = static_cast<int32_t>(3 + test::rng()() % (a->description().vocab_size - 3));
    auto seq = a->new_sequence();
    for (size_t begin = 0; begin < prompt.size(); begin += 10) {
      StepRow row{seq.get(), std::span<const int32_t>(prompt).subspan(begin, std::min<size_t>(10, prompt.size() - begin))};
      a->forward({&row, 1});
    }
    test::TempDir tmp;
    save_kv_snapshot(tmp.file("kv"), a->kv_cache(), a->kv_cache().own(seq.get()), prompt, identity);
    KvSnapshot loaded = load_kv_snapshot(tmp.file("kv"), b->kv_cache(), identity);
    EXPECT_EQ(loaded.tokens, prompt);
    for (int step = 0; step < 6; ++step) {
      const int32_t next = static_cast<int32_t>(5 + step * 7);
      StepRow ra{seq.get(), std::span<const int32_t>(&next, 1)};
      StepRow rb{loaded.sequence.get(), std::span<const int32_t>(&next, 1)};
      const Tensor la = a->forward({&ra, 1}), lb = b->forward({&rb, 1});
      ASSERT_EQ(std::memcmp(la.raw_data(), lb.raw_data(), la.nbytes()), 0) << "step " << step;
    }
  }
}

TEST(KvSnapshotModel, FingerprintsTellModelsAndTokenizersApart) {
  const std::string e2b = test::tiny_model_dir("e2b");
  EXPECT_EQ(model_fingerprint(e2b), model_fingerprint(e2b));
  EXPECT_NE(model_fingerprint(e2b), model_fingerprint(test::tiny_model_dir("31b")));
  EXPECT_EQ(tokenizer_fingerprint(e2b), "tokenizer:none");
  // A copy with one weight byte changed (the first of the first tensor, which the sample reads) differs.
  test::TempDir tmp;
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::error_code error;
    ASSERT_TRUE(std::filesystem::copy_file(join_path(e2b, f), tmp.file(f), error)) << error.message();
  }
  EXPECT_EQ(model_fingerprint(tmp.path()), model_fingerprint(e2b));
  {
    std::fstream file(tmp.file("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    file.read(reinterpret_cast<char*>(&header), 8);
    file.seekg(static_cast<std::streamoff>(8 + header));
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 1);
    file.seekp(static_cast<std::streamoff>(8 + header));
    file.write(&byte, 1);
  }
  EXPECT_NE(model_fingerprint(tmp.path()), model_fingerprint(e2b));
  std::ofstream(tmp.file("tokenizer.json")) << "{}";
  const std::string with_tokenizer = tokenizer_fingerprint(tmp.path());
  EXPECT_NE(with_tokenizer, "tokenizer:none");
  std::ofstream(tmp.file("tokenizer.json")) << "{ }";
  EXPECT_NE(tokenizer_fingerprint(tmp.path()), with_tokenizer);
}

}  // namespace
}  // namespace lmx
