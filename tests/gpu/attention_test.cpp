// GPU tests for the CUDA attention (lmx/ops/cuda/attention.h) against lmx::ops::attention: decode and
// prefill chunks, several sequences per call, GQA, head dims 32..512, sliding windows, queries that
// see no key, never-written cache slots (NaN) that must stay invisible, batch invariance (a query's
// output bits do not depend on the rest of the call, nor on the split-KV vs tiled path), and
// kv_append, and the swizzled shared-memory layout of the wgmma kernel (no GPU needed). Skipped when no CUDA device
// is visible.
//
// Tolerance: the kernels round q to bf16 and the softmax weights p to bf16 (tensor cores). The
// reference gets the same bf16 q and the same bf16 K/V, so the remaining difference is the rounding of
// p: out is a convex combination whose weights each move by ≤ 2^-9 relatively, hence
// |out - ref| ≤ 2 · 2^-9 · 2 max|v| = 2^-7 max|v| (plus f32 summation order). Cases with q = 0 have
// p = 1 exactly, so out is the plain mean of the visible values: a tight check of every mask edge.
#include "lmx/ops/cuda/attention.h"
#include "lmx/core/half.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/paged_arrays.h"
#include "lmx/ops/cuda/sm90a/wgmma.cuh"
#include "lmx/ops/ops.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace lmx {
namespace {

constexpr uint16_t kBf16NaN = 0x7fc0;

// One sequence's cache: slots [0, cap) of [kv_heads, dim] bf16; slots ≥ kv_len hold NaN.
struct HostSeq {
  int kv_len = 0;
  int cap = 0;
  std::vector<uint16_t> k, v;
};

struct Query {
  int seq = 0;
  int pos = 0;
  std::vector<float> q;  // [heads * dim]
};

struct Shape {
  int heads = 8, kv_heads = 2, dim = 64;
  int window = 0;
  float scale = 0.125f;
  int64_t max_kv_len = 0;  // 0: the largest kv_len of the call
  int q_pad = 0;           // extra floats between query rows
};

HostSeq make_seq(const Shape& s, int kv_len, int cap = -1) {
  HostSeq seq;
  seq.kv_len = kv_len;
  seq.cap = std::max(cap, kv_len);
  const size_t n = static_cast<size_t>(seq.cap) * s.kv_heads * s.dim;
  const std::vector<float> kf = test::random_floats(n), vf = test::random_floats(n);
  seq.k.resize(n);
  seq.v.resize(n);
  const size_t valid = static_cast<size_t>(kv_len) * s.kv_heads * s.dim;
  for (size_t i = 0; i < n; ++i) {
    seq.k[i] = i < valid ? f32_to_bf16(kf[i]) : kBf16NaN;
    seq.v[i] = i < valid ? f32_to_bf16(vf[i]) : kBf16NaN;
  }
  return seq;
}

Query make_query(const Shape& s, int seq, int pos, float amplitude = 1.0f) {
  Query q;
  q.seq = seq;
  q.pos = pos;
  q.q = test::random_floats(static_cast<size_t>(s.heads) * s.dim, -amplitude, amplitude);
  return q;
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Runs one cuda::attention call; returns out [T, heads, dim].
std::vector<float> run_gpu(const Shape& s, const std::vector<HostSeq>& seqs, const std::vector<Query>& queries) {
  const int64_t tokens = static_cast<int64_t>(queries.size());
  const int64_t row = static_cast<int64_t>(s.heads) * s.dim;
  const int64_t q_stride = row + s.q_pad;
  std::vector<std::vector<uint16_t>> ks, vs;
  std::vector<int32_t> kv_len;
  int64_t max_kv = 0;
  for (const HostSeq& seq : seqs) {
    ks.push_back(seq.k);
    vs.push_back(seq.v);
    kv_len.push_back(seq.kv_len);
    max_kv = std::max<int64_t>(max_kv, seq.kv_len);
  }
  // The caches in blocks of 64 tokens, scattered (cuda::PagedArrays).
  const cuda::PagedArrays k_pages(ks, int64_t{s.kv_heads} * s.dim, 64),
      v_pages(vs, int64_t{s.kv_heads} * s.dim, 64);
  std::vector<float> q(static_cast<size_t>(std::max<int64_t>(1, tokens * q_stride)), 0.0f);
  std::vector<int32_t> q_pos, q_seq;
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy(queries[t].q.begin(), queries[t].q.end(), q.begin() + t * q_stride);
    q_pos.push_back(queries[t].pos);
    q_seq.push_back(queries[t].seq);
  }
  cuda::DeviceBuffer d_len = cuda::upload_vector(kv_len), d_q = cuda::upload_vector(q);
  cuda::DeviceBuffer d_pos = cuda::upload_vector(q_pos), d_seq = cuda::upload_vector(q_seq);
  const size_t out_bytes = static_cast<size_t>(std::max<int64_t>(1, tokens * row)) * sizeof(float);
  cuda::DeviceBuffer d_out(out_bytes);
  LMX_CUDA_CHECK(cudaMemset(d_out.data(), 0xff, out_bytes));  // NaN: every element must be written

  cuda::AttentionBatch b;
  b.q = d_q.as<const float>();
  b.q_stride = q_stride;
  b.out = d_out.as<float>();
  b.tokens = tokens;
  b.heads = s.heads;
  b.kv_heads = s.kv_heads;
  b.head_dim = s.dim;
  b.q_pos = d_pos.as<const int32_t>();
  b.q_seq = d_seq.as<const int32_t>();
  b.k = k_pages.store();
  b.v = v_pages.store();
  b.kv_len = d_len.as<const int32_t>();
  b.max_kv_len = s.max_kv_len > 0 ? s.max_kv_len : max_kv;
  b.window = s.window;
  b.scale = s.scale;
  const size_t partial_bytes = cuda::attention_partials_bytes(b);
  cuda::DeviceBuffer partials(std::max<size_t>(partial_bytes, 256));
  LMX_CUDA_CHECK(cudaDeviceSynchronize());
  cuda::attention(b, partials.as<float>(), partial_bytes, nullptr);
  LMX_CUDA_CHECK(cudaDeviceSynchronize());
  return cuda::download_vector<float>(d_out, static_cast<size_t>(tokens * row));
}

// lmx::ops::attention per sequence over the same bf16 K/V and bf16-rounded q.
std::vector<float> run_ref(const Shape& s, const std::vector<HostSeq>& seqs, const std::vector<Query>& queries) {
  const int64_t row = static_cast<int64_t>(s.heads) * s.dim;
  std::vector<float> out(queries.size() * static_cast<size_t>(row), 0.0f);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const HostSeq& seq = seqs[si];
    std::vector<size_t> idx;
    for (size_t t = 0; t < queries.size(); ++t)
      if (queries[t].seq == static_cast<int>(si)) idx.push_back(t);
    if (idx.empty() || seq.kv_len == 0) continue;
    const int64_t n = static_cast<int64_t>(idx.size());
    std::vector<float> qf(static_cast<size_t>(n * row));
    std::vector<int32_t> qp;
    for (int64_t i = 0; i < n; ++i) {
      const Query& q = queries[idx[static_cast<size_t>(i)]];
      for (int64_t c = 0; c < row; ++c) qf[static_cast<size_t>(i * row + c)] = round_bf16(q.q[static_cast<size_t>(c)]);
      qp.push_back(q.pos);
    }
    const size_t kvn = static_cast<size_t>(seq.kv_len) * s.kv_heads * s.dim;
    std::vector<float> kf(kvn), vf(kvn);
    for (size_t i = 0; i < kvn; ++i) {
      kf[i] = bf16_to_f32(seq.k[i]);
      vf[i] = bf16_to_f32(seq.v[i]);
    }
    std::vector<int32_t> kpos(static_cast<size_t>(seq.kv_len));
    std::iota(kpos.begin(), kpos.end(), 0);
    const Tensor qt = Tensor::from_vector(qf, {n, s.heads, s.dim});
    const Tensor kt = Tensor::from_vector(kf, {seq.kv_len, s.kv_heads, s.dim});
    const Tensor vt = Tensor::from_vector(vf, {seq.kv_len, s.kv_heads, s.dim});
    Tensor o;
    ops::attention(qt, kt, vt, qp, kpos, s.window, s.scale, o);
    const float* od = o.data<float>();
    for (int64_t i = 0; i < n; ++i)
      std::copy(od + i * row, od + (i + 1) * row, out.begin() + static_cast<int64_t>(idx[static_cast<size_t>(i)]) * row);
  }
  return out;
}

// Compares one call against the reference: max |diff| ≤ 2^-7 (values in [-1, 1]) and a small mean;
// `exact_p` (q = 0) tightens the bound to f32 summation error.
void check(const Shape& s, const std::vector<HostSeq>& seqs, const std::vector<Query>& queries, bool exact_p,
           const std::string& what) {
  const std::vector<float> got = run_gpu(s, seqs, queries);
  const std::vector<float> want = run_ref(s, seqs, queries);
  ASSERT_EQ(got.size(), want.size());
  const double tol = exact_p ? 2e-5 : std::ldexp(1.0, -7) + 1e-5;
  double max_err = 0, sum_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(static_cast<double>(got[i]) - want[i]) : INFINITY;
    if (e > max_err) {
      max_err = e;
      worst = i;
    }
    sum_err += std::isfinite(e) ? e : 0.0;
  }
  const size_t row = static_cast<size_t>(s.heads) * s.dim;
  EXPECT_LE(max_err, tol) << what << ": worst element " << worst << " (token " << worst / row << ", head "
                          << worst % row / s.dim << ", col " << worst % s.dim << ") got " << got[worst] << " want "
                          << want[worst];
  if (!got.empty()) {
    EXPECT_LE(sum_err / static_cast<double>(got.size()), exact_p ? 2e-6 : std::ldexp(1.0, -9)) << what;
  }
}

void zero_queries(std::vector<Query>& queries) {
  for (Query& q : queries) std::fill(q.q.begin(), q.q.end(), 0.0f);
}

std::string name(const Shape& s) {
  return "heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " dim " + std::to_string(s.dim) +
         " window " + std::to_string(s.window);
}

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

const Shape kShapes[] = {
    {8, 8, 32, 0, 0.17677669f},   // MHA, tiny dim
    {8, 4, 64, 0, 0.125f},        // GQA 2
    {16, 2, 128, 0, 0.08838835f},  // GQA 8
    {16, 8, 256, 0, 1.0f},        // Gemma 4 sliding-layer dim, scale 1
    {32, 4, 512, 0, 1.0f},        // Gemma 4 global-layer dim, scale 1
    {16, 1, 96, 0, 0.1f},         // GQA 16, dim not a power of two
    {4, 2, 16, 0, 0.25f},         // the tiny test models' sliding-layer dim (padded to 32)
    {8, 2, 192, 0, 0.07216878f},  // tier 256 not full (zero-padded columns in the wgmma kernel's tiles)
    {8, 4, 320, 0, 0.05590170f},  // tier 512 not full
};

// Gemma-style scale 1 with head_dim 256/512 makes softmax very peaky for uniform [-1, 1] data; a
// smaller q amplitude keeps the cases meaningful.
float amplitude(const Shape& s) { return s.scale >= 1.0f ? 4.0f / std::sqrt(static_cast<float>(s.dim)) : 1.0f; }

TEST_F(CudaAttention, DecodeOneQueryAtLastPosition) {
  for (const Shape& s : kShapes)
    for (int kv_len : {1, 5, 257, 1000, 3000}) {  // 1000: 16 chunk slots, folded in one cluster
      const std::vector<HostSeq> seqs = {make_seq(s, kv_len, kv_len + 3)};
      std::vector<Query> qs = {make_query(s, 0, kv_len - 1, amplitude(s))};
      check(s, seqs, qs, false, name(s) + " decode kv_len " + std::to_string(kv_len));
      zero_queries(qs);
      check(s, seqs, qs, true, name(s) + " decode flat kv_len " + std::to_string(kv_len));
    }
}

TEST_F(CudaAttention, PrefillChunks) {
  for (const Shape& s : kShapes)
    for (int t : {1, 7, 64, 200}) {
      const int kv_len = 333;
      const std::vector<HostSeq> seqs = {make_seq(s, kv_len)};
      std::vector<Query> qs;
      for (int p = kv_len - t; p < kv_len; ++p) qs.push_back(make_query(s, 0, p, amplitude(s)));
      check(s, seqs, qs, false, name(s) + " prefill chunk " + std::to_string(t));
      zero_queries(qs);
      check(s, seqs, qs, true, name(s) + " prefill flat chunk " + std::to_string(t));
    }
}

TEST_F(CudaAttention, FirstChunkOfLongPrompt) {
  // A whole 1500-token prompt in one call (prefill path, many key tiles and chunks per query tile).
  for (const Shape& s : {kShapes[1], kShapes[3], kShapes[4]}) {
    const std::vector<HostSeq> seqs = {make_seq(s, 1500)};
    std::vector<Query> qs;
    for (int p = 0; p < 1500; ++p) qs.push_back(make_query(s, 0, p, amplitude(s)));
    check(s, seqs, qs, false, name(s) + " full prompt");
  }
}

TEST_F(CudaAttention, SeveralSequencesPerCall) {
  for (const Shape& s : kShapes) {
    const std::vector<HostSeq> seqs = {make_seq(s, 700), make_seq(s, 1), make_seq(s, 260), make_seq(s, 90),
                                       make_seq(s, 1030)};
    // Decode rows of four sequences and a 100-token chunk of another, sequences interleaved.
    std::vector<Query> mixed;
    mixed.push_back(make_query(s, 0, 699, amplitude(s)));
    for (int p = 160; p < 210; ++p) mixed.push_back(make_query(s, 2, p, amplitude(s)));
    mixed.push_back(make_query(s, 1, 0, amplitude(s)));
    mixed.push_back(make_query(s, 3, 89, amplitude(s)));
    for (int p = 210; p < 260; ++p) mixed.push_back(make_query(s, 2, p, amplitude(s)));
    mixed.push_back(make_query(s, 4, 1029, amplitude(s)));
    check(s, seqs, mixed, false, name(s) + " mixed call");
    // Decode rows only (split-KV path), two tokens of one sequence (speculative verify).
    std::vector<Query> decode = {make_query(s, 0, 698, amplitude(s)), make_query(s, 0, 699, amplitude(s)),
                                 make_query(s, 1, 0, amplitude(s)), make_query(s, 3, 89, amplitude(s)),
                                 make_query(s, 4, 1029, amplitude(s))};
    check(s, seqs, decode, false, name(s) + " decode batch");
    // Tokens in shuffled order (a sequence's tokens not adjacent) through the prefill path.
    std::mt19937 shuffle_rng(7);
    std::shuffle(mixed.begin(), mixed.end(), shuffle_rng);
    check(s, seqs, mixed, false, name(s) + " shuffled call");
    zero_queries(mixed);
    check(s, seqs, mixed, true, name(s) + " shuffled flat call");
  }
}

TEST_F(CudaAttention, SlidingWindow) {
  for (Shape s : {kShapes[0], kShapes[2], kShapes[3], kShapes[4]})
    for (int window : {8, 100, 500, 1024}) {  // 500: 9 slots, folded in a non-portable cluster
      s.window = window;
      const int kv_len = 1400;
      const std::vector<HostSeq> seqs = {make_seq(s, kv_len), make_seq(s, 300)};
      std::vector<Query> decode = {make_query(s, 0, kv_len - 1, amplitude(s)), make_query(s, 1, 299, amplitude(s))};
      check(s, seqs, decode, false, name(s) + " window decode");
      zero_queries(decode);
      check(s, seqs, decode, true, name(s) + " window decode flat");
      std::vector<Query> chunk;
      for (int p = kv_len - 130; p < kv_len; ++p) chunk.push_back(make_query(s, 0, p, amplitude(s)));
      check(s, seqs, chunk, false, name(s) + " window chunk");
      zero_queries(chunk);
      check(s, seqs, chunk, true, name(s) + " window chunk flat");
    }
}

TEST_F(CudaAttention, QueriesThatSeeNoKey) {
  for (Shape s : {kShapes[1], kShapes[3]}) {
    s.window = 8;
    // Sequence 0 stores 10 tokens; queries at 100 (window [93, 100]) see nothing; at 12 they see 5..9.
    // Sequence 1 stores nothing yet.
    const std::vector<HostSeq> seqs = {make_seq(s, 10, 128), make_seq(s, 0, 16)};
    std::vector<Query> qs = {make_query(s, 0, 100), make_query(s, 0, 12), make_query(s, 1, 3)};
    for (std::vector<Query> call : {qs, std::vector<Query>(70, qs[0])}) {  // split-KV and tiled paths
      check(s, seqs, call, false, name(s) + " no visible key");
      const std::vector<float> out = run_gpu(s, seqs, call);
      const size_t row = static_cast<size_t>(s.heads) * s.dim;
      for (size_t i = 0; i < row; ++i) ASSERT_EQ(out[i], 0.0f) << "query at 100 must give zeros";
    }
  }
}

// A query's output bits must not depend on the other queries of the call, on the path (split-KV for
// ≤ 64 tokens, tiled otherwise), nor on max_kv_len (a CUDA graph sizes it from the capacity).
TEST_F(CudaAttention, BatchInvariance) {
  for (Shape s : kShapes)
    for (int window : {0, 100}) {
      s.window = window;
      const std::vector<HostSeq> seqs = {make_seq(s, 1000, 1100), make_seq(s, 37), make_seq(s, 2100),
                                         make_seq(s, 400)};
      const Query target = make_query(s, 0, 999, amplitude(s));
      const size_t row = static_cast<size_t>(s.heads) * s.dim;
      const std::vector<float> alone = run_gpu(s, seqs, {target});
      auto expect_same = [&](const std::vector<float>& out, size_t token, const std::string& what) {
        ASSERT_GE(out.size(), (token + 1) * row);
        EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + token * row, row * sizeof(float)))
            << name(s) << ": " << what;
      };
      // Other decode rows (split-KV path).
      std::vector<Query> call = {make_query(s, 2, 2099), make_query(s, 1, 36), target, make_query(s, 3, 399)};
      expect_same(run_gpu(s, seqs, call), 2, "with other decode rows");
      // A capacity-sized max_kv_len.
      Shape big = s;
      big.max_kv_len = 40000;
      expect_same(run_gpu(big, seqs, {target}), 0, "max_kv_len 40000");
      // A 120-token prefill chunk of another sequence (tiled path).
      std::vector<Query> prefill;
      for (int p = 280; p < 400; ++p) prefill.push_back(make_query(s, 3, p, amplitude(s)));
      prefill.insert(prefill.begin() + 57, target);
      const std::vector<float> prefill_out = run_gpu(s, seqs, prefill);
      expect_same(prefill_out, 57, "inside a prefill call");
      // A query of the 400-key sequence alone, with max_kv_len 400: at most 7 chunk slots, so its decode
      // call folds the chunk states inside the work item's cluster (no combine kernel); the same bits as
      // its prefill row.
      Shape short_call = s;
      short_call.max_kv_len = 400;
      const std::vector<float> short_alone = run_gpu(short_call, seqs, {prefill.back()});
      EXPECT_EQ(0, std::memcmp(short_alone.data(), prefill_out.data() + (prefill.size() - 1) * row, row * sizeof(float)))
          << name(s) << ": a 400-key decode query vs its prefill row";
      // With max_kv_len 1024: 16 slots in a (non-portable) cluster, 9 of them past the token's keys.
      short_call.max_kv_len = 1024;
      const std::vector<float> wide_alone = run_gpu(short_call, seqs, {prefill.back()});
      EXPECT_EQ(0, std::memcmp(wide_alone.data(), prefill_out.data() + (prefill.size() - 1) * row, row * sizeof(float)))
          << name(s) << ": a 400-key decode query in a 16-slot cluster vs its prefill row";
      // The same query as a row of a prefill chunk of its own sequence: compare chunk rows with
      // single-query calls of the same rows.
      std::vector<Query> chunk;
      for (int p = 900; p < 1000; ++p) chunk.push_back(make_query(s, 0, p, amplitude(s)));
      const std::vector<float> chunk_out = run_gpu(s, seqs, chunk);
      for (int i : {0, 41, 99}) {
        const std::vector<float> single = run_gpu(s, seqs, {chunk[static_cast<size_t>(i)]});
        EXPECT_EQ(0, std::memcmp(single.data(), chunk_out.data() + static_cast<size_t>(i) * row, row * sizeof(float)))
            << name(s) << ": chunk row " << i << " vs the same query alone";
      }
    }
}

TEST_F(CudaAttention, StridedQueries) {
  Shape s = kShapes[2];
  s.q_pad = 24;  // q rows inside a fused [q | k | v] buffer
  const std::vector<HostSeq> seqs = {make_seq(s, 500)};
  std::vector<Query> qs;
  for (int p = 400; p < 500; ++p) qs.push_back(make_query(s, 0, p));
  check(s, seqs, qs, false, "strided q, tiled");
  qs.resize(3);
  check(s, seqs, qs, false, "strided q, split-KV");
  s.q_pad = 3;  // rows not 16-byte aligned
  check(s, seqs, qs, false, "misaligned q");
}

// The 128-byte swizzled layout the wgmma prefill attention writes Q, K and V in (what TMA's SWIZZLE_128B
// writes and wgmma reads; the GPU tests check it on the hardware): blocks of 64 columns, each row's 128 bytes
// in place, 16-byte chunk j at chunk j ^ (row % 8), the 8 elements of a chunk contiguous, every byte of the
// operand used once. Needs no GPU.
TEST(CudaSwizzle, OffsetsKeepRowsAndPermuteChunks) {
  constexpr int kRows = 64, kCols = 512;
  std::set<uint32_t> chunks;
  for (int row = 0; row < kRows; ++row)
    for (int col = 0; col < kCols; col += 8) {
      const uint32_t off = cuda::sm90a::swizzled_offset(kRows, row, col);
      const uint32_t block = static_cast<uint32_t>(col / 64) * kRows * 128;
      ASSERT_EQ(off % 16, 0u);
      ASSERT_EQ((off - block) / 128, static_cast<uint32_t>(row)) << "row " << row << " col " << col;
      ASSERT_EQ((off % 128) / 16, static_cast<uint32_t>(((col / 8) % 8) ^ (row % 8)))
          << "row " << row << " col " << col;
      for (int k = 1; k < 8; ++k) ASSERT_EQ(cuda::sm90a::swizzled_offset(kRows, row, col + k), off + 2 * k);
      chunks.insert(off / 16);
    }
  EXPECT_EQ(chunks.size(), static_cast<size_t>(kRows * kCols / 8));
  EXPECT_EQ(*chunks.rbegin(), static_cast<uint32_t>(kRows * kCols / 8 - 1));
}

TEST_F(CudaAttention, PartialsBytes) {
  cuda::AttentionBatch b;
  b.tokens = 0;
  EXPECT_EQ(cuda::attention_partials_bytes(b), 0u);
  b.tokens = 4;
  b.heads = 8;
  b.kv_heads = 2;
  b.head_dim = 128;
  b.max_kv_len = 1000;
  const size_t decode = cuda::attention_partials_bytes(b);
  EXPECT_GE(decode, size_t{4} * 8 * 4 * (128 + 2) * sizeof(float));
  b.window = 100;  // a window bounds the chunks a query touches
  EXPECT_LT(cuda::attention_partials_bytes(b), decode);
  b.tokens = 1000;  // tiled path: a tile list
  EXPECT_GE(cuda::attention_partials_bytes(b), size_t{1003} * sizeof(int32_t));
}

TEST_F(CudaAttention, KvAppendRoundsToNearestEven) {
  const int kv_heads = 3, dim = 40, cap = 20;
  const int row = kv_heads * dim;
  for (int64_t pad : {int64_t{0}, int64_t{8}, int64_t{1}}) {  // vector path, padded rows, scalar path
    const int64_t stride = row + pad;
    const std::vector<int32_t> pos = {0, 5, 19, 7, 6};
    const std::vector<int32_t> seq = {0, 1, 1, 0, 0};
    const int64_t tokens = static_cast<int64_t>(pos.size());
    std::vector<float> k = test::random_floats(static_cast<size_t>(tokens * stride), -3.0f, 3.0f);
    std::vector<float> v = test::random_floats(static_cast<size_t>(tokens * stride), -3.0f, 3.0f);
    // Ties and specials: 1 + 2^-8 rounds down to even, 1 + 3·2^-8 up; ±0, ±inf, the largest finite.
    const float specials[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -1.0f - 0x1p-8f, 0.0f, -0.0f, INFINITY, -INFINITY,
                              3.3895314e38f, 1e-40f};
    for (size_t i = 0; i < std::size(specials); ++i) {
      k[i] = specials[i];
      v[static_cast<size_t>(stride) + i] = specials[i];
    }
    const uint16_t fill = 0xabcd;
    // Two sequences' caches in scattered blocks of 64 tokens (cuda::PagedArrays).
    const std::vector<std::vector<uint16_t>> filled(
        2, std::vector<uint16_t>(static_cast<size_t>(cap * row), fill));
    const cuda::PagedArrays k_pages(filled, row, 64), v_pages(filled, row, 64);
    cuda::DeviceBuffer d_pos = cuda::upload_vector(pos), d_seq = cuda::upload_vector(seq);
    // pad == 1: start one float in, so rows are not 16-byte aligned either.
    const int64_t offset = pad == 1 ? 1 : 0;
    std::vector<float> k_off(static_cast<size_t>(offset), 0.0f), v_off(static_cast<size_t>(offset), 0.0f);
    k_off.insert(k_off.end(), k.begin(), k.end());
    v_off.insert(v_off.end(), v.begin(), v.end());
    cuda::DeviceBuffer d_ko = cuda::upload_vector(k_off), d_vo = cuda::upload_vector(v_off);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    cuda::kv_append(d_ko.as<const float>() + offset, stride, d_vo.as<const float>() + offset, stride, tokens,
                    kv_heads, dim, d_pos.as<const int32_t>(), d_seq.as<const int32_t>(), k_pages.store(),
                    v_pages.store(), nullptr);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    for (int s = 0; s < 2; ++s) {
      const std::vector<uint16_t> ks = k_pages.download(s, cap), vs = v_pages.download(s, cap);
      for (int slot = 0; slot < cap; ++slot) {
        int64_t token = -1;
        for (int64_t t = 0; t < tokens; ++t)
          if (seq[static_cast<size_t>(t)] == s && pos[static_cast<size_t>(t)] == slot) token = t;
        for (int e = 0; e < row; ++e) {
          const size_t i = static_cast<size_t>(slot * row + e);
          const uint16_t want_k = token < 0 ? fill : f32_to_bf16(k[static_cast<size_t>(token * stride + e)]);
          const uint16_t want_v = token < 0 ? fill : f32_to_bf16(v[static_cast<size_t>(token * stride + e)]);
          ASSERT_EQ(ks[i], want_k) << "pad " << pad << " seq " << s << " slot " << slot << " elem " << e;
          ASSERT_EQ(vs[i], want_v) << "pad " << pad << " seq " << s << " slot " << slot << " elem " << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lmx
