// Per-layer KV codecs from a model directory:
// - kv_config.json, which some mlx-community checkpoints ship beside their weights: a JSON list of
//   {"layer_idx": L, "bits": B, "group_size": G}, each layer's MLX affine codec;
// - kv_fit.json, which `lmx kv-fit` writes (model/kv_fit.h): {"format": "lmx-kv-fit", "version": 1,
//   "layers": [{"layer_idx": L, "codec": SPEC}, ...]} plus keys describing the fit (not read back).
#pragma once

#include "lmx/kv/kv_codec.h"

#include <map>
#include <string>
#include <vector>

namespace lmx {

// The codecs dir/kv_config.json gives, by model layer; empty when the file does not exist. Throws IoError
// when it cannot be read, FormatError when it is not JSON, ConfigError naming the file and entry for a
// malformed entry, a repeated layer, or bits and group size the affine KV codecs do not have (bits 4 or 8,
// groups 32, 64 or 128).
std::map<int, KvCodec> read_kv_config(const std::string& dir);

// One measured option of a fit (model/kv_fit.h): model layer `layer` (a layer that owns its KV) in `codec`,
// every other cache layer f32.
struct KvFitOption {
  int layer = 0;
  KvCodec codec;
  size_t bytes_per_token = 0;  // this layer's keys and values
  double kl = 0;               // mean KL against the f32 cache on the calibration text
};

// What a kv_fit.json records about its fit, beside the codecs: the totals and every measured option.
struct KvFitSummary {
  size_t bytes_per_token = 0;
  double compression_vs_bf16 = 0;
  size_t calibration_tokens = 0;
  double predicted_kl = 0, measured_kl = 0, top1 = 0;
  std::vector<KvFitOption> measurements;
};
// The codecs of the kv_fit.json at `path`, by model layer. IoError when it cannot be read, FormatError when
// it is not JSON, ConfigError naming the file and entry for another format or version, a malformed entry, an
// unknown codec spec or a repeated layer.
std::map<int, KvCodec> read_kv_fit(const std::string& path);
// The measured options a kv_fit.json records ("measurements"; empty when it has none), for planning again at
// another budget without measuring; errors as read_kv_fit.
std::vector<KvFitOption> read_kv_fit_measurements(const std::string& path);
// Writes a kv_fit.json (atomically: a temporary file, fsynced, renamed).
void write_kv_fit(const std::string& path, const std::map<int, KvCodec>& layer_codecs,
                  const KvFitSummary& summary);

}  // namespace lmx
