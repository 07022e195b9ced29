// apply_request_fields: each OpenAI field lands in the request; wrong types and out-of-range values are
// refused naming the field; absent and null fields keep the caller's defaults.
#include "lmx/server/request_fields.h"
#include "lmx/core/error.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

GenerationRequest apply(const char* json, GenerationRequest r = {}) {
  apply_request_fields(nlohmann::ordered_json::parse(json), r);
  return r;
}

void expect_refused(const char* json, const std::string& needle) {
  try {
    apply(json);
    ADD_FAILURE() << json << " was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RequestFields, EveryFieldLands) {
  const GenerationRequest r = apply(R"({"max_tokens": 12, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
      "min_p": 0.05, "seed": 42, "stop": ["\n\n", "END"], "n": 3, "presence_penalty": 0.5,
      "frequency_penalty": -0.25, "repetition_penalty": 1.1, "logit_bias": {"17": -100, "5": 2.5},
      "logprobs": true, "top_logprobs": 4, "unknown_field": {"ignored": true}})");
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.25f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.sampling.logit_bias, (std::map<int32_t, float>{{5, 2.5f}, {17, -100.0f}}));
  EXPECT_EQ(r.top_logprobs, 4);
}

TEST(RequestFields, AbsentAndNullKeepDefaultsAndLogprobsForms) {
  GenerationRequest defaults;
  defaults.max_tokens = 99;
  defaults.sampling.temperature = 0.3f;
  GenerationRequest r = apply(R"({"max_tokens": null, "stop": "x"})", defaults);
  EXPECT_EQ(r.max_tokens, 99);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.3f);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(apply(R"({"logprobs": 3})").top_logprobs, 3);
  EXPECT_EQ(apply(R"({"logprobs": true})").top_logprobs, 0);
  EXPECT_EQ(apply(R"({"logprobs": false, "top_logprobs": 5})").top_logprobs, -1);
  EXPECT_EQ(apply(R"({"max_completion_tokens": 7})").max_tokens, 7);
  EXPECT_EQ(apply(R"({"n": 2.0})").n, 2);
  GenerationRequest with_eos;
  with_eos.stop_token_ids = {1, 106};
  EXPECT_TRUE(apply(R"({"ignore_eos": true})", with_eos).stop_token_ids.empty());
  EXPECT_EQ(apply(R"({"ignore_eos": false})", with_eos).stop_token_ids, (std::vector<int32_t>{1, 106}));
}

TEST(RequestFields, BadValuesNameTheField) {
  expect_refused(R"([1, 2])", "JSON object");
  expect_refused(R"({"max_tokens": "12"})", "\"max_tokens\" must be an integer");
  expect_refused(R"({"max_tokens": -1})", "\"max_tokens\" must be in");
  expect_refused(R"({"max_tokens": 1.5})", "\"max_tokens\" must be an integer");
  expect_refused(R"({"temperature": "hot"})", "\"temperature\" must be a number");
  expect_refused(R"({"temperature": 1e9})", "\"temperature\" must be in");
  expect_refused(R"({"top_p": 1.5})", "\"top_p\"");
  expect_refused(R"({"top_k": -3})", "\"top_k\"");
  expect_refused(R"({"n": 0})", "\"n\"");
  expect_refused(R"({"n": 1000})", "\"n\"");
  expect_refused(R"({"stop": 5})", "\"stop\" must be a string or an array");
  expect_refused(R"({"stop": ["a", 3]})", "\"stop\"[1] must be a string");
  expect_refused(R"({"stop": [""]})", "\"stop\"[0] is empty");
  expect_refused(R"({"stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
                 "at most 16");
  expect_refused(R"({"logit_bias": [1]})", "\"logit_bias\" must be an object");
  expect_refused(R"({"logit_bias": {"abc": 1}})", "key \"abc\" is not a token id");
  expect_refused(R"({"logit_bias": {"-2": 1}})", "key \"-2\"");
  expect_refused(R"({"logit_bias": {"5": 500}})", "bias of token 5");
  expect_refused(R"({"logprobs": 21})", "\"logprobs\"");
  expect_refused(R"({"logprobs": true, "top_logprobs": 50})", "\"top_logprobs\"");
  expect_refused(R"({"presence_penalty": 3})", "\"presence_penalty\"");
  expect_refused(R"({"seed": "x"})", "\"seed\"");
  expect_refused(R"({"ignore_eos": 1})", "\"ignore_eos\" must be a boolean");
}

}  // namespace
}  // namespace lmx
