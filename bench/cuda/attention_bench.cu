// Benchmark of the CUDA attention (lmx/ops/cuda/attention.h).
//
// Decode: `batch` sequences, one query each at the last position of a kv_len-token bf16 cache
// (split-KV path + combine). Prints the median µs per call and the K/V bytes read per second. Calls
// rotate over enough cache copies (≥ 256 MiB in all) that K/V come from HBM, as in a forward pass.
// Prefill: one sequence, T query tokens at positions 0..T-1 over T keys, causal, optionally windowed (tiled
// tensor-core path). Prints µs and TFLOP/s counting 4·D·H flops per visible (query, key) pair (QKᵀ and PV).
#include "bench_cuda_support.cuh"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/paged_arrays.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

namespace {

using lmx::bench::fill_bf16_kernel;
using lmx::bench::fill_f32_kernel;
using lmx::bench::median_seconds;
using lmx::cuda::DeviceBuffer;

struct Shape {
  int heads, kv_heads, dim;
};

// `seqs` caches of `cap` slots each, viewed as paged storage of 64-token blocks (their block tables).
struct Caches {
  std::vector<DeviceBuffer> k, v;
  DeviceBuffer k_table, v_table, k_first, v_first;
  lmx::cuda::PagedStore k_pages, v_pages;
};

Caches make_caches(const Shape& s, int seqs, int64_t cap, uint32_t seed) {
  Caches c;
  std::vector<const uint16_t*> kp, vp;
  const size_t elems = static_cast<size_t>(cap) * s.kv_heads * s.dim;
  for (int i = 0; i < seqs; ++i) {
    c.k.emplace_back(elems * 2);
    c.v.emplace_back(elems * 2);
    fill_bf16_kernel<<<1024, 256>>>(c.k.back().as<uint16_t>(), elems, seed + 2 * i);
    fill_bf16_kernel<<<1024, 256>>>(c.v.back().as<uint16_t>(), elems, seed + 2 * i + 1);
    LMX_CUDA_CHECK_LAUNCH();
    kp.push_back(c.k.back().as<const uint16_t>());
    vp.push_back(c.v.back().as<const uint16_t>());
  }
  const int64_t row = int64_t{s.kv_heads} * s.dim;
  c.k_pages = lmx::cuda::contiguous_as_pages(kp, cap, row, 64, c.k_table, c.k_first);
  c.v_pages = lmx::cuda::contiguous_as_pages(vp, cap, row, 64, c.v_table, c.v_first);
  return c;
}

void bench_decode(const Shape& s, int batch, int kv_len) {
  const size_t kv_bytes = static_cast<size_t>(batch) * kv_len * s.kv_heads * s.dim * 2 * 2;
  const int copies = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / kv_bytes + 1, 1, 1024));
  std::vector<Caches> caches;
  for (int c = 0; c < copies; ++c) caches.push_back(make_caches(s, batch, kv_len, 1000u * c));
  const int64_t row = static_cast<int64_t>(s.heads) * s.dim;
  DeviceBuffer q(static_cast<size_t>(batch * row) * 4), out(static_cast<size_t>(batch * row) * 4);
  fill_f32_kernel<<<256, 256>>>(q.as<float>(), static_cast<size_t>(batch * row), 7);
  LMX_CUDA_CHECK_LAUNCH();
  std::vector<int32_t> pos(static_cast<size_t>(batch), kv_len - 1), seq(static_cast<size_t>(batch)),
      len(static_cast<size_t>(batch), kv_len);
  std::iota(seq.begin(), seq.end(), 0);
  DeviceBuffer d_pos = lmx::cuda::upload_vector(pos), d_seq = lmx::cuda::upload_vector(seq),
               d_len = lmx::cuda::upload_vector(len);
  lmx::cuda::AttentionBatch b;
  b.q = q.as<const float>();
  b.q_stride = row;
  b.out = out.as<float>();
  b.tokens = batch;
  b.heads = s.heads;
  b.kv_heads = s.kv_heads;
  b.head_dim = s.dim;
  b.q_pos = d_pos.as<const int32_t>();
  b.q_seq = d_seq.as<const int32_t>();
  b.kv_len = d_len.as<const int32_t>();
  b.max_kv_len = kv_len;
  b.scale = 1.0f;
  const size_t pbytes = lmx::cuda::attention_partials_bytes(b);
  DeviceBuffer partials(std::max<size_t>(pbytes, 256));
  const double t = median_seconds(nullptr, 30, 1, [&](int i) {
    const Caches& c = caches[static_cast<size_t>(i % copies)];
    b.k = c.k_pages;
    b.v = c.v_pages;
    lmx::cuda::attention(b, partials.as<float>(), pbytes, nullptr);
  });
  fmt::print("decode   heads {:>2}/{:<2} dim {:>3}  batch {:>2}  kv_len {:>6}  {:>9.1f} us  {:>7.1f} GB/s KV\n", s.heads,
             s.kv_heads, s.dim, batch, kv_len, t * 1e6, static_cast<double>(kv_bytes) / t / 1e9);
}

void bench_prefill(const Shape& s, int tokens, int window = 0) {
  Caches c = make_caches(s, 1, tokens, 99);
  const int64_t row = static_cast<int64_t>(s.heads) * s.dim;
  DeviceBuffer q(static_cast<size_t>(tokens * row) * 4), out(static_cast<size_t>(tokens * row) * 4);
  fill_f32_kernel<<<1024, 256>>>(q.as<float>(), static_cast<size_t>(tokens * row), 11);
  LMX_CUDA_CHECK_LAUNCH();
  std::vector<int32_t> pos(static_cast<size_t>(tokens)), seq(static_cast<size_t>(tokens), 0), len = {tokens};
  std::iota(pos.begin(), pos.end(), 0);
  DeviceBuffer d_pos = lmx::cuda::upload_vector(pos), d_seq = lmx::cuda::upload_vector(seq),
               d_len = lmx::cuda::upload_vector(len);
  lmx::cuda::AttentionBatch b;
  b.q = q.as<const float>();
  b.q_stride = row;
  b.out = out.as<float>();
  b.tokens = tokens;
  b.heads = s.heads;
  b.kv_heads = s.kv_heads;
  b.head_dim = s.dim;
  b.q_pos = d_pos.as<const int32_t>();
  b.q_seq = d_seq.as<const int32_t>();
  b.k = c.k_pages;
  b.v = c.v_pages;
  b.kv_len = d_len.as<const int32_t>();
  b.max_kv_len = tokens;
  b.window = window;
  b.scale = 1.0f / 16.0f;
  const size_t pbytes = lmx::cuda::attention_partials_bytes(b);
  DeviceBuffer partials(std::max<size_t>(pbytes, 256));
  const double t = median_seconds(nullptr, tokens > 4096 ? 5 : 15, 1,
                                  [&](int) { lmx::cuda::attention(b, partials.as<float>(), pbytes, nullptr); });
  // Keys seen per query: min(i + 1, window), summed over queries i.
  double pairs = 0;
  for (int i = 0; i < tokens; ++i) pairs += window > 0 ? std::min(i + 1, window) : i + 1;
  const double flops = 4.0 * pairs * s.dim * s.heads;
  fmt::print(
      "prefill  heads {:>2}/{:<2} dim {:>3}  tokens {:>5}  window {:>5}  {:>11.1f} us  {:>7.1f} TFLOP/s\n",
      s.heads, s.kv_heads, s.dim, tokens, window, t * 1e6, flops / t / 1e12);
}

}  // namespace

// Usage: bench_cuda_attention [decode|prefill]   (default: both)
//        bench_cuda_attention prefill HEADS KV_HEADS DIM TOKENS [WINDOW]   (one prefill shape, e.g. for ncu)
int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  const bool one_shape = only == "prefill" && (argc == 6 || argc == 7);
  if ((!only.empty() && only != "decode" && only != "prefill") || (argc > 2 && !one_shape)) {
    fmt::print(stderr,
               "usage: bench_cuda_attention [decode|prefill]\n"
               "       bench_cuda_attention prefill HEADS KV_HEADS DIM TOKENS [WINDOW]\n");
    return 2;
  }
  int v[5] = {0, 0, 0, 0, 0};  // heads, kv heads, dim, tokens, window
  for (int i = 2; one_shape && i < argc; ++i) {
    const char* end = argv[i] + std::strlen(argv[i]);
    const auto [ptr, ec] = std::from_chars(argv[i], end, v[i - 2]);
    if (ec != std::errc() || ptr != end || v[i - 2] < (i == 6 ? 0 : 1) || v[i - 2] > (1 << 20)) {
      fmt::print(stderr, "bench_cuda_attention: '{}' is not a number in [{}, 2^20]\n", argv[i], i == 6 ? 0 : 1);
      return 2;
    }
  }
  if (one_shape && v[0] % v[1] != 0) {
    fmt::print(stderr, "bench_cuda_attention: heads {} not a multiple of kv heads {}\n", v[0], v[1]);
    return 2;
  }
  if (lmx::cuda::device_count() == 0) {
    fmt::print("no CUDA device\n");
    return 0;
  }
  fmt::print("{}\n", lmx::cuda::device_description(0));
  if (one_shape) {
    try {
      bench_prefill({v[0], v[1], v[2]}, v[3], v[4]);
      LMX_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const std::exception& e) {
      fmt::print(stderr, "bench_cuda_attention: {}\n", e.what());
      return 1;
    }
    return 0;
  }
  const Shape shapes[] = {{8, 1, 256}, {16, 8, 256}, {32, 4, 512}, {32, 8, 128}};
  if (only != "prefill")
    for (const Shape& s : shapes)
      for (int batch : {1, 16})
        for (int kv_len : {512, 2048, 8192, 32768}) bench_decode(s, batch, kv_len);
  if (only != "decode") {
    for (const Shape& s : shapes)
      for (int tokens : {2048, 8192}) bench_prefill(s, tokens);
    // Gemma 4 26B-A4B's sliding layers (window 1024).
    for (int tokens : {2048, 8192}) bench_prefill({16, 8, 256}, tokens, 1024);
  }
  LMX_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
