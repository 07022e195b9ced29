// A KV quantization start on a real model: below it the logits are the bf16 cache's bit for bit, a lone
// row crossing it runs split there, and snapshots on either side of it load back and continue bit for bit
// (and are refused by a cache with another start).
#include "lmx/core/error.h"
#include "lmx/io/fingerprint.h"
#include "lmx/kv/snapshot.h"
#include "lmx/model/language_model.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

constexpr int64_t kStart = 12;

// The committed tiny E2B (head_dim 32, so the quantized codecs apply), KV blocks of 4 tokens.
std::unique_ptr<LanguageModel> tiny(const char* codec, int64_t quant_start) {
  ModelOptions options;
  options.kv_codec = KvCodec::parse(codec);
  options.kv_block_tokens = 4;
  options.kv_quant_start = quant_start;
  return test::load_model(test::source_path("tests/data/models/tiny-e2b"), Device::cpu(), options);
}

std::vector<int32_t> random_tokens(const LanguageModel& model, size_t n) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(3 + test::rng()() % (model.description().vocab_size - 3));
  return ids;
}

// Logits of every position of `tokens` fed in chunks of `chunk`.
Tensor run(LanguageModel& model, Sequence& seq, std::span<const int32_t> tokens, size_t chunk) {
  std::vector<float> all;
  int64_t vocab = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    StepRow row{&seq, tokens.subspan(begin, std::min(chunk, tokens.size() - begin))};
    const Tensor logits = model.forward({&row, 1}, /*all_positions=*/true);
    vocab = logits.dim(1);
    all.insert(all.end(), logits.data<float>(), logits.data<float>() + logits.numel());
  }
  return Tensor::from_vector(all, {static_cast<int64_t>(all.size()) / vocab, vocab});
}

bool rows_equal(const Tensor& a, const Tensor& b, int64_t from, int64_t to) {
  const auto width = static_cast<size_t>(a.dim(1));
  return std::memcmp(a.data<float>() + static_cast<size_t>(from) * width,
                     b.data<float>() + static_cast<size_t>(from) * width,
                     static_cast<size_t>(to - from) * width * sizeof(float)) == 0;
}

TEST(KvQuantStartModel, BelowTheStartTheLogitsAreTheBf16CachesAndALoneRowSplitsThere) {
  for (const char* codec : {"affine4:g32", "turbo"}) {
    SCOPED_TRACE(codec);
    auto bf16 = tiny("bf16", 0), started = tiny(codec, kStart), split = tiny(codec, kStart);
    const std::vector<int32_t> tokens = random_tokens(*bf16, 30);
    auto a = bf16->new_sequence(), b = started->new_sequence(), c = split->new_sequence();
    const Tensor la = run(*bf16, *a, tokens, 6), lb = run(*started, *b, tokens, 6);
    EXPECT_TRUE(rows_equal(la, lb, 0, kStart));
    EXPECT_FALSE(rows_equal(la, lb, kStart, 30));  // the quantized history shows after the start
    // One forward of all 30 tokens runs [0, 12) then [12, 30): the same as chunks that end at the start.
    const Tensor lc = run(*split, *c, tokens, 30);
    EXPECT_TRUE(rows_equal(lb, lc, 0, 30));
    auto& held = started->kv_cache().own(b.get());
    EXPECT_FALSE(held.before_quant_start());
    EXPECT_EQ(held.min_reusable_offset(), kStart);
    EXPECT_FALSE(b->can_truncate(kStart - 1));
    EXPECT_THROW(started->fork(*b, kStart - 1), InvalidArgument);
  }
}

TEST(KvQuantStartModel, SnapshotsOnEitherSideLoadBackAndContinueBitForBit) {
  const std::string dir = test::source_path("tests/data/models/tiny-e2b");
  const KvSnapshotIdentity identity{model_fingerprint(dir), tokenizer_fingerprint(dir)};
  for (const size_t length : {size_t{9}, size_t{21}}) {
    SCOPED_TRACE(length);
    auto a = tiny("affine4:g32", kStart), b = tiny("affine4:g32", kStart);
    const std::vector<int32_t> prompt = random_tokens(*a, length);
    auto seq = a->new_sequence();
    run(*a, *seq, prompt, 5);
    test::TempDir tmp;
    save_kv_snapshot(tmp.file("kv"), a->kv_cache(), a->kv_cache().own(seq.get()), prompt, identity);
    KvSnapshot loaded = load_kv_snapshot(tmp.file("kv"), b->kv_cache(), identity);
    EXPECT_EQ(loaded.sequence->before_quant_start(), length < static_cast<size_t>(kStart));
    const std::vector<int32_t> more = random_tokens(*a, 8);
    const Tensor la = run(*a, *seq, more, 1), lb = run(*b, *loaded.sequence, more, 1);
    EXPECT_TRUE(rows_equal(la, lb, 0, 8));
    // A cache with another start, or none, refuses the file.
    for (const int64_t other : {int64_t{0}, int64_t{16}}) {
      auto c = other > 0 ? tiny("affine4:g32", other) : tiny("affine4:g32", 0);
      try {
        load_kv_snapshot(tmp.file("kv"), c->kv_cache(), identity);
        FAIL() << "a cache with quantization start " << other << " loaded the file";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("quantization start " + std::to_string(kStart)),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace lmx
