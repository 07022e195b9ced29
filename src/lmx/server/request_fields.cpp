// OpenAI-shaped request fields → GenerationRequest.
#include "lmx/server/request_fields.h"

#include "lmx/core/error.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace lmx {
namespace {

double number(const nlohmann::ordered_json& body, const char* field) {
  const nlohmann::ordered_json& v = body.at(field);
  LMX_REQUIRE(InvalidArgument, v.is_number(), "field \"{}\" must be a number, got {}", field, v.type_name());
  const double d = v.get<double>();
  LMX_REQUIRE(InvalidArgument, std::isfinite(d), "field \"{}\" must be finite", field);
  return d;
}

float bounded(const nlohmann::ordered_json& body, const char* field, double lo, double hi) {
  const double d = number(body, field);
  LMX_REQUIRE(InvalidArgument, d >= lo && d <= hi, "field \"{}\" must be in [{}, {}], got {}", field, lo, hi,
              d);
  return static_cast<float>(d);
}

int64_t integer(const nlohmann::ordered_json& body, const char* field, int64_t lo, int64_t hi) {
  const nlohmann::ordered_json& v = body.at(field);
  LMX_REQUIRE(
      InvalidArgument,
      v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())),
      "field \"{}\" must be an integer, got {}", field, v.is_number() ? v.dump() : v.type_name());
  const double d = v.get<double>();
  LMX_REQUIRE(InvalidArgument, d >= static_cast<double>(lo) && d <= static_cast<double>(hi),
              "field \"{}\" must be in [{}, {}], got {}", field, lo, hi, v.dump());
  return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
}

bool has(const nlohmann::ordered_json& body, const char* field) {
  return body.contains(field) && !body.at(field).is_null();
}

}  // namespace

void apply_request_fields(const nlohmann::ordered_json& body, GenerationRequest& r) {
  LMX_REQUIRE(InvalidArgument, body.is_object(), "the request must be a JSON object, got {}",
              body.type_name());
  constexpr int64_t kMaxTokens = int64_t{1} << 30;
  if (has(body, "max_tokens")) r.max_tokens = static_cast<int>(integer(body, "max_tokens", 0, kMaxTokens));
  if (has(body, "max_completion_tokens"))
    r.max_tokens = static_cast<int>(integer(body, "max_completion_tokens", 0, kMaxTokens));
  if (has(body, "temperature")) r.sampling.temperature = bounded(body, "temperature", 0, 100);
  if (has(body, "top_p")) r.sampling.top_p = bounded(body, "top_p", 0, 1);
  if (has(body, "top_k")) r.sampling.top_k = static_cast<int32_t>(integer(body, "top_k", 0, 1 << 30));
  if (has(body, "min_p")) r.sampling.min_p = bounded(body, "min_p", 0, 1);
  if (has(body, "seed"))
    r.sampling.seed = static_cast<uint64_t>(
        integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  if (has(body, "presence_penalty")) r.sampling.presence_penalty = bounded(body, "presence_penalty", -2, 2);
  if (has(body, "frequency_penalty"))
    r.sampling.frequency_penalty = bounded(body, "frequency_penalty", -2, 2);
  if (has(body, "repetition_penalty"))
    r.sampling.repetition_penalty = bounded(body, "repetition_penalty", 1e-3, 100);
  if (has(body, "n")) r.n = static_cast<int>(integer(body, "n", 1, kMaxChoices));
  if (has(body, "ignore_eos")) {
    LMX_REQUIRE(InvalidArgument, body.at("ignore_eos").is_boolean(),
                "field \"ignore_eos\" must be a boolean");
    if (body.at("ignore_eos").get<bool>()) r.stop_token_ids.clear();
  }
  if (has(body, "stop")) {
    const nlohmann::ordered_json& stop = body.at("stop");
    r.stop.clear();
    if (stop.is_string()) {
      r.stop.push_back(stop.get<std::string>());
    } else {
      LMX_REQUIRE(InvalidArgument, stop.is_array(),
                  "field \"stop\" must be a string or an array of strings, got {}", stop.type_name());
      LMX_REQUIRE(InvalidArgument, stop.size() <= kMaxStopStrings,
                  "field \"stop\" holds {} strings; at most {}", stop.size(), kMaxStopStrings);
      for (size_t i = 0; i < stop.size(); ++i) {
        LMX_REQUIRE(InvalidArgument, stop[i].is_string(), "field \"stop\"[{}] must be a string, got {}", i,
                    stop[i].type_name());
        r.stop.push_back(stop[i].get<std::string>());
      }
    }
    for (size_t i = 0; i < r.stop.size(); ++i)
      LMX_REQUIRE(InvalidArgument, !r.stop[i].empty(), "field \"stop\"[{}] is empty", i);
  }
  if (has(body, "logit_bias")) {
    const nlohmann::ordered_json& bias = body.at("logit_bias");
    LMX_REQUIRE(InvalidArgument, bias.is_object(),
                "field \"logit_bias\" must be an object of token ids to numbers");
    r.sampling.logit_bias.clear();
    for (const auto& [key, value] : bias.items()) {
      int32_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      LMX_REQUIRE(InvalidArgument, ec == std::errc() && end == key.data() + key.size() && id >= 0,
                  "field \"logit_bias\": key \"{}\" is not a token id", key);
      LMX_REQUIRE(
          InvalidArgument,
          value.is_number() && std::isfinite(value.get<double>()) && std::fabs(value.get<double>()) <= 100,
          "field \"logit_bias\": the bias of token {} must be a number in [-100, 100]", key);
      r.sampling.logit_bias[id] = value.get<float>();
    }
  }
  if (has(body, "logprobs")) {
    const nlohmann::ordered_json& lp = body.at("logprobs");
    if (lp.is_boolean()) {
      r.top_logprobs = lp.get<bool>() ? 0 : -1;
      if (lp.get<bool>() && has(body, "top_logprobs"))
        r.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, kMaxTopLogprobs));
    } else {
      r.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, kMaxTopLogprobs));
    }
  }
}

}  // namespace lmx
