// Tests of the CUDA tuning table (cuda/tuning.h) without a GPU: the built-in tables, the table's JSON as an
// override file, overrides of every kind of entry, and the strict checks of the "cuda" section (every error
// names the file and the key path).
#include "lmx/ops/cuda/tuning.h"
#include "lmx/ops/tuning.h"

#include <gtest/gtest.h>

#include <string>

namespace lmx {
namespace {

using cuda::Choice;
using cuda::CudaTuning;

CudaTuning apply(const std::string& cuda_section, const std::string& base = "sm_90") {
  return cuda::apply_tuning(cuda::builtin_tuning(base),
                            ops::parse_tuning_file("{\"cuda\": " + cuda_section + "}", "t.json"));
}

void expect_invalid(const std::string& cuda_section, const std::string& message) {
  try {
    (void)apply(cuda_section);
    ADD_FAILURE() << "accepted " << cuda_section;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tuning file t.json: " + message), std::string::npos) << e.what();
  }
}

TEST(CudaTuning, BuiltInTables) {
  EXPECT_EQ(cuda::builtin_tuning_names(), (std::vector<std::string>{"sm_90", "generic"}));
  EXPECT_STREQ(cuda::builtin_tuning_name(9, 0), "sm_90");
  EXPECT_STREQ(cuda::builtin_tuning_name(8, 0), "generic");
  EXPECT_STREQ(cuda::builtin_tuning_name(10, 0), "generic");
  EXPECT_THROW((void)cuda::builtin_tuning("sm_80"), InvalidArgument);
  const CudaTuning sm90 = cuda::builtin_tuning("sm_90");
  EXPECT_TRUE(sm90.launch.pdl);
  EXPECT_TRUE(sm90.prefill.wgmma);
  EXPECT_TRUE(sm90.attention.prefill_wgmma);
  EXPECT_EQ(sm90.q4_gemv.stages, 0);
  EXPECT_TRUE(sm90.q4_gemv.shapes.empty());
  EXPECT_EQ(sm90.attention.fused_inputs, Choice::kAuto);
  EXPECT_EQ(sm90.attention.cluster_fold_slots, 16);
  EXPECT_EQ(sm90.moe.target_warps, 512);
  // The generic table differs only where sm_90a kernels run.
  EXPECT_EQ(
      ops::tuning_differences(cuda::tuning_json(cuda::builtin_tuning("generic")), cuda::tuning_json(sm90)),
      (std::vector<std::string>{"prefill.wgmma", "attention.prefill_wgmma"}));
}

TEST(CudaTuning, JsonIsAnOverrideSection) {
  const ops::TuningJson json = cuda::tuning_json(cuda::builtin_tuning("sm_90"));
  for (const char* group : {"launch", "linear", "q4_gemv", "prefill", "attention", "moe", "per_layer_input"})
    EXPECT_TRUE(json.contains(group)) << group;
  EXPECT_EQ(json["q4_gemv"]["wide_tiles"]["max_cols"], 8192);
  EXPECT_EQ(json["prefill"]["narrow_tiles"], "auto");
  EXPECT_EQ(json["prefill"]["narrow_tile_cost"], 0.8);
  EXPECT_EQ(json["linear"]["q4_segments"], ops::TuningJson::array());
  // Every entry changed, written, read back: the same table.
  CudaTuning t = cuda::builtin_tuning("sm_90");
  t.launch.pdl = false;
  t.linear.q4_segments = {{2560, 10240, 5}};
  t.q4_gemv.shapes = {{1536, 12288, 4, 2, 1}};
  t.q4_gemv.wide_tiles.max_cols = 4096;
  t.prefill.rows_first = Choice::kAlways;
  t.attention.fused_inputs = Choice::kNever;
  t.moe.segments = {{256, 2048, 8}};
  t.per_layer_input.cluster_blocks = 8;
  const ops::TuningJson changed = cuda::tuning_json(t);
  EXPECT_EQ(cuda::tuning_json(apply(changed.dump())), changed);
  EXPECT_EQ(
      ops::tuning_differences(changed, json),
      (std::vector<std::string>{"launch.pdl", "linear.q4_segments", "q4_gemv.shapes",
                                "q4_gemv.wide_tiles.max_cols", "prefill.rows_first", "attention.fused_inputs",
                                "moe.segments", "per_layer_input.cluster_blocks"}));
}

TEST(CudaTuning, OverridesChangeOnlyTheirEntries) {
  const CudaTuning t = apply(R"({"q4_gemv": {"stages": 4, "shapes": [{"n": 2560, "k": 10240, "tiles": 2}]},
                                 "prefill": {"wgmma": false, "narrow_tiles": "always"},
                                 "moe": {"segments": [{"n": 256, "k": 2048, "segments": 8}], "pass_pairs": 4096}})",
                             "generic");
  EXPECT_EQ(t.q4_gemv.stages, 4);
  ASSERT_EQ(t.q4_gemv.shapes.size(), 1u);
  EXPECT_EQ(t.q4_gemv.shapes[0].n, 2560);
  EXPECT_EQ(t.q4_gemv.shapes[0].tiles, 2);
  EXPECT_EQ(t.q4_gemv.shapes[0].stages, 0);
  EXPECT_FALSE(t.prefill.wgmma);
  EXPECT_EQ(t.prefill.narrow_tiles, Choice::kAlways);
  ASSERT_EQ(t.moe.segments.size(), 1u);
  EXPECT_EQ(t.moe.segments[0].segments, 8);
  EXPECT_EQ(t.moe.pass_pairs, 4096);
  // The rest is the base table's.
  EXPECT_EQ(ops::tuning_differences(cuda::tuning_json(t), cuda::tuning_json(cuda::builtin_tuning("generic"))),
            (std::vector<std::string>{"q4_gemv.stages", "q4_gemv.shapes", "prefill.narrow_tiles",
                                      "moe.segments", "moe.pass_pairs"}));
  // No section: the built-in table.
  EXPECT_EQ(cuda::tuning_json(cuda::apply_tuning(cuda::builtin_tuning("sm_90"), ops::TuningFile{})),
            cuda::tuning_json(cuda::builtin_tuning("sm_90")));
}

TEST(CudaTuning, BadSectionsAreRejectedNamingTheKey) {
  expect_invalid(R"({"q4gemv": {}})", "cuda.q4gemv: unknown key");
  expect_invalid(R"({"q4_gemv": {"stage": 2}})", "cuda.q4_gemv.stage: unknown key");
  expect_invalid(R"({"q4_gemv": {"stages": 3}})", "cuda.q4_gemv.stages: 3 is not one of 0, 2, 4");
  expect_invalid(R"({"q4_gemv": {"window_lanes": 3}})", "cuda.q4_gemv.window_lanes: 3 is not one of");
  expect_invalid(R"({"q4_gemv": {"tiles": "2"}})", "cuda.q4_gemv.tiles: expected an integer");
  expect_invalid(R"({"q4_gemv": {"wide_tiles": {"enabled": 1}}})",
                 "cuda.q4_gemv.wide_tiles.enabled: expected true");
  expect_invalid(R"({"q4_gemv": {"shapes": [{"n": 1, "k": 2, "split": 3}]}})",
                 "cuda.q4_gemv.shapes[0].split: 3 is not one of 0, 1, 2");
  expect_invalid(R"({"q4_gemv": {"shapes": [{"k": 2}]}})", "cuda.q4_gemv.shapes[0].n: missing");
  expect_invalid(R"({"linear": {"q4_segments": [{"n": 1, "k": 2}]}})",
                 "cuda.linear.q4_segments[0].segments: missing");
  expect_invalid(R"({"linear": {"q4_segments": [{"n": 1, "k": 2, "segments": 17}]}})",
                 "cuda.linear.q4_segments[0].segments: 17 is outside [1, 16]");
  expect_invalid(R"({"linear": {"q4_segments": [{"n": 0, "k": 2, "segments": 1}]}})",
                 "cuda.linear.q4_segments[0].n: 0 is outside");
  expect_invalid(R"({"moe": {"segments": [{"n": 1, "k": 2, "segments": 9}]}})",
                 "cuda.moe.segments[0].segments: 9 is outside [1, 8]");
  expect_invalid(R"({"moe": {"group_blocks": 9}})", "cuda.moe.group_blocks: 9 is outside [0, 8]");
  expect_invalid(R"({"attention": {"cluster_fold_slots": 17}})",
                 "cuda.attention.cluster_fold_slots: 17 is outside");
  expect_invalid(R"({"attention": {"fused_inputs": "sometimes"}})",
                 "cuda.attention.fused_inputs: \"sometimes\" is not one of auto, never, always");
  expect_invalid(R"({"prefill": {"narrow_tile_cost": -1}})", "cuda.prefill.narrow_tile_cost: -1 is outside");
  expect_invalid(R"({"per_layer_input": {"cluster_blocks": 4}})",
                 "cuda.per_layer_input.cluster_blocks: 4 is not one of");
  expect_invalid(R"({"per_layer_input": {"max_warps": 0}})",
                 "cuda.per_layer_input.max_warps: 0 is outside [1, 16]");
  expect_invalid(R"({"launch": []})", "cuda.launch: expected an object");
}

TEST(CudaTuning, ShapeSegmentsLookUpOrReject) {
  const std::vector<cuda::ShapeSegments> list = {{2816, 704, 2}, {1408, 2816, 8}};
  EXPECT_EQ(cuda::shape_segments(list, "cuda.moe.segments", 2816, 704, 6), 2);
  EXPECT_EQ(cuda::shape_segments(list, "cuda.moe.segments", 704, 2816, 6), 0);
  EXPECT_EQ(cuda::shape_segments({}, "cuda.moe.segments", 2816, 704, 6), 0);
  try {
    (void)cuda::shape_segments(list, "cuda.moe.segments", 1408, 2816, 6);
    ADD_FAILURE() << "accepted 8 segments where 6 are the most";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda.moe.segments: 1408x2816 allows at most 6 segments, not 8"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lmx
