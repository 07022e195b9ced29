// What a front end hands the engine (GenerationRequest) and what the engine hands back as a request
// runs (RequestEvent): requests are data; the engine's step loop turns them into tokens and text.
#pragma once

#include "lmx/engine/sampler.h"
#include "lmx/kv/sequence.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lmx {

class JsonSchema;

// A conversation's KV kept between requests (lmx chat's turns): the tokens whose KV `sequence` holds.
// A request naming it reuses the longest common prefix with its prompt and leaves the conversation
// holding the prompt and every generated token but the last. One request at a time may use it; the
// caller owns it and keeps it alive while its request runs. Idle, its blocks count against the KV budget.
struct Conversation {
  std::vector<int32_t> tokens;
  std::unique_ptr<Sequence> sequence;
};

// Top logprobs reported per generated token (OpenAI's limit).
constexpr int kMaxTopLogprobs = 20;

// What a forced tool call's arguments are after its forced opening (GenerationRequest::forced_arguments).
enum class ForcedArguments { kFree, kJson, kGemma4 };

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty token ids
  SamplingParams sampling;
  int max_tokens = 256;  // ≥ 0 generated tokens per choice (a stop token counts)
  // Sampling one of these ends a choice (finish kStop); the token is in `tokens`, never in the text.
  std::vector<int32_t> stop_token_ids;
  // Non-empty strings; the first one the decoded text contains ends a choice before it (OpenAI "stop").
  std::vector<std::string> stop;
  int n = 1;  // ≥ 1 choices, forked from the prompt's KV; choice c samples with seed + c when seeded
  // -1: no logprobs; 0..kMaxTopLogprobs: each token's logprob and this many most probable alternatives.
  int top_logprobs = -1;
  // Keep special tokens (<|tool_call>, <|channel>, ...) in the events' text; by default they are left out.
  // Front ends that parse tool calls or reasoning out of the text set it.
  bool keep_special_tokens = false;
  // Constrained decoding (OpenAI's response_format json_object): each choice's text is one JSON object —
  // every token that no JSON object could continue with is masked — and the choice ends (kStop) when it
  // closes. Needs a tokenizer; sampling for such a step runs on the host.
  bool json_object = false;
  // Constrained decoding to JSON this schema accepts (OpenAI's response_format json_schema; compiled by
  // JsonSchema::compile): like json_object, with keys, required properties and value types from the schema.
  std::shared_ptr<const JsonSchema> json_schema;
  // Forced output (a forced tool call: OpenAI's tool_choice "required" or a named function, Anthropic's "any"
  // or "tool"): each choice begins with the tokens of one of `forced_prefixes` as the tokenizer encodes them
  // (special tokens as themselves) — every other token is masked. Then `forced_arguments` says what follows:
  // free text (kFree), or one object of arguments — JSON (kJson, constrained as json_object is) or Gemma 4's
  // argument syntax (kGemma4; JsonSyntax::kGemma4) — after which the choice ends (kStop)
  // with `forced_suffix` appended to its text (not generated). Needs a tokenizer; not with json_object.
  std::vector<std::string> forced_prefixes;
  ForcedArguments forced_arguments = ForcedArguments::kFree;
  // With kJson or kGemma4: per prefix, the schema its arguments must satisfy (as json_schema; for kGemma4 one
  // that JsonSchema::gemma4_writable), or null for any object; empty: any object after every prefix.
  std::vector<std::shared_ptr<const JsonSchema>> forced_schemas;
  std::string forced_suffix;
  std::shared_ptr<Conversation> conversation;  // optional: KV kept across requests (n must be 1)
};

enum class FinishReason {
  kStop,       // a stop token or stop string
  kLength,     // max_tokens reached
  kCancelled,  // Engine::cancel
  kError,      // the request was refused or failed (RequestEvent::error says why)
};
// "stop", "length", "cancelled", "error".
const char* finish_reason_name(FinishReason reason);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  // of the processed distribution (bias and penalties applied, before filters)
  std::vector<std::pair<int32_t, float>> top;  // the most probable tokens first, top_logprobs of them
};

using RequestId = uint64_t;

// What one step added to one choice of a request. Every choice ends with exactly one event whose
// `finish` is set; the concatenated texts of a choice's events are its output text.
struct RequestEvent {
  RequestId request = 0;
  int choice = 0;
  std::vector<int32_t> tokens;         // new generated tokens
  std::string text;                    // new text (empty without a tokenizer)
  std::vector<TokenLogprob> logprobs;  // one per new token when the request asked for logprobs
  std::optional<FinishReason> finish;
  std::string error;          // with kError: what was wrong
  int stop_string = -1;       // with kStop: the index of the stop string that ended it, else -1
  int64_t prompt_tokens = 0;  // the request's prompt length
  // Prompt tokens whose KV came from its conversation or the prefix cache (choice 0's, at its admission).
  int64_t reused_tokens = 0;
  int64_t generated_tokens = 0;  // this choice's tokens so far
};

}  // namespace lmx
