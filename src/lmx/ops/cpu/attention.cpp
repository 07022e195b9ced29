// Attention for one sequence (GQA, causal by position, optional sliding window) over f32 q and keys and
// values stored contiguously (attention) or in fixed-size blocks (paged_attention), f32 or bf16.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/affine_kv.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"
#include "lmx/quant/turbo.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

namespace lmx::ops {
namespace {

// Queries scored together against the keys (one linear tile walk over the block's key range).
constexpr int64_t kQueryBlock = 16;

void require_q(const Tensor& t, const char* what) {
  cpu::require_dtype(t, DType::kF32, "attention", what);
  LMX_REQUIRE(InvalidArgument, t.ndim() == 3 && t.strides()[2] == 1,
              "attention: {} must be [T, H, D] with a contiguous last dim, got {}", what,
              shape_string(t.shape()));
}

// Keys and values as given to attention(): rows of f32 tensors with arbitrary positions.
struct ContiguousKeys {
  const float *kb, *vb;
  int64_t k_st, k_sh, v_st, v_sh, count;
  std::span<const int32_t> k_pos;

  int64_t position(int64_t j) const { return k_pos[static_cast<size_t>(j)]; }
  // s[j - lo] = q · k_j over [lo, hi) for the query rows of each of `heads` (their x, out and strides set):
  // the query heads that share key head g.
  void scores(std::span<cpu::LinearArgs> heads, int64_t rows, int64_t g, int64_t lo, int64_t hi) const {
    for (cpu::LinearArgs args : heads) {
      args.w = kb + lo * k_st + g * k_sh;
      args.w_bf16 = false;
      args.w_stride = k_st;
      cpu::linear_block(args, 0, rows, 0, hi - lo);
    }
  }
  void add_value(float p, int64_t j, int64_t g, float* out, int64_t dv) const {
    cpu::axpy(p, vb + j * v_st + g * v_sh, out, dv);
  }
  void finish_value(float*, int64_t) const {}
  bool coded_values() const { return false; }
  void decode_value(int64_t, int64_t, float*) const {}
};

// Keys and values in blocks (PagedKvRow): stored key j is position first_position + j. Affine blocks are
// dequantized inside the loop, a block's run of keys (or one value row) at a time into a per-thread tile —
// exactly the f32 values the reference codec dequantizes to, so the result equals attention over them.
struct PagedKeys {
  const PagedKvRow& kv;
  int64_t first_position, count;
  int64_t row_elems;  // kv_heads * head_dim

  int64_t position(int64_t j) const { return first_position + j; }
  bool affine() const { return kv.quant_bits > 0 && !kv.turbo; }
  bool decoded() const { return kv.quant_bits > 0; }  // affine or TurboQuant: dequantized in the loop
  AffineKvHalf half() const {
    return {kv.block_tokens, kv.kv_heads, kv.head_dim, kv.quant_bits, kv.quant_group};
  }
  const std::byte* block_of(int64_t j) const {
    const int64_t p = first_position + j;
    return static_cast<const std::byte*>(
        kv.blocks[static_cast<size_t>(p / kv.block_tokens - kv.first_block)]);
  }
  const std::byte* row(size_t offset, int64_t j, int64_t g) const {
    const int64_t p = first_position + j;
    const size_t elem = dtype_size(kv.dtype);
    return block_of(j) + offset +
           static_cast<size_t>((p % kv.block_tokens) * row_elems + g * kv.head_dim) * elem;
  }
  // Head g of stored key or value j, dequantized into `out` [head_dim] (TurboQuant values: rotated).
  void dequantize(size_t offset, int64_t j, int64_t g, float* out) const {
    const int64_t at = (first_position + j) % kv.block_tokens * kv.kv_heads + g;
    if (kv.turbo) {
      const bool value = offset == kv.v_offset;
      const size_t row_bytes = value ? quant::turbo_value_bytes(kv.head_dim, kv.value_bits)
                                     : quant::turbo_key_bytes(kv.head_dim, kv.quant_bits);
      const std::byte* row = block_of(j) + offset + static_cast<size_t>(at) * row_bytes;
      if (value)
        quant::turbo_dequantize_value_rotated(row, kv.head_dim, kv.value_bits, out);
      else
        quant::turbo_dequantize_key(row, kv.head_dim, kv.quant_bits, out);
      return;
    }
    const AffineKvHalf h = half();
    const std::byte* base = block_of(j) + offset;
    cpu::dequantize_affine_row(reinterpret_cast<const uint32_t*>(base + h.codes_at(at)),
                               reinterpret_cast<const uint16_t*>(base + h.scales_at(at)),
                               reinterpret_cast<const uint16_t*>(base + h.biases_at(at)), kv.head_dim,
                               kv.quant_bits, kv.quant_group, out);
  }
  // A coded block's run of keys is decoded once for all of `heads`.
  void scores(std::span<cpu::LinearArgs> heads, int64_t rows, int64_t g, int64_t lo, int64_t hi) const {
    thread_local std::vector<float> tile;
    for (int64_t j = lo; j < hi;) {
      const int64_t p = first_position + j;
      const int64_t run = std::min(hi - j, kv.block_tokens - p % kv.block_tokens);  // keys left in this block
      if (decoded()) {
        tile.resize(static_cast<size_t>(run * kv.head_dim));
        for (int64_t i = 0; i < run; ++i) dequantize(kv.k_offset, j + i, g, tile.data() + i * kv.head_dim);
      }
      for (cpu::LinearArgs args : heads) {
        if (decoded()) {
          args.w = tile.data();
          args.w_bf16 = false;
          args.w_stride = kv.head_dim;
        } else {
          args.w = row(kv.k_offset, j, g);
          args.w_bf16 = kv.dtype == DType::kBF16;
          args.w_stride = row_elems;
        }
        args.out += j - lo;
        cpu::linear_block(args, 0, rows, 0, run);
      }
      j += run;
    }
  }
  // After the normalised Σ p·v of one query head: TurboQuant values were summed in the rotated space.
  void finish_value(float* out, int64_t dv) const {
    if (kv.turbo) quant::turbo_unrotate(out, static_cast<int>(dv));
  }
  // Coded values are decoded (decode_value) once per key for a block of queries; add_value takes the rest.
  bool coded_values() const { return decoded(); }
  void decode_value(int64_t j, int64_t g, float* out) const { dequantize(kv.v_offset, j, g, out); }
  void add_value(float p, int64_t j, int64_t g, float* out, int64_t dv) const {
    const std::byte* v = row(kv.v_offset, j, g);
    if (kv.dtype == DType::kBF16)
      cpu::axpy(p, reinterpret_cast<const uint16_t*>(v), out, dv);
    else
      cpu::axpy(p, reinterpret_cast<const float*>(v), out, dv);
  }
};

// The attention core over either key source. Tasks are (run of query heads sharing a key head, block of
// queries). A query's scores are linear-tile values (each depends only on D), its softmax and its Σ p·v run
// over its own visible keys in storage order: nothing depends on the other queries or heads of the task, or
// on how keys are stored — so the split into tasks changes no bit.
template <class Keys>
void attend(const Tensor& q, const Keys& keys, int64_t hkv, int64_t dv, std::span<const int32_t> q_pos,
            int window, float scale, Tensor& out) {
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2), tk = keys.count;
  const int64_t group = hq / hkv;
  const float* qb = q.data<float>();
  float* ob = out.data<float>();
  const int64_t q_st = q.strides()[0], q_sh = q.strides()[1];
  auto visible = [&](int64_t i, int64_t j) {
    const int64_t qp = q_pos[static_cast<size_t>(i)], kp = keys.position(j);
    return kp <= qp && (window <= 0 || qp - kp < window);
  };
  const int64_t q_blocks = (tq + kQueryBlock - 1) / kQueryBlock;
  // Query heads per task: one where keys are read as stored; where they are decoded in the loop, the largest
  // share of a key head's group that still gives every thread a task, since a task decodes each key and value
  // row once for all its heads (decode of a model with one key head: its query heads split over the threads).
  int64_t heads_per_task = 1;
  if (keys.coded_values()) {
    const int64_t threads = default_pool().threads();
    for (heads_per_task = group; heads_per_task > 1; --heads_per_task)
      if (group % heads_per_task == 0 && hkv * q_blocks * (group / heads_per_task) >= threads) break;
  }
  const int64_t head_runs = hq / heads_per_task;
  const int64_t work_per_task = heads_per_task * kQueryBlock * std::max<int64_t>(tk, 1) * (d + dv);
  parallel_for(head_runs * q_blocks, std::max<int64_t>(1, (int64_t{1} << 16) / work_per_task),
               [&](int64_t begin, int64_t end) {
                 std::vector<float> scores, sums, value;
                 std::vector<cpu::LinearArgs> heads(static_cast<size_t>(heads_per_task));
                 for (int64_t task = begin; task < end; ++task) {
                   const int64_t h0 = task / q_blocks * heads_per_task, g = h0 / group;
                   const int64_t i0 = task % q_blocks * kQueryBlock, i1 = std::min(tq, i0 + kQueryBlock);
                   const int64_t nq = i1 - i0;
                   // Key index range [lo, hi) holding every key visible to some query of the block.
                   int64_t lo = tk, hi = 0;
                   for (int64_t i = i0; i < i1; ++i) {
                     for (int64_t j = 0; j < tk; ++j)
                       if (visible(i, j)) {
                         lo = std::min(lo, j);
                         break;
                       }
                     for (int64_t j = tk; j-- > 0;)
                       if (visible(i, j)) {
                         hi = std::max(hi, j + 1);
                         break;
                       }
                   }
                   const int64_t span = hi > lo ? hi - lo : 0;
                   // Scores (then probabilities) of head h0 + t, query i: row t * nq + (i - i0) of `scores`.
                   auto score_row = [&](int64_t t, int64_t i) {
                     return scores.data() + (t * nq + (i - i0)) * span;
                   };
                   auto out_row = [&](int64_t t, int64_t i) { return ob + (i * hq + h0 + t) * dv; };
                   if (span > 0) {
                     scores.resize(static_cast<size_t>(heads_per_task * nq * span));
                     for (int64_t t = 0; t < heads_per_task; ++t) {
                       cpu::LinearArgs& args = heads[static_cast<size_t>(t)];
                       args.x = qb + i0 * q_st + (h0 + t) * q_sh;
                       args.x_stride = q_st;
                       args.out = score_row(t, i0);
                       args.out_stride = span;
                       args.k = d;
                     }
                     keys.scores(heads, nq, g, lo, hi);
                   }
                   // Each query's probabilities (in place of its scores) and their sum, in key order.
                   sums.assign(static_cast<size_t>(heads_per_task * nq), 0.0f);
                   for (int64_t t = 0; t < heads_per_task; ++t)
                     for (int64_t i = i0; i < i1; ++i) {
                       std::memset(out_row(t, i), 0, static_cast<size_t>(dv) * sizeof(float));
                       if (span == 0) continue;
                       float* s = score_row(t, i);
                       float& sum = sums[static_cast<size_t>(t * nq + (i - i0))];
                       float max = -std::numeric_limits<float>::infinity();
                       for (int64_t j = lo; j < hi; ++j) {
                         if (!visible(i, j)) continue;
                         s[j - lo] *= scale;
                         max = std::max(max, s[j - lo]);
                       }
                       for (int64_t j = lo; j < hi; ++j) {
                         if (!visible(i, j)) continue;
                         s[j - lo] = std::exp(s[j - lo] - max);
                         sum += s[j - lo];
                       }
                     }
                   // Σ p·v with keys outer, so that a coded value is decoded once for the task's heads and
                   // queries; each query still accumulates in key order.
                   for (int64_t j = lo; j < hi; ++j) {
                     const float* decoded = nullptr;
                     for (int64_t t = 0; t < heads_per_task; ++t)
                       for (int64_t i = i0; i < i1; ++i) {
                         if (!visible(i, j)) continue;
                         const float p = score_row(t, i)[j - lo];
                         if (!keys.coded_values()) {
                           keys.add_value(p, j, g, out_row(t, i), dv);
                           continue;
                         }
                         if (decoded == nullptr) {
                           value.resize(static_cast<size_t>(dv));
                           keys.decode_value(j, g, value.data());
                           decoded = value.data();
                         }
                         cpu::axpy(p, decoded, out_row(t, i), dv);
                       }
                   }
                   for (int64_t t = 0; t < heads_per_task; ++t)
                     for (int64_t i = i0; i < i1; ++i) {
                       const float sum = sums[static_cast<size_t>(t * nq + (i - i0))];
                       if (sum == 0.0f) continue;  // no visible key
                       float* orow = out_row(t, i);
                       const float inv = 1.0f / sum;
                       for (int64_t c = 0; c < dv; ++c) orow[c] *= inv;
                       keys.finish_value(orow, dv);
                     }
                 }
               });
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const int32_t> q_pos,
               std::span<const int32_t> k_pos, int window, float scale, Tensor& out) {
  require_q(q, "q");
  require_q(k, "k");
  require_q(v, "v");
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t tk = k.dim(0), hkv = k.dim(1), dv = v.dim(2);
  LMX_REQUIRE(InvalidArgument, k.dim(2) == d && v.dim(0) == tk && v.dim(1) == hkv && hkv > 0 && hq % hkv == 0,
              "attention: incompatible shapes q {} k {} v {}", shape_string(q.shape()),
              shape_string(k.shape()), shape_string(v.shape()));
  LMX_REQUIRE(InvalidArgument,
              static_cast<int64_t>(q_pos.size()) == tq && static_cast<int64_t>(k_pos.size()) == tk,
              "attention: {} query positions and {} key positions for q {} k {}", q_pos.size(), k_pos.size(),
              shape_string(q.shape()), shape_string(k.shape()));
  cpu::prepare_out(out, {tq, hq, dv}, DType::kF32, "attention");
  const ContiguousKeys keys{k.data<float>(),
                            v.data<float>(),
                            k.strides()[0],
                            k.strides()[1],
                            v.strides()[0],
                            v.strides()[1],
                            tk,
                            k_pos};
  attend(q, keys, hkv, dv, q_pos, window, scale, out);
}

void paged_attention(const Tensor& q, const PagedKvRow& kv, std::span<const int32_t> q_pos, int window,
                     float scale, Tensor& out) {
  require_q(q, "q");
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2);
  LMX_REQUIRE(InvalidArgument,
              kv.kv_heads > 0 && hq % kv.kv_heads == 0 && kv.head_dim == d && kv.block_tokens > 0 &&
                  cpu::paged_kv_format_ok(kv.dtype, kv.quant_bits, kv.quant_group, kv.value_bits, kv.turbo,
                                          kv.head_dim),
              "paged attention: q {} against {} kv heads of {} ({} blocks of {} tokens, {}, {}-bit codes in "
              "groups of {})",
              shape_string(q.shape()), kv.kv_heads, kv.head_dim, kv.blocks.size(), kv.block_tokens,
              dtype_name(kv.dtype), kv.quant_bits, kv.quant_group);
  const int64_t first = kv.first_block * kv.block_tokens;
  LMX_REQUIRE(InvalidArgument,
              kv.first_block >= 0 && kv.kv_len >= first &&
                  kv.kv_len <= (kv.first_block + static_cast<int64_t>(kv.blocks.size())) * kv.block_tokens,
              "paged attention: {} positions from block {} in {} blocks of {}", kv.kv_len, kv.first_block,
              kv.blocks.size(), kv.block_tokens);
  LMX_REQUIRE(InvalidArgument, static_cast<int64_t>(q_pos.size()) == tq,
              "paged attention: {} query positions for q {}", q_pos.size(), shape_string(q.shape()));
  cpu::prepare_out(out, {tq, hq, d}, DType::kF32, "attention");
  const PagedKeys keys{kv, first, kv.kv_len - first, static_cast<int64_t>(kv.kv_heads) * kv.head_dim};
  attend(q, keys, kv.kv_heads, d, q_pos, window, scale, out);
}

}  // namespace lmx::ops
