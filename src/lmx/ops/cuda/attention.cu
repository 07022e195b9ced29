// CUDA attention over a bf16 KV cache (attention.h): path choice, scratch sizing, kv_append.
//
// Two kernels share one numeric definition (attention_kernels.cuh), so a query's output bits do not
// depend on the path nor on the other queries of the call:
//  - split-KV decode (attention_decode.cu): calls with at most kDecodeMaxTokens query tokens; one
//    block per (token, kv head, ≤16 heads, 64-key chunk), partial states in `partials` and a combine
//    kernel, or (≤ 16 chunk slots) folded inside each work item's thread-block cluster;
//  - tiled prefill (attention_prefill.cu): every other call; persistent blocks walk (token tile,
//    kv head) items, `partials` holds the tile list.
// The choice uses host-side shape only (tokens, heads, head_dim, max_kv_len, window); since both
// paths give the same bits it only moves time. Split-KV blocks whose chunk lies past a token's visible
// range exit without writing: the combine kernel derives each token's chunk range from the same
// device-side q_pos / kv_len, so a CUDA graph captured with max_kv_len = capacity replays correctly.
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/attention_kernels.cuh"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/paged_store.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <algorithm>
#include <utility>

namespace lmx::cuda {
namespace {

using attn::kChunkKeys;

// Split-KV only for few query tokens (each token reads its keys on its own) and bounded scratch.
constexpr int64_t kDecodeMaxTokens = 64;
constexpr int64_t kDecodeMaxSlots = 2048;  // the combine kernel keeps 16 bytes per slot in shared memory
constexpr size_t kDecodeMaxBytes = size_t{512} << 20;

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

int dim_tier(int head_dim) {
  for (int t : {32, 64, 128, 256}) {
    if (head_dim <= t) return t;
  }
  return 512;
}

struct Plan {
  bool decode = false;
  int n_slots = 0;
  size_t acc_bytes = 0;  // decode: partial acc, then (m, l) pairs
  size_t bytes = 0;
};

Plan make_plan(const AttentionBatch& b) {
  Plan plan;
  if (b.tokens <= 0) return plan;
  const int64_t chunks = std::max<int64_t>(1, (b.max_kv_len + kChunkKeys - 1) / kChunkKeys);
  // A window of W keys touches at most (W - 1) / 256 + 2 chunks.
  const int64_t slots = b.window > 0 ? std::min<int64_t>(chunks, (b.window - 1) / kChunkKeys + 2) : chunks;
  const size_t rows =
      static_cast<size_t>(b.tokens) * static_cast<size_t>(b.heads) * static_cast<size_t>(slots);
  const size_t acc_bytes = align256(rows * static_cast<size_t>(b.head_dim) * sizeof(float));
  const size_t decode_bytes = acc_bytes + align256(rows * sizeof(float2));
  if (b.tokens <= kDecodeMaxTokens && slots <= kDecodeMaxSlots && decode_bytes <= kDecodeMaxBytes) {
    plan.decode = true;
    plan.n_slots = static_cast<int>(slots);
    plan.acc_bytes = acc_bytes;
    plan.bytes = decode_bytes;
  } else {
    plan.bytes = align256(static_cast<size_t>(b.tokens + 3) * sizeof(int));
  }
  return plan;
}

void validate(const AttentionBatch& b) {
  LMX_REQUIRE(InvalidArgument, b.heads > 0 && b.kv_heads > 0 && b.heads % b.kv_heads == 0,
              "cuda attention: heads {} must be a positive multiple of kv_heads {}", b.heads, b.kv_heads);
  // Head dims are zero-padded to the next tier (32, 64, 128, 256, 512) in 16-byte (8-element) chunks.
  LMX_REQUIRE(InvalidArgument, b.head_dim > 0 && b.head_dim <= 512 && b.head_dim % 8 == 0,
              "cuda attention: head_dim {} must be a multiple of 8 in [8, 512]", b.head_dim);
  LMX_REQUIRE(InvalidArgument, b.tokens <= (int64_t{1} << 24) && b.max_kv_len >= 0,
              "cuda attention: {} tokens / max_kv_len {} out of range", b.tokens, b.max_kv_len);
  LMX_REQUIRE(InvalidArgument,
              b.q && b.out && b.q_pos && b.q_seq && b.k.blocks && b.v.blocks && b.k.first_block &&
                  b.v.first_block && b.kv_len && b.q_stride >= int64_t{b.heads} * b.head_dim,
              "cuda attention: missing pointer or q_stride {} < heads * head_dim", b.q_stride);
  LMX_REQUIRE(InvalidArgument, (b.k.codec == StoreCodec::kBf16) == (b.v.codec == StoreCodec::kBf16),
              "cuda attention: keys and values must both be bf16 rows or both coded");
  LMX_REQUIRE(
      InvalidArgument,
      b.k.block_tokens > 0 && b.k.block_tokens % attn::kTileKeys == 0 && b.v.block_tokens == b.k.block_tokens,
      "cuda attention: KV blocks of {} tokens; the CUDA kernels need a multiple of {}", b.k.block_tokens,
      attn::kTileKeys);
}

// ---- kv_append ------------------------------------------------------------------------------------------

// One thread per 4 (kVec4) or 1 element of one token's [kv_heads, head_dim] row, for k and v.
template <bool kVec4>
__global__ void kv_append_kernel(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                                 int64_t tokens, int row_elems, const int32_t* q_pos, const int32_t* q_seq,
                                 PagedStore k_store, PagedStore v_store) {
  wait_for_prior_kernels();
  allow_next_kernel();
  constexpr int kW = kVec4 ? 4 : 1;
  const int per_token = row_elems / kW;
  const int64_t total = tokens * per_token;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_token;
    const int e = static_cast<int>(i % per_token) * kW;
    const int32_t seq = q_seq[t];
    uint16_t* k_row = paged_row(k_store, seq, q_pos[t], row_elems) + e;
    uint16_t* v_row = paged_row(v_store, seq, q_pos[t], row_elems) + e;
    if constexpr (kVec4) {
      const float4 a = *reinterpret_cast<const float4*>(k + t * k_stride + e);
      const float4 c = *reinterpret_cast<const float4*>(v + t * v_stride + e);
      *reinterpret_cast<uint2*>(k_row) = make_uint2(attn::pack_bf16x2(a.x, a.y), attn::pack_bf16x2(a.z, a.w));
      *reinterpret_cast<uint2*>(v_row) = make_uint2(attn::pack_bf16x2(c.x, c.y), attn::pack_bf16x2(c.z, c.w));
    } else {
      *k_row = __bfloat16_as_ushort(__float2bfloat16_rn(k[t * k_stride + e]));
      *v_row = __bfloat16_as_ushort(__float2bfloat16_rn(v[t * v_stride + e]));
    }
  }
}

}  // namespace

size_t attention_partials_bytes(const AttentionBatch& batch) {
  return make_plan(batch).bytes;
}

namespace {

// The kernels' parameters for a validated batch (the decode or prefill fields follow the plan).
attn::Params make_params(const AttentionBatch& batch) {
  attn::Params p;
  p.q = batch.q;
  p.q_stride = batch.q_stride;
  p.out = batch.out;
  p.tokens = static_cast<int>(batch.tokens);
  p.heads = batch.heads;
  p.kv_heads = batch.kv_heads;
  p.head_dim = batch.head_dim;
  p.group = batch.heads / batch.kv_heads;
  p.q_pos = batch.q_pos;
  p.q_seq = batch.q_seq;
  p.k = batch.k;
  p.v = batch.v;
  p.kv_len = batch.kv_len;
  p.window = batch.window;
  p.scale_log2 = static_cast<float>(static_cast<double>(batch.scale) * 1.4426950408889634);
  p.q_vec4 = detail::aligned16(batch.q) && batch.q_stride % 4 == 0;
  return p;
}

void check_partials(const Plan& plan, const float* partials, size_t partials_bytes) {
  LMX_REQUIRE(InvalidArgument, partials != nullptr && partials_bytes >= plan.bytes,
              "cuda attention: partials scratch of {} bytes, {} needed", partials_bytes, plan.bytes);
}

// The split-KV kernels' fields for a decode plan.
void set_decode_fields(attn::Params& p, const Plan& plan, float* partials) {
  p.gh = std::min(p.group, 16);
  p.head_blocks = (p.group + 15) / 16;
  p.tokens_per_item = 1;
  p.part_acc = partials;
  p.part_ml = reinterpret_cast<float2*>(reinterpret_cast<char*>(partials) + plan.acc_bytes);
  p.n_slots = plan.n_slots;
}

// InputsFusion::kAuto takes the tuning table's attention.fused_inputs, whose rule fuses unless the split-KV
// kernel would fold in clusters over more than attention.fused_inputs_max_cluster_blocks (64) blocks. Fused,
// the kernel's blocks are launched early (PDL) while the q/k/v projection still runs, and clusters of up to
// 16 blocks, ~80 KB of shared memory each, that cover the GPU wait for whole GPCs to free up: 8 kv heads x 16
// slots = 128 blocks (26B-A4B's sliding layers) decoded 1.2-1.4 % slower fused everywhere, though 3.6 %
// faster without PDL and 0.9 % faster without clusters; grids of 16 to 64 blocks (E2B, E4B, 26B-A4B's and
// 31B's global layers) gain (same-run A/Bs on the H200, 2026-12-01). The same results either way.
InputsFusion auto_fusion(const CudaTuning::Attention& rules) {
  return rules.fused_inputs == Choice::kNever    ? InputsFusion::kNever
         : rules.fused_inputs == Choice::kAlways ? InputsFusion::kAlways
                                                 : InputsFusion::kAuto;
}

// The attention kernels of a validated batch whose partials the plan's check passed (p: make_params').
void launch_attention(const AttentionBatch& batch, const Plan& plan, attn::Params& p, float* partials,
                      cudaStream_t stream) {
  const int tier = dim_tier(batch.head_dim);
  if (plan.decode) {
    set_decode_fields(p, plan, partials);
    attn::launch_decode(p, tier, stream);
  } else {
    // (The wgmma kernel reads bf16 rows only: coded stores take the mma kernel.)
    const bool wgmma = batch.k.codec == StoreCodec::kBf16 && attn::prefill_wgmma_runs(tier);
    const int rows = attn::prefill_rows(tier, wgmma);
    p.gh = std::min(p.group, rows);
    p.head_blocks = (p.group + p.gh - 1) / p.gh;
    p.tokens_per_item = rows / p.gh;
    p.work = reinterpret_cast<int*>(partials);
    attn::launch_prefill(p, tier, wgmma, stream);
  }
}

}  // namespace

void attention(const AttentionBatch& batch, float* partials, size_t partials_bytes, cudaStream_t stream) {
  if (batch.tokens <= 0) return;
  validate(batch);
  const Plan plan = make_plan(batch);
  check_partials(plan, partials, partials_bytes);
  attn::Params p = make_params(batch);
  launch_attention(batch, plan, p, partials, stream);
}

void attention_inputs(const AttentionBatch& batch, const AttentionInputs& in, cudaStream_t stream) {
  HeadNormJob jobs[3];
  jobs[0] = {in.q, batch.q_stride, batch.heads, in.q_norm, true, {}};
  int count = 1;
  if (in.k != nullptr) {
    jobs[count++] = {in.k, in.kv_stride, batch.kv_heads, in.k_norm, true, batch.k};
    jobs[count++] = {in.v, in.kv_stride, batch.kv_heads, nullptr, false, batch.v};
  }
  attention_inputs(jobs, count, batch.tokens, batch.head_dim, in.eps, batch.q_pos, batch.q_seq, in.inv_freq,
                   stream);
}

bool attention_with_inputs(const AttentionBatch& batch, const AttentionInputs& in, float* partials,
                           size_t partials_bytes, cudaStream_t stream, InputsFusion fusion) {
  if (batch.tokens <= 0) return false;
  validate(batch);
  LMX_REQUIRE(InvalidArgument, in.q == batch.q && in.inv_freq != nullptr,
              "attention_with_inputs: inputs.q must be the batch's q, and inv_freq set");
  LMX_REQUIRE(InvalidArgument, batch.k.codec == StoreCodec::kBf16 && batch.v.codec == StoreCodec::kBf16,
              "attention_with_inputs: bf16 stores only (coded stores: attention_inputs without a store, "
              "kv_append_coded, attention)");
  LMX_REQUIRE(InvalidArgument, (in.k == nullptr) == (in.v == nullptr),
              "attention_with_inputs: keys and values are appended together (k and v both set or both null)");
  const Plan plan = make_plan(batch);
  check_partials(plan, partials, partials_bytes);
  attn::Params p = make_params(batch);
  const int tier = dim_tier(batch.head_dim);
  const CudaTuning::Attention& rules = tuning().attention;
  if (fusion == InputsFusion::kAuto) fusion = auto_fusion(rules);
  bool fuse = plan.decode && batch.tokens == 1 && fusion != InputsFusion::kNever;
  if (fuse) {
    set_decode_fields(p, plan, partials);
    fuse = fusion == InputsFusion::kAlways ||
           attn::decode_cluster_blocks(p, tier) <= rules.fused_inputs_max_cluster_blocks;
  }
  if (!fuse) {
    attention_inputs(batch, in, stream);
    launch_attention(batch, plan, p, partials, stream);
    return false;
  }
  p.inputs_fused = true;
  p.q_norm = in.q_norm;
  p.k_in = in.k;
  p.v_in = in.v;
  p.k_norm = in.k_norm;
  p.inv_freq = in.inv_freq;
  p.eps = in.eps;
  attn::launch_decode(p, tier, stream);
  return true;
}

void kv_append(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
               int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
               const PagedStore& k_store, const PagedStore& v_store, cudaStream_t stream) {
  if (tokens <= 0) return;
  LMX_REQUIRE(InvalidArgument, kv_heads > 0 && head_dim > 0, "kv_append: kv_heads {} head_dim {}", kv_heads,
              head_dim);
  LMX_REQUIRE(InvalidArgument,
              k_store.blocks && v_store.blocks && k_store.block_tokens > 0 && v_store.block_tokens > 0,
              "kv_append: missing block tables");
  const int row_elems = kv_heads * head_dim;
  const bool vec4 = row_elems % 4 == 0 && k_stride % 4 == 0 && v_stride % 4 == 0 && detail::aligned16(k) &&
                    detail::aligned16(v);
  constexpr int kThreads = 256;
  const int64_t work = tokens * (vec4 ? row_elems / 4 : row_elems);
  const unsigned grid = static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, 8192));
  if (vec4) {
    launch(kv_append_kernel<true>, grid, kThreads, 0, stream, k, k_stride, v, v_stride, tokens, row_elems,
           q_pos, q_seq, k_store, v_store);
  } else {
    launch(kv_append_kernel<false>, grid, kThreads, 0, stream, k, k_stride, v, v_stride, tokens, row_elems,
           q_pos, q_seq, k_store, v_store);
  }
}

}  // namespace lmx::cuda
