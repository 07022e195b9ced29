// Backend selection for the model-running verbs (--device) and `lmx info`.
#include "commands.h"

#include "lmx/io/directory.h"
#include "lmx/kv/kv_config.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/backends.h"
#include "lmx/ops/cpu/tuning.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/tuning.h"
#ifdef LMX_HAS_CUDA
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/tuning.h"

#include <cuda_runtime.h>
#endif

#include <cstdio>

namespace lmx::cli {

namespace {
int cuda_devices() {
#ifdef LMX_HAS_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

// A table in use and the keys where it differs from its built-in table.
nlohmann::ordered_json table_entry(const ops::TuningJson& table, const ops::TuningJson& builtin) {
  return {{"table", table}, {"overridden", ops::tuning_differences(table, builtin)}};
}

// The tuning tables in use (lmx info): their source, the CPU's table, and per built-in CUDA table the table
// with the override file applied and the devices that use it.
nlohmann::ordered_json tuning_info() {
  const ops::TuningFile& file = ops::tuning_file();
  nlohmann::ordered_json out;
  out["source"] = file.source();
  const std::string target = ops::simd_target_name();
  out["cpu"]["builtin"] = target;
  out["cpu"].update(table_entry(ops::cpu::tuning_json(ops::cpu::tuning()),
                                ops::cpu::tuning_json(ops::cpu::builtin_tuning(target))));
#ifdef LMX_HAS_CUDA
  nlohmann::ordered_json cuda_tables = nlohmann::ordered_json::object();
  for (const std::string& name : cuda::builtin_tuning_names()) {
    const cuda::CudaTuning builtin = cuda::builtin_tuning(name);
    cuda_tables[name] =
        table_entry(cuda::tuning_json(cuda::apply_tuning(builtin, file)), cuda::tuning_json(builtin));
    cuda_tables[name]["devices"] = nlohmann::ordered_json::array();
  }
  for (int i = 0; i < cuda::device_count(); ++i)
    cuda_tables[cuda::device_tuning_name(i)]["devices"].push_back(fmt::format("cuda:{}", i));
  out["cuda"] = cuda_tables;
#endif
  return out;
}

// "a.b, c.d" or "none".
std::string key_list(const nlohmann::ordered_json& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k.get<std::string>();
  return out.empty() ? "none" : out;
}
}  // namespace

void load_tuning(const std::string& path) {
  if (!path.empty()) ops::set_tuning_file(path);
  const ops::TuningFile& file = ops::tuning_file();
  (void)ops::cpu::tuning();
#ifdef LMX_HAS_CUDA
  for (const std::string& name : cuda::builtin_tuning_names())
    (void)cuda::apply_tuning(cuda::builtin_tuning(name), file);
#else
  (void)file;
#endif
}

void add_model_options(CLI::App* command, ModelFlags& flags) {
  command
      ->add_option("--device", flags.device,
                   "cpu, cuda or cuda:N (default: cuda when a GPU is present, else cpu)")
      ->default_val("auto");
  command->add_option(
      "--kv-cache", flags.kv_cache,
      "KV cache codec: f32, bf16, affine4 or affine8 (MLX affine along head_dim, groups of 64; affine4:g32 "
      "etc. for 32 or 128), turbo (TurboQuant k8v3; turbo:k8v4, turbo:k4v3, ...) (default: f32 on the CPU, "
      "bf16 on CUDA)");
  command->add_option("--kv-cache-sliding", flags.kv_cache_sliding,
                      "KV cache codec of the sliding-window layers, as --kv-cache (default: --kv-cache's)");
  command->add_option("--kv-budget", flags.kv_budget,
                      "Bytes the KV cache may hold, e.g. 8G (default: 90 % of the device's free memory)");
  command->add_option("--kv-block-tokens", flags.kv_block_tokens, "Tokens per KV block (default 64)")
      ->check(CLI::Range(1, 65536));
  command->add_option("--prefix-cache", flags.prefix_cache,
                      "Bytes of KV blocks kept for prefix reuse after their sequences end, e.g. 2G, or off "
                      "(default: as many as the KV budget holds; the least recently used go first)");
  command
      ->add_option(
          "--kv-quant-start", flags.kv_quant_start,
          "Keep a sequence's KV in bf16 until it holds N tokens, then convert it to the quantized "
          "--kv-cache codec; nothing rewinds or reuses a prefix below N (default 0: quantized from the "
          "first token)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
}

std::unique_ptr<LanguageModel> load_language_model(const std::string& dir, const ModelFlags& flags) {
  const std::string& device = flags.device;
  std::string name = device.empty() ? "auto" : device;
  if (name == "auto") name = cuda_devices() > 0 ? "cuda:0" : "cpu";
  Device target = Device::cpu();
  if (name == "cuda" || name.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (name.size() > 5) {
      const std::string digits = name.substr(5);
      LMX_REQUIRE(
          InvalidArgument,
          !digits.empty() && digits.size() < 4 && digits.find_first_not_of("0123456789") == std::string::npos,
          "--device {}: expected cuda:N with a device number", device);
      index = std::stoi(digits);
    }
#ifdef LMX_HAS_CUDA
    const int count = cuda_devices();
    LMX_REQUIRE(InvalidArgument, count > 0, "--device {}: no CUDA device is visible", device);
    LMX_REQUIRE(InvalidArgument, index < count, "--device {}: only {} CUDA device(s) visible", device, count);
#endif
    target = Device::cuda(index);
  } else if (name != "cpu") {
    throw InvalidArgument(fmt::format("--device {}: expected cpu, cuda or cuda:N", device));
  }
  ModelOptions options;
  if (!flags.kv_cache.empty()) {
    try {
      options.kv_codec = KvCodec::parse(flags.kv_cache);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--kv-cache: {}", e.what()));
    }
  }
  if (!flags.kv_cache_sliding.empty()) {
    try {
      options.kv_sliding_codec = KvCodec::parse(flags.kv_cache_sliding);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--kv-cache-sliding: {}", e.what()));
    }
  }
  // A model directory's kv_fit.json (`lmx kv-fit`), else its kv_config.json, sets per-layer codecs unless a
  // KV codec flag chooses for every layer.
  if (flags.kv_cache.empty() && flags.kv_cache_sliding.empty()) {
    const std::string fit = join_path(dir, "kv_fit.json");
    options.kv_layer_codecs = path_exists(fit) ? read_kv_fit(fit) : read_kv_config(dir);
  }
  if (!flags.kv_budget.empty()) options.kv_budget_bytes = parse_bytes(flags.kv_budget, "--kv-budget");
  options.kv_block_tokens = flags.kv_block_tokens;
  if (flags.prefix_cache == "off")
    options.kv_prefix_cache_bytes = 0;
  else if (!flags.prefix_cache.empty())
    options.kv_prefix_cache_bytes = parse_bytes(flags.prefix_cache, "--prefix-cache");
  options.kv_quant_start = flags.kv_quant_start;
  return LanguageModel::load(dir, make_backend(target), options);
}

Verb add_info(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "List compiled backends, CPU SIMD targets and visible GPUs");
  cmd->add_flag("--json", *json, "Print as JSON");
  return {cmd, [json] {
            nlohmann::ordered_json out;
            out["version"] = LMX_VERSION;
            out["backends"] = nlohmann::ordered_json::array({"cpu"});
            out["cpu"] = {{"simd_target", ops::simd_target_name()},
                          {"simd_targets_available", ops::simd_target_names()},
                          {"threads", default_pool().threads()}};
            nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
#ifdef LMX_HAS_CUDA
            out["backends"].push_back("cuda");
            int runtime = 0, driver = 0;
            (void)cudaRuntimeGetVersion(&runtime);
            if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
            out["cuda"] = {
                {"runtime", fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10)},
                {"driver", driver > 0 ? fmt::format("{}.{}", driver / 1000, driver % 1000 / 10) : "none"},
                {"compiled_for", LMX_CUDA_ARCHITECTURES}};
            for (int i = 0; i < cuda::device_count(); ++i)
              gpus.push_back({{"device", fmt::format("cuda:{}", i)}, {"name", cuda::device_description(i)}});
#endif
            out["devices"] = gpus;
            out["tuning"] = tuning_info();
            if (*json) {
              std::printf("%s\n", out.dump().c_str());
              return 0;
            }
            std::printf("lmx %s\n", LMX_VERSION);
            std::printf("backends     %s\n", out["backends"].dump().c_str());
            std::printf("cpu          %s (%d threads); available: %s\n", ops::simd_target_name().c_str(),
                        default_pool().threads(), out["cpu"]["simd_targets_available"].dump().c_str());
            if (out.contains("cuda"))
              std::printf("cuda         runtime %s, driver %s, code for %s\n",
                          out["cuda"]["runtime"].get<std::string>().c_str(),
                          out["cuda"]["driver"].get<std::string>().c_str(),
                          out["cuda"]["compiled_for"].get<std::string>().c_str());
            if (gpus.empty()) std::printf("gpus         none visible\n");
            for (const auto& g : gpus)
              std::printf("gpu          %s: %s\n", g["device"].get<std::string>().c_str(),
                          g["name"].get<std::string>().c_str());
            const auto& tuning = out["tuning"];
            std::printf("tuning       %s (lmx info --json prints the tables)\n",
                        tuning["source"].get<std::string>().c_str());
            std::printf("  cpu        %s table; overridden: %s\n",
                        tuning["cpu"]["builtin"].get<std::string>().c_str(),
                        key_list(tuning["cpu"]["overridden"]).c_str());
            if (tuning.contains("cuda"))
              for (const auto& [name, entry] : tuning["cuda"].items())
                std::printf("  cuda       %s table (devices: %s); overridden: %s\n", name.c_str(),
                            entry["devices"].empty() ? "none" : key_list(entry["devices"]).c_str(),
                            key_list(entry["overridden"]).c_str());
            return 0;
          }};
}

}  // namespace lmx::cli
