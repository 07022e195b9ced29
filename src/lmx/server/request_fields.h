// The sampling and stopping fields of an OpenAI-shaped request body, turned into a GenerationRequest:
// what `lmx batch` lines and the HTTP server's completion requests share.
#pragma once

#include "lmx/engine/request.h"

#include <nlohmann/json.hpp>

namespace lmx {

// Applies the fields `body` (ordered, as request bodies are parsed to keep their messages' key order) holds
// onto `request` (fields absent keep its values, so the caller sets the model's defaults first): max_tokens
// (or max_completion_tokens), temperature, top_p, top_k, min_p, seed, stop (a string or an array of up to
// kMaxStopStrings strings), n (1..kMaxChoices), presence_penalty, frequency_penalty, repetition_penalty,
// ignore_eos (true: the model's end tokens do not end a choice — benchmarks fix output lengths with it),
// logit_bias (an object of token id strings to numbers in
// [-100, 100]), logprobs (true/false with top_logprobs, as the chat API has it, or a number 0..20 as the
// completions API has it). Throws InvalidArgument naming the field for a wrong type or a value out of range
// (the engine checks the rest when the request is submitted). Unknown fields are ignored.
void apply_request_fields(const nlohmann::ordered_json& body, GenerationRequest& request);

constexpr int kMaxStopStrings = 16;
constexpr int kMaxChoices = 128;

}  // namespace lmx
