// Tests of the CUDA plan choices against the tuning table (host only, no GPU): the built-in tables choose
// what the rules chose before the table existed (tests/data/tuning/default_plans.txt, printed by that code
// for a grid of shapes), and each table entry changes the choice it names.
#include "lmx/core/error.h"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/moe_expert_mma.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace lmx {
namespace {

using cuda::Choice;
using cuda::CudaTuning;

// The source tree (LMX_SOURCE_DIR in the environment wins over the configure-time path).
std::string source_path(const std::string& relative) {
  const char* env = std::getenv("LMX_SOURCE_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : LMX_SOURCE_DIR) + "/" + relative;
}

// A batch-1 problem of a 4-bit [n, k] weight whose arrays are 16-byte aligned (never dereferenced).
struct Q4Weight {
  int group = 64;
  DType dtype = DType::kBF16;
  bool pair = false;
};
cuda::linear::Problem q4_problem(int64_t n, int64_t k, const Q4Weight& v, const CudaTuning& table,
                                 int64_t m = 1) {
  cuda::DeviceQuantized w;
  w.codes = reinterpret_cast<const uint32_t*>(0x100000);
  w.scales = reinterpret_cast<const void*>(0x200000);
  w.biases = reinterpret_cast<const void*>(0x300000);
  w.scale_dtype = v.dtype;
  w.bits = 4;
  w.group_size = v.group;
  w.rows = n;
  w.cols = k;
  w.gate_up_pair = v.pair;
  cuda::linear::Problem p = cuda::linear::quantized_problem(reinterpret_cast<const float*>(0x400000), k, m, w,
                                                            reinterpret_cast<float*>(0x500000), n, table);
  cuda::linear::complete(p, table);
  return p;
}

std::string plan_text(const cuda::linear::Q4GemvPlan& plan) {
  return std::to_string(plan.stages) + "/" + std::to_string(plan.tiles) + "/" + std::to_string(plan.split);
}

// The golden file's lines as `table` chooses them (the file's grid, in its order).
std::vector<std::string> plan_lines(const CudaTuning& table) {
  const int64_t ns[] = {16,   40,   77,   300,   1000,  1536,  2048,  2560,  2816,  4096,  4224,  5376,
                        6144, 8192, 8480, 10240, 12288, 16384, 16400, 20480, 21504, 24576, 43008, 262144};
  const int64_t ks[] = {256,  512,  704,  1024, 1344, 1536,  2112,  2560,  2816,
                        4096, 4160, 5376, 6144, 8192, 10240, 12288, 21504, 65536};
  struct Variant {
    Q4Weight weight;
    const char* name;
  };
  const Variant variants[] = {{{64, DType::kBF16, false}, "g64-bf16"},
                              {{64, DType::kBF16, true}, "g64-bf16-pair"},
                              {{32, DType::kF16, false}, "g32-f16"},
                              {{128, DType::kF32, false}, "g128-f32"}};
  std::vector<std::string> lines;
  char buf[256];
  for (const Variant& v : variants)
    for (int64_t n : ns)
      for (int64_t k : ks) {
        if (k % v.weight.group != 0) continue;
        const cuda::linear::Problem p = q4_problem(n, k, v.weight, table);
        std::string line = std::string("q4 ") + v.name + " " + std::to_string(n) + " " + std::to_string(k) +
                           " segments " + std::to_string(p.segments);
        for (int pairs : {1, 8})
          for (bool geglu : {false, true})
            line += " | " + plan_text(cuda::linear::q4_gemv_plan(p, geglu, pairs, table.q4_gemv));
        lines.push_back(line);
      }
  for (int rows : {16, 32})
    for (int blocks = 0; blocks <= 40; ++blocks) {
      std::snprintf(buf, sizeof buf, "window %d %d %d", rows, blocks,
                    cuda::linear::q4_window_shift(rows, blocks, table.q4_gemv.window_lanes));
      lines.emplace_back(buf);
    }
  for (int64_t n : ns)
    for (int64_t k : ks) {
      std::snprintf(buf, sizeof buf, "expert %lld %lld %d", static_cast<long long>(n),
                    static_cast<long long>(k), cuda::moe::expert_segments(n, k, table.moe));
      lines.emplace_back(buf);
    }
  for (int64_t tokens : {1, 2, 7, 100, 2048, 8192, 100000})
    for (int top_k : {1, 2, 8})
      for (int64_t hidden : {1536, 2816})
        for (int64_t inter : {704, 2112, 8192}) {
          std::snprintf(buf, sizeof buf, "pass %lld %d %lld %lld %lld", static_cast<long long>(tokens), top_k,
                        static_cast<long long>(hidden), static_cast<long long>(inter),
                        static_cast<long long>(
                            cuda::moe_pass_tokens(tokens, top_k, hidden, inter, table.moe.pass_pairs)));
          lines.emplace_back(buf);
        }
  return lines;
}

TEST(CudaPlans, BuiltInTablesChooseWhatTheRulesChoseBefore) {
  std::ifstream in(source_path("tests/data/tuning/default_plans.txt"));
  ASSERT_TRUE(in) << "tests/data/tuning/default_plans.txt";
  std::vector<std::string> golden;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') golden.push_back(line);
  for (const std::string& name : cuda::builtin_tuning_names()) {
    const std::vector<std::string> lines = plan_lines(cuda::builtin_tuning(name));
    ASSERT_EQ(lines.size(), golden.size()) << name;
    for (size_t i = 0; i < lines.size(); ++i) ASSERT_EQ(lines[i], golden[i]) << name << ", line " << i;
  }
}

TEST(CudaPlans, Q4GemvEntriesForceTheirChoice) {
  const CudaTuning builtin = cuda::builtin_tuning("sm_90");
  const Q4Weight bf16;
  // 2560 x 10240: 160 row blocks, split by the rule (2/1/2); a listed shape takes its entry, others keep the
  // rule; the MoE's gathered GEMVs ignore shape entries.
  const cuda::linear::Problem p = q4_problem(2560, 10240, bf16, builtin);
  EXPECT_EQ(plan_text(cuda::linear::q4_gemv_plan(p, false, 1, builtin.q4_gemv)), "2/1/2");
  CudaTuning t = builtin;
  t.q4_gemv.shapes = {{2560, 10240, 4, 2, 1}, {77, 77, 2, 1, 1}};
  EXPECT_EQ(plan_text(cuda::linear::q4_gemv_plan(p, false, 1, t.q4_gemv)), "4/2/1");
  EXPECT_EQ(plan_text(cuda::linear::q4_gemv_plan(p, false, 8, t.q4_gemv)),
            plan_text(cuda::linear::q4_gemv_plan(p, false, 8, builtin.q4_gemv)));
  // Zeros keep the rules' choice: two tiles make 80 row blocks, one wave without a split, so the deep ring.
  t.q4_gemv.shapes = {{2560, 10240, 0, 2, 0}};
  EXPECT_EQ(plan_text(cuda::linear::q4_gemv_plan(p, false, 1, t.q4_gemv)), "4/2/1");
  // Forced for every shape, over shape entries.
  t.q4_gemv.stages = 4;
  t.q4_gemv.tiles = 1;
  t.q4_gemv.split = 1;
  EXPECT_EQ(plan_text(cuda::linear::q4_gemv_plan(p, false, 1, t.q4_gemv)), "4/1/1");
  // One tile per warp leaves the GeGLU output no pairing.
  EXPECT_EQ(cuda::linear::q4_gemv_plan(p, true, 1, t.q4_gemv).stages, 0);
  // The wide-tile rule: 16384 x 5376 takes two tiles by it, one without it.
  const cuda::linear::Problem wide = q4_problem(16384, 5376, bf16, builtin);
  EXPECT_EQ(cuda::linear::q4_gemv_plan(wide, false, 1, builtin.q4_gemv).tiles, 2);
  t = builtin;
  t.q4_gemv.wide_tiles.enabled = false;
  EXPECT_EQ(cuda::linear::q4_gemv_plan(wide, false, 1, t.q4_gemv).tiles, 1);
  t = builtin;
  t.q4_gemv.tall_rows = 8192;
  EXPECT_EQ(cuda::linear::q4_gemv_plan(q4_problem(10240, 2560, bf16, builtin), false, 1, t.q4_gemv).tiles, 2);
  // The split window and the deep ring.
  t = builtin;
  t.q4_gemv.split_blocks_from = 200;
  EXPECT_EQ(plan_text(cuda::linear::q4_gemv_plan(p, false, 1, t.q4_gemv)), "2/1/1");
  const cuda::linear::Problem deep = q4_problem(1536, 12288, bf16, builtin);
  EXPECT_EQ(cuda::linear::q4_gemv_plan(deep, false, 1, builtin.q4_gemv).stages, 4);
  t = builtin;
  t.q4_gemv.deep_ring_min_chunks = 7;
  EXPECT_EQ(cuda::linear::q4_gemv_plan(deep, false, 1, t.q4_gemv).stages, 2);
  // Window lanes: the rule's two for 16 rows, else forced (at least 32 / rows).
  EXPECT_EQ(cuda::linear::q4_window_shift(16, 5, 0), 1);
  EXPECT_EQ(cuda::linear::q4_window_shift(16, 5, 32), 5);
  EXPECT_EQ(cuda::linear::q4_window_shift(16, 5, 1), 1);
  t = builtin;
  t.q4_gemv.window_lanes = 8;
  EXPECT_EQ(cuda::linear::q4_gemv_plan(p, false, 1, t.q4_gemv).window_shift, 3);
}

TEST(CudaPlans, SegmentEntriesSetSegments) {
  const CudaTuning builtin = cuda::builtin_tuning("sm_90");
  const Q4Weight bf16;
  EXPECT_EQ(q4_problem(2560, 10240, bf16, builtin).segments, 16);
  CudaTuning t = builtin;
  t.linear.q4_segments = {{2560, 10240, 5}};
  EXPECT_EQ(q4_problem(2560, 10240, bf16, t).segments, 5);
  EXPECT_EQ(q4_problem(2560, 4096, bf16, t).segments, q4_problem(2560, 4096, bf16, builtin).segments);
  t.linear.q4_segments = {{2560, 512, 8}};  // more than its 4 chunks
  try {
    (void)q4_problem(2560, 512, bf16, t);
    ADD_FAILURE() << "accepted 8 segments of 4 chunks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda.linear.q4_segments"), std::string::npos) << e.what();
  }
  t = builtin;
  t.linear.q4_target_warps = 1024;
  EXPECT_EQ(q4_problem(2560, 10240, bf16, t).segments, 6);  // 1024 warps over 160 tiles
  t = builtin;
  t.linear.q4_one_segment_tiles = 100;
  EXPECT_EQ(q4_problem(2560, 10240, bf16, t).segments, 1);
  // Small scales: kept by the table's rule, dropped where it is off.
  cuda::DeviceQuantized w;
  w.small_scales = true;
  w.rows = w.cols = 64;
  EXPECT_TRUE(cuda::linear::quantized_problem(nullptr, 64, 1, w, nullptr, 64, builtin).small_scales);
  t = builtin;
  t.linear.small_scales = false;
  EXPECT_FALSE(cuda::linear::quantized_problem(nullptr, 64, 1, w, nullptr, 64, t).small_scales);
  // Expert matrices.
  EXPECT_EQ(cuda::moe::expert_segments(2816, 704, builtin.moe), 2);
  t = builtin;
  t.moe.segments = {{2816, 704, 5}};
  EXPECT_EQ(cuda::moe::expert_segments(2816, 704, t.moe), 5);
  t.moe.target_warps = 64;
  EXPECT_EQ(cuda::moe::expert_segments(2816, 1408, t.moe), 1);
  EXPECT_EQ(cuda::moe_pass_tokens(2048, 8, 2816, 704, 0), 2048);
  EXPECT_EQ(cuda::moe_pass_tokens(2048, 8, 2816, 704, 4096), 512);
}

TEST(CudaPlans, PrefillRulesFollowTheirEntries) {
  const CudaTuning builtin = cuda::builtin_tuning("sm_90");
  const Q4Weight bf16;
  // Rows-first: for grouped launches and where the prepared x outweighs the weight, unless forced.
  const cuda::linear::Problem small_x = q4_problem(2560, 10240, bf16, builtin, 128);
  const cuda::linear::Problem big_x = q4_problem(2560, 10240, bf16, builtin, 2048);
  EXPECT_FALSE(cuda::linear::prefill_rows_first(small_x, false, 1, Choice::kAuto));
  EXPECT_TRUE(cuda::linear::prefill_rows_first(small_x, true, 1, Choice::kAuto));
  EXPECT_TRUE(cuda::linear::prefill_rows_first(big_x, false, 16, Choice::kAuto));
  EXPECT_TRUE(cuda::linear::prefill_rows_first(small_x, false, 1, Choice::kAlways));
  EXPECT_FALSE(cuda::linear::prefill_rows_first(big_x, true, 16, Choice::kNever));
  EXPECT_FALSE(cuda::linear::prefill_rows_first(big_x, false, 70000, Choice::kAlways));
  // Short tiles: one 128-row tile of a 2048-row weight, 4 x 16 blocks within one wave of 132.
  const cuda::linear::Problem one_tile = q4_problem(2048, 1024, bf16, builtin, 128);
  EXPECT_EQ(cuda::linear::prefill_short_tiles(one_tile, 1, 132, builtin.prefill), 4);
  EXPECT_EQ(cuda::linear::prefill_short_tiles(one_tile, 1, 32, builtin.prefill), 0);
  CudaTuning t = builtin;
  t.prefill.short_tiles = false;
  EXPECT_EQ(cuda::linear::prefill_short_tiles(one_tile, 1, 132, t.prefill), 0);
  // Narrow tiles: N = 1536 at 2048 rows takes 192 blocks of 128 rows (2 waves of 132) or 22 x 12 = 264 of 96
  // (2 waves, at 0.8 the cost).
  const cuda::linear::Problem narrow = q4_problem(1536, 6144, bf16, builtin, 2048);
  EXPECT_EQ(cuda::linear::prefill_narrow_tiles(narrow, 16, 132, builtin.prefill), 22);
  t = builtin;
  t.prefill.narrow_tile_cost = 1.0;
  EXPECT_EQ(cuda::linear::prefill_narrow_tiles(narrow, 16, 132, t.prefill), 0);
  t = builtin;
  t.prefill.narrow_tiles = Choice::kNever;
  EXPECT_EQ(cuda::linear::prefill_narrow_tiles(narrow, 16, 132, t.prefill), 0);
  const cuda::linear::Problem under_a_wave = q4_problem(1536, 6144, bf16, builtin, 256);
  EXPECT_EQ(cuda::linear::prefill_narrow_tiles(under_a_wave, 2, 132, builtin.prefill), 0);
  t.prefill.narrow_tiles = Choice::kAlways;
  EXPECT_EQ(cuda::linear::prefill_narrow_tiles(under_a_wave, 2, 132, t.prefill), 3);
}

}  // namespace
}  // namespace lmx
