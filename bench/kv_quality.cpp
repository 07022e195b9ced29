// KV codec quality: a model teacher-forced token by token (one position per step, so every prediction
// attends over stored KV), each codec against the f32 KV cache on the CPU: mean KL(f32 ‖ codec) of the
// next-token distributions, top-1 agreement, the cache's bytes per token and its compression against bf16.
// Prints one markdown table row per codec.
//
//   bench_kv_quality --model DIR --ids FILE [--tokens N] [--codecs f32,bf16,affine8,affine4,...]
//
// FILE holds token ids separated by commas or whitespace (e.g. `lmx tokenize` output).
#include "lmx/core/error.h"
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

// Log-probabilities of every position's next token [positions × vocab], run one token per step.
std::vector<float> teacher_forced(const std::string& dir, const lmx::KvCodec& codec,
                                  const std::vector<int32_t>& ids, size_t* bytes_per_token) {
  lmx::ModelOptions options;
  options.kv_codec = codec;
  auto model = lmx::LanguageModel::load(dir, lmx::make_cpu_backend(), options);
  *bytes_per_token = model->kv_cache().layout().bytes_per_token();
  auto sequence = model->new_sequence();
  const auto vocab = static_cast<size_t>(model->description().vocab_size);
  std::vector<float> out(ids.size() * vocab);
  for (size_t t = 0; t < ids.size(); ++t) {
    const lmx::StepRow row{sequence.get(), std::span<const int32_t>(&ids[t], 1)};
    const lmx::Tensor logits = model->forward(std::span(&row, 1));
    const float* l = logits.data<float>();
    double max_value = -INFINITY, sum = 0;
    for (size_t i = 0; i < vocab; ++i) max_value = std::max<double>(max_value, l[i]);
    for (size_t i = 0; i < vocab; ++i) sum += std::exp(l[i] - max_value);
    const double lse = max_value + std::log(sum);
    for (size_t i = 0; i < vocab; ++i) out[t * vocab + i] = static_cast<float>(l[i] - lse);
  }
  return out;
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
    const std::vector<float> reference = teacher_forced(model, lmx::KvCodec::parse("f32"), ids, &f32_bytes);
    const size_t vocab = reference.size() / ids.size();
    size_t bf16_bytes = 0;
    (void)teacher_forced(model, lmx::KvCodec::parse("bf16"),
                         std::vector<int32_t>(ids.begin(), ids.begin() + 1), &bf16_bytes);
    std::printf("%zu positions, vocabulary %zu\n\n", ids.size(), vocab);
    std::printf("| codec | mean KL vs f32 | top-1 agreement | KV bytes per token | vs bf16 |\n");
    std::printf("| --- | --- | --- | --- | --- |\n");
    for (const std::string& spec : split(codecs)) {
      size_t bytes = 0;
      const std::vector<float> lp = teacher_forced(model, lmx::KvCodec::parse(spec), ids, &bytes);
      double kl = 0;
      size_t agree = 0;
      for (size_t t = 0; t < ids.size(); ++t) {
        const float* p = reference.data() + t * vocab;
        const float* q = lp.data() + t * vocab;
        double row = 0;
        for (size_t i = 0; i < vocab; ++i) row += std::exp(static_cast<double>(p[i])) * (p[i] - q[i]);
        kl += row;
        agree += std::max_element(p, p + vocab) - p == std::max_element(q, q + vocab) - q;
      }
      std::printf("| %s | %.5f | %.2f %% | %zu | %.2f× |\n", spec.c_str(),
                  kl / static_cast<double>(ids.size()),
                  100.0 * static_cast<double>(agree) / static_cast<double>(ids.size()), bytes,
                  static_cast<double>(bf16_bytes) / static_cast<double>(bytes));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kv_quality: %s\n", e.what());
    return 1;
  }
  return 0;
}
