// quantized_linear, quantized_linear_gelu and quantized_linear_geglu (linear.h): argument checks and the
// choice of weight format; the kernels are the tensor-core projections of linear_tiles.cuh (decode:
// quantized_gemv.cu, prefill: quantized_gemm.cu) and the batch-1 4-bit GEMV (linear_decode_q4.cuh).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

namespace lmx::cuda {

namespace {

// Reads the fields of one entry of a knob's "NxK=..." list in turn.
class EntryReader {
 public:
  explicit EntryReader(std::string_view entry) : p_(entry.data()), end_(entry.data() + entry.size()) {}
  // A decimal number followed by `stop` ('\0': the entry's end), stepping past both; false (and nothing read)
  // when the text does not match.
  bool number(int64_t& value, char stop) {
    int64_t v = 0;
    const auto [next, ec] = std::from_chars(p_, end_, v);
    const bool ok =
        ec == std::errc() && next != p_ && (stop == '\0' ? next == end_ : next < end_ && *next == stop);
    if (!ok) return false;
    value = v;
    p_ = stop == '\0' ? next : next + 1;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

// Calls fn(entry) for each comma-separated entry of text (a trailing comma allowed, an empty entry elsewhere
// passed on as such).
template <class Fn>
void for_each_entry(std::string_view text, Fn fn) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    fn(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
}

}  // namespace

std::vector<SegmentOverride> parse_segment_overrides(std::string_view text, std::string_view knob) {
  std::vector<SegmentOverride> out;
  for_each_entry(text, [&](std::string_view entry) {
    SegmentOverride o;
    EntryReader r(entry);
    int64_t segments = 0;
    const bool ok = r.number(o.n, 'x') && r.number(o.k, '=') && r.number(segments, '\0');
    LMX_REQUIRE(InvalidArgument,
                ok && o.n > 0 && o.k > 0 && segments >= 1 && segments <= linear::kMaxSegments,
                "{}: '{}' is not NxK=S with S in [1, {}]", knob, entry, linear::kMaxSegments);
    o.segments = static_cast<int>(segments);
    out.push_back(o);
  });
  return out;
}

std::vector<Q4PlanOverride> parse_q4_plan_overrides(std::string_view text) {
  std::vector<Q4PlanOverride> out;
  for_each_entry(text, [&](std::string_view entry) {
    Q4PlanOverride o;
    EntryReader r(entry);
    int64_t fields[3] = {0, 0, 0};  // stages, tiles, split
    bool ok = r.number(o.n, 'x') && r.number(o.k, '=') && o.n > 0 && o.k > 0;
    bool last = false;  // a field ended the entry
    for (int i = 0; ok && !last && i < 3; ++i) {
      last = r.number(fields[i], '\0');
      ok = last || r.number(fields[i], '/');
    }
    ok = ok && last;
    const auto one_of = [](int64_t v, int64_t a, int64_t b) { return v == 0 || v == a || v == b; };
    LMX_REQUIRE(
        InvalidArgument, ok && one_of(fields[0], 2, 4) && one_of(fields[1], 1, 2) && one_of(fields[2], 1, 2),
        "LMX_Q4_SHAPE_PLAN: '{}' is not NxK=S[/T[/P]] with S 2 or 4, T and P 1 or 2 (0: the rule's)", entry);
    o.stages = static_cast<int>(fields[0]);
    o.tiles = static_cast<int>(fields[1]);
    o.split = static_cast<int>(fields[2]);
    out.push_back(o);
  });
  return out;
}

std::vector<Q4PlanOverride> q4_plan_overrides_from_env() {
  const char* v = std::getenv("LMX_Q4_SHAPE_PLAN");
  return parse_q4_plan_overrides(v != nullptr ? v : "");
}

std::vector<SegmentOverride> segment_overrides_from_env(const char* knob) {
  const char* v = std::getenv(knob);
  return parse_segment_overrides(v != nullptr ? v : "", knob);
}

int segment_override(const std::vector<SegmentOverride>& overrides, std::string_view knob, int64_t n,
                     int64_t k, int64_t most) {
  for (const SegmentOverride& o : overrides) {
    if (o.n != n || o.k != k) continue;
    LMX_REQUIRE(InvalidArgument, o.segments <= most, "{}: {}x{} allows at most {} segments, not {}", knob, n,
                k, most, o.segments);
    return o.segments;
  }
  return 0;
}

namespace linear {

namespace {
// The segments of a 4-bit [n, k] weight: LMX_Q4_SEGMENTS for its shape, else linear_segments with the knobs
// LMX_Q4_TARGET_WARPS and LMX_Q4_ONE_SEGMENT_TILES (all for A/B runs), no shorter than kPairMinChunks chunks
// for a gate_up pair.
int q4_segments(int64_t n, int64_t k, int chunks, bool gate_up_pair) {
  static const int64_t target_warps = env_integer("LMX_Q4_TARGET_WARPS", 0, 0, 1 << 20);
  static const int64_t one_segment_tiles = env_integer("LMX_Q4_ONE_SEGMENT_TILES", 0, 0, 1 << 20);
  static const std::vector<SegmentOverride> overrides = segment_overrides_from_env("LMX_Q4_SEGMENTS");
  if (const int forced = segment_override(overrides, "LMX_Q4_SEGMENTS", n, k, chunks); forced > 0)
    return forced;
  const int s = linear_segments(n, k, 4, target_warps, one_segment_tiles);
  return gate_up_pair ? std::max(1, std::min(s, chunks / kPairMinChunks)) : s;
}
}  // namespace

void complete(Problem& p) {
  LMX_REQUIRE(InvalidArgument, p.n <= int64_t{65535} * 16, "linear: {} output features exceed the grid limit",
              p.n);
  p.chunks = static_cast<int>((p.k + kChunk - 1) / kChunk);
  p.segments =
      p.bits == 4 ? q4_segments(p.n, p.k, p.chunks, p.gate_up_pair) : linear_segments(p.n, p.k, p.bits);
  p.x_vec4 = detail::aligned16(p.x) && (p.x_stride % 4 == 0 || p.m == 1);
}

void run(Problem p, CudaContext& ctx) {
  complete(p);
  if (p.m > kDecodeMaxRows)
    run_prefill(p, ctx);
  else
    launch_decode(p, ctx.stream());
}

void run_prefill(const Problem& p, CudaContext& ctx, const XRows& rows) {
  auto* xp = static_cast<uint32_t*>(ctx.scratch(Scratch::kLinearInput, prefill_scratch_bytes(p)));
  launch_prefill(p, xp, ctx.stream(), rows);
}

Problem quantized_problem(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                          int64_t out_stride) {
  Problem p;
  const bool aligned = detail::aligned16(w.codes);
  p.format = aligned && w.bits == 4   ? WeightFormat::kQ4
             : aligned && w.bits == 8 ? WeightFormat::kQ8
                                      : WeightFormat::kPacked;
  p.bits = w.bits;
  p.group_shift = log2_group_size(w.group_size);
  p.scale_dtype = w.scale_dtype;
  p.weight = w.codes;
  p.scales = w.scales;
  p.biases = w.biases;
  // LMX_Q4_SMALL_SCALES=0 ignores DeviceQuantized::small_scales (A/B runs; the bits are the same).
  static const bool small_scales_off = [] {
    const char* v = std::getenv("LMX_Q4_SMALL_SCALES");
    return v != nullptr && std::string_view(v) == "0";
  }();
  p.small_scales = w.small_scales && !small_scales_off;
  p.gate_up_pair = w.gate_up_pair;
  p.n = w.rows;
  p.k = w.cols;
  p.row_words = w.cols * w.bits / 32;
  p.groups_per_row = w.cols / w.group_size;
  p.x = x;
  p.x_stride = x_stride;
  p.m = m;
  p.out = out;
  p.out_stride = out_stride;
  return p;
}

}  // namespace linear

namespace {

// The checks every quantized projection makes; `op` names the caller in the message.
void check_quantized(const char* op, const DeviceQuantized& w, int64_t x_stride, int64_t m,
                     int64_t out_stride) {
  const bool bits_ok = w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8;
  const bool group_ok = w.group_size == 32 || w.group_size == 64 || w.group_size == 128;
  LMX_REQUIRE(InvalidArgument, bits_ok && group_ok, "{}: unsupported bits {} / group size {}", op, w.bits,
              w.group_size);
  LMX_REQUIRE(InvalidArgument, w.batch == 1, "{}: weight batch must be 1, got {}", op, w.batch);
  LMX_REQUIRE(InvalidArgument, w.rows >= 0 && w.cols > 0 && w.cols % w.group_size == 0,
              "{}: weight [{}, {}] columns must be a positive multiple of the group size {}", op, w.rows,
              w.cols, w.group_size);
  LMX_REQUIRE(InvalidArgument,
              w.scale_dtype == DType::kBF16 || w.scale_dtype == DType::kF16 || w.scale_dtype == DType::kF32,
              "{}: scale dtype must be bf16, f16 or f32", op);
  LMX_REQUIRE(InvalidArgument, m >= 0 && x_stride >= w.cols && out_stride >= w.rows,
              "{}: M {} with x stride {} (K {}) and out stride {} (N {})", op, m, x_stride, w.cols,
              out_stride, w.rows);
}

}  // namespace

void quantized_linear(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                      int64_t out_stride, CudaContext& ctx) {
  check_quantized("quantized_linear", w, x_stride, m, out_stride);
  if (m == 0 || w.rows == 0) return;
  linear::run(linear::quantized_problem(x, x_stride, m, w, out, out_stride), ctx);
}

void quantized_linear_gelu(float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t m,
                           const DeviceQuantized& w, float* out, int64_t out_stride, CudaContext& ctx) {
  check_quantized("quantized_linear_gelu", w, gate_stride, m, out_stride);
  LMX_REQUIRE(InvalidArgument, up_stride >= w.cols, "quantized_linear_gelu: up stride {} below K {}",
              up_stride, w.cols);
  if (m == 0 || w.rows == 0) return;
  linear::Problem p = linear::quantized_problem(gate, gate_stride, m, w, out, out_stride);
  linear::complete(p);
  if (linear::q4_gemv_applies(p) && detail::aligned16(up)) {  // (then M == 1: the decode path)
    linear::launch_decode(p, ctx.stream(), up);
    return;
  }
  if (p.m > linear::kDecodeMaxRows) {  // the prefill path: its x preparation forms the product
    linear::XRows rows;
    rows.up = up;
    rows.up_stride = up_stride;
    linear::run_prefill(p, ctx, rows);
    return;
  }
  // Two kernels: the product into gate, then the projection.
  gelu_tanh_mul(gate, gate_stride, up, up_stride, gate, gate_stride, m, w.cols, ctx.stream());
  linear::run(p, ctx);
}

bool quantized_linear_geglu(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                            CudaContext& ctx) {
  check_quantized("quantized_linear_geglu", w, x_stride, m, w.rows);
  if (m != 1 || w.rows % 2 != 0 || w.rows / 2 < kGegluMinRows) return false;
  linear::Problem p = linear::quantized_problem(x, x_stride, m, w, out, w.rows);
  linear::complete(p);
  return linear::launch_decode_geglu(p, ctx.stream());
}

}  // namespace lmx::cuda
