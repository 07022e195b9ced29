// `lmx logits`: float32 logits at every prompt position, written as a .npy file.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/io/output_file.h"
#include "lmx/model/language_model.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace lmx::cli {
namespace {

// Writes a C-order float32 [rows, cols] array in NumPy's .npy format (version 1.0) and commits it.
void write_npy(AtomicFileWriter& out, const float* data, int64_t rows, int64_t cols) {
  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  const uint16_t len = static_cast<uint16_t>(header.size());
  std::string preamble("\x93NUMPY\x01\x00", 8);
  preamble.push_back(static_cast<char>(len & 0xff));
  preamble.push_back(static_cast<char>(len >> 8));
  out.write(preamble + header);
  out.write(data, static_cast<size_t>(rows * cols) * sizeof(float));
  out.commit();
}

}  // namespace

Verb add_logits(CLI::App& app) {
  struct Options {
    std::string model, prompt_ids, out;
    ModelFlags flags;
    int prefill_chunk = 0, threads = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("logits", "Write float32 logits [T, V] for every prompt position (.npy)");
  cmd->add_option("--model", opt->model, "Model directory")->required()->check(non_empty());
  cmd->add_option("--prompt-ids", opt->prompt_ids, "Comma-separated prompt token ids")->required();
  cmd->add_option("--out", opt->out, "Output .npy path")->required()->check(non_empty());
  cmd->add_option("--prefill-chunk", opt->prefill_chunk,
                  "Feed the prompt in chunks of N tokens (0 = one step)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  add_model_options(cmd, opt->flags);
  return {
      cmd, [opt] {
        apply_threads(opt->threads);
        std::vector<int32_t> prompt = parse_ids(opt->prompt_ids);
        LMX_REQUIRE(InvalidArgument, !prompt.empty(), "--prompt-ids is empty");
        AtomicFileWriter out(opt->out);  // before any work: an unwritable --out fails first
        auto model = load_language_model(opt->model, opt->flags);
        require_within_context(*model, static_cast<int64_t>(prompt.size()),
                               fmt::format("the prompt ({} tokens)", prompt.size()));
        auto seq = model->new_sequence();
        const int64_t vocab = model->description().vocab_size, total = static_cast<int64_t>(prompt.size());
        std::vector<float> all(static_cast<size_t>(total * vocab));
        const size_t chunk = opt->prefill_chunk > 0 ? static_cast<size_t>(opt->prefill_chunk) : prompt.size();
        for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
          size_t n = std::min(chunk, prompt.size() - begin);
          StepRow row{seq.get(), std::span<const int32_t>(prompt).subspan(begin, n)};
          Tensor logits = model->forward({&row, 1}, /*all_positions=*/true);
          std::memcpy(all.data() + begin * vocab, logits.data<float>(), n * vocab * 4);
        }
        write_npy(out, all.data(), total, vocab);
        std::printf("wrote %s: float32 [%lld, %lld]; KV: %s (%s)\n", opt->out.c_str(),
                    static_cast<long long>(total), static_cast<long long>(vocab),
                    format_bytes(model->kv_bytes(*seq)).c_str(),
                    model->kv_cache().codec_description().c_str());
        return 0;
      }};
}

}  // namespace lmx::cli
