// Loading transformers goldens for parity tests (see goldens.h).
#include "support/goldens.h"

#include "lmx/io/safetensors.h"
#include "support/test_support.h"

namespace lmx::test {

std::vector<Golden> load_goldens(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/goldens.safetensors");
  auto to_ids = [](const Tensor& t) {
    Tensor c = t.contiguous();
    auto s = c.span<int32_t>();
    return std::vector<int32_t>(s.begin(), s.end());
  };
  std::vector<Golden> goldens;
  for (int i = 0; file->contains("prompt_" + std::to_string(i)); ++i) {
    Golden g;
    g.prompt = to_ids(file->tensor("prompt_" + std::to_string(i)));
    g.logits = file->tensor("logits_" + std::to_string(i)).contiguous();
    g.greedy = to_ids(file->tensor("greedy_" + std::to_string(i)));
    goldens.push_back(std::move(g));
  }
  return goldens;
}

std::string reference_model_dir(const std::string& name) {
  return source_path(name.find('/') == std::string::npos ? "tests/data/models/" + name : name);
}

}  // namespace lmx::test
