// KvLayout: cache layers, groups by window, and each layer's offsets inside a group block.
#include "lmx/kv/kv_layout.h"

#include "lmx/core/error.h"

#include <algorithm>

namespace lmx {

KvLayout::KvLayout(std::span<const KvLayerGeometry> model_layers, KvCodec codec, int block_tokens,
                   std::optional<KvCodec> sliding_codec, const std::map<int, KvCodec>& layer_codecs)
    : codec_(codec), sliding_codec_(sliding_codec.value_or(codec)), block_tokens_(block_tokens) {
  LMX_REQUIRE(InvalidArgument, block_tokens >= 1 && block_tokens <= 65536,
              "KV block tokens must be in [1, 65536], got {}", block_tokens);
  for (const auto& [layer, layer_codec] : layer_codecs) {
    LMX_REQUIRE(InvalidArgument, layer >= 0 && static_cast<size_t>(layer) < model_layers.size(),
                "KV codec for layer {}: the model has layers 0-{}", layer, model_layers.size() - 1);
    if (model_layers[static_cast<size_t>(layer)].donor < 0) layer_codecs_.emplace(layer, layer_codec);
  }
  for (size_t i = 0; i < model_layers.size(); ++i) {
    const KvLayerGeometry& g = model_layers[i];
    LMX_REQUIRE(InvalidArgument, g.num_kv_heads > 0 && g.head_dim > 0 && g.window >= 0,
                "KV layer {}: bad geometry (heads {}, head_dim {}, window {})", i, g.num_kv_heads, g.head_dim,
                g.window);
    if (g.donor >= 0) {
      LMX_REQUIRE(InvalidArgument, static_cast<size_t>(g.donor) < i && model_layers[g.donor].donor < 0,
                  "KV layer {}: donor {} is not an earlier layer that owns KV", i, g.donor);
      const KvLayerGeometry& d = model_layers[g.donor];
      LMX_REQUIRE(InvalidArgument,
                  d.num_kv_heads == g.num_kv_heads && d.head_dim == g.head_dim && d.window == g.window,
                  "KV layer {}: its geometry differs from its donor {}'s", i, g.donor);
      cache_of_model_layer_.push_back(cache_of_model_layer_[static_cast<size_t>(g.donor)]);
      continue;
    }
    KvCacheLayer layer;
    layer.model_layer = static_cast<int>(i);
    layer.num_kv_heads = g.num_kv_heads;
    layer.head_dim = g.head_dim;
    layer.window = g.window;
    const auto own = layer_codecs_.find(static_cast<int>(i));
    layer.codec = own != layer_codecs_.end() ? own->second : g.window > 0 ? sliding_codec_ : codec_;
    const KvCodec& layer_codec = layer.codec;
    int group = 0;
    while (group < num_groups() && groups_[static_cast<size_t>(group)].window != g.window) ++group;
    if (group == num_groups()) groups_.push_back({g.window, {}, 0});
    layer.group = group;
    KvGroup& owner = groups_[static_cast<size_t>(group)];
    const size_t keys =
        static_cast<size_t>(block_tokens) * layer_codec.token_bytes(g.num_kv_heads, g.head_dim);
    const size_t values =
        static_cast<size_t>(block_tokens) * layer_codec.token_bytes(g.num_kv_heads, g.head_dim, true);
    layer.k_offset = owner.block_bytes;
    layer.v_offset = owner.block_bytes + keys;
    owner.block_bytes += keys + values;
    owner.layers.push_back(num_cache_layers());
    cache_of_model_layer_.push_back(num_cache_layers());
    layers_.push_back(layer);
  }
}

std::string KvLayout::codec_description() const {
  // (When every cache layer has a codec of its own, the defaults name no layer and are left out.)
  std::string out = layer_codecs_.size() == layers_.size() ? "" : codec_.name();
  if (!out.empty() && sliding_codec_ != codec_) out += ", sliding " + sliding_codec_.name();
  // Layers with codecs of their own, grouped by codec as runs: "; layers 0-3, 7 affine8:g64".
  std::map<std::string, std::vector<int>> by_codec;
  for (const auto& [layer, codec] : layer_codecs_) by_codec[codec.name()].push_back(layer);
  for (const auto& [name, layers] : by_codec) {
    std::string runs;
    for (size_t i = 0; i < layers.size();) {
      size_t j = i;
      while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
      runs += (runs.empty() ? "" : ", ") +
              (j == i ? std::to_string(layers[i]) : fmt::format("{}-{}", layers[i], layers[j]));
      i = j + 1;
    }
    out += fmt::format("{}{} {} {}", out.empty() ? "" : "; ", layers.size() == 1 ? "layer" : "layers", runs,
                       name);
  }
  return out;
}

bool KvLayout::owns_cache(int model_layer) const {
  return layer(cache_layer_of(model_layer)).model_layer == model_layer;
}

std::string KvLayout::signature(int cache_layer) const {
  const KvCacheLayer& l = layer(cache_layer);
  std::string s = fmt::format("kv:{}:h={}:d={}", l.codec.name(), l.num_kv_heads, l.head_dim);
  if (l.window > 0) s += fmt::format(":window={}", l.window);
  return s;
}

size_t KvLayout::bytes_per_token() const {
  size_t total = 0;
  for (const auto& l : layers_)
    total += l.codec.token_bytes(l.num_kv_heads, l.head_dim) +
             l.codec.token_bytes(l.num_kv_heads, l.head_dim, true);
  return total;
}

PagedKvLayer KvLayout::view(int cache_layer, const PagedKvTables& group_tables) const {
  const KvCacheLayer& l = layer(cache_layer);
  PagedKvLayer view;
  view.tables = group_tables;
  view.k_offset = l.k_offset;
  view.v_offset = l.v_offset;
  view.kv_heads = l.num_kv_heads;
  view.head_dim = l.head_dim;
  view.dtype = l.codec.element_dtype();
  view.quant_bits = l.codec.bits();
  view.quant_group = l.codec.group();
  view.value_bits = l.codec.value_bits();
  view.turbo = l.codec.kind() == KvCodecKind::kTurbo;
  view.window = l.window;
  return view;
}

size_t KvLayout::sequence_bytes(int64_t tokens, int64_t step_tokens) const {
  const int64_t bt = block_tokens_, step = std::max<int64_t>(step_tokens, 1);
  size_t bytes = 0;
  for (const KvGroup& g : groups_) {
    int64_t blocks = (tokens + bt - 1) / bt;
    // A step of n tokens from position L holds blocks (L - W + 1) / bt ... (L + n - 1) / bt.
    if (g.window > 0) blocks = std::min<int64_t>(blocks, (g.window + step - 2) / bt + 2);
    bytes += static_cast<size_t>(blocks) * g.block_bytes;
  }
  return bytes;
}

}  // namespace lmx
