// HostKvStep: host block tables of a step.
#include "lmx/kv/host_kv.h"

#include <algorithm>

namespace lmx {

HostKvStep::HostKvStep(const KvCache& cache, std::span<const KvRow> rows)
    : cache_(cache), layout_(rows.empty() ? &cache.layout() : &cache.layout_of(*rows[0].sequence)) {
  const KvLayout& layout = *layout_;
  for (size_t r = 0; r < rows.size(); ++r) {
    const KvSequence& seq = *rows[r].sequence;
    for (int64_t i = 0; i < rows[r].new_tokens; ++i) {
      positions_.push_back(static_cast<int32_t>(seq.length() + i));
      rows_.push_back(static_cast<int32_t>(r));
    }
    kv_len_.push_back(static_cast<int32_t>(seq.length() + rows[r].new_tokens));
  }
  for (int g = 0; g < layout.num_groups(); ++g) {
    int64_t stride = 1;
    for (const KvRow& row : rows)
      stride = std::max<int64_t>(stride, static_cast<int64_t>(row.sequence->blocks(g).size()));
    std::vector<const void*> table(rows.size() * static_cast<size_t>(stride), nullptr);
    std::vector<int32_t> first;
    for (size_t r = 0; r < rows.size(); ++r) {
      first.push_back(static_cast<int32_t>(rows[r].sequence->first_block(g)));
      const auto blocks = rows[r].sequence->blocks(g);
      for (size_t i = 0; i < blocks.size(); ++i)
        table[r * static_cast<size_t>(stride) + i] = cache.pool().data(blocks[i]);
    }
    blocks_.push_back(std::move(table));
    first_block_.push_back(std::move(first));
    strides_.push_back(stride);
  }
  step_.tokens = static_cast<int64_t>(positions_.size());
  step_.rows = static_cast<int64_t>(rows.size());
  step_.q_pos = positions_.data();
  step_.q_row = rows_.data();
  step_.kv_len = kv_len_.data();
  step_.max_kv_len = kv_len_.empty() ? 0 : *std::max_element(kv_len_.begin(), kv_len_.end());
  step_.block_tokens = layout.block_tokens();
}

PagedKvLayer HostKvStep::layer(int cache_layer) const {
  const size_t g = static_cast<size_t>(layout_->layer(cache_layer).group);
  return layout_->view(cache_layer, {blocks_[g].data(), strides_[g], first_block_[g].data()});
}

}  // namespace lmx
