// The trained demo model speaks: its 4-bit version (converted here exactly as `lmx convert --model
// models/demo --out DIR --quantize 4:64` does) still answers chat turns in readable English.
#include "lmx/engine/greedy.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/convert.h"
#include "lmx/model/language_model.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <cctype>
#include <sstream>

namespace lmx {
namespace {

std::string greedy_answer(const std::string& dir, const std::string& question) {
  Tokenizer tokenizer = Tokenizer::load(dir);
  ChatTemplateInputs inputs;
  inputs.messages = {{{"role", "user"}, {"content", question}}};
  inputs.bos_token = tokenizer.bos_token();
  inputs.eos_token = tokenizer.eos_token();
  std::string prompt = ChatTemplate(tokenizer.chat_template()).render(inputs);
  auto model = test::load_model(dir);
  GreedyOptions options;
  options.max_new_tokens = 48;
  options.stop_token_ids = load_generation_config(dir).eos_token_ids;
  GreedyResult r = generate_greedy(*model, tokenizer.encode(prompt, false), options);
  return tokenizer.decode(r.tokens, /*skip_special_tokens=*/true);
}

// Fails on noise: most characters are letters, spaces or punctuation, and there are real words.
void expect_readable(const std::string& text) {
  size_t plain = 0;
  for (unsigned char c : text) plain += std::isalpha(c) || c == ' ' || c == '\n' || std::ispunct(c);
  EXPECT_GE(plain, text.size() * 9 / 10) << text;
  std::istringstream words(text);
  int long_words = 0, vowel_words = 0;
  for (std::string w; words >> w;) {
    long_words += w.size() >= 3;
    vowel_words += w.find_first_of("aeiouAEIOU") != std::string::npos;
  }
  EXPECT_GE(long_words, 5) << text;
  EXPECT_GE(vowel_words, 5) << text;
}

TEST(DemoModel, FourBitAnswersReadably) {
  test::TempDir dir;
  convert_checkpoint(test::source_path("models/demo"), dir.path(), parse_quantize_spec("4:64"));
  for (const char* question : {"Hello, who are you?", "Tell me a fortune.", "Quote a verse from Genesis."}) {
    std::string answer = greedy_answer(dir.path(), question);
    SCOPED_TRACE(question);
    expect_readable(answer);
  }
}

TEST(DemoModel, Bf16AnswersReadably) {
  expect_readable(greedy_answer(test::source_path("models/demo"), "Hello, who are you?"));
}

}  // namespace
}  // namespace lmx
