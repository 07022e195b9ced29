// lmx convert's quantizing writer: which modules are quantized at which bits, the config block, and
// slice-wise quantization of large tables being identical to whole-tensor quantization.
#include "lmx/io/model_dir.h"
#include "lmx/io/safetensors.h"
#include "lmx/io/sharded_writer.h"
#include "lmx/model/convert.h"
#include "lmx/quant/affine.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

TEST(Convert, ParsesSpecs) {
  QuantizeOptions o = parse_quantize_spec("4:32");
  EXPECT_EQ(o.bits, 4);
  EXPECT_EQ(o.group_size, 32);
  EXPECT_EQ(parse_quantize_spec("8").group_size, 64);
  for (const char* bad : {"", "4:", "7", "4:48", "x", "4:32:1", "-4"})
    EXPECT_THROW(parse_quantize_spec(bad), InvalidArgument) << bad;
  EXPECT_EQ(parse_bits_for("*down_proj=8"), (std::pair<std::string, int>{"*down_proj", 8}));
  for (const char* bad : {"down_proj", "=8", "x=9", "x=eight"}) EXPECT_THROW(parse_bits_for(bad), InvalidArgument) << bad;
}

TEST(Convert, ChoosesModulesAndWritesTheBlock) {
  test::TempDir dir;
  QuantizeOptions options = parse_quantize_spec("4:32");
  options.keep_dense = {"*o_proj"};
  options.bits_for = {{"*down_proj", 8}};
  {
    ShardedWriter shards(dir.path());
    QuantizingWriter writer(shards, options);
    writer.add("model.layers.0.self_attn.q_proj.weight", test::random_tensor({64, 64}, DType::kBF16));
    writer.add("model.layers.0.self_attn.o_proj.weight", test::random_tensor({64, 64}, DType::kBF16));
    writer.add("model.layers.0.mlp.down_proj.weight", test::random_tensor({64, 96}, DType::kBF16));
    writer.add("model.layers.0.mlp.odd_proj.weight", test::random_tensor({8, 40}, DType::kBF16));  // 40 % 32 != 0
    writer.add("model.layers.0.input_layernorm.weight", test::random_tensor({64}, DType::kF32));
    writer.add("model.layers.0.experts.gate_up_proj", test::random_tensor({2, 16, 64}, DType::kBF16));
    writer.add("model.layers.0.experts.down_proj", test::random_tensor({2, 64, 32}, DType::kBF16));
    EXPECT_THROW(writer.add("model.x.scales", test::random_tensor({4})), InvalidArgument);
    nlohmann::json block = writer.quantization_block();
    EXPECT_EQ(block["bits"], 4);
    EXPECT_EQ(block["group_size"], 32);
    EXPECT_EQ(block["model.layers.0.self_attn.o_proj"], false);
    EXPECT_EQ(block["model.layers.0.mlp.odd_proj"], false);
    EXPECT_EQ(block["model.layers.0.mlp.down_proj"]["bits"], 8);
    EXPECT_FALSE(block.contains("model.layers.0.self_attn.q_proj"));
    shards.finish();
  }
  auto file = SafetensorsFile::open(dir.file("model.safetensors"));
  EXPECT_EQ(file->info("model.layers.0.self_attn.q_proj.weight").dtype, DType::kU32);
  EXPECT_EQ(file->info("model.layers.0.self_attn.q_proj.weight").shape, (Shape{64, 8}));
  EXPECT_EQ(file->info("model.layers.0.self_attn.q_proj.scales").shape, (Shape{64, 2}));
  EXPECT_EQ(file->info("model.layers.0.mlp.down_proj.weight").shape, (Shape{64, 24}));
  EXPECT_EQ(file->info("model.layers.0.self_attn.o_proj.weight").dtype, DType::kBF16);
  EXPECT_EQ(file->info("model.layers.0.input_layernorm.weight").dtype, DType::kBF16);
  EXPECT_EQ(file->info("model.layers.0.experts.switch_glu.gate_proj.weight").shape, (Shape{2, 8, 8}));
  EXPECT_EQ(file->info("model.layers.0.experts.switch_glu.up_proj.scales").shape, (Shape{2, 8, 2}));
  // "*down_proj" also matches the expert down projections: 8 bits.
  EXPECT_EQ(file->info("model.layers.0.experts.switch_glu.down_proj.weight").shape, (Shape{2, 64, 8}));
  EXPECT_FALSE(file->contains("model.layers.0.experts.gate_up_proj"));
}

TEST(Convert, LargeTablesQuantizeInSlicesIdentically) {
  // More than the 2^24 values of one slice, so the writer quantizes it in two slices.
  Tensor big = test::random_tensor({4100, 4096}, DType::kBF16);
  test::TempDir dir;
  {
    ShardedWriter shards(dir.path());
    QuantizingWriter writer(shards, parse_quantize_spec("4:64"));
    writer.add("model.embed_tokens.weight", big);
    shards.finish();
  }
  quant::AffineQuantized whole = quant::quantize_affine(big, 4, 64, DType::kBF16);
  auto file = SafetensorsFile::open(dir.file("model.safetensors"));
  for (auto [name, expected] : {std::pair{"weight", &whole.codes}, {"scales", &whole.scales}, {"biases", &whole.biases}}) {
    Tensor got = file->tensor(std::string("model.embed_tokens.") + name);
    ASSERT_EQ(got.shape(), expected->shape());
    EXPECT_EQ(std::memcmp(got.raw_data(), expected->raw_data(), got.nbytes()), 0) << name;
  }
}

TEST(Convert, RefusesQuantizedInputAndSameDirectory) {
  test::TempDir out;
  const std::string q4 = test::source_path("tests/data/models/tiny-31b-q4");
  EXPECT_THROW(convert_checkpoint(q4, out.file("x"), parse_quantize_spec("4")), InvalidArgument);
  const std::string dense = test::source_path("tests/data/models/tiny-31b");
  EXPECT_THROW(convert_checkpoint(dense, dense, parse_quantize_spec("4"), /*replace_existing=*/true),
               InvalidArgument);
  // Nor any directory holding the source, which replacing would delete.
  EXPECT_THROW(convert_checkpoint(dense, test::source_path("tests/data"), parse_quantize_spec("4"), true),
               InvalidArgument);
  EXPECT_FALSE(test::exists(out.file("x")));
}

// The output appears whole or not at all: into an absent or empty directory, a non-empty one only
// with replace (then replaced whole), and nothing written when the source does not load.
TEST(Convert, WritesAtomicallyAndOnlyFromAValidSource) {
  test::TempDir dir;
  const std::string dense = test::source_path("tests/data/models/tiny-31b");
  const std::string out = dir.file("out");
  convert_checkpoint(dense, out, parse_quantize_spec("4"));
  EXPECT_TRUE(test::exists(out + "/model.safetensors"));
  EXPECT_EQ(test::count_entries(dir.path()), 1u);  // no staging directory left behind

  test::write_file(out + "/stale.txt", "from an earlier run");
  try {
    convert_checkpoint(dense, out, parse_quantize_spec("8"));
    FAIL() << "converted into a non-empty directory";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("is not empty"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(test::exists(out + "/stale.txt"));
  convert_checkpoint(dense, out, parse_quantize_spec("8"), /*replace_existing=*/true);
  EXPECT_FALSE(test::exists(out + "/stale.txt"));
  EXPECT_EQ(load_json_file(out + "/config.json")["quantization"]["bits"], 8);

  // A broken source: a weight missing. Loading it fails, so nothing is written.
  test::copy_path(dense, dir.file("broken"));
  auto file = SafetensorsFile::open(dir.file("broken/model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& name : file->names())
    if (name != "model.norm.weight") tensors.emplace_back(name, file->tensor(name).contiguous());
  file.reset();
  write_safetensors(dir.file("broken/model.safetensors"), tensors);
  try {
    convert_checkpoint(dir.file("broken"), dir.file("out2"), parse_quantize_spec("4"));
    FAIL() << "converted a checkpoint that does not load";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(test::exists(dir.file("out2")));
}

}  // namespace
}  // namespace lmx
