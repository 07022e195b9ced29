// LanguageModel: the model-independent step executor (see language_model.h).
#include "lmx/model/language_model.h"

#include "lmx/core/error.h"
#include "lmx/model/registry.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace lmx {

namespace {
// Smallest KV-length bucket a decode step's graph is recorded for; buckets double from there.
constexpr int64_t kMinGraphBucket = 256;
// The most graphs kept at once; recording one more drops them all first (a step of a new row count or KV
// bucket records again).
constexpr size_t kMaxGraphs = 96;

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
}  // namespace

PagedKvLayer StepView::kv_layer(int layer) const {
  const int cache_layer = kv_layout->cache_layer_of(layer);
  return kv_layout->view(cache_layer, kv_tables[static_cast<size_t>(kv_layout->layer(cache_layer).group)]);
}

// What one step runs: its rows, their KV rows and the shape of its staged inputs.
struct LanguageModel::Plan {
  std::vector<KvRow> kv_rows;
  std::vector<std::span<const int32_t>> tokens;
  int64_t tokens_total = 0;
  bool all_positions = false;
  bool graphed = false;
  int64_t max_kv_len = 0;             // the graph bucket when graphed
  std::vector<int64_t> table_widths;  // per group: block pointers staged per row
  int phase = 1;                      // the rows' KvCache::step_phase
};

std::unique_ptr<LanguageModel> LanguageModel::load(const std::string& dir, std::unique_ptr<Backend> backend,
                                                   const ModelOptions& options) {
  return std::make_unique<LanguageModel>(open_model_family(dir), std::move(backend), options);
}

LanguageModel::LanguageModel(std::unique_ptr<ModelForward> forward, std::unique_ptr<Backend> backend,
                             const ModelOptions& options)
    : backend_(std::move(backend)), forward_(std::move(forward)), use_graphs_(options.use_graphs) {
  LMX_REQUIRE(InvalidArgument, backend_ != nullptr && forward_ != nullptr,
              "a model needs a backend and a forward");
  KvCacheOptions kv;
  kv.codec = options.kv_codec.value_or(
      KvCodec(backend_->device().is_cpu() ? KvCodecKind::kF32 : KvCodecKind::kBf16));
  kv.sliding_codec = options.kv_sliding_codec;
  kv.layer_codecs = options.kv_layer_codecs;
  const KvCodec sliding = kv.sliding_codec.value_or(kv.codec);
  std::vector<KvCodec> codecs = {kv.codec, sliding};
  for (const auto& [layer, codec] : kv.layer_codecs) codecs.push_back(codec);
  for (const KvCodec& codec : codecs)
    LMX_REQUIRE(InvalidArgument, !codec.quantized() || backend_->supports_quantized_kv(),
                "KV codec {}: the {} backend stores only f32 and bf16 KV", codec.name(),
                backend_->description());
  // The f32 KV cache is the exactness reference: every op of the backend computes in f32 then.
  backend_->set_exact(std::all_of(codecs.begin(), codecs.end(),
                                  [](const KvCodec& c) { return c.kind() == KvCodecKind::kF32; }));
  forward_->prepare(*backend_);
  kv.block_tokens = options.kv_block_tokens > 0 ? options.kv_block_tokens : kDefaultKvBlockTokens;
  kv.budget_bytes = options.kv_budget_bytes;
  kv.prefix_cache_bytes = options.kv_prefix_cache_bytes;
  kv.quant_start = options.kv_quant_start;
  kv_ = std::make_unique<KvCache>(description().kv_layers, kv, backend_->kv_memory());
}

LanguageModel::~LanguageModel() {
  if (backend_) backend_->drop_graphs();
}

std::unique_ptr<Sequence> LanguageModel::new_sequence() {
  return kv_->new_sequence();
}

std::unique_ptr<Sequence> LanguageModel::fork(Sequence& source, int64_t length) {
  return kv_->fork(kv_->own(&source), length);
}

size_t LanguageModel::kv_bytes(const Sequence& sequence) const {
  return kv_->own(const_cast<Sequence*>(&sequence)).bytes();
}

LanguageModel::Plan LanguageModel::plan(std::span<const StepRow> rows, bool all_positions) {
  LMX_REQUIRE(InvalidArgument, !rows.empty(), "forward: empty batch");
  const int vocab = description().vocab_size;
  Plan p;
  p.all_positions = all_positions;
  std::unordered_set<const Sequence*> seen;
  for (size_t r = 0; r < rows.size(); ++r) {
    LMX_REQUIRE(InvalidArgument, rows[r].sequence != nullptr && !rows[r].tokens.empty(),
                "forward: row {} has no tokens", r);
    KvSequence& seq = kv_->own(rows[r].sequence);
    LMX_REQUIRE(InvalidArgument, seen.insert(&seq).second, "forward: row {} repeats a sequence of the step",
                r);
    for (int32_t id : rows[r].tokens)
      LMX_REQUIRE(InvalidArgument, id >= 0 && id < vocab, "token id {} out of range [0, {}) in row {}", id,
                  vocab, r);
    const int64_t n = static_cast<int64_t>(rows[r].tokens.size());
    LMX_REQUIRE(InvalidArgument, seq.length() + n <= (int64_t{1} << 30),
                "forward: row {} would hold {} tokens", r, seq.length() + n);
    if (r == 0) p.phase = kv_->step_phase(seq);
    LMX_REQUIRE(
        InvalidArgument, kv_->step_phase(seq) == p.phase,
        "forward: rows 0 and {} hold KV on both sides of the quantization start (one layout per step)", r);
    LMX_REQUIRE(InvalidArgument, n <= kv_->step_limit(seq),
                "forward: row {} crosses the KV quantization start {} (split it there)", r,
                kv_->quant_start());
    p.kv_rows.push_back({&seq, n});
    p.tokens.push_back(rows[r].tokens);
    p.tokens_total += n;
    p.max_kv_len = std::max(p.max_kv_len, seq.length() + n);
  }
  // Decode steps (one token per row) are graphed, one graph per row count and KV-length bucket.
  p.graphed = use_graphs_ && backend_->supports_graphs() && !all_positions &&
              p.tokens_total == static_cast<int64_t>(rows.size());
  if (p.graphed) p.max_kv_len = std::max(kMinGraphBucket, next_pow2(p.max_kv_len));
  return p;
}

StepView LanguageModel::stage(const Plan& p) {
  const KvLayout& layout = kv_->layout_of(*p.kv_rows.front().sequence);  // after prepare: converted rows too
  const int64_t t = p.tokens_total, s = static_cast<int64_t>(p.kv_rows.size());
  const int groups = layout.num_groups(), extras = forward_->extra_token_arrays();
  const int64_t block_tokens = layout.block_tokens();
  // Pointer table widths: what the rows hold now, or, for a graph, the most any row of its bucket can hold
  // (a sliding group holds at most the blocks of its window and one step), so that replays keep the layout.
  std::vector<int64_t> widths(static_cast<size_t>(groups), 0);
  for (int g = 0; g < groups; ++g) {
    for (const KvRow& r : p.kv_rows)
      widths[g] = std::max<int64_t>(widths[g], static_cast<int64_t>(r.sequence->blocks(g).size()));
    if (p.graphed) {
      const int window = layout.group(g).window;
      int64_t bound = ceil_div(p.max_kv_len, block_tokens);
      if (window > 0) bound = std::min(bound, (window - 1) / block_tokens + 2);
      LMX_REQUIRE(InvalidArgument, widths[g] <= bound,
                  "internal: a graphed row holds {} blocks, more than {}", widths[g], bound);
      widths[g] = bound;
    }
  }
  // Layout: int32 ids[t], positions[t], rows[t], extras[e][t], kv_len[s], first_block[g][s]; then 8-aligned
  // block pointers [g][s][width g].
  const size_t ints = static_cast<size_t>((3 + extras) * t + (1 + groups) * s);
  size_t pointers_at = (ints * 4 + 7) / 8 * 8, bytes = pointers_at;
  for (int g = 0; g < groups; ++g) bytes += static_cast<size_t>(s * widths[g]) * sizeof(void*);
  staging_.assign(bytes, std::byte{0});
  auto* ids = reinterpret_cast<int32_t*>(staging_.data());
  int32_t* positions = ids + t;
  int32_t* token_rows = ids + 2 * t;
  int32_t* extra = ids + 3 * t;
  int32_t* kv_len = extra + extras * t;
  int32_t* first_block = kv_len + s;
  int64_t token = 0;
  for (int64_t r = 0; r < s; ++r) {
    const KvRow& row = p.kv_rows[static_cast<size_t>(r)];
    const int64_t start = row.sequence->length();
    for (int64_t i = 0; i < row.new_tokens; ++i, ++token) {
      ids[token] = p.tokens[static_cast<size_t>(r)][static_cast<size_t>(i)];
      positions[token] = static_cast<int32_t>(start + i);
      token_rows[token] = static_cast<int32_t>(r);
    }
    kv_len[r] = static_cast<int32_t>(start + row.new_tokens);
  }
  for (int e = 0; e < extras; ++e)
    forward_->fill_extra(e, {ids, static_cast<size_t>(t)}, {extra + e * t, static_cast<size_t>(t)});
  size_t table_at = pointers_at;
  std::vector<size_t> table_offsets;
  for (int g = 0; g < groups; ++g) {
    auto** table = reinterpret_cast<const void**>(staging_.data() + table_at);
    table_offsets.push_back(table_at);
    for (int64_t r = 0; r < s; ++r) {
      const KvSequence& seq = *p.kv_rows[static_cast<size_t>(r)].sequence;
      first_block[g * s + r] = static_cast<int32_t>(seq.first_block(g));
      const auto blocks = seq.blocks(g);
      for (size_t i = 0; i < blocks.size(); ++i)
        table[r * widths[g] + static_cast<int64_t>(i)] = kv_->pool().data(blocks[i]);
    }
    table_at += static_cast<size_t>(s * widths[g]) * sizeof(void*);
  }

  const Tensor inputs = backend_->stage(kStepInputsSlot, staging_);
  auto* base = static_cast<std::byte*>(inputs.raw_data());
  auto ints_at = [&](const int32_t* host) {
    return reinterpret_cast<const int32_t*>(base +
                                            (reinterpret_cast<const std::byte*>(host) - staging_.data()));
  };
  const size_t inputs_offset = static_cast<size_t>(base - inputs.storage()->data());
  auto int_tensor = [&](const int32_t* host, int64_t n) {
    const size_t offset = static_cast<size_t>(reinterpret_cast<const std::byte*>(host) - staging_.data());
    return Tensor::from_storage(inputs.storage(), {n}, DType::kI32, inputs_offset + offset);
  };
  StepView v;
  v.backend = backend_.get();
  v.tokens = t;
  v.rows = s;
  v.all_positions = p.all_positions;
  v.out_rows = p.all_positions ? t : s;
  int64_t end = 0;
  for (const KvRow& r : p.kv_rows) v.last_index.push_back((end += r.new_tokens) - 1);
  v.ids = int_tensor(ids, t);
  v.positions = int_tensor(positions, t);
  for (int e = 0; e < extras; ++e) v.extras.push_back(int_tensor(extra + e * t, t));
  v.kv.tokens = t;
  v.kv.rows = s;
  v.kv.q_pos = ints_at(positions);
  v.kv.q_row = ints_at(token_rows);
  v.kv.kv_len = ints_at(kv_len);
  v.kv.max_kv_len = p.max_kv_len;
  v.kv.block_tokens = static_cast<int>(block_tokens);
  for (int g = 0; g < groups; ++g) {
    PagedKvTables tables;
    tables.blocks = reinterpret_cast<const void* const*>(base + table_offsets[static_cast<size_t>(g)]);
    tables.stride = widths[g];
    tables.first_block = ints_at(first_block + g * s);
    v.kv_tables.push_back(tables);
  }
  v.kv_layout = &layout;
  return v;
}

StepOutputs LanguageModel::run(const Plan& p) {
  kv_->prepare(p.kv_rows);
  const StepView view = stage(p);
  if (backend_->memory_generation() != graphs_generation_) {
    backend_->drop_graphs();
    graphs_.clear();
    graphs_generation_ = backend_->memory_generation();
  }
  StepOutputs out;
  const GraphKey key{static_cast<int64_t>(p.kv_rows.size()), p.max_kv_len, p.phase};
  const auto found = p.graphed ? graphs_.find(key) : graphs_.end();
  if (found != graphs_.end()) {
    backend_->replay(found->second.graph);
    ++graph_replays_;
    out = found->second.outputs;  // where the recorded step leaves them
  } else {
    // Direct launches; a decode step of a new row count or bucket is then recorded for later replays (the
    // direct run first sizes every buffer, so the capture allocates nothing).
    out = forward_->enqueue(view);
    if (p.graphed) {
      if (backend_->memory_generation() != graphs_generation_ || graphs_.size() >= kMaxGraphs) {
        backend_->drop_graphs();
        graphs_.clear();
        graphs_generation_ = backend_->memory_generation();
      }
      backend_->begin_capture();
      try {
        out = forward_->enqueue(view);
      } catch (...) {
        backend_->abort_capture();
        throw;
      }
      graphs_[key] = {backend_->end_capture(), out};
      ++graph_captures_;
    }
  }
  KvCache::commit(p.kv_rows);
  return out;
}

std::optional<std::pair<StepRow, StepRow>> LanguageModel::split_at_quant_start(
    std::span<const StepRow> rows) const {
  if (rows.size() != 1 || rows[0].sequence == nullptr) return std::nullopt;
  const int64_t limit = kv_->step_limit(kv_->own(rows[0].sequence));
  if (static_cast<int64_t>(rows[0].tokens.size()) <= limit) return std::nullopt;
  const auto head = static_cast<size_t>(limit);
  return std::pair{StepRow{rows[0].sequence, rows[0].tokens.first(head)},
                   StepRow{rows[0].sequence, rows[0].tokens.subspan(head)}};
}

Tensor LanguageModel::forward(std::span<const StepRow> rows, bool all_positions) {
  if (const auto split = split_at_quant_start(rows)) {
    const Tensor head = forward({&split->first, 1}, all_positions);
    const Tensor tail = forward({&split->second, 1}, all_positions);
    if (!all_positions) return tail;
    Tensor both = Tensor::zeros({head.dim(0) + tail.dim(0), head.dim(1)}, DType::kF32);
    std::memcpy(both.data<float>(), head.data<float>(), head.numel() * sizeof(float));
    std::memcpy(both.data<float>() + head.numel(), tail.data<float>(), tail.numel() * sizeof(float));
    return both;
  }
  const Plan p = plan(rows, all_positions);
  const StepOutputs out = run(p);
  Tensor logits = Tensor::zeros(out.logits.shape(), DType::kF32);
  backend_->to_host(out.logits, logits.raw_data());
  return logits;
}

std::vector<int32_t> LanguageModel::forward_argmax(std::span<const StepRow> rows) {
  if (const auto split = split_at_quant_start(rows)) {
    forward_argmax({&split->first, 1});
    return forward_argmax({&split->second, 1});
  }
  const Plan p = plan(rows, false);
  const StepOutputs out = run(p);
  std::vector<int32_t> tokens(static_cast<size_t>(out.argmax.numel()));
  backend_->to_host(out.argmax, tokens.data());
  return tokens;
}

std::vector<SampledRow> LanguageModel::forward_sampled(std::span<const StepRow> rows,
                                                       std::span<const SamplingEntry> entries) {
  LMX_REQUIRE(InvalidArgument, backend_->supports_sampling(),
              "forward_sampled: the {} backend does not sample", backend_->description());
  const auto vocab = static_cast<int32_t>(description().vocab_size);
  size_t edit_count = 0;
  for (const SamplingEntry& e : entries) {
    LMX_REQUIRE(InvalidArgument, e.row >= 0 && e.row < static_cast<int64_t>(rows.size()),
                "forward_sampled: entry row {} is outside the step's {} rows", e.row, rows.size());
    LMX_REQUIRE(InvalidArgument, e.params.top_logprobs >= 0 && e.params.top_logprobs <= kSampledTopMax,
                "forward_sampled: top_logprobs {} is outside [0, {}]", e.params.top_logprobs, kSampledTopMax);
    for (const LogitEdit& edit : e.edits)
      LMX_REQUIRE(InvalidArgument, edit.id >= 0 && edit.id < vocab,
                  "forward_sampled: edit token id {} is outside the vocabulary [0, {})", edit.id, vocab);
    edit_count += e.edits.size();
  }
  const Plan p = plan(rows, false);
  const StepOutputs out = run(p);
  const auto n = static_cast<int64_t>(entries.size());
  sampled_entries_ = n;
  std::vector<SampledRow> results(entries.size());
  if (n == 0) return results;
  // Staged: the entries' settings, then every entry's edits.
  sampling_staging_.assign(entries.size() * sizeof(SamplingRowParams) + edit_count * sizeof(LogitEdit),
                           std::byte{0});
  auto* params = reinterpret_cast<SamplingRowParams*>(sampling_staging_.data());
  auto* edits = reinterpret_cast<LogitEdit*>(params + n);
  int32_t at = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    params[i] = entries[i].params;
    params[i].row = static_cast<int32_t>(entries[i].row);
    params[i].edits_begin = at;
    params[i].edits_count = static_cast<int32_t>(entries[i].edits.size());
    std::copy(entries[i].edits.begin(), entries[i].edits.end(), edits + at);
    at += params[i].edits_count;
  }
  const Tensor inputs = backend_->stage(kSamplingInputsSlot, sampling_staging_);
  Tensor processed = backend_->workspace(kSamplingProcessedSlot, {n, vocab}, DType::kF32);
  Tensor sampled =
      backend_->workspace(kSampledSlot, {static_cast<int64_t>(n * sizeof(SampledRow))}, DType::kU8);
  LMX_REQUIRE(InvalidArgument, backend_->sample_rows(out.logits, inputs, n, processed, sampled),
              "forward_sampled: the backend did not sample");
  backend_->to_host(sampled, results.data());
  return results;
}

std::vector<float> LanguageModel::sampled_logits(int64_t entry) {
  LMX_REQUIRE(InvalidArgument, entry >= 0 && entry < sampled_entries_,
              "sampled_logits: entry {} is outside the last step's {} entries", entry, sampled_entries_);
  const auto vocab = static_cast<int64_t>(description().vocab_size);
  Tensor processed = backend_->workspace(kSamplingProcessedSlot, {sampled_entries_, vocab}, DType::kF32);
  std::vector<float> row(static_cast<size_t>(vocab));
  backend_->to_host(Tensor::from_storage(processed.storage(), {vocab}, DType::kF32,
                                         static_cast<size_t>(entry * vocab) * sizeof(float)),
                    row.data());
  return row;
}

}  // namespace lmx
