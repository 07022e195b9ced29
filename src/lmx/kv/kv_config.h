// kv_config.json: per-layer KV cache quantization that some mlx-community checkpoints ship beside their
// weights — a JSON list of {"layer_idx": L, "bits": B, "group_size": G}, each layer's MLX affine codec.
#pragma once

#include "lmx/kv/kv_codec.h"

#include <map>
#include <string>

namespace lmx {

// The codecs dir/kv_config.json gives, by model layer; empty when the file does not exist. Throws IoError
// when it cannot be read, FormatError when it is not JSON, ConfigError naming the file and entry for a
// malformed entry, a repeated layer, or bits and group size the affine KV codecs do not have (bits 4 or 8,
// groups 32, 64 or 128).
std::map<int, KvCodec> read_kv_config(const std::string& dir);

}  // namespace lmx
