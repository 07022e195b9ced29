// The CUDA tuning table: its schema, the built-in tables per architecture and the tables in use per device
// (tuning.h).
#include "lmx/ops/cuda/tuning.h"

#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/tuning.h"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

namespace lmx::cuda {

namespace {

constexpr int64_t kInt32Max = 0x7fffffff;
constexpr int64_t kInt64Max = INT64_MAX;

// The names of Choice's values in the file.
constexpr std::initializer_list<std::pair<Choice, const char*>> kChoices = {
    {Choice::kAuto, "auto"}, {Choice::kNever, "never"}, {Choice::kAlways, "always"}};

// The shape key of a list entry: required in every entry.
template <class Visitor>
void shape_key(Visitor& v, int64_t& n, int64_t& k) {
  v.required(true);
  v.field("n", n, 1, kInt64Max);
  v.field("k", k, 1, kInt64Max);
  v.required(false);
}

// Every field of the table, in print order (ops/tuning.h describes the visitors; tuning.h the fields).
template <class Visitor>
void schema(Visitor& v, CudaTuning& t) {
  v.group("launch", [&] { v.field("pdl", t.launch.pdl); });
  v.group("linear", [&] {
    CudaTuning::Linear& l = t.linear;
    v.field("small_scales", l.small_scales);
    v.field("decode_max_rows", l.decode_max_rows, 1, kTuningMaxDecodeRows);
    v.field("q4_target_warps", l.q4_target_warps, 1, 1 << 20);
    v.field("q4_one_segment_tiles", l.q4_one_segment_tiles, 0, 1 << 20);
    v.list("q4_segments", l.q4_segments, [&](ShapeSegments& e) {
      shape_key(v, e.n, e.k);
      v.required(true);
      v.field("segments", e.segments, 1, kTuningMaxSegments);
      v.required(false);
    });
  });
  v.group("q4_gemv", [&] {
    CudaTuning::Q4Gemv& q = t.q4_gemv;
    v.one_of("stages", q.stages, {0, 2, 4});
    v.one_of("tiles", q.tiles, {0, 1, 2});
    v.one_of("split", q.split, {0, 1, 2});
    v.one_of("window_lanes", q.window_lanes, {0, 1, 2, 4, 8, 16, 32});
    v.list("shapes", q.shapes, [&](ShapePlan& e) {
      shape_key(v, e.n, e.k);
      v.one_of("stages", e.stages, {0, 2, 4});
      v.one_of("tiles", e.tiles, {0, 1, 2});
      v.one_of("split", e.split, {0, 1, 2});
    });
    v.field("tall_rows", q.tall_rows, 0, kInt64Max);
    v.group("wide_tiles", [&] {
      v.field("enabled", q.wide_tiles.enabled);
      v.field("min_rows", q.wide_tiles.min_rows, 0, kInt64Max);
      v.field("min_cols", q.wide_tiles.min_cols, 0, kInt64Max);
      v.field("max_cols", q.wide_tiles.max_cols, 0, kInt64Max);
    });
    v.field("split_blocks_from", q.split_blocks_from, 0, kInt64Max);
    v.field("split_blocks_below", q.split_blocks_below, 0, kInt64Max);
    v.field("split_min_segments", q.split_min_segments, 1, kTuningMaxSegments);
    v.field("deep_ring_blocks_below", q.deep_ring_blocks_below, 0, kInt64Max);
    v.field("deep_ring_min_chunks", q.deep_ring_min_chunks, 1, kInt32Max);
    v.field("geglu_min_rows", q.geglu_min_rows, 1, kInt64Max);
  });
  v.group("prefill", [&] {
    CudaTuning::Prefill& p = t.prefill;
    v.field("wgmma", p.wgmma);
    v.choice("rows_first", p.rows_first, kChoices);
    v.field("small_chunk_kernel", p.small_chunk_kernel);
    v.field("short_tiles", p.short_tiles);
    v.choice("narrow_tiles", p.narrow_tiles, kChoices);
    v.field("narrow_tile_cost", p.narrow_tile_cost, 0.0, 16.0);
    v.field("wide_chunks", p.wide_chunks);
  });
  v.group("attention", [&] {
    CudaTuning::Attention& a = t.attention;
    v.field("prefill_wgmma", a.prefill_wgmma);
    v.field("cluster_fold_slots", a.cluster_fold_slots, 0, 16);
    v.choice("fused_inputs", a.fused_inputs, kChoices);
    v.field("fused_inputs_max_cluster_blocks", a.fused_inputs_max_cluster_blocks, 0, 1 << 20);
    v.field("inputs_heads_per_warp", a.inputs_heads_per_warp, 0, 1 << 16);
  });
  v.group("moe", [&] {
    CudaTuning::Moe& m = t.moe;
    v.field("routing_stream", m.routing_stream);
    v.field("target_warps", m.target_warps, 1, 65536);
    v.list("segments", m.segments, [&](ShapeSegments& e) {
      shape_key(v, e.n, e.k);
      v.required(true);
      v.field("segments", e.segments, 1, kTuningMaxExpertSegments);
      v.required(false);
    });
    v.field("pass_pairs", m.pass_pairs, 0, int64_t{1} << 24);
    v.field("group_blocks", m.group_blocks, 0, 8);
    v.field("prefill_scatter", m.prefill_scatter);
    v.field("combine_capped", m.combine_capped);
  });
  v.group("per_layer_input", [&] {
    CudaTuning::PerLayerInput& p = t.per_layer_input;
    v.field("fused", p.fused);
    v.one_of("cluster_blocks", p.cluster_blocks, {0, 8, 16});
    v.field("max_warps", p.max_warps, 1, 16);
  });
}

constexpr const char* kSm90 = "sm_90";
constexpr const char* kGeneric = "generic";

}  // namespace

std::vector<std::string> builtin_tuning_names() {
  return {kSm90, kGeneric};
}

CudaTuning builtin_tuning(const std::string& name) {
  LMX_REQUIRE(InvalidArgument, name == kSm90 || name == kGeneric,
              "cuda tuning: no built-in table '{}' (sm_90, generic)", name);
  CudaTuning t;  // the sm_90 table: the defaults of tuning.h
  if (name == kGeneric) {
    // No sm_90a code runs elsewhere; the rules stay those measured on the H200.
    t.prefill.wgmma = false;
    t.attention.prefill_wgmma = false;
  }
  return t;
}

const char* builtin_tuning_name(int major, int minor) {
  return major == 9 && minor == 0 ? kSm90 : kGeneric;
}

const char* device_tuning_name(int device) {
  int major = 0, minor = 0;
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return builtin_tuning_name(major, minor);
}

CudaTuning apply_tuning(CudaTuning table, const ops::TuningFile& file) {
  ops::TuningReader reader(file.section("cuda"), file.path, "cuda");
  schema(reader, table);
  reader.finish();
  return table;
}

const CudaTuning& tuning_for_device(int device) {
  constexpr int kCached = 64;  // device ordinals with a lock-free lookup
  static std::array<std::atomic<const CudaTuning*>, kCached> cached{};
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<const CudaTuning>> tables;  // never freed: references stay valid
  const bool cacheable = device >= 0 && device < kCached;
  if (cacheable)
    if (const CudaTuning* t = cached[device].load(std::memory_order_acquire)) return *t;
  std::lock_guard lock(mutex);
  auto it = tables.find(device);
  if (it == tables.end()) {
    CudaTuning table = apply_tuning(builtin_tuning(device_tuning_name(device)), ops::tuning_file());
    it = tables.emplace(device, std::make_unique<const CudaTuning>(std::move(table))).first;
  }
  if (cacheable) cached[device].store(it->second.get(), std::memory_order_release);
  return *it->second;
}

namespace {
// The table every visible device uses when they all have the same built-in table (the override file applies
// to all alike), so that tuning() needs no device query; null when they differ or none is visible.
const CudaTuning* uniform_table() {
  const int count = device_count();
  if (count == 0) return nullptr;
  for (int d = 1; d < count; ++d)
    if (std::string(device_tuning_name(d)) != device_tuning_name(0)) return nullptr;
  return &tuning_for_device(0);
}
}  // namespace

const CudaTuning& tuning() {
  static const CudaTuning* const uniform = uniform_table();
  if (uniform != nullptr) return *uniform;
  int device = 0;
  LMX_CUDA_CHECK(cudaGetDevice(&device));
  return tuning_for_device(device);
}

nlohmann::ordered_json tuning_json(const CudaTuning& table) {
  ops::TuningWriter writer;
  CudaTuning copy = table;
  schema(writer, copy);
  return writer.json();
}

int shape_segments(const std::vector<ShapeSegments>& entries, const char* key, int64_t n, int64_t k,
                   int64_t most) {
  for (const ShapeSegments& e : entries) {
    if (e.n != n || e.k != k) continue;
    LMX_REQUIRE(InvalidArgument, e.segments <= most,
                "tuning ({}): {}: {}x{} allows at most {} segments, not {}", ops::tuning_file().source(), key,
                n, k, most, e.segments);
    return e.segments;
  }
  return 0;
}

}  // namespace lmx::cuda
