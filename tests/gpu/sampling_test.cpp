// GPU tests of per-request sampling on the device (lmx/ops/cuda/sampling.h) against the host Sampler:
// the processed rows bit for bit, the tokens drawn from the same uniforms, logprobs and top logprobs, the
// entries left to the host, and batch invariance (an entry alone and among others gives the same bytes).
// Vocabularies of Gemma's size (the radix-select path, float4 loads) and small odd ones (all finite tokens
// are candidates, scalar loads); peaked, flat, tied and partly masked rows. Skipped without a GPU.
#include "lmx/ops/cuda/sampling.h"
#include "lmx/engine/sampler.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace lmx {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Entry {
  int row = 0;
  SamplingParams params;
  std::vector<int32_t> history;
  int top_logprobs = 0;
  double uniform = 0.0;
};

// Rows of different shapes: peaked, flat, tied (multiples of 0.5), a third masked, all masked.
std::vector<float> make_rows(int vocab, int rows) {
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row = test::random_floats(static_cast<size_t>(vocab), -1.0f, 1.0f);
    for (float& v : row) {
      switch (r % 5) {
        case 0:
          v *= 12.0f;
          break;  // peaked
        case 1:
          break;  // flat: nuclei wider than the candidates
        case 2:
          v = std::round(v * 8.0f) / 2.0f;
          break;  // ties
        case 3:
          v = test::rng()() % 3 == 0 ? kNegInf : v * 6.0f;
          break;
        case 4:
          v = r == rows - 1 ? kNegInf : v * 3.0f;
          break;  // the last row has nothing finite
      }
    }
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

std::vector<Entry> make_entries(int rows, int vocab, int count) {
  std::vector<Entry> entries;
  for (int i = 0; i < count; ++i) {
    Entry e;
    e.row = i % rows;
    SamplingParams& p = e.params;
    p.temperature = i % 6 == 0 ? 0.0f : 0.4f + 0.3f * static_cast<float>(i % 4);
    p.top_k = std::vector<int>{0, 1, 20, 64, 256, 300}[static_cast<size_t>(i / 2 % 6)];
    p.top_p = std::vector<float>{1.0f, 0.95f, 0.6f, 1.0f, 0.2f}[static_cast<size_t>(i / 3 % 5)];
    p.min_p = i % 7 == 3 ? 0.05f : (i % 11 == 5 ? 0.001f : 0.0f);
    if (i % 5 == 1) p.repetition_penalty = 1.3f;
    if (i % 5 == 2) p.presence_penalty = 0.7f;
    if (i % 4 == 3) p.frequency_penalty = 0.4f;
    if (i % 9 == 4)
      p.logit_bias = {{static_cast<int32_t>(i % vocab), 30.0f}, {static_cast<int32_t>(7 % vocab), -5.0f}};
    e.history.resize(test::rng()() % 30);
    for (auto& id : e.history)
      id = static_cast<int32_t>(test::rng()() % static_cast<uint64_t>(std::min(vocab, 64)));
    e.top_logprobs = i % 3 == 0 ? static_cast<int>(i % kSampledTopMax) + 1 : 0;
    e.uniform = static_cast<double>(test::rng()() >> 11) * 0x1.0p-53;
    entries.push_back(std::move(e));
  }
  return entries;
}

class CudaSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx_ = std::make_unique<cuda::CudaContext>(0);
  }

  // Runs the entries (indices `which` of `entries`) over `logits` on the device.
  std::vector<SampledRow> run(const cuda::DeviceBuffer& logits, int vocab, const std::vector<Entry>& entries,
                              const std::vector<size_t>& which, std::vector<float>* processed = nullptr) {
    std::vector<SamplingRowParams> params;
    std::vector<LogitEdit> edits;
    for (size_t k : which) {
      const Entry& e = entries[k];
      SamplingRowParams p;
      p.row = e.row;
      p.temperature = e.params.temperature;
      p.top_p = e.params.top_p;
      p.min_p = e.params.min_p;
      p.top_k = e.params.top_k;
      p.top_logprobs = e.top_logprobs;
      p.uniform = e.uniform;
      const std::vector<LogitEdit> mine =
          sampling::logit_edits(e.params, e.history, static_cast<size_t>(vocab));
      p.edits_begin = static_cast<int32_t>(edits.size());
      p.edits_count = static_cast<int32_t>(mine.size());
      edits.insert(edits.end(), mine.begin(), mine.end());
      params.push_back(p);
    }
    if (edits.empty()) edits.push_back({});
    const auto n = static_cast<int64_t>(which.size());
    cuda::DeviceBuffer params_d = cuda::upload_vector(params);
    cuda::DeviceBuffer edits_d = cuda::upload_vector(edits);
    cuda::DeviceBuffer processed_d(static_cast<size_t>(n * vocab) * sizeof(float));
    cuda::DeviceBuffer out_d(static_cast<size_t>(n) * sizeof(SampledRow));
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    cuda::sample_rows(static_cast<const float*>(logits.data()), vocab, vocab, n,
                      static_cast<const SamplingRowParams*>(params_d.data()),
                      static_cast<const LogitEdit*>(edits_d.data()), static_cast<float*>(processed_d.data()),
                      static_cast<SampledRow*>(out_d.data()), ctx_->stream());
    ctx_->synchronize();
    if (processed) *processed = cuda::download_vector<float>(processed_d, static_cast<size_t>(n * vocab));
    std::vector<SampledRow> out(static_cast<size_t>(n));
    LMX_CUDA_CHECK(
        cudaMemcpy(out.data(), out_d.data(), out.size() * sizeof(SampledRow), cudaMemcpyDeviceToHost));
    return out;
  }

  void check_vocab(int vocab) {
    const int rows = 10;
    const std::vector<float> logits = make_rows(vocab, rows);
    const cuda::DeviceBuffer logits_d = cuda::upload_vector(logits);
    const std::vector<Entry> entries = make_entries(rows, vocab, 120);
    std::vector<size_t> all(entries.size());
    for (size_t k = 0; k < all.size(); ++k) all[k] = k;
    std::vector<float> processed;
    const std::vector<SampledRow> out = run(logits_d, vocab, entries, all, &processed);
    int statuses[3] = {};
    for (size_t k = 0; k < entries.size(); ++k) {
      const Entry& e = entries[k];
      const SampledRow& s = out[k];
      SCOPED_TRACE(testing::Message() << "vocab " << vocab << " entry " << k << " row " << e.row << " T "
                                      << e.params.temperature << " top_k " << e.params.top_k << " top_p "
                                      << e.params.top_p << " min_p " << e.params.min_p);
      ++statuses[static_cast<int>(s.status)];
      // The processed row, bit for bit.
      std::vector<float> expected(logits.begin() + static_cast<ptrdiff_t>(e.row) * vocab,
                                  logits.begin() + static_cast<ptrdiff_t>(e.row + 1) * vocab);
      sampling::apply_logit_processors(e.params, expected, e.history);
      ASSERT_EQ(0, std::memcmp(expected.data(), processed.data() + k * static_cast<size_t>(vocab),
                               expected.size() * sizeof(float)));
      SamplingParams params = e.params;
      params.seed = 1;
      Sampler host(params);
      int32_t token = -1;
      bool finite = true;
      try {
        token = host.sample_processed(expected, e.uniform);
      } catch (const InvalidArgument&) {
        finite = false;
      }
      if (!finite) {
        EXPECT_EQ(s.status, SampledStatus::kNoFiniteLogit);
        continue;
      }
      const std::span<const float> lp = host.last_logprobs();
      if (s.status == SampledStatus::kNeedsHost) {
        // Only when the filters keep more tokens than the candidates.
        std::vector<float> filtered(lp.begin(), lp.end());
        sampling::apply_top_p(filtered, params.top_p);
        sampling::apply_min_p(filtered, params.min_p);
        sampling::apply_top_k(filtered, params.top_k);
        int64_t kept = 0;
        for (float v : filtered) kept += v > kNegInf;
        EXPECT_GT(kept, kSamplingCandidates);
        continue;
      }
      ASSERT_EQ(s.status, SampledStatus::kSampled);
      EXPECT_EQ(s.token, token);
      EXPECT_NEAR(s.logprob, lp[static_cast<size_t>(token)], 2e-5f);
      const std::vector<int32_t> ranked = sampling::ranked_finite(lp);
      ASSERT_EQ(s.top_count, std::min<int>(e.top_logprobs, static_cast<int>(ranked.size())));
      for (int i = 0; i < s.top_count; ++i) {
        EXPECT_EQ(s.top_ids[i], ranked[static_cast<size_t>(i)]) << "top " << i;
        EXPECT_NEAR(s.top_logprobs[i], lp[static_cast<size_t>(ranked[static_cast<size_t>(i)])], 2e-5f);
      }
    }
    EXPECT_GT(statuses[0], 60);
    EXPECT_GT(statuses[2], 0);
    if (vocab > kSamplingCandidates * 4) {
      EXPECT_GT(statuses[1], 0);
    }
    // Batch invariance: every entry alone gives the bytes it gave among the others.
    for (size_t k = 0; k < entries.size(); k += 7) {
      const std::vector<SampledRow> alone = run(logits_d, vocab, entries, {k});
      EXPECT_EQ(0, std::memcmp(&alone[0], &out[k], sizeof(SampledRow))) << "entry " << k;
    }
  }

  std::unique_ptr<cuda::CudaContext> ctx_;
};

TEST_F(CudaSampling, MatchesTheHostSamplerAtGemmaVocabulary) {
  check_vocab(262144);
}
TEST_F(CudaSampling, MatchesTheHostSamplerAtSmallOddVocabularies) {
  check_vocab(301);
  check_vocab(1003);
}

}  // namespace
}  // namespace lmx
