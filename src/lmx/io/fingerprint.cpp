// Model and tokenizer fingerprints: checksums over config files, tensor metadata and sampled weight bytes.
#include "lmx/io/fingerprint.h"

#include "lmx/core/checksum.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/io/safetensors.h"

#include <fmt/format.h>

#include <algorithm>

namespace lmx {

std::string model_fingerprint(const std::string& dir) {
  uint64_t h = checksum64(read_input_file(join_path(dir, "config.json"), InputKind::kConfig), 0x6d6f64656cULL);
  const Checkpoint checkpoint = Checkpoint::open_dir(dir);
  constexpr size_t kWindows = 16, kWindowBytes = 64;
  for (const std::string& name : checkpoint.names()) {
    const TensorInfo& info = checkpoint.info(name);
    std::string meta = fmt::format("{}|{}|", name, dtype_name(info.dtype));
    for (int64_t d : info.shape) meta += fmt::format("{},", d);
    h = checksum64(meta, h);
    const Tensor t = checkpoint.tensor(name);
    const auto* bytes = static_cast<const std::byte*>(t.raw_data());
    const size_t n = t.nbytes();
    if (n <= kWindows * kWindowBytes) {
      h = checksum64(bytes, n, h);
      continue;
    }
    for (size_t w = 0; w < kWindows; ++w) {
      const size_t at = (n - kWindowBytes) * w / (kWindows - 1);
      h = checksum64(bytes + at, kWindowBytes, h);
    }
  }
  return "model:" + hex64(h);
}

std::string tokenizer_fingerprint(const std::string& dir) {
  uint64_t h = 0x746f6b656eULL;
  bool any = false;
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    const auto kind = std::string_view(file) == "tokenizer.json" ? InputKind::kTokenizer : InputKind::kConfig;
    if (auto text = read_input_file_if_exists(join_path(dir, file), kind)) {
      h = checksum64(*text, checksum64(file, h));
      any = true;
    }
  }
  return any ? "tokenizer:" + hex64(h) : "tokenizer:none";
}

}  // namespace lmx
