// KV codec quality: a model teacher-forced token by token (one position per step, so every prediction
// attends over stored KV), each codec against the f32 KV cache on the CPU: mean KL(f32 ‖ codec) of the
// next-token distributions, top-1 agreement, the cache's bytes per token and its compression against bf16.
// Prints one markdown table row per codec.
//
//   bench_kv_quality --model DIR --ids FILE [--tokens N] [--codecs f32,bf16,affine8,affine4,fit:PATH,...]
//
// A codec "SPEC@N" runs SPEC with a quantization start of N tokens (--kv-quant-start: bf16 below N).
// FILE holds token ids separated by commas or whitespace (e.g. `lmx tokenize` output).
#include "lmx/core/error.h"
#include "lmx/kv/kv_config.h"
#include "lmx/model/kv_fit.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  LMX_REQUIRE(lmx::InvalidArgument, in.good(), "cannot read {}", path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream tokens(s);
  std::vector<int32_t> ids;
  for (int32_t id; tokens >> id;) ids.push_back(id);
  return ids;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// The model with `spec`'s KV codecs: a KvCodec spec for every layer, or "fit:PATH" for a kv_fit.json's
// per-layer codecs (the rest f32), either with "@N" for a quantization start; its log-probabilities at every
// position and its bytes per token (after the start).
std::vector<float> teacher_forced(const std::string& dir, std::string spec, const std::vector<int32_t>& ids,
                                  size_t* bytes_per_token) {
  lmx::ModelOptions options;
  if (const size_t at = spec.rfind('@'); at != std::string::npos) {
    options.kv_quant_start = std::stoll(spec.substr(at + 1));
    spec = spec.substr(0, at);
  }
  if (spec.rfind("fit:", 0) == 0) {
    options.kv_codec = lmx::KvCodec(lmx::KvCodecKind::kF32);
    options.kv_layer_codecs = lmx::read_kv_fit(spec.substr(4));
  } else {
    options.kv_codec = lmx::KvCodec::parse(spec);
  }
  auto model = lmx::LanguageModel::load(dir, lmx::make_cpu_backend(), options);
  *bytes_per_token = model->kv_cache().layout().bytes_per_token();
  return lmx::teacher_forced_logprobs(*model, ids);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, ids_path, codecs = "f32,bf16,affine8:g32,affine8,affine4:g32,affine4";
  size_t tokens = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    if (!std::strcmp(argv[i], "--ids")) ids_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--codecs")) codecs = argv[i + 1];
  }
  if (model.empty() || ids_path.empty()) {
    std::fprintf(stderr, "usage: bench_kv_quality --model DIR --ids FILE [--tokens N] [--codecs LIST]\n");
    return 2;
  }
  try {
    std::vector<int32_t> ids = read_ids(ids_path);
    if (ids.size() > tokens) ids.resize(tokens);
    LMX_REQUIRE(lmx::InvalidArgument, ids.size() >= 2, "{} holds fewer than 2 token ids", ids_path);
    size_t f32_bytes = 0;
    const std::vector<float> reference = teacher_forced(model, "f32", ids, &f32_bytes);
    const size_t vocab = reference.size() / ids.size();
    size_t bf16_bytes = 0;
    (void)teacher_forced(model, "bf16", std::vector<int32_t>(ids.begin(), ids.begin() + 1), &bf16_bytes);
    std::printf("%zu positions, vocabulary %zu\n\n", ids.size(), vocab);
    std::printf("| codec | mean KL vs f32 | top-1 agreement | KV bytes per token | vs bf16 |\n");
    std::printf("| --- | --- | --- | --- | --- |\n");
    for (const std::string& spec : split(codecs)) {
      size_t bytes = 0;
      const std::vector<float> lp = teacher_forced(model, spec, ids, &bytes);
      const lmx::KvDivergence d = lmx::kv_divergence(reference, lp, vocab);
      std::printf("| %s | %.5f | %.2f %% | %zu | %.2f× |\n", spec.c_str(), d.mean_kl, 100.0 * d.top1, bytes,
                  static_cast<double>(bf16_bytes) / static_cast<double>(bytes));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kv_quality: %s\n", e.what());
    return 1;
  }
  return 0;
}
