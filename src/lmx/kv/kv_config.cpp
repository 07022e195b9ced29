// kv_config.json: a list of per-layer affine KV codecs.
#include "lmx/kv/kv_config.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/json_input.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/output_file.h"

namespace lmx {

std::map<int, KvCodec> read_kv_config(const std::string& dir) {
  const std::string path = join_path(dir, "kv_config.json");
  std::map<int, KvCodec> codecs;
  if (!path_exists(path)) return codecs;
  const nlohmann::json list = load_json_file(path);
  LMX_REQUIRE(ConfigError, list.is_array(), "{}: expected a list of {{layer_idx, bits, group_size}} entries",
              path);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("{} entry {}", path, i);
    LMX_REQUIRE(ConfigError, list[i].is_object(), "{}: expected an object", where);
    const int64_t layer = json_int(list[i], "layer_idx", where), bits = json_int(list[i], "bits", where),
                  group = json_int(list[i], "group_size", where);
    LMX_REQUIRE(ConfigError, layer >= 0 && layer < (1 << 20), "{}: layer_idx {} is out of range", where,
                layer);
    LMX_REQUIRE(
        ConfigError, (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128),
        "{}: bits {} with group_size {}: the affine KV codecs take bits 4 or 8 and groups of 32, 64 or 128",
        where, bits, group);
    LMX_REQUIRE(ConfigError,
                codecs
                    .emplace(static_cast<int>(layer),
                             KvCodec::affine(static_cast<int>(bits), static_cast<int>(group)))
                    .second,
                "{}: layer {} appears twice", where, layer);
  }
  return codecs;
}

namespace {

nlohmann::json load_kv_fit(const std::string& path) {
  nlohmann::json doc = load_json_file(path);
  LMX_REQUIRE(
      ConfigError,
      doc.is_object() && doc.value("format", std::string()) == "lmx-kv-fit" && doc.value("version", 0) == 1,
      "{}: expected {{\"format\": \"lmx-kv-fit\", \"version\": 1, ...}} (a file `lmx kv-fit` writes)", path);
  LMX_REQUIRE(ConfigError, doc.contains("layers") && doc["layers"].is_array(),
              "{}: expected a \"layers\" list", path);
  return doc;
}

// Entry i's layer and codec ({"layer_idx": L, "codec": SPEC, ...}).
std::pair<int, KvCodec> fit_entry(const nlohmann::json& entry, const std::string& where) {
  LMX_REQUIRE(ConfigError, entry.is_object(), "{}: expected an object", where);
  const int64_t layer = json_int(entry, "layer_idx", where);
  LMX_REQUIRE(ConfigError, layer >= 0 && layer < (1 << 20), "{}: layer_idx {} is out of range", where, layer);
  LMX_REQUIRE(ConfigError, entry.contains("codec") && entry["codec"].is_string(),
              "{}: expected a \"codec\" string", where);
  try {
    return {static_cast<int>(layer), KvCodec::parse(entry["codec"].get<std::string>())};
  } catch (const InvalidArgument& e) {
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  }
}

}  // namespace

std::map<int, KvCodec> read_kv_fit(const std::string& path) {
  const nlohmann::json doc = load_kv_fit(path);
  std::map<int, KvCodec> codecs;
  const nlohmann::json& list = doc["layers"];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("{} layer entry {}", path, i);
    const auto [layer, codec] = fit_entry(list[i], where);
    LMX_REQUIRE(ConfigError, codecs.emplace(layer, codec).second, "{}: layer {} appears twice", where, layer);
  }
  return codecs;
}

std::vector<KvFitOption> read_kv_fit_measurements(const std::string& path) {
  const nlohmann::json doc = load_kv_fit(path);
  std::vector<KvFitOption> out;
  if (!doc.contains("measurements")) return out;
  const nlohmann::json& list = doc["measurements"];
  LMX_REQUIRE(ConfigError, list.is_array(), "{}: \"measurements\" must be a list", path);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("{} measurement {}", path, i);
    KvFitOption o;
    std::tie(o.layer, o.codec) = fit_entry(list[i], where);
    const int64_t bytes = json_int(list[i], "bytes_per_token", where);
    LMX_REQUIRE(ConfigError, bytes > 0 && list[i].contains("kl") && list[i]["kl"].is_number(),
                "{}: expected a positive bytes_per_token and a number kl", where);
    o.bytes_per_token = static_cast<size_t>(bytes);
    o.kl = list[i]["kl"].get<double>();
    out.push_back(o);
  }
  return out;
}

void write_kv_fit(const std::string& path, const std::map<int, KvCodec>& layer_codecs,
                  const KvFitSummary& summary) {
  nlohmann::ordered_json doc;
  doc["format"] = "lmx-kv-fit";
  doc["version"] = 1;
  doc["bytes_per_token"] = summary.bytes_per_token;
  doc["compression_vs_bf16"] = summary.compression_vs_bf16;
  doc["calibration"] = {{"tokens", summary.calibration_tokens},
                        {"predicted_kl", summary.predicted_kl},
                        {"measured_kl", summary.measured_kl},
                        {"top1_agreement", summary.top1}};
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& [layer, codec] : layer_codecs)
    layers.push_back({{"layer_idx", layer}, {"codec", codec.name()}});
  doc["layers"] = std::move(layers);
  nlohmann::ordered_json measured = nlohmann::ordered_json::array();
  for (const KvFitOption& o : summary.measurements)
    measured.push_back({{"layer_idx", o.layer},
                        {"codec", o.codec.name()},
                        {"bytes_per_token", o.bytes_per_token},
                        {"kl", o.kl}});
  doc["measurements"] = std::move(measured);
  AtomicFileWriter out(path);
  out.write(doc.dump(2) + "\n");
  out.commit();
}

}  // namespace lmx
