// Invariants 2 and 3 on the tiny Gemma 4 shapes: batch invariance (bit-identical), and incremental
// decode / chunked prefill against a one-shot forward.
#include "lmx/model/language_model.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

class Invariants : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = test::load_model(test::tiny_model_dir(GetParam())); }

  std::vector<int32_t> random_prompt(size_t length) {
    std::vector<int32_t> ids(length);
    for (auto& id : ids)
      id = static_cast<int32_t>(3 + test::rng()() % (model_->description().vocab_size - 3));
    ids[0] = 2;
    return ids;
  }
  // All-position logits of a prompt in one step on a fresh sequence.
  Tensor one_shot(const std::vector<int32_t>& prompt) {
    auto seq = model_->new_sequence();
    StepRow row{seq.get(), prompt};
    return model_->forward({&row, 1}, true);
  }
  std::unique_ptr<LanguageModel> model_;
};

bool rows_bit_identical(const Tensor& a, int64_t row_a, const Tensor& b, int64_t row_b) {
  const int64_t v = a.dim(1);
  return std::memcmp(a.data<float>() + row_a * v, b.data<float>() + row_b * v, static_cast<size_t>(v) * 4) == 0;
}

float row_max_diff(const Tensor& a, int64_t row_a, const Tensor& b, int64_t row_b) {
  const int64_t v = a.dim(1);
  float m = 0;
  for (int64_t i = 0; i < v; ++i)
    m = std::max(m, std::fabs(a.data<float>()[row_a * v + i] - b.data<float>()[row_b * v + i]));
  return m;
}

// Invariant 2: a row's logits do not depend on which other rows share its step.
TEST_P(Invariants, BatchInvariance) {
  const std::vector<size_t> lengths = {5, 23, 1, 40};
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : lengths) prompts.push_back(random_prompt(n));

  std::vector<std::unique_ptr<Sequence>> batch_seqs, solo_seqs;
  std::vector<StepRow> rows;
  for (auto& p : prompts) {
    batch_seqs.push_back(model_->new_sequence());
    rows.push_back({batch_seqs.back().get(), p});
  }
  Tensor batched = model_->forward(rows, true);
  int64_t offset = 0;
  for (size_t r = 0; r < prompts.size(); ++r) {
    solo_seqs.push_back(model_->new_sequence());
    StepRow solo{solo_seqs.back().get(), prompts[r]};
    Tensor alone = model_->forward({&solo, 1}, true);
    for (int64_t t = 0; t < alone.dim(0); ++t)
      ASSERT_TRUE(rows_bit_identical(batched, offset + t, alone, t)) << "row " << r << " token " << t;
    offset += alone.dim(0);
  }
  // Decode steps: the same rows continuing together vs alone, with different partners.
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> next(prompts.size());
    for (auto& t : next) t = static_cast<int32_t>(3 + test::rng()() % 200);
    std::vector<StepRow> decode_rows;
    for (size_t r = 0; r < prompts.size(); ++r)
      if (r != static_cast<size_t>(step) % prompts.size()) decode_rows.push_back({batch_seqs[r].get(), {&next[r], 1}});
    Tensor together = model_->forward(decode_rows, false);
    size_t k = 0;
    for (size_t r = 0; r < prompts.size(); ++r) {
      if (r == static_cast<size_t>(step) % prompts.size()) continue;
      StepRow solo{solo_seqs[r].get(), {&next[r], 1}};
      Tensor alone = model_->forward({&solo, 1}, false);
      ASSERT_TRUE(rows_bit_identical(together, static_cast<int64_t>(k), alone, 0)) << "decode step " << step << " row " << r;
      ++k;
    }
  }
}

// Invariant 3: token-by-token decode and chunked prefill match a one-shot forward. Prompts are long
// enough to cross every sliding window.
TEST_P(Invariants, IncrementalAndChunkedMatchOneShot) {
  const std::vector<int32_t> prompt = random_prompt(48);
  Tensor reference = one_shot(prompt);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{7}, size_t{16}}) {
    auto seq = model_->new_sequence();
    float worst = 0;
    for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
      size_t n = std::min(chunk, prompt.size() - begin);
      StepRow row{seq.get(), std::span<const int32_t>(prompt).subspan(begin, n)};
      Tensor logits = model_->forward({&row, 1}, true);
      for (size_t t = 0; t < n; ++t)
        worst = std::max(worst, row_max_diff(logits, static_cast<int64_t>(t), reference, static_cast<int64_t>(begin + t)));
    }
    EXPECT_LE(worst, 1e-4f) << "chunk " << chunk;
  }
}

TEST_P(Invariants, RejectsBadTokenIds) {
  auto seq = model_->new_sequence();
  std::vector<int32_t> bad = {2, model_->description().vocab_size};
  StepRow row{seq.get(), bad};
  EXPECT_THROW(model_->forward({&row, 1}), InvalidArgument);
  std::vector<int32_t> negative = {-1};
  row.tokens = negative;
  EXPECT_THROW(model_->forward({&row, 1}), InvalidArgument);
  // The sequence was not advanced by the failed steps.
  EXPECT_EQ(seq->length(), 0);
}

INSTANTIATE_TEST_SUITE_P(TinyShapes, Invariants, ::testing::ValuesIn(test::tiny_config_names()));

}  // namespace
}  // namespace lmx
