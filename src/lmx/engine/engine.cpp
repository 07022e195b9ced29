// lmx::Engine: admission, the step loop, per-choice sampling and the output stage.
#include "lmx/engine/engine.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"
#include "lmx/engine/forced_tokens.h"
#include "lmx/engine/json_constraint.h"
#include "lmx/engine/json_schema_constraint.h"
#include "lmx/engine/text_output.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace lmx {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

struct Engine::Request {
  RequestId id = 0;
  GenerationRequest spec;
  EventCallback on_event;
  std::vector<std::unique_ptr<Choice>> choices;
  int unfinished = 0;
  int64_t reused_tokens = 0;
  bool forked = false;  // choices 1.. exist as sequences (forked from choice 0's prompt)
  std::vector<std::vector<int32_t>> forced_tokens;  // spec.forced_prefixes, tokenized
};

struct Engine::Choice : ScheduledSequence {
  Choice(Request& r, int i, const Tokenizer* tokenizer)
      : request(&r),
        index(i),
        sampler(seeded(r.spec.sampling, i)),
        text(tokenizer, r.spec.stop, r.spec.keep_special_tokens) {}
  static SamplingParams seeded(SamplingParams params, int index) {
    if (params.seed) *params.seed += static_cast<uint64_t>(index);
    return params;
  }
  Request* request;
  int index;
  Sampler sampler;
  TextOutput text;
  // The JSON it must write: any object (json_object; forced JSON or Gemma 4 arguments once the prefix is
  // written) or one the request's schema accepts (json_schema).
  struct JsonOutput {
    std::optional<JsonObjectConstraint> any;
    std::optional<JsonSchemaConstraint> schema;
    bool accept(std::string_view t) { return schema ? schema->accept(t) : any->accept(t); }
    bool allows(std::string_view t) const { return schema ? schema->allows(t) : any->allows(t); }
    bool complete() const { return schema ? schema->complete() : any->complete(); }
    JsonSyntax syntax() const { return schema ? schema->syntax() : any->syntax(); }
  };
  std::optional<JsonOutput> json;
  std::optional<ForcedTokens> forced;  // forced_prefixes, until one is written
  // Whether its next token is constrained (sampled on the host against the masks).
  bool constrained() const { return json.has_value() || (forced && !forced->complete()); }
  int64_t generated = 0;
  bool finished = false;
};

namespace {
TokenLogprob token_logprob(std::span<const float> logprobs, int32_t token, int top) {
  TokenLogprob out{token, logprobs[static_cast<size_t>(token)], {}};
  if (top <= 0) return out;
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(ids.size(), static_cast<size_t>(top));
  std::partial_sort(
      ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
        const float la = logprobs[static_cast<size_t>(a)], lb = logprobs[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
      });
  for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logprobs[static_cast<size_t>(ids[i])]);
  return out;
}
}  // namespace

Engine::Engine(LanguageModel& model, const Tokenizer* tokenizer, EngineOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      scheduler_(model.kv_cache(), options.scheduler) {}

Engine::~Engine() = default;

void Engine::validate(const GenerationRequest& r) const {
  LMX_REQUIRE(InvalidArgument, !r.prompt.empty(), "request: the prompt is empty");
  const int vocab = model_.description().vocab_size;
  for (size_t i = 0; i < r.prompt.size(); ++i)
    LMX_REQUIRE(InvalidArgument, r.prompt[i] >= 0 && r.prompt[i] < vocab,
                "request: prompt token {} is {}, out of range [0, {}) of the vocabulary", i, r.prompt[i],
                vocab);
  LMX_REQUIRE(InvalidArgument, r.max_tokens >= 0, "request: max_tokens must be ≥ 0, got {}", r.max_tokens);
  LMX_REQUIRE(InvalidArgument, r.n >= 1, "request: n must be ≥ 1, got {}", r.n);
  LMX_REQUIRE(InvalidArgument, r.top_logprobs >= -1 && r.top_logprobs <= kMaxTopLogprobs,
              "request: top_logprobs must be in [0, {}], got {}", kMaxTopLogprobs, r.top_logprobs);
  lmx::validate(r.sampling);
  for (const auto& [id, bias] : r.sampling.logit_bias)
    LMX_REQUIRE(InvalidArgument, id >= 0 && id < vocab,
                "request: logit_bias token {} is out of range [0, {}) of the vocabulary", id, vocab);
  for (size_t i = 0; i < r.stop.size(); ++i)
    LMX_REQUIRE(InvalidArgument, !r.stop[i].empty(), "request: stop string {} is empty", i);
  LMX_REQUIRE(InvalidArgument, r.stop.empty() || tokenizer_ != nullptr,
              "request: stop strings need a tokenizer (the model directory has no tokenizer.json)");
  LMX_REQUIRE(InvalidArgument, !(r.json_object || r.json_schema) || tokenizer_ != nullptr,
              "request: JSON output needs a tokenizer (the model directory has no tokenizer.json)");
  LMX_REQUIRE(InvalidArgument, r.forced_prefixes.empty() || tokenizer_ != nullptr,
              "request: a forced tool call needs a tokenizer (the model directory has no tokenizer.json)");
  LMX_REQUIRE(InvalidArgument, !(r.json_schema && r.json_object),
              "request: json_object and json_schema exclude each other");
  LMX_REQUIRE(InvalidArgument, r.forced_prefixes.empty() || (!r.json_object && !r.json_schema),
              "request: a forced tool call and JSON output exclude each other");
  LMX_REQUIRE(InvalidArgument, r.forced_arguments == ForcedArguments::kFree || !r.forced_prefixes.empty(),
              "request: forced arguments need forced prefixes");
  LMX_REQUIRE(InvalidArgument,
              r.forced_schemas.empty() || (r.forced_arguments != ForcedArguments::kFree &&
                                           r.forced_schemas.size() == r.forced_prefixes.size()),
              "request: forced schemas need forced arguments and one per forced prefix");
  for (const auto& schema : r.forced_schemas)
    LMX_REQUIRE(InvalidArgument,
                !schema || r.forced_arguments != ForcedArguments::kGemma4 || schema->gemma4_writable(),
                "request: a forced schema that Gemma 4's argument syntax cannot write");
  for (const std::string& p : r.forced_prefixes)
    LMX_REQUIRE(InvalidArgument, !p.empty(), "request: a forced prefix is empty");
  LMX_REQUIRE(InvalidArgument, r.conversation == nullptr || r.n == 1,
              "request: a conversation takes n = 1, got {}", r.n);
  const auto tokens = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  const int64_t context = model_.description().context_length;
  LMX_REQUIRE(InvalidArgument, context <= 0 || tokens <= context,
              "request: the prompt ({} tokens) and max_tokens {} exceed the model's context length {}",
              r.prompt.size(), r.max_tokens, context);
  const KvCache& kv = model_.kv_cache();
  const size_t needed = kv.sequence_bytes(tokens, options_.scheduler.prefill_chunk_tokens);
  LMX_REQUIRE(
      InvalidArgument, needed <= kv.pool().budget_bytes(),
      "request: the prompt ({} tokens) and max_tokens {} need {} bytes of KV blocks, more than the whole KV "
      "budget of {} bytes",
      r.prompt.size(), r.max_tokens, needed, kv.pool().budget_bytes());
}

RequestId Engine::submit(GenerationRequest request, EventCallback on_event) {
  validate(request);
  std::lock_guard lock(mutex_);
  if (request.conversation) {
    LMX_REQUIRE(InvalidArgument, conversations_in_use_.insert(request.conversation.get()).second,
                "request: its conversation is in use by another request");
  }
  const RequestId id = next_id_++;
  incoming_.push_back({id, std::move(request), std::move(on_event)});
  ++live_requests_;
  work_.notify_all();
  return id;
}

void Engine::cancel(RequestId id) {
  std::lock_guard lock(mutex_);
  cancelled_.push_back(id);
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  work_.wait_for(lock, timeout, [&] { return live_requests_.load() > 0; });
  return live_requests_.load() > 0;
}

void Engine::admit(Incoming in) {
  auto owned = std::make_unique<Request>();
  Request& r = *owned;
  r.id = in.id;
  r.spec = std::move(in.request);
  r.on_event = std::move(in.on_event);
  // A forced prefix is written as the tokenizer encodes it: special tokens as themselves.
  for (const std::string& prefix : r.spec.forced_prefixes)
    r.forced_tokens.push_back(tokenizer_->encode(prefix, /*add_special_tokens=*/false));
  // Each token's text alone, once: what constrained decoding checks against the JSON automata (special
  // tokens are never part of JSON; Gemma 4's string delimiter <|"|>, a special token of its tokenizers, is
  // checked on its own).
  if ((r.spec.json_object || r.spec.json_schema || r.spec.forced_arguments != ForcedArguments::kFree) &&
      vocabulary_.empty()) {
    vocabulary_ = ConstraintVocabulary(*tokenizer_, model_.description().vocab_size);
    const int32_t quote = tokenizer_->token_to_id(kGemma4Quote);
    if (quote >= 0 && quote < model_.description().vocab_size && vocabulary_.text(quote).empty())
      gemma4_quote_id_ = quote;
  }
  for (int i = 0; i < r.spec.n; ++i) {
    auto c = std::make_unique<Choice>(r, i, tokenizer_);
    if (r.spec.json_object) c->json.emplace().any.emplace();
    if (r.spec.json_schema) c->json.emplace().schema.emplace(r.spec.json_schema);
    if (!r.forced_tokens.empty()) c->forced.emplace(r.forced_tokens);
    c->order = next_order_++;
    c->tokens = r.spec.prompt;
    c->prompt_tokens = static_cast<int64_t>(r.spec.prompt.size());
    r.choices.push_back(std::move(c));
  }
  r.unfinished = r.spec.n;
  requests_.push_back(std::move(owned));
  Choice& first = *r.choices.front();
  if (Conversation* conv = r.spec.conversation.get(); conv && conv->sequence) {
    // Keep the longest common prefix of the conversation and the prompt, but run at least its last token.
    KvSequence& held = model_.kv_cache().own(conv->sequence.get());
    const std::vector<int32_t>& prompt = r.spec.prompt;
    const size_t limit = std::min(prompt.size() - 1, conv->tokens.size());
    size_t common = 0;
    while (common < limit && prompt[common] == conv->tokens[common]) ++common;
    if (common > 0 && held.can_truncate(static_cast<int64_t>(common))) {
      held.truncate(static_cast<int64_t>(common));
      conv->sequence.release();
      first.kv.reset(&held);
      r.reused_tokens = static_cast<int64_t>(common);
    }
  }
  if (r.spec.conversation) {
    r.spec.conversation->sequence.reset();
    r.spec.conversation->tokens.clear();
  }
  if (r.spec.max_tokens == 0) {
    finish_request(r, FinishReason::kLength, {});
    return;
  }
  scheduler_.add(&first);
}

void Engine::apply_cancellations() {
  std::vector<RequestId> ids;
  {
    std::lock_guard lock(mutex_);
    ids.swap(cancelled_);
  }
  for (RequestId id : ids)
    for (auto& r : requests_)
      if (r->id == id && r->unfinished > 0) finish_request(*r, FinishReason::kCancelled, {});
}

void Engine::emit(Choice& c, RequestEvent& event) {
  Request& r = *c.request;
  event.request = r.id;
  event.choice = c.index;
  event.prompt_tokens = static_cast<int64_t>(r.spec.prompt.size());
  event.reused_tokens = r.reused_tokens + r.choices.front()->cached_tokens;
  event.generated_tokens = c.generated;
  if (r.on_event) r.on_event(event);
}

void Engine::finish(Choice& c, RequestEvent& event, FinishReason reason, const std::string& error) {
  event.finish = reason;
  event.error = error;
  c.finished = true;
  scheduler_.remove(&c);
  Request& r = *c.request;
  --r.unfinished;
  if (c.index == 0 && r.spec.conversation) {
    Conversation& conv = *r.spec.conversation;
    if (c.kv && reason != FinishReason::kError) {
      conv.tokens.assign(c.tokens.begin(), c.tokens.begin() + c.computed());
      conv.sequence = std::move(c.kv);
    }
    std::lock_guard lock(mutex_);
    conversations_in_use_.erase(&conv);
  }
  // What it computed stays in the prefix cache, its partial last block included (a next turn reuses it).
  if (c.kv && reason != FinishReason::kError) model_.kv_cache().cache_prefix(*c.kv, c.tokens, true);
  c.kv.reset();
  emit(c, event);
}

void Engine::finish_request(Request& r, FinishReason reason, const std::string& error) {
  for (auto& c : r.choices)
    if (!c->finished) {
      RequestEvent event;
      finish(*c, event, reason, error);
    }
}

void Engine::pick(Pick& p) const {
  if (!p.error.empty()) return;
  Choice& c = *p.choice;
  const GenerationRequest& spec = c.request->spec;
  const RowOutput& out = p.out;
  try {
    if (out.sampled && out.sampled->status != SampledStatus::kNeedsHost) {
      const SampledRow& s = *out.sampled;
      LMX_REQUIRE(InvalidArgument, s.status == SampledStatus::kSampled,
                  "sampling: no token has a finite logit");
      p.token = s.token;
      if (spec.top_logprobs >= 0) {
        TokenLogprob lp{s.token, s.logprob, {}};
        for (int i = 0; i < std::min(s.top_count, spec.top_logprobs); ++i)
          lp.top.emplace_back(s.top_ids[i], s.top_logprobs[i]);
        p.logprob = std::move(lp);
      }
      return;
    }
    if (c.constrained()) {
      // Constrained: while a forced prefix is written, every token but the ones that continue it is masked;
      // then every token the JSON automaton refuses (and every special token).
      std::vector<float> masked(out.logits.size(), -std::numeric_limits<float>::infinity());
      bool any = false;
      const auto allow = [&](int32_t id) {
        if (id < 0 || static_cast<size_t>(id) >= masked.size()) return;
        masked[static_cast<size_t>(id)] = out.logits[static_cast<size_t>(id)];
        any = true;
      };
      if (c.forced && !c.forced->complete()) {
        for (int32_t id : c.forced->next()) allow(id);
      } else {
        if (c.json->schema)
          vocabulary_.for_each_allowed(*c.json->schema, allow);
        else
          vocabulary_.for_each_allowed(*c.json->any, allow);
        if (gemma4_quote_id_ >= 0 && c.json->syntax() == JsonSyntax::kGemma4 && c.json->allows(kGemma4Quote))
          allow(gemma4_quote_id_);
      }
      LMX_REQUIRE(InvalidArgument, any, "constrained output: no token of the vocabulary continues it");
      p.token = c.sampler.sample(masked, c.tokens);
    } else if (out.argmax)
      p.token = *out.argmax;
    else if (out.sampled)
      p.token = c.sampler.sample_processed(out.processed, out.uniform);
    else
      p.token = c.sampler.sample(out.logits, c.tokens);
    if (spec.top_logprobs >= 0)
      p.logprob = token_logprob(c.sampler.last_logprobs(), p.token, spec.top_logprobs);
  } catch (const std::exception& e) {
    p.error = e.what();
  }
}

std::optional<FinishReason> Engine::apply(const Pick& p, RequestEvent& event) {
  Choice& c = *p.choice;
  const GenerationRequest& spec = c.request->spec;
  const int32_t token = p.token;
  c.tokens.push_back(token);
  ++c.generated;
  ++stats_.generated_tokens;
  event.tokens.push_back(token);
  if (p.logprob) event.logprobs.push_back(*p.logprob);
  if (std::find(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), token) != spec.stop_token_ids.end()) {
    event.text += c.text.finish();
    return FinishReason::kStop;
  }
  event.text += c.text.feed(token);
  if (c.forced && !c.forced->complete()) {
    c.forced->accept(token);
    // The arguments of the tool whose opening was written, in JSON or Gemma 4's syntax: what its schema
    // accepts when it has one, else any object.
    if (c.forced->complete() && spec.forced_arguments != ForcedArguments::kFree) {
      const size_t which = static_cast<size_t>(c.forced->completed());
      const JsonSyntax syntax =
          spec.forced_arguments == ForcedArguments::kGemma4 ? JsonSyntax::kGemma4 : JsonSyntax::kJson;
      if (which < spec.forced_schemas.size() && spec.forced_schemas[which])
        c.json.emplace().schema.emplace(spec.forced_schemas[which], syntax);
      else
        c.json.emplace().any.emplace(syntax);
    }
  } else if (c.json) {
    c.json->accept(token == gemma4_quote_id_ ? kGemma4Quote : vocabulary_.text(token));
    if (c.json->complete()) {
      event.text += c.text.finish();
      event.text += spec.forced_suffix;
      return FinishReason::kStop;
    }
  }
  if (c.text.stopped()) {
    event.stop_string = c.text.matched_stop();
    return FinishReason::kStop;
  }
  if (c.generated >= spec.max_tokens) {
    event.text += c.text.finish();
    return FinishReason::kLength;
  }
  return std::nullopt;
}

void Engine::sample_rows(std::vector<Pick>& picks) {
  // Picking (the sampler's passes over the vocabulary, logprobs) is independent per choice: in parallel.
  parallel_for(static_cast<int64_t>(picks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) pick(picks[static_cast<size_t>(i)]);
  });
  // The output stage and the events, in row order on this thread.
  for (const Pick& p : picks) {
    Choice& c = *p.choice;
    if (c.finished) continue;  // an earlier choice of its request failed
    if (!p.error.empty()) {
      finish_request(*c.request, FinishReason::kError, p.error);
      continue;
    }
    try {
      RequestEvent event;
      if (const auto reason = apply(p, event)) {
        finish(c, event, *reason);
      } else {
        emit(c, event);
        if (p.forked) scheduler_.add(&c);
      }
    } catch (const std::exception& e) {
      finish_request(*c.request, FinishReason::kError, e.what());
    }
  }
}

std::vector<Engine::Pick> Engine::plan_picks(const StepPlan& plan) {
  std::vector<Pick> picks;
  auto add = [&](Choice* c, size_t row, bool forked) {
    picks.emplace_back();
    picks.back().choice = c;
    picks.back().row = row;
    picks.back().forked = forked;
  };
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const ScheduledRow& row = plan.rows[i];
    auto& c = static_cast<Choice&>(*row.sequence);
    if (!row.samples || c.finished) continue;
    Request& r = *c.request;
    if (c.index == 0 && !r.forked && r.spec.n > 1) {
      r.forked = true;
      for (size_t k = 1; k < r.choices.size(); ++k)
        if (!r.choices[k]->finished) add(r.choices[k].get(), i, true);
    }
    add(&c, i, false);
  }
  return picks;
}

std::vector<SamplingEntry> Engine::sampling_entries(std::vector<Pick>& picks) {
  std::vector<SamplingEntry> entries(picks.size());
  const auto vocab = static_cast<size_t>(model_.description().vocab_size);
  for (size_t k = 0; k < picks.size(); ++k) {
    Pick& p = picks[k];
    Choice& c = *p.choice;
    const SamplingParams& s = c.sampler.params();
    SamplingEntry& e = entries[k];
    e.row = static_cast<int64_t>(p.row);
    e.params.top_logprobs = std::max(c.request->spec.top_logprobs, 0);
    try {
      e.edits = sampling::logit_edits(s, c.tokens, vocab);
    } catch (const std::exception& error) {
      p.error = error.what();
      continue;
    }
    e.params.temperature = s.temperature;
    e.params.top_p = s.top_p;
    e.params.min_p = s.min_p;
    e.params.top_k = s.top_k;
    if (s.temperature > 0.0f) p.out.uniform = e.params.uniform = c.sampler.next_uniform();
  }
  return entries;
}

void Engine::fail_stuck_request() {
  // Waiting sequences that hold KV (forks, conversations) give it back first, newest first; they recompute.
  const auto& waiting = scheduler_.waiting();
  for (auto it = waiting.rbegin(); it != waiting.rend(); ++it)
    if ((*it)->kv && (*it)->computed() > 0 && *it != waiting.front()) {
      (*it)->kv.reset();
      ++(*it)->preemptions;
      ++stats_.preemptions;
      return;
    }
  const KvBlockPool& pool = model_.kv_cache().pool();
  auto& c = static_cast<Choice&>(*waiting.front());
  finish_request(*c.request, FinishReason::kError,
                 fmt::format("KV cache full: {} of {} bytes are held by sequences that are not running (idle "
                             "conversations), and the request does not fit beside them",
                             pool.used_bytes(), pool.budget_bytes()));
}

bool Engine::step() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::vector<Incoming> incoming;
  {
    std::lock_guard lock(mutex_);
    incoming.swap(incoming_);
  }
  for (Incoming& in : incoming) admit(std::move(in));
  apply_cancellations();

  StepRecord record;
  const StepPlan plan = scheduler_.schedule();
  record.preempted = static_cast<int64_t>(plan.preempted.size());
  stats_.preemptions += record.preempted;
  if (plan.empty() && !scheduler_.waiting().empty()) fail_stuck_request();
  if (!plan.empty()) {
    std::vector<StepRow> rows;
    rows.reserve(plan.rows.size());
    for (const ScheduledRow& row : plan.rows)
      rows.push_back({row.sequence->kv.get(),
                      std::span<const int32_t>(row.sequence->tokens)
                          .subspan(static_cast<size_t>(row.begin), static_cast<size_t>(row.count))});
    std::vector<Pick> picks = plan_picks(plan);
    // When every pick is plain greedy without logprobs, only the argmax ids leave the backend; else a
    // backend that samples returns only the sampled tokens (and requested logprobs); else the logits come.
    bool argmax_only = true;
    // Constrained choices need every row's logits on the host.
    bool constrained = false;
    for (const Pick& p : picks) {
      const GenerationRequest& spec = p.choice->request->spec;
      if (!is_plain_greedy(spec.sampling) || spec.top_logprobs >= 0) argmax_only = false;
      if (p.choice->constrained()) constrained = true;
    }
    if (constrained) argmax_only = false;
    const bool on_backend =
        !argmax_only && !constrained && options_.backend_sampling && model_.samples_on_backend();
    std::vector<SamplingEntry> entries;
    if (on_backend) entries = sampling_entries(picks);
    Tensor logits;
    std::vector<int32_t> argmax;
    std::vector<SampledRow> sampled;
    bool ran = true;
    try {
      if (argmax_only) {
        argmax = model_.forward_argmax(rows);
      } else if (on_backend) {
        sampled = model_.forward_sampled(rows, entries);
        for (size_t k = 0; k < picks.size(); ++k)
          if (sampled[k].status == SampledStatus::kNeedsHost)
            picks[k].out.processed = model_.sampled_logits(static_cast<int64_t>(k));
      } else {
        logits = model_.forward(rows);
      }
    } catch (const std::exception& e) {
      // The rows' KV may hold part of the step: their requests end.
      ran = false;
      for (const ScheduledRow& row : plan.rows) {
        auto& c = static_cast<Choice&>(*row.sequence);
        if (!c.finished) finish_request(*c.request, FinishReason::kError, e.what());
      }
    }
    ++stats_.steps;
    for (size_t i = 0; i < plan.rows.size() && ran; ++i) {
      const ScheduledRow& row = plan.rows[i];
      auto& c = static_cast<Choice&>(*row.sequence);
      model_.kv_cache().cache_prefix(*c.kv, c.tokens);
      ++record.rows;
      if (row.begin < c.prompt_tokens) {
        record.prefill_tokens += row.count;
        stats_.prompt_tokens_run += row.count;
      } else {
        ++record.decode_rows;
      }
    }
    if (!ran) picks.clear();
    const auto vocab = logits.defined() ? static_cast<size_t>(logits.dim(1)) : 0;
    for (size_t k = 0; k < picks.size(); ++k) {
      Pick& p = picks[k];
      if (p.forked) {
        // Choices 1.. start from choice 0's prompt KV, which this step completed.
        Choice& first = *p.choice->request->choices.front();
        p.choice->kv = model_.kv_cache().fork(*first.kv, p.choice->prompt_tokens);
      }
      if (argmax_only)
        p.out.argmax = argmax[p.row];
      else if (on_backend)
        p.out.sampled = &sampled[k];
      else
        p.out.logits = std::span<const float>(logits.data<float>() + p.row * vocab, vocab);
    }
    record.sampled = static_cast<int64_t>(picks.size());
    sample_rows(picks);
  }
  // Finished requests leave.
  const auto before = requests_.size();
  std::erase_if(requests_, [](const std::unique_ptr<Request>& r) { return r->unfinished == 0; });
  const auto done = static_cast<int64_t>(before - requests_.size());
  stats_.requests_finished += done;
  live_requests_ -= done;
  record.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (observer_ && (record.rows > 0 || !incoming.empty())) observer_(record);
  return !plan.empty() || !incoming.empty() || done > 0 || !requests_.empty();
}

void Engine::run_until_idle() {
  while (!idle()) step();
}

}  // namespace lmx
