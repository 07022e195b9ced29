// The quantized KV codecs on CUDA (affine 4/8 with groups of 32/64/128; TurboQuant k8v3, k8v4, k4v3, k8v2,
// k4v4) against the CPU:
//  - kv_append_coded writes the CPU's bytes (codes, scales, biases, norms) for the same f32 keys and values;
//  - attention over the coded blocks (decode, prefill, a sliding window; blocks of 64 and 128 tokens)
//    against a host reference over the CPU codec's decoded rows, given the GPU's own roundings (q and the
//    decoded K and V in bf16): what remains is the bf16 rounding of the softmax weights, |out − ref| ≤
//    2^-7 · max|v| (tests/gpu/attention_test.cpp's bound), checked with a factor 2 of slack. TurboQuant's
//    values are compared in their rotated space (the host rotates the GPU's output back into it; the
//    rotation is orthonormal, so this is the output's error).
// Skips without a GPU.
#include "lmx/kv/kv_codec.h"
#include "lmx/core/half.h"
#include "lmx/ops/cpu/affine_kv.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/paged_kv.h"
#include "lmx/quant/turbo.h"
#include "support/test_support.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace lmx {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

float bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

struct Case {
  std::string spec;
  int head_dim = 64;
  int block_tokens = 64;
  int length = 150;  // stored positions
  int window = 0;
};

// One sequence's coded KV of one layer, on the host (written by the CPU codec) and on the device (written by
// kv_append_coded), from the same random keys and values.
class CodedKv {
 public:
  static constexpr int kKvHeads = 2, kHeads = 4;

  explicit CodedKv(const Case& c) : c_(c), codec_(KvCodec::parse(c.spec)) {
    k_bytes_ = codec_.token_bytes(kKvHeads, c.head_dim);
    v_bytes_ = codec_.token_bytes(kKvHeads, c.head_dim, true);
    block_bytes_ = static_cast<size_t>(c.block_tokens) * (k_bytes_ + v_bytes_);
    blocks_ = (c.length + c.block_tokens - 1) / c.block_tokens;
    host_.assign(block_bytes_ * blocks_, std::byte{0});
    const size_t width = static_cast<size_t>(kKvHeads) * c.head_dim;
    k_ = test::random_floats(width * c.length, -2.0f, 2.0f);
    v_ = test::random_floats(width * c.length, -2.0f, 2.0f);
    // Some rows with a channel offset and some constant groups (the codecs' edge cases).
    for (size_t i = 0; i < width * c.length; i += 7) k_[i] += 3.0f;
    std::fill(v_.begin(), v_.begin() + static_cast<int64_t>(c.head_dim), 0.5f);
    append_on_host();
    append_on_device();
  }

  // The block bytes the GPU wrote.
  std::vector<std::byte> device_bytes() const {
    return cuda::download_vector<std::byte>(device_, host_.size());
  }
  const std::vector<std::byte>& host_bytes() const { return host_; }

  // GPU attention of queries q [T, heads, head_dim] at positions pos (f32 out, TurboQuant values rotated back
  // into the rotated space for comparison).
  std::vector<float> gpu_attention(const std::vector<float>& q, const std::vector<int32_t>& pos) const {
    const auto tokens = static_cast<int64_t>(pos.size());
    const std::vector<int32_t> seq(pos.size(), 0), kv_len{c_.length};
    cuda::DeviceBuffer d_q = cuda::upload_vector(q), d_pos = cuda::upload_vector(pos),
                       d_seq = cuda::upload_vector(seq), d_len = cuda::upload_vector(kv_len);
    const size_t out_elems = q.size();
    cuda::DeviceBuffer d_out(out_elems * sizeof(float));
    cuda::AttentionBatch b;
    b.q = d_q.as<const float>();
    b.q_stride = int64_t{kHeads} * c_.head_dim;
    b.out = d_out.as<float>();
    b.tokens = tokens;
    b.heads = kHeads;
    b.kv_heads = kKvHeads;
    b.head_dim = c_.head_dim;
    b.q_pos = d_pos.as<const int32_t>();
    b.q_seq = d_seq.as<const int32_t>();
    b.k = store(false);
    b.v = store(true);
    b.kv_len = d_len.as<const int32_t>();
    b.max_kv_len = c_.length;
    b.window = c_.window;
    b.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    const size_t bytes = cuda::attention_partials_bytes(b);
    cuda::DeviceBuffer partials(std::max<size_t>(bytes, 256));
    cuda::attention(b, partials.as<float>(), bytes, nullptr);
    if (codec_.kind() == KvCodecKind::kTurbo)
      cuda::turbo_unrotate_rows(b.out, tokens * kHeads, c_.head_dim, nullptr);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out = cuda::download_vector<float>(d_out, out_elems);
    if (codec_.kind() == KvCodecKind::kTurbo)
      for (size_t r = 0; r < out.size(); r += static_cast<size_t>(c_.head_dim))
        quant::turbo_rotate(out.data() + r, c_.head_dim);
    return out;
  }

  // The host reference with the GPU's roundings (file comment), in the values' stored space.
  std::vector<float> reference(const std::vector<float>& q, const std::vector<int32_t>& pos) const {
    const int d = c_.head_dim;
    std::vector<float> k_hat = decoded(false), v_hat = decoded(true), out(q.size());
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (size_t t = 0; t < pos.size(); ++t)
      for (int h = 0; h < kHeads; ++h) {
        const int kvh = h / (kHeads / kKvHeads);
        const float* qr = q.data() + (t * kHeads + h) * d;
        std::vector<double> w;
        const int lo = c_.window > 0 ? std::max(0, pos[t] - c_.window + 1) : 0;
        for (int j = lo; j <= pos[t]; ++j) {
          double s = 0;
          for (int e = 0; e < d; ++e)
            s += double{bf16(qr[e])} * k_hat[(static_cast<size_t>(j) * kKvHeads + kvh) * d + e];
          w.push_back(s * scale);
        }
        const double m = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& x : w) sum += x = std::exp(x - m);
        for (int e = 0; e < d; ++e) {
          double acc = 0;
          for (int j = lo; j <= pos[t]; ++j)
            acc += w[static_cast<size_t>(j - lo)] * v_hat[(static_cast<size_t>(j) * kKvHeads + kvh) * d + e];
          out[(t * kHeads + h) * d + e] = static_cast<float>(acc / sum);
        }
      }
    return out;
  }
  float max_abs_value() const {
    const std::vector<float> v = decoded(true);
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  }

 private:
  cuda::PagedStore store(bool values) const {
    cuda::PagedStore s;
    s.blocks = table_.as<const void* const>();
    s.stride = blocks_;
    s.first_block = first_block_.as<const int32_t>();
    s.block_tokens = c_.block_tokens;
    s.offset = values ? static_cast<int64_t>(c_.block_tokens * k_bytes_) : 0;
    if (codec_.kind() == KvCodecKind::kTurbo) {
      s.codec = values ? cuda::StoreCodec::kTurboValue : cuda::StoreCodec::kTurboKey;
      s.bits = values ? codec_.value_bits() : codec_.bits();
    } else {
      s.codec = cuda::StoreCodec::kAffine;
      s.bits = codec_.bits();
      s.group = codec_.group();
    }
    return s;
  }

  PagedKvLayer host_layer(const std::vector<const void*>& blocks, const int32_t* first_block) const {
    PagedKvLayer kv;
    kv.tables = {blocks.data(), blocks_, first_block};
    kv.k_offset = 0;
    kv.v_offset = static_cast<size_t>(c_.block_tokens) * k_bytes_;
    kv.kv_heads = kKvHeads;
    kv.head_dim = c_.head_dim;
    kv.dtype = DType::kBF16;
    kv.quant_bits = codec_.bits();
    kv.quant_group = codec_.group();
    kv.value_bits = codec_.value_bits();
    kv.turbo = codec_.kind() == KvCodecKind::kTurbo;
    return kv;
  }

  void append_on_host() {
    std::vector<const void*> blocks;
    for (int b = 0; b < blocks_; ++b) blocks.push_back(host_.data() + b * block_bytes_);
    std::vector<int32_t> pos(static_cast<size_t>(c_.length)), rows(pos.size(), 0);
    std::iota(pos.begin(), pos.end(), 0);
    const int32_t first_block = 0, kv_len = c_.length;
    PagedKvStep step;
    step.tokens = c_.length;
    step.rows = 1;
    step.q_pos = pos.data();
    step.q_row = rows.data();
    step.kv_len = &kv_len;
    step.max_kv_len = c_.length;
    step.block_tokens = c_.block_tokens;
    const int64_t width = int64_t{kKvHeads} * c_.head_dim;
    Tensor k = Tensor::from_vector(k_, {c_.length, width}), v = Tensor::from_vector(v_, {c_.length, width});
    ops::paged_kv_append(step, host_layer(blocks, &first_block), k, v);
  }

  void append_on_device() {
    device_ = cuda::DeviceBuffer(host_.size());
    LMX_CUDA_CHECK(cudaMemset(device_.data(), 0, host_.size()));
    std::vector<const void*> blocks;
    for (int b = 0; b < blocks_; ++b)
      blocks.push_back(static_cast<const std::byte*>(device_.data()) + b * block_bytes_);
    table_ = cuda::upload_vector(blocks);
    first_block_ = cuda::upload_vector(std::vector<int32_t>{0});
    std::vector<int32_t> pos(static_cast<size_t>(c_.length)), seq(pos.size(), 0);
    std::iota(pos.begin(), pos.end(), 0);
    cuda::DeviceBuffer d_k = cuda::upload_vector(k_), d_v = cuda::upload_vector(v_);
    cuda::DeviceBuffer d_pos = cuda::upload_vector(pos), d_seq = cuda::upload_vector(seq);
    const int64_t width = int64_t{kKvHeads} * c_.head_dim;
    cuda::kv_append_coded(d_k.as<const float>(), width, d_v.as<const float>(), width, c_.length, kKvHeads,
                          c_.head_dim, d_pos.as<const int32_t>(), d_seq.as<const int32_t>(), store(false),
                          store(true), nullptr);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Every stored row decoded by the CPU codec and rounded to bf16 (what the GPU's tiles hold), [length,
  // kv_heads, head_dim]; TurboQuant values in their rotated space.
  std::vector<float> decoded(bool values) const {
    const int d = c_.head_dim;
    std::vector<float> out(static_cast<size_t>(c_.length) * kKvHeads * d);
    const AffineKvHalf half{c_.block_tokens, kKvHeads, d, codec_.bits(), codec_.group()};
    for (int p = 0; p < c_.length; ++p)
      for (int h = 0; h < kKvHeads; ++h) {
        const std::byte* block = host_.data() + static_cast<size_t>(p / c_.block_tokens) * block_bytes_ +
                                 (values ? static_cast<size_t>(c_.block_tokens) * k_bytes_ : 0);
        const int64_t row = int64_t{p % c_.block_tokens} * kKvHeads + h;
        float* x = out.data() + (static_cast<size_t>(p) * kKvHeads + h) * d;
        if (codec_.kind() == KvCodecKind::kTurbo) {
          const size_t row_bytes = values ? quant::turbo_value_bytes(d, codec_.value_bits())
                                          : quant::turbo_key_bytes(d, codec_.bits());
          if (values)
            quant::turbo_dequantize_value_rotated(block + row * row_bytes, d, codec_.value_bits(), x);
          else
            quant::turbo_dequantize_key(block + row * row_bytes, d, codec_.bits(), x);
        } else {
          ops::cpu::dequantize_affine_row(reinterpret_cast<const uint32_t*>(block + half.codes_at(row)),
                                          reinterpret_cast<const uint16_t*>(block + half.scales_at(row)),
                                          reinterpret_cast<const uint16_t*>(block + half.biases_at(row)), d,
                                          codec_.bits(), codec_.group(), x);
        }
        for (int e = 0; e < d; ++e) x[e] = bf16(x[e]);
      }
    return out;
  }

  Case c_;
  KvCodec codec_;
  size_t k_bytes_ = 0, v_bytes_ = 0, block_bytes_ = 0;
  int blocks_ = 0;
  std::vector<float> k_, v_;
  std::vector<std::byte> host_;
  cuda::DeviceBuffer device_, table_, first_block_;
};

const char* const kSpecs[] = {"affine4", "affine8",    "affine4:g32", "affine8:g128", "affine4:g128",
                              "turbo",   "turbo:k8v4", "turbo:k4v3",  "turbo:k8v2",   "turbo:k4v4"};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* spec : kSpecs) {
    const KvCodec codec = KvCodec::parse(spec);
    for (const Case& c : {Case{spec, 64, 64, 150, 0}, Case{spec, 256, 128, 300, 0},
                          Case{spec, 128, 64, 200, 70}, Case{spec, 512, 64, 70, 0}})
      if (codec.group() == 0 || c.head_dim % codec.group() == 0)
        out.push_back(c);  // the group divides head_dim
  }
  return out;
}

std::string name(const Case& c) {
  return c.spec + " d" + std::to_string(c.head_dim) + " blocks of " + std::to_string(c.block_tokens) +
         (c.window > 0 ? " window " + std::to_string(c.window) : "");
}

TEST(CudaKvCodecs, AppendWritesTheCpuBytes) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const CodedKv kv(c);
    const std::vector<std::byte> gpu = kv.device_bytes();
    const std::vector<std::byte>& cpu = kv.host_bytes();
    ASSERT_EQ(gpu.size(), cpu.size());
    size_t first = cpu.size();
    for (size_t i = 0; i < cpu.size(); ++i)
      if (gpu[i] != cpu[i]) {
        first = i;
        break;
      }
    std::string around;
    for (size_t i = first - std::min<size_t>(first, 4); i < std::min(cpu.size(), first + 8); ++i)
      around +=
          fmt::format(" {}:{:02x}/{:02x}", i, std::to_integer<int>(gpu[i]), std::to_integer<int>(cpu[i]));
    EXPECT_EQ(first, cpu.size()) << "first differing byte at " << first << " of " << cpu.size()
                                 << " (gpu/cpu):" << around;
  }
}

TEST(CudaKvCodecs, AttentionOverCodedBlocksMatchesTheDecodedReference) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const CodedKv kv(c);
    const float bound = 2.0f * std::ldexp(kv.max_abs_value(), -7);
    // Decode (one query at the last position), a few queries, and prefill over every position.
    std::vector<std::vector<int32_t>> calls = {{c.length - 1}, {0, c.length / 2, c.length - 1}, {}};
    calls[2].resize(static_cast<size_t>(c.length));
    std::iota(calls[2].begin(), calls[2].end(), 0);
    for (const auto& pos : calls) {
      const std::vector<float> q =
          test::random_floats(pos.size() * CodedKv::kHeads * static_cast<size_t>(c.head_dim), -2.0f, 2.0f);
      const std::vector<float> gpu = kv.gpu_attention(q, pos), ref = kv.reference(q, pos);
      float worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(gpu[i] - ref[i]));
      EXPECT_LE(worst, bound) << pos.size() << " queries";
    }
  }
}

}  // namespace
}  // namespace lmx
