// How a model's layers map onto KV storage: cache layers (the layers that own KV), the cache groups
// that share one block table (layers of one attention window), and each layer's place inside a block.
#pragma once

#include "lmx/kv/kv_codec.h"
#include "lmx/ops/paged_kv.h"

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace lmx {

// The KV geometry of one model layer, as a model family describes it.
struct KvLayerGeometry {
  int num_kv_heads = 0;
  int head_dim = 0;  // of keys and values
  int window = 0;    // 0: full attention; W > 0: a query at position p sees keys p - W < j <= p
  int donor = -1;    // >= 0: the layer owns no KV and attends over this earlier layer's
};

// A layer that owns KV.
struct KvCacheLayer {
  int model_layer = 0;
  int num_kv_heads = 0, head_dim = 0, window = 0;
  KvCodec codec;
  int group = 0;
  // Bytes from the start of one of its group's blocks to this layer's keys and to its values, each
  // [block_tokens, heads, head_dim] in the codec's layout.
  size_t k_offset = 0, v_offset = 0;
};

// Cache layers that share one block table per sequence: every cache layer of one attention window.
// A block of the group holds block_tokens consecutive positions of all its layers.
struct KvGroup {
  int window = 0;
  std::vector<int> layers;  // cache layer indices, in model order
  size_t block_bytes = 0;
};

class KvLayout {
 public:
  // InvalidArgument for a malformed geometry (no heads, a donor that is not an earlier layer owning
  // KV, a sharing layer whose geometry differs from its donor's) or block_tokens outside [1, 65536].
  // Sliding-window layers take `sliding_codec` when given, every other layer `codec`; a model layer in
  // `layer_codecs` (kv_config.json) takes its own, which a layer sharing its KV follows (InvalidArgument
  // for a layer the model does not have).
  KvLayout(std::span<const KvLayerGeometry> model_layers, KvCodec codec, int block_tokens,
           std::optional<KvCodec> sliding_codec = std::nullopt, const std::map<int, KvCodec>& layer_codecs = {});

  int num_model_layers() const { return static_cast<int>(cache_of_model_layer_.size()); }
  int num_cache_layers() const { return static_cast<int>(layers_.size()); }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  int block_tokens() const { return block_tokens_; }
  // The full-attention layers' codec, and the sliding layers' (the same unless the layout was given one).
  KvCodec codec() const { return codec_; }
  KvCodec sliding_codec() const { return sliding_codec_; }
  // "bf16", or "affine4:g64, sliding bf16" when the sliding layers differ, then "; layers 0-3 affine8:g64"
  // for layers with codecs of their own: what front ends report.
  std::string codec_description() const;

  // The cache layer model layer `layer` appends to or (when it shares KV) reads its donor's.
  int cache_layer_of(int model_layer) const {
    return cache_of_model_layer_.at(static_cast<size_t>(model_layer));
  }
  // Whether model layer `layer` owns its cache layer (appends to it).
  bool owns_cache(int model_layer) const;
  const KvCacheLayer& layer(int cache_layer) const { return layers_.at(static_cast<size_t>(cache_layer)); }
  const KvGroup& group(int g) const { return groups_.at(static_cast<size_t>(g)); }

  // The stable signature of a cache layer: "kv:<codec>:h=<heads>:d=<head_dim>" plus ":window=<W>" for
  // sliding layers, e.g. "kv:bf16:h=2:d=256:window=512".
  std::string signature(int cache_layer) const;
  // KV bytes one token takes in every cache layer (keys and values).
  size_t bytes_per_token() const;
  // The most bytes of blocks one sequence holds while it grows to `tokens` positions in steps of at most
  // `step_tokens` (sliding groups hold only the blocks their window and one step's tokens span).
  size_t sequence_bytes(int64_t tokens, int64_t step_tokens) const;
  // What attention kernels read of cache layer `cache_layer`: its group's step tables and its place in a
  // block.
  PagedKvLayer view(int cache_layer, const PagedKvTables& group_tables) const;

 private:
  std::vector<int> cache_of_model_layer_;
  std::vector<KvCacheLayer> layers_;
  std::vector<KvGroup> groups_;
  KvCodec codec_, sliding_codec_;
  std::map<int, KvCodec> layer_codecs_;  // model layer → its own codec
  int block_tokens_ = 0;
};

}  // namespace lmx
