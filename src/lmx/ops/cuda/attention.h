// CUDA attention over a paged device KV cache: bf16 K/V storage in fixed-size token blocks (kv/'s block
// tables), f32 queries and outputs, f32 softmax.
//
// Storage (PagedStore): the keys (or values) of one cache layer of sequence s at position p live in block
// p / block_tokens of s's table, at row p % block_tokens of the layer's [block_tokens, kv_heads, head_dim]
// bf16 array inside the block. Sliding-window layers mask; blocks wholly before a sequence's first_block are
// released and never read.
// Conventions: see elementwise.h. Lengths and positions are read from device memory, so a decode
// step can be captured once as a CUDA graph and replayed with new values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda {

// One cache layer's keys or values for the sequences of a call (device memory, staged per step): the row of
// position p of sequence s starts at
//   blocks[s * stride + p / block_tokens - first_block[s]] + offset bytes + (p % block_tokens) * kv_heads *
//   head_dim
// bf16 elements. block_tokens is a multiple of 64: an attention tile of 64 keys lies in one block.
//
// A coded store (codec != kBf16) holds the quantized layouts of ops/paged_kv.h instead: affine codes, then
// bf16 scales, then biases (AffineKvHalf), or TurboQuant key or value rows (quant/turbo.h), each
// [block_tokens, kv_heads] rows from `offset`. Attention decodes them inside its tile loads (kv_codec.cuh).
enum class StoreCodec : uint8_t { kBf16, kAffine, kTurboKey, kTurboValue };

struct PagedStore {
  const void* const* blocks = nullptr;
  int64_t stride = 0;
  const int32_t* first_block = nullptr;
  int block_tokens = 0;
  int64_t offset = 0;  // bytes from a block's start to the layer's array
  StoreCodec codec = StoreCodec::kBf16;
  int bits = 0;   // coded: code bits (affine 4 or 8; TurboQuant keys 4 or 8, values 2, 3 or 4)
  int group = 0;  // affine: elements per scale and bias (32, 64 or 128)
};

// One attention call over a ragged batch: T query tokens, each belonging to one of S sequences.
struct AttentionBatch {
  const float* q = nullptr;  // [T, heads, head_dim] f32; token t at q + t * q_stride
  int64_t q_stride = 0;
  float* out = nullptr;  // [T, heads, head_dim] f32 contiguous
  int64_t tokens = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;  // heads % kv_heads == 0; head_dim ≤ 512, multiple of 8
  const int32_t* q_pos = nullptr;             // [T] position of each query token
  const int32_t* q_seq = nullptr;             // [T] sequence index of each query token, in [0, S)
  PagedStore k, v;                            // the layer's keys and values
  const int32_t* kv_len = nullptr;            // [S] stored tokens (positions < kv_len are valid)
  int64_t max_kv_len = 0;  // host-side upper bound on every kv_len (sizes the split-KV grid)
  int window = 0;          // > 0: key j visible to a query at p iff p - j < window
  float scale = 1.0f;      // scores = scale * (q · k)
};

// out[t, h] = Σ_j softmax_j(scale * q[t,h]·k[j, h/g]) v[j, h/g] over visible keys j: j ≤ q_pos[t],
// j < kv_len[seq], and the window. A query with no visible key gets zeros. Coded stores are decoded into
// each tile (bf16, like the bf16 rows); over TurboQuant values out is in their rotated space
// (turbo_unrotate_rows). Picks flash-decoding
// (split-KV, for few query tokens per sequence) or tiled flash attention (prefill) internally; each
// query's result does not depend on the other queries in the call.
void attention(const AttentionBatch& batch, float* partials, size_t partials_bytes, cudaStream_t stream);
// Bytes of `partials` scratch that attention() needs for this batch shape.
size_t attention_partials_bytes(const AttentionBatch& batch);

// Writes new keys/values into the caches: for token t (sequence q_seq[t], position q_pos[t]), the row of
// q_pos[t] in k_store = bf16(k[t]) (round to nearest even), likewise v.
// k, v f32 [T, kv_heads, head_dim] with token strides k_stride / v_stride.
void kv_append(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
               int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
               const PagedStore& k_store, const PagedStore& v_store, cudaStream_t stream);

// kv_append for coded stores (k_store and v_store both coded): each token-head row of k and v quantized in
// its store's codec, written at q_pos[t] of sequence q_seq[t]; the same bytes as the CPU codec for the same
// input (ops/cpu/affine_kv.cpp, quant/turbo.cpp). head_dim a multiple of 8, at most 512.
void kv_append_coded(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                     int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
                     const PagedStore& k_store, const PagedStore& v_store, cudaStream_t stream);

// TurboQuant's deferred inverse rotation: each of `rows` rows of x [rows, head_dim] (contiguous) ← s ⊙ H(row)
// (quant::turbo_unrotate). attention() over TurboQuant values leaves its outputs in the rotated space; this
// brings them back. head_dim a power of two in [32, 512].
void turbo_unrotate_rows(float* x, int64_t rows, int head_dim, cudaStream_t stream);

// One group of heads for attention_inputs: head h of token t is the head_dim floats at
// x + t * token_stride + h * head_dim.
struct HeadNormJob {
  float* x = nullptr;
  int64_t token_stride = 0;
  int heads = 0;
  const float* weight = nullptr;  // RMSNorm weight [head_dim] f32, or nullptr (no weight)
  bool rope = false;              // rotate after the norm (rope's contract, positions / inv_freq)
  PagedStore store;               // store.blocks set: the result goes to the bf16 row of positions[t] of
                                  // sequence q_seq[t] (kv_append's layout); else it overwrites x
};
constexpr int kMaxHeadNormJobs = 3;

// The per-head work between the q/k/v projections and attention, fused: for every token and every head of
// each job, x ← rms_norm(x)·weight (Σx² in f32), then rope when asked, then either written back in place
// or appended to the job's cache in bf16. Rounds like rms_norm, rope and kv_append run in that order.
// A job that writes back must not overlap another job's x (jobs may share x when none writes it back).
// head_dim even, ≤ 512; at most kMaxHeadNormJobs jobs. heads_per_warp: how many consecutive heads of a token
// one warp norms in turn (0: chosen from the call's size; the same results for any value, tests force
// several).
void attention_inputs(const HeadNormJob* jobs, int job_count, int64_t tokens, int head_dim, float eps,
                      const int32_t* positions, const int32_t* q_seq, const float* inv_freq,
                      cudaStream_t stream, int heads_per_warp = 0);

// attention_inputs' work for the query tokens of an attention call, as a Gemma layer asks it: q normed per
// head (q_norm; nullptr: no weight) and rotated, in place; for a layer with its own cache, the call's keys
// normed (k_norm), rotated and appended to the batch's k store, and its values normed (no weight) and
// appended to its v store.
struct AttentionInputs {
  float* q = nullptr;  // the batch's q (AttentionBatch::q), raw projections
  const float* q_norm = nullptr;
  float* k = nullptr;  // raw keys [T, kv_heads, head_dim] at token stride kv_stride; nullptr:
  float* v = nullptr;  //   the call appends nothing (v: raw values; v == k is allowed)
  int64_t kv_stride = 0;
  const float* k_norm = nullptr;
  // (The keys and values go to the caches the batch reads: AttentionBatch::k and ::v.)
  const float* inv_freq = nullptr;  // RoPE (rope's contract; the batch's q_pos are the positions)
  float eps = 0.0f;
};

// attention_inputs with the jobs `inputs` describes, for the batch's query tokens (q_pos, q_seq, head shape).
void attention_inputs(const AttentionBatch& batch, const AttentionInputs& inputs, cudaStream_t stream);

// Whether attention_with_inputs may run its two steps as one kernel: kAuto as the tuning table's
// attention.fused_inputs says (its rule: where that is measured faster; attention.cu), kNever, or kAlways
// where the kernel can (tests).
enum class InputsFusion { kAuto, kNever, kAlways };

// attention_inputs (the jobs above), then attention(batch): for a single-token call on the split-KV path, one
// kernel that does both (as `fusion` allows), with the same results — every output, cache row and bit; q is
// then left raw, since nothing reads it after attention —; otherwise the two calls. Returns whether the one
// kernel ran.
bool attention_with_inputs(const AttentionBatch& batch, const AttentionInputs& inputs, float* partials,
                           size_t partials_bytes, cudaStream_t stream,
                           InputsFusion fusion = InputsFusion::kAuto);

}  // namespace lmx::cuda
