// KV cache: full-precision (f32) codec over growable per-sequence, per-layer token arrays.
#include "lmx/kv/kv_cache.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <cstring>

namespace lmx {

std::string kv_codec_signature(KvCodecKind codec, const KvLayerSpec& spec) {
  std::string s;
  switch (codec) {
    case KvCodecKind::kF32:
      s = "kv:f32";
      break;
  }
  s += fmt::format(":h={}:d={}", spec.num_kv_heads, spec.head_dim);
  if (spec.sliding_window > 0) s += fmt::format(":window={}", spec.sliding_window);
  return s;
}

int64_t SequenceKv::stored_tokens(int layer) const { return layers_.at(static_cast<size_t>(layer)).count; }

size_t SequenceKv::bytes() const {
  size_t total = 0;
  for (const auto& l : layers_) total += l.keys.nbytes() + l.values.nbytes();
  return total;
}

bool SequenceKv::can_truncate(int64_t new_length) const {
  if (new_length < 0 || new_length > length_) return false;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    const int window = owner_->spec(static_cast<int>(i)).sliding_window;
    const int64_t needed_from = window > 0 ? std::max<int64_t>(0, new_length - window + 1) : 0;
    if (l.count > 0 && l.first_position > needed_from) return false;
  }
  return true;
}

void SequenceKv::truncate(int64_t new_length) {
  LMX_REQUIRE(InvalidArgument, new_length >= 0 && new_length <= length_, "truncate to {} of a sequence of length {}",
                           new_length, length_);
  // A sliding layer must still hold every key the next query (at position new_length) can see:
  // positions new_length - W + 1 and later.
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    const int window = owner_->spec(static_cast<int>(i)).sliding_window;
    const int64_t needed_from = window > 0 ? std::max<int64_t>(0, new_length - window + 1) : 0;
    if (l.count > 0 && l.first_position > needed_from)
      throw InvalidArgument(fmt::format("cannot rewind to {}: layer {} kept only tokens from position {}", new_length,
                                        i, l.first_position));
  }
  for (auto& l : layers_) l.count = std::max<int64_t>(0, std::min(l.count, new_length - l.first_position));
  length_ = new_length;
}

KvCache::KvCache(std::vector<KvLayerSpec> layers, KvCodecKind codec) : specs_(std::move(layers)), codec_(codec) {
  for (const auto& s : specs_)
    LMX_REQUIRE(InvalidArgument, s.num_kv_heads > 0 && s.head_dim > 0 && s.sliding_window >= 0,
                             "bad KV layer spec (heads {}, head_dim {}, window {})", s.num_kv_heads, s.head_dim,
                             s.sliding_window);
}

std::unique_ptr<SequenceKv> KvCache::new_sequence() const {
  auto seq = std::make_unique<SequenceKv>();
  seq->owner_ = this;
  seq->layers_.resize(specs_.size());
  return seq;
}

namespace {
// Ensures room for `needed` tokens, growing geometrically and keeping stored tokens.
void reserve(Tensor& buffer, int64_t stored, int64_t needed, int heads, int head_dim) {
  int64_t capacity = buffer.defined() ? buffer.dim(0) : 0;
  if (needed <= capacity) return;
  int64_t new_capacity = std::max<int64_t>({needed, capacity * 2, 16});
  Tensor grown = Tensor::zeros({new_capacity, heads, head_dim}, DType::kF32);
  if (stored > 0) std::memcpy(grown.raw_data(), buffer.raw_data(), static_cast<size_t>(stored) * heads * head_dim * 4);
  buffer = std::move(grown);
}

// Drops the oldest `drop` tokens of a [capacity, heads, dim] buffer holding `count` tokens.
void drop_front(Tensor& buffer, int64_t count, int64_t drop) {
  if (drop <= 0) return;
  size_t row = static_cast<size_t>(buffer.dim(1) * buffer.dim(2)) * 4;
  auto* base = static_cast<std::byte*>(buffer.raw_data());
  std::memmove(base, base + drop * row, static_cast<size_t>(count - drop) * row);
}
}  // namespace

void KvCache::append(int layer, std::span<const KvRow> rows, const Tensor& k, const Tensor& v) const {
  const KvLayerSpec& spec = specs_.at(static_cast<size_t>(layer));
  int64_t total = 0;
  for (const auto& r : rows) total += r.new_tokens;
  const Shape expected{total, spec.num_kv_heads, spec.head_dim};
  LMX_REQUIRE(InvalidArgument, k.shape() == expected && v.shape() == expected && k.is_contiguous() && v.is_contiguous(),
                           "KV append to layer {}: k {} and v {} must be contiguous {}", layer,
                           shape_string(k.shape()), shape_string(v.shape()), shape_string(expected));
  const size_t row_bytes = static_cast<size_t>(spec.num_kv_heads) * spec.head_dim * 4;
  int64_t offset = 0;
  for (const auto& r : rows) {
    LMX_REQUIRE(InvalidArgument, r.kv && r.kv->owner_ == this, "KV append: row's sequence belongs to another cache");
    auto& store = r.kv->layers_[static_cast<size_t>(layer)];
    const int64_t first_new = r.kv->length_;
    // Tokens stored past the sequence's length (a step that failed before commit) are discarded.
    store.count = std::clamp<int64_t>(first_new - store.first_position, 0, store.count);
    if (store.count == 0) store.first_position = first_new;
    // Sliding layers: the earliest query of this step (position first_new) sees keys > first_new - W.
    if (spec.sliding_window > 0) {
      int64_t keep_from = first_new - spec.sliding_window + 1;
      int64_t drop = std::clamp<int64_t>(keep_from - store.first_position, 0, store.count);
      drop_front(store.keys, store.count, drop);
      drop_front(store.values, store.count, drop);
      store.count -= drop;
      store.first_position += drop;
    }
    reserve(store.keys, store.count, store.count + r.new_tokens, spec.num_kv_heads, spec.head_dim);
    reserve(store.values, store.count, store.count + r.new_tokens, spec.num_kv_heads, spec.head_dim);
    const size_t bytes = static_cast<size_t>(r.new_tokens) * row_bytes;
    std::memcpy(static_cast<std::byte*>(store.keys.raw_data()) + store.count * row_bytes,
                static_cast<const std::byte*>(k.raw_data()) + offset * row_bytes, bytes);
    std::memcpy(static_cast<std::byte*>(store.values.raw_data()) + store.count * row_bytes,
                static_cast<const std::byte*>(v.raw_data()) + offset * row_bytes, bytes);
    store.count += r.new_tokens;
    offset += r.new_tokens;
  }
}

void KvCache::attend(int layer, std::span<const KvRow> rows, const Tensor& q, float scale, Tensor& out) const {
  const KvLayerSpec& spec = specs_.at(static_cast<size_t>(layer));
  int64_t total = 0;
  for (const auto& r : rows) total += r.new_tokens;
  LMX_REQUIRE(InvalidArgument, q.ndim() == 3 && q.dim(0) == total && q.dim(2) == spec.head_dim &&
                               q.dim(1) % spec.num_kv_heads == 0 && out.shape() == q.shape(),
                           "KV attend on layer {}: q {} / out {} do not match {} tokens of {} heads × {}", layer,
                           shape_string(q.shape()), shape_string(out.shape()), total, spec.num_kv_heads,
                           spec.head_dim);
  int64_t offset = 0;
  std::vector<int32_t> q_pos, k_pos;
  for (const auto& r : rows) {
    const auto& store = r.kv->layers_[static_cast<size_t>(layer)];
    q_pos.resize(static_cast<size_t>(r.new_tokens));
    for (int64_t i = 0; i < r.new_tokens; ++i) q_pos[static_cast<size_t>(i)] = static_cast<int32_t>(r.kv->length_ + i);
    k_pos.resize(static_cast<size_t>(store.count));
    for (int64_t j = 0; j < store.count; ++j) k_pos[static_cast<size_t>(j)] = static_cast<int32_t>(store.first_position + j);
    Tensor row_q = q.slice(0, offset, offset + r.new_tokens);
    Tensor row_out = out.slice(0, offset, offset + r.new_tokens);
    Tensor keys = store.keys.slice(0, 0, store.count);
    Tensor values = store.values.slice(0, 0, store.count);
    ops::attention(row_q, keys, values, q_pos, k_pos, spec.sliding_window, scale, row_out);
    offset += r.new_tokens;
  }
}

void KvCache::commit(std::span<const KvRow> rows) {
  for (const auto& r : rows) r.kv->length_ += r.new_tokens;
}

}  // namespace lmx
