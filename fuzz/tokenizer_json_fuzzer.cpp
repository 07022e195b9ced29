// libFuzzer target: tokenizer.json text loaded, then a fixed text encoded and the ids decoded back.
#include "fuzz_support.h"
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lmx::fuzz::expect_only_lmx_errors([&] {
    const lmx::Tokenizer tokenizer =
        lmx::Tokenizer::from_json(lmx::fuzz::as_text(data, size), "fuzz/tokenizer.json");
    for (const char* text : {"Hello world! 12 ab\xc3\xa9 <s>\n\t  x", ""}) {
      const std::vector<int32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/true);
      (void)tokenizer.decode(ids, /*skip_special_tokens=*/false);
      (void)tokenizer.decode(ids, /*skip_special_tokens=*/true);
    }
    // Every id up to a bound, through the decoders and the streaming detokenizer.
    lmx::StreamingDetokenizer stream(tokenizer, /*skip_special_tokens=*/false);
    for (int32_t id = 0; id < std::min(tokenizer.vocab_size(), 512); ++id)
      if (tokenizer.is_valid_id(id)) (void)stream.feed(id);
    (void)stream.flush();
  });
  return 0;
}
