// KV cache interface: per-sequence storage of keys and values for every cache layer, with
// append-once-per-layer-and-step and attend-for-every-consumer (DESIGN.md, "KV design").
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/kv/sequence.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

// Shape and policy of one cache layer. A model layer that shares KV (Gemma 4 KV sharing) has no
// cache layer of its own; it attends over its donor's.
struct KvLayerSpec {
  int num_kv_heads = 0;
  int head_dim = 0;        // of keys and values
  int sliding_window = 0;  // 0 = full attention; W > 0: a query at p sees keys p - W < j <= p
};

// The codec that stores a cache layer's tokens. Full precision (f32 on CPU) is the first; quantized
// codecs implement the same contract. Every codec has a stable signature string.
enum class KvCodecKind { kF32 };
std::string kv_codec_signature(KvCodecKind codec, const KvLayerSpec& spec);

class KvCache;

// One sequence's KV across all cache layers. Created by KvCache::new_sequence; used only with the
// cache that made it. Not thread-safe; a sequence belongs to one engine step at a time.
class SequenceKv final : public Sequence {
 public:
  int64_t length() const override { return length_; }
  // Tokens currently stored for cache layer `layer` (≤ length: sliding layers keep their window).
  int64_t stored_tokens(int layer) const;
  // Bytes of KV storage currently held (all layers).
  size_t bytes() const;
  bool can_truncate(int64_t new_length) const override;
  // Drops every token at position >= new_length (rewind). Throws InvalidArgument when a sliding
  // layer has already discarded tokens the rewind would need.
  void truncate(int64_t new_length) override;

 private:
  friend class KvCache;
  struct LayerStore {
    Tensor keys;    // [capacity, heads, head_dim] f32
    Tensor values;  // [capacity, heads, head_dim] f32
    int64_t first_position = 0;  // position of stored token 0
    int64_t count = 0;           // stored tokens
  };
  std::vector<LayerStore> layers_;
  int64_t length_ = 0;
  const KvCache* owner_ = nullptr;
};

// A row of one engine step: a sequence and the number of new tokens it brings. Its new tokens take
// positions [kv->length(), kv->length() + new_tokens) until commit().
struct KvRow {
  SequenceKv* kv = nullptr;
  int64_t new_tokens = 0;
};

class KvCache {
 public:
  KvCache(std::vector<KvLayerSpec> layers, KvCodecKind codec = KvCodecKind::kF32);

  int num_layers() const { return static_cast<int>(specs_.size()); }
  const KvLayerSpec& spec(int layer) const { return specs_[layer]; }
  std::string signature(int layer) const { return kv_codec_signature(codec_, specs_[layer]); }

  std::unique_ptr<SequenceKv> new_sequence() const;

  // Stores the step's new keys and values for cache layer `layer`. k and v are [T, heads, head_dim]
  // with T = Σ rows.new_tokens, rows' tokens consecutive in row order. Sliding layers first drop
  // tokens no query of this step can see. Call once per layer per step, before attend().
  void append(int layer, std::span<const KvRow> rows, const Tensor& k, const Tensor& v) const;

  // Attention of the step's queries q [T, q_heads, head_dim] (rows as in append) over each row's
  // stored history of cache layer `layer` (which includes this step's tokens), causal and windowed
  // by position; GQA when q_heads is a multiple of the layer's heads. Writes out [T, q_heads,
  // head_dim]. Any number of consumers (KV-sharing layers) may attend to one layer per step.
  void attend(int layer, std::span<const KvRow> rows, const Tensor& q, float scale, Tensor& out) const;

  // Advances each row's length by its new tokens. Call once per step after every layer.
  static void commit(std::span<const KvRow> rows);

 private:
  std::vector<KvLayerSpec> specs_;
  KvCodecKind codec_;
};

}  // namespace lmx
