// `lmx kv-fit`: fits a KV codec per cache layer to a byte budget on calibration text (model/kv_fit.h) and
// writes kv_fit.json, which the model-running verbs then apply (devices.cpp).
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/kv/kv_config.h"
#include "lmx/model/kv_fit.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/cpu/cpu_backend.h"
#include "lmx/text/tokenizer.h"

#include <cstdio>
#include <memory>
#include <sstream>

namespace lmx::cli {
namespace {

constexpr const char* kDefaultCandidates =
    "bf16,affine8:g32,turbo:k8v4,turbo:k8v3,turbo:k8v2,turbo:k4v4,turbo:k4v3,turbo:k4v2";

std::vector<KvCodec> parse_candidates(const std::string& list) {
  std::vector<KvCodec> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      out.push_back(KvCodec::parse(item));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--codecs: {}", e.what()));
    }
  }
  LMX_REQUIRE(InvalidArgument, !out.empty(), "--codecs is empty");
  return out;
}

}  // namespace

Verb add_kv_fit(CLI::App& app) {
  struct Options {
    std::string model, text_file, codecs = kDefaultCandidates, out, reuse;
    int tokens = 1024, threads = 0;
    double ratio = 3.0;
    size_t bytes_per_token = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "kv-fit", "Choose a KV codec per layer for a byte budget from measurements on calibration text (CPU)");
  cmd->add_option("--model", opt->model, "Model directory")->required()->check(non_empty());
  cmd->add_option("--text-file", opt->text_file, "Calibration text (not the text you evaluate on)")
      ->required()
      ->check(non_empty());
  cmd->add_option("--tokens", opt->tokens, "Calibration tokens (the text's first N)")
      ->check(CLI::Range(2, 1 << 20));
  auto* ratio = cmd->add_option("--ratio", opt->ratio, "Target compression against bf16 KV (default 3)")
                    ->check(CLI::Range(1.0, 64.0));
  auto* bytes =
      cmd->add_option("--bytes-per-token", opt->bytes_per_token, "Byte budget per token instead of --ratio")
          ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  ratio->excludes(bytes);
  cmd->add_option("--codecs", opt->codecs,
                  fmt::format("Candidate codecs per layer (default {})", kDefaultCandidates));
  cmd->add_option("--out", opt->out, "Where to write (default: MODEL/kv_fit.json, which lmx then applies)");
  cmd->add_option("--reuse", opt->reuse,
                  "Plan from the measurements a kv_fit.json recorded (another budget, no measuring)")
      ->check(non_empty());
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  return {
      cmd, [opt, bytes] {
        apply_threads(opt->threads);
        const std::vector<KvCodec> candidates = parse_candidates(opt->codecs);
        const std::string out = opt->out.empty() ? join_path(opt->model, "kv_fit.json") : opt->out;
        Tokenizer tokenizer = Tokenizer::load(opt->model);
        std::vector<int32_t> ids =
            tokenizer.encode(read_input_file(opt->text_file, InputKind::kUserData), true);
        if (ids.size() > static_cast<size_t>(opt->tokens)) ids.resize(static_cast<size_t>(opt->tokens));
        LMX_REQUIRE(InvalidArgument, ids.size() >= 2, "--text-file {}: fewer than 2 tokens", opt->text_file);
        KvFitInputs in;
        in.ids = ids;
        in.candidates = candidates;
        in.load = [&](const std::map<int, KvCodec>& layer_codecs) {
          ModelOptions o;
          o.kv_codec = KvCodec(KvCodecKind::kF32);
          o.kv_layer_codecs = layer_codecs;
          o.kv_prefix_cache_bytes = 0;
          return LanguageModel::load(opt->model, make_cpu_backend(), o);
        };
        in.progress = [](const KvFitOption& o, size_t done, size_t total) {
          std::fprintf(stderr, "kv-fit: %zu/%zu layer %d %s: KL %.5f, %zu bytes per token\n", done, total,
                       o.layer, o.codec.name().c_str(), o.kl, o.bytes_per_token);
        };
        KvFitMeasurements m;
        if (opt->reuse.empty()) {
          m = measure_kv_options(in);
        } else {
          m = measure_kv_reference(in);
          m.options = read_kv_fit_measurements(opt->reuse);
          LMX_REQUIRE(InvalidArgument, !m.options.empty(), "--reuse {}: records no measurements", opt->reuse);
        }
        const size_t budget =
            bytes->count() > 0
                ? opt->bytes_per_token
                : static_cast<size_t>(static_cast<double>(m.bf16_bytes_per_token) / opt->ratio);
        const KvFitPlan plan = plan_kv_codecs(m.options, budget);
        auto model = in.load(plan.layer_codecs);
        const KvDivergence d = kv_divergence(m.reference, teacher_forced_logprobs(*model, ids), m.vocab);
        KvFitSummary summary;
        summary.bytes_per_token = model->kv_cache().layout().bytes_per_token();
        summary.compression_vs_bf16 =
            static_cast<double>(m.bf16_bytes_per_token) / static_cast<double>(summary.bytes_per_token);
        summary.calibration_tokens = ids.size();
        summary.predicted_kl = plan.predicted_kl;
        summary.measured_kl = d.mean_kl;
        summary.top1 = d.top1;
        summary.measurements = m.options;
        write_kv_fit(out, plan.layer_codecs, summary);
        std::printf(
            "wrote %s: %s\n%zu bytes per token (%.2fx against bf16, budget %zu); on %zu calibration "
            "tokens KL %.5f (predicted %.5f), top-1 agreement %.2f %%\n",
            out.c_str(), model->kv_cache().layout().codec_description().c_str(), summary.bytes_per_token,
            summary.compression_vs_bf16, budget, ids.size(), d.mean_kl, plan.predicted_kl, 100.0 * d.top1);
        return 0;
      }};
}

}  // namespace lmx::cli
