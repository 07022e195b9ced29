// Tests for config.json / generation_config.json loading and the typed JSON accessors.
#include "lmx/io/model_dir.h"
#include "io_test_helpers.h"
#include "lmx/io/output_file.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

using nlohmann::json;
using test::expect_error;

TEST(ModelConfig, TextOnlyConfigIsItsOwnTextConfig) {
  test::TempDir dir;
  write_text_file(dir.file("config.json"), R"({"model_type": "llama", "hidden_size": 64})");
  ModelConfigFiles config = load_model_config(dir.path());
  EXPECT_EQ(config.dir, dir.path());
  EXPECT_EQ(config.path, dir.file("config.json"));
  EXPECT_EQ(config.text, config.root);
  EXPECT_EQ(json_int(config.text, "hidden_size", config.path), 64);
}

TEST(ModelConfig, MultimodalUsesTextConfigAndKeepsQuantizationAtRoot) {
  test::TempDir dir;
  write_text_file(dir.file("config.json"), R"({
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "quantization": {"group_size": 64, "bits": 4},
    "quantization_config": {"group_size": 64, "bits": 4},
    "text_config": {"model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 35}})");
  ModelConfigFiles config = load_model_config(dir.path());
  EXPECT_EQ(json_string(config.text, "model_type", "text"), "gemma4_text");
  EXPECT_EQ(json_int(config.text, "num_hidden_layers", "text"), 35);
  EXPECT_EQ(json_int(config.root.at("quantization"), "bits", "q"), 4);
  EXPECT_TRUE(config.root.contains("quantization_config"));
}

TEST(ModelConfig, MissingBadOrNotAnObject) {
  test::TempDir dir;
  expect_error<IoError>([&] { load_model_config(dir.path()); }, {dir.file("config.json")});
  write_text_file(dir.file("config.json"), "{\n  \"hidden_size\": 64,\n  oops\n}");
  expect_error<FormatError>([&] { load_model_config(dir.path()); }, {dir.file("config.json"), "line 3"});
  write_text_file(dir.file("config.json"), std::string("{}\0{\"x\"", 8));
  expect_error<FormatError>([&] { load_model_config(dir.path()); }, {dir.file("config.json"), "NUL"});
  write_text_file(dir.file("config.json"), "[1]");
  expect_error<ConfigError>([&] { load_model_config(dir.path()); }, {dir.file("config.json"), "object"});
  write_text_file(dir.file("config.json"), R"({"text_config": 3})");
  expect_error<ConfigError>([&] { load_model_config(dir.path()); }, {"text_config"});
}

TEST(GenerationConfig, AbsentFileGivesEmptyConfig) {
  test::TempDir dir;
  GenerationConfig config = load_generation_config(dir.path());
  EXPECT_TRUE(config.eos_token_ids.empty());
  EXPECT_FALSE(config.bos_token_id || config.temperature || config.top_k || config.do_sample ||
               config.max_new_tokens);
}

TEST(GenerationConfig, ReadsEveryField) {
  test::TempDir dir;
  write_text_file(dir.file("generation_config.json"), R"({
    "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "temperature": 1, "top_p": 0.95,
    "min_p": null, "top_k": 64, "do_sample": true, "repetition_penalty": 1.1, "max_new_tokens": 512,
    "transformers_version": "4.57.0"})");
  GenerationConfig config = load_generation_config(dir.path());
  EXPECT_EQ(config.eos_token_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(config.bos_token_id, 2);
  EXPECT_EQ(config.pad_token_id, 0);
  EXPECT_EQ(config.temperature, 1.0f);
  EXPECT_EQ(config.top_p, 0.95f);
  EXPECT_FALSE(config.min_p.has_value());
  EXPECT_EQ(config.top_k, 64);
  EXPECT_EQ(config.do_sample, true);
  EXPECT_EQ(config.repetition_penalty, 1.1f);
  EXPECT_EQ(config.max_new_tokens, 512);
}

TEST(GenerationConfig, SingleEosAndWrongTypes) {
  test::TempDir dir;
  const std::string path = dir.file("generation_config.json");
  write_text_file(path, R"({"eos_token_id": 1})");
  EXPECT_EQ(load_generation_config(dir.path()).eos_token_ids, std::vector<int32_t>{1});
  write_text_file(path, R"({"temperature": "hot"})");
  expect_error<ConfigError>([&] { load_generation_config(dir.path()); }, {path, "'temperature'", "number"});
  write_text_file(path, R"({"eos_token_id": [1, "x"]})");
  expect_error<ConfigError>([&] { load_generation_config(dir.path()); }, {path, "'eos_token_id'"});
  write_text_file(path, R"({"eos_token_id": -5})");
  expect_error<ConfigError>([&] { load_generation_config(dir.path()); }, {path, "'eos_token_id'"});
  write_text_file(path, R"({"bos_token_id": 4294967296})");
  expect_error<ConfigError>([&] { load_generation_config(dir.path()); }, {path, "'bos_token_id'"});
  write_text_file(path, R"({"do_sample": 1})");
  expect_error<ConfigError>([&] { load_generation_config(dir.path()); }, {path, "'do_sample'"});
  write_text_file(path, R"({"top_k": 1.5})");
  expect_error<ConfigError>([&] { load_generation_config(dir.path()); }, {path, "'top_k'", "integer"});
  write_text_file(path, "{,}");
  expect_error<FormatError>([&] { load_generation_config(dir.path()); }, {path, "JSON"});
}

TEST(JsonAccessors, TypedValuesAndErrorsNamingKeyAndContext) {
  const json obj = json::parse(R"({"i": 3, "f": 3.0, "half": 2.5, "neg": -7, "s": "x", "b": true, "n": null,
                                   "ids": [1, 2], "one": 9, "names": ["a", "b"], "big": 18446744073709551615})");
  const std::string ctx = "m/config.json";
  EXPECT_EQ(json_int(obj, "i", ctx), 3);
  EXPECT_EQ(json_int(obj, "f", ctx), 3);
  EXPECT_EQ(json_int(obj, "neg", ctx), -7);
  EXPECT_EQ(json_number(obj, "half", ctx), 2.5);
  EXPECT_EQ(json_number(obj, "i", ctx), 3.0);
  EXPECT_EQ(json_string(obj, "s", ctx), "x");
  EXPECT_TRUE(json_bool(obj, "b", ctx, false));
  EXPECT_TRUE(json_bool(obj, "absent", ctx, true));
  EXPECT_FALSE(json_bool(obj, "n", ctx, false));
  EXPECT_FALSE(json_opt_int(obj, "n", ctx));
  EXPECT_FALSE(json_opt_int(obj, "absent", ctx));
  EXPECT_FALSE(json_opt_number(obj, "n", ctx));
  EXPECT_EQ(json_opt_number(obj, "half", ctx), 2.5);
  EXPECT_FALSE(json_opt_string(obj, "absent", ctx));
  EXPECT_EQ(json_int_list(obj, "ids", ctx), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(json_int_list(obj, "one", ctx), std::vector<int64_t>{9});
  EXPECT_EQ(json_string_list(obj, "names", ctx), (std::vector<std::string>{"a", "b"}));

  expect_error<ConfigError>([&] { json_int(obj, "absent", ctx); }, {ctx, "'absent'", "missing"});
  expect_error<ConfigError>([&] { json_int(obj, "half", ctx); }, {ctx, "'half'", "integer", "2.5"});
  expect_error<ConfigError>([&] { json_int(obj, "s", ctx); }, {ctx, "'s'", "string"});
  expect_error<ConfigError>([&] { json_int(obj, "big", ctx); }, {ctx, "'big'"});
  expect_error<ConfigError>([&] { json_number(obj, "s", ctx); }, {ctx, "'s'", "number"});
  expect_error<ConfigError>([&] { json_number(obj, "n", ctx); }, {ctx, "'n'"});
  expect_error<ConfigError>([&] { json_string(obj, "i", ctx); }, {ctx, "'i'", "string"});
  expect_error<ConfigError>([&] { json_bool(obj, "s", ctx, false); }, {ctx, "'s'"});
  expect_error<ConfigError>([&] { json_string_list(obj, "ids", ctx); }, {ctx, "'ids'"});
  expect_error<ConfigError>([&] { json_int(json::array(), "i", ctx); }, {ctx, "object"});
}

}  // namespace
}  // namespace lmx
