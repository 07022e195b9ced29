// The registry of model families.
#include "lmx/model/registry.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/gemma4/gemma4_forward.h"

#include <nlohmann/json.hpp>

#include <functional>

namespace lmx {

namespace {
struct Family {
  const char* model_type;
  std::function<std::unique_ptr<ModelForward>(const ModelConfigFiles&, const std::string&)> open;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"gemma4", open_gemma4},
      {"gemma4_text", open_gemma4},
  };
  return table;
}
}  // namespace

std::vector<std::string> known_model_types() {
  std::vector<std::string> types;
  for (const Family& f : families()) types.emplace_back(f.model_type);
  return types;
}

std::unique_ptr<ModelForward> open_model_family(const std::string& dir) {
  ModelConfigFiles files = load_model_config(dir);
  // The root's model_type, else text_config's (a multimodal wrapper around a known text model).
  auto type_of = [](const nlohmann::json& j) {
    const auto type = j.find("model_type");
    return type != j.end() && type->is_string() ? type->get<std::string>() : std::string();
  };
  const std::string root_type = type_of(files.root), text_type = type_of(files.text);
  for (const std::string& model_type : {root_type, text_type})
    for (const Family& f : families())
      if (!model_type.empty() && model_type == f.model_type) return f.open(files, dir);
  std::string known;
  for (const std::string& t : known_model_types()) known += (known.empty() ? "" : ", ") + t;
  throw Unsupported(
      fmt::format("{}: unknown architecture (model_type '{}'); lmx runs {}", files.path, root_type, known));
}

}  // namespace lmx
