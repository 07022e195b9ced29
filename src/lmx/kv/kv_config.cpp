// kv_config.json: a list of per-layer affine KV codecs.
#include "lmx/kv/kv_config.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/json_input.h"
#include "lmx/io/model_dir.h"

namespace lmx {

std::map<int, KvCodec> read_kv_config(const std::string& dir) {
  const std::string path = join_path(dir, "kv_config.json");
  std::map<int, KvCodec> codecs;
  if (!path_exists(path)) return codecs;
  const nlohmann::json list = load_json_file(path);
  LMX_REQUIRE(ConfigError, list.is_array(), "{}: expected a list of {{layer_idx, bits, group_size}} entries", path);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("{} entry {}", path, i);
    LMX_REQUIRE(ConfigError, list[i].is_object(), "{}: expected an object", where);
    const int64_t layer = json_int(list[i], "layer_idx", where), bits = json_int(list[i], "bits", where),
                  group = json_int(list[i], "group_size", where);
    LMX_REQUIRE(ConfigError, layer >= 0 && layer < (1 << 20), "{}: layer_idx {} is out of range", where, layer);
    LMX_REQUIRE(ConfigError, (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128),
                "{}: bits {} with group_size {}: the affine KV codecs take bits 4 or 8 and groups of 32, 64 or 128",
                where, bits, group);
    LMX_REQUIRE(ConfigError, codecs.emplace(static_cast<int>(layer), KvCodec::affine(static_cast<int>(bits), static_cast<int>(group))).second,
                "{}: layer {} appears twice", where, layer);
  }
  return codecs;
}

}  // namespace lmx
