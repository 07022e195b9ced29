// kv_config.json: per-layer affine codecs read from a model directory, applied by the layout (a layer
// sharing KV follows its donor), described for front ends; malformed files refused naming the entry.
#include "lmx/kv/kv_config.h"
#include "lmx/core/error.h"
#include "lmx/kv/kv_layout.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <fstream>

namespace lmx {
namespace {

std::string config_error(const std::string& dir) {
  try {
    read_kv_config(dir);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(KvConfig, ReadsPerLayerAffineCodecs) {
  test::TempDir dir;
  EXPECT_TRUE(read_kv_config(dir.path()).empty()) << "no file, no codecs";
  std::ofstream(dir.file("kv_config.json"))
      << R"([{"layer_idx": 0, "bits": 8, "group_size": 64}, {"layer_idx": 3, "bits": 4, "group_size": 32}])";
  const auto codecs = read_kv_config(dir.path());
  ASSERT_EQ(codecs.size(), 2u);
  EXPECT_EQ(codecs.at(0), KvCodec::affine(8, 64));
  EXPECT_EQ(codecs.at(3), KvCodec::affine(4, 32));
}

TEST(KvConfig, RefusesMalformedFilesNamingTheEntry) {
  test::TempDir dir;
  const std::string file = dir.file("kv_config.json");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"layer_idx": 0})", "expected a list"},
      {R"([3])", "entry 0: expected an object"},
      {R"([{"layer_idx": 0, "bits": 3, "group_size": 64}])", "bits 3 with group_size 64"},
      {R"([{"layer_idx": 0, "bits": 4, "group_size": 16}])", "bits 4 with group_size 16"},
      {R"([{"layer_idx": 1, "bits": 4, "group_size": 64}, {"layer_idx": 1, "bits": 8, "group_size": 64}])",
       "entry 1: layer 1 appears twice"},
      {R"([{"bits": 4, "group_size": 64}])", "layer_idx"},
      {R"([{"layer_idx": -2, "bits": 4, "group_size": 64}])", "out of range"},
  };
  for (const auto& [text, expected] : cases) {
    std::ofstream(file, std::ios::trunc) << text;
    const std::string message = config_error(dir.path());
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
  }
}

TEST(KvConfig, TheLayoutAppliesLayerCodecsAndDescribesThem) {
  // Layers 0 (full), 1 (sliding), 2 (full), 3 (sharing layer 0's KV).
  const std::vector<KvLayerGeometry> layers = {{1, 64, 0, -1}, {1, 64, 8, -1}, {1, 64, 0, -1}, {1, 64, 0, 0}};
  const KvLayout plain(layers, KvCodec(KvCodecKind::kBf16), 4);
  const KvLayout mixed(
      layers, KvCodec(KvCodecKind::kBf16), 4, std::nullopt,
      {{0, KvCodec::affine(8, 64)}, {1, KvCodec::affine(8, 64)}, {3, KvCodec::affine(4, 32)}});
  EXPECT_EQ(mixed.layer(mixed.cache_layer_of(0)).codec, KvCodec::affine(8, 64));
  EXPECT_EQ(mixed.layer(mixed.cache_layer_of(1)).codec, KvCodec::affine(8, 64));
  EXPECT_EQ(mixed.layer(mixed.cache_layer_of(2)).codec, KvCodec(KvCodecKind::kBf16));
  EXPECT_EQ(mixed.cache_layer_of(3), mixed.cache_layer_of(0)) << "layer 3 reads layer 0's KV, in its codec";
  EXPECT_EQ(mixed.signature(0), "kv:affine8:g64:h=1:d=64");
  EXPECT_EQ(mixed.codec_description(), "bf16; layers 0-1 affine8:g64");
  // Every cache layer with its own codec: the defaults name no layer and are not described.
  const KvLayout fitted(layers, KvCodec(KvCodecKind::kF32), 4, std::nullopt,
                        {{0, KvCodec::turbo(8, 4)}, {1, KvCodec::turbo(8, 4)}, {2, KvCodec::affine(4, 32)}});
  EXPECT_EQ(fitted.codec_description(), "layer 2 affine4:g32; layers 0-1 turbo:k8v4");
  EXPECT_LT(mixed.bytes_per_token(), plain.bytes_per_token());
  EXPECT_THROW(KvLayout(layers, KvCodec(KvCodecKind::kBf16), 4, std::nullopt, {{4, KvCodec::affine(8, 64)}}),
               InvalidArgument);
}

std::string fit_error(const std::string& path) {
  try {
    read_kv_fit(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

// kv_fit.json round trip: what write_kv_fit writes, read_kv_fit reads back (codecs by layer).
TEST(KvFitFile, RoundTrips) {
  test::TempDir dir;
  const std::map<int, KvCodec> codecs = {
      {0, KvCodec::turbo(8, 4)}, {2, KvCodec::affine(8, 32)}, {5, KvCodec(KvCodecKind::kBf16)}};
  KvFitSummary summary;
  summary.bytes_per_token = 596;
  summary.compression_vs_bf16 = 3.0;
  summary.measurements = {{0, KvCodec::turbo(8, 4), 108, 0.0035}, {2, KvCodec::affine(8, 32), 144, 1e-5}};
  write_kv_fit(dir.file("kv_fit.json"), codecs, summary);
  EXPECT_EQ(read_kv_fit(dir.file("kv_fit.json")), codecs);
  const std::vector<KvFitOption> measured = read_kv_fit_measurements(dir.file("kv_fit.json"));
  ASSERT_EQ(measured.size(), 2u);
  EXPECT_EQ(measured[1].layer, 2);
  EXPECT_EQ(measured[1].codec, KvCodec::affine(8, 32));
  EXPECT_EQ(measured[1].bytes_per_token, 144u);
  EXPECT_EQ(measured[0].kl, 0.0035);
}

TEST(KvFitFile, RefusesMalformedFilesNamingTheEntry) {
  test::TempDir dir;
  const std::string file = dir.file("kv_fit.json");
  const std::pair<const char*, const char*> cases[] = {
      {R"([])", "lmx-kv-fit"},
      {R"({"format": "lmx-kv-fit", "version": 2, "layers": []})", "lmx-kv-fit"},
      {R"({"format": "lmx-kv-fit", "version": 1})", "\"layers\" list"},
      {R"({"format": "lmx-kv-fit", "version": 1, "layers": [3]})", "layer entry 0: expected an object"},
      {R"({"format": "lmx-kv-fit", "version": 1, "layers": [{"layer_idx": 0}]})", "\"codec\" string"},
      {R"({"format": "lmx-kv-fit", "version": 1, "layers": [{"layer_idx": 0, "codec": "int3"}]})", "int3"},
      {R"({"format": "lmx-kv-fit", "version": 1, "layers": [{"layer_idx": -1, "codec": "bf16"}]})",
       "out of range"},
      {R"({"format": "lmx-kv-fit", "version": 1, "layers": [{"layer_idx": 1, "codec": "bf16"},
          {"layer_idx": 1, "codec": "turbo"}]})",
       "layer 1 appears twice"},
  };
  for (const auto& [text, expected] : cases) {
    std::ofstream(file, std::ios::trunc) << text;
    const std::string message = fit_error(file);
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
  }
}

}  // namespace
}  // namespace lmx
