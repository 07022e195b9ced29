// libFuzzer target: arbitrary bytes encoded with the demo model's real tokenizer and decoded back.
#include "fuzz_support.h"
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"

#include <memory>
#include <vector>

namespace {
std::unique_ptr<lmx::Tokenizer> g_tokenizer;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tokenizer = std::make_unique<lmx::Tokenizer>(lmx::Tokenizer::from_json(
      lmx::fuzz::source_file("models/demo/tokenizer.json"), "models/demo/tokenizer.json"));
  return 0;
}

// Encoding never fails (invalid UTF-8 is replaced); decoding what was encoded never fails either,
// and the streaming detokenizer agrees with a one-shot decode.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = lmx::fuzz::as_text(data, size);
  for (bool special : {true, false}) {
    const std::vector<int32_t> ids = g_tokenizer->encode(text, special);
    const std::string decoded = g_tokenizer->decode(ids, /*skip_special_tokens=*/false);
    lmx::StreamingDetokenizer stream(*g_tokenizer, /*skip_special_tokens=*/false);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.feed(id);
    streamed += stream.flush();
    if (streamed != decoded) __builtin_trap();
  }
  // The bytes read as little-endian ids: unknown ids are InvalidArgument, never a crash.
  std::vector<int32_t> ids(size / 4);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int32_t>(data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 |
                                  static_cast<uint32_t>(data[4 * i + 3]) << 24);
  lmx::fuzz::expect_only_lmx_errors([&] { (void)g_tokenizer->decode(ids, /*skip_special_tokens=*/true); });
  return 0;
}
