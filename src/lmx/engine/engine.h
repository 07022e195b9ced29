// lmx::Engine: the one step loop every front end runs on (generate, chat, batch, bench, the server).
// Requests are queued from any thread; one thread calls step(), which schedules a ragged batch
// (Scheduler), runs it through the model, samples each finished row per request, and turns tokens into
// events through the output stage (detokenization, stop tokens and strings, max tokens).
//
// Reproducibility: a request's tokens do not depend on which other requests share its steps — the
// scheduler fixes how each sequence is chunked, the model's rows are batch-invariant, and each choice
// samples with its own generator (seeded requests give the same tokens alone or under load).
#pragma once

#include "lmx/engine/constraint_vocabulary.h"
#include "lmx/engine/request.h"
#include "lmx/engine/scheduler.h"
#include "lmx/model/language_model.h"
#include "lmx/text/tokenizer.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

namespace lmx {

struct EngineOptions {
  SchedulerOptions scheduler;
  // Sample on the backend where it can (only sampled ids and requested logprobs leave it); false: the
  // full logits come to the host and the host Sampler picks (the same tokens; for A/Bs and debugging).
  bool backend_sampling = true;
};

// What one step did, for observers (lmx bench --concurrency).
struct StepRecord {
  int64_t rows = 0;
  int64_t prefill_tokens = 0;  // tokens of rows still in their prompt
  int64_t decode_rows = 0;     // rows of one token past the prompt
  int64_t sampled = 0;         // tokens sampled (choices that got a token)
  int64_t preempted = 0;
  double seconds = 0;  // planning, the model's forward and the output stage
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens_run = 0, generated_tokens = 0, preemptions = 0;
  int64_t requests_finished = 0;
};

class Engine {
 public:
  using EventCallback = std::function<void(const RequestEvent&)>;

  // The model (and tokenizer, when given: without one the events carry no text and stop strings are
  // refused) must outlive the engine. InvalidArgument for bad options.
  Engine(LanguageModel& model, const Tokenizer* tokenizer, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates the request and queues it; `on_event` is then called on the thread running
  // step() with every change, ending with one finishing event per choice. It must not throw, and may call
  // cancel() but not step(). Throws InvalidArgument naming
  // the field for a bad request (empty prompt, token id outside the vocabulary, bad sampling settings,
  // prompt and max_tokens past the context length, a conversation in use or with n > 1), and when its KV
  // could never fit the pool even alone.
  RequestId submit(GenerationRequest request, EventCallback on_event);
  // Thread-safe. The request ends with kCancelled in the next step, its KV blocks released. Unknown or
  // finished ids are ignored.
  void cancel(RequestId id);

  // Runs one step on the calling thread (one thread at a time). Returns false when nothing was queued
  // or running.
  bool step();
  // Steps until no request is queued or running.
  void run_until_idle();
  // Thread-safe: whether no request is queued or running.
  bool idle() const { return live_requests_.load() == 0; }
  // Thread-safe: waits until a request is queued or `timeout` passes; returns !idle().
  bool wait_for_work(std::chrono::milliseconds timeout);

  // Called after every step with what it did (on the stepping thread).
  void set_step_observer(std::function<void(const StepRecord&)> observer) { observer_ = std::move(observer); }
  const EngineStats& stats() const { return stats_; }
  LanguageModel& model() { return model_; }
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  struct Request;
  struct Choice;
  struct Incoming {
    RequestId id;
    GenerationRequest request;
    EventCallback on_event;
  };

  // What a step left for one pick: its row's last logits on the host, only its argmax (plain greedy
  // steps), or what the backend sampled for it — with the backend's processed logits when the backend
  // left the draw to the host (SampledStatus::kNeedsHost).
  struct RowOutput {
    std::span<const float> logits;
    std::optional<int32_t> argmax;
    const SampledRow* sampled = nullptr;
    std::vector<float> processed;
    double uniform = 0.0;  // the choice's draw for this token (backend sampling)
  };

  void validate(const GenerationRequest& request) const;
  void admit(Incoming incoming);
  void apply_cancellations();
  // One choice's next token of a step: which choice, from which step row (a forked choice joins the
  // scheduler once its first token is in), its row output, and what picking found.
  struct Pick {
    Choice* choice = nullptr;
    size_t row = 0;
    bool forked = false;
    RowOutput out;
    int32_t token = -1;
    std::optional<TokenLogprob> logprob;
    std::string error;
  };
  // The picks of a step, in the order their events go out: per sampling row, the other choices of a
  // request forking there (n > 1; marks it forked), then the row's own choice.
  std::vector<Pick> plan_picks(const StepPlan& plan);
  // Backend sampling's entries, one per pick (drawing each sampling choice's uniform); a pick whose
  // edits cannot be made gets its error and a greedy entry.
  std::vector<SamplingEntry> sampling_entries(std::vector<Pick>& picks);
  // Samples p's token (and logprobs) with its choice's sampler, or takes what the backend sampled;
  // touches only that choice. Errors go to p.error.
  void pick(Pick& p) const;
  // Appends p's token to its choice and runs the output stage into `event`; returns how the choice ends
  // when it does.
  std::optional<FinishReason> apply(const Pick& p, RequestEvent& event);
  // pick() for every entry in parallel, then apply() and the events in order (finishing choices that
  // ended, failing the request of an error).
  void sample_rows(std::vector<Pick>& picks);
  // Ends choice `c` with `event` (which may carry its last tokens): releases or keeps its KV, emits.
  void finish(Choice& c, RequestEvent& event, FinishReason reason, const std::string& error = {});
  void finish_request(Request& r, FinishReason reason, const std::string& error);
  void emit(Choice& c, RequestEvent& event);
  // No step could run while requests wait: fails the oldest waiting one (idle conversations hold the pool).
  void fail_stuck_request();

  LanguageModel& model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  Scheduler scheduler_;
  std::vector<std::unique_ptr<Request>> requests_;  // admitted, not finished
  std::function<void(const StepRecord&)> observer_;
  EngineStats stats_;
  uint64_t next_order_ = 0;
  // Constrained decoding: each token's text alone, indexed (built at the first JSON request).
  ConstraintVocabulary vocabulary_;
  int32_t gemma4_quote_id_ = -1;  // the special token <|"|> when the tokenizer has one

  mutable std::mutex mutex_;  // guards the members below
  std::condition_variable work_;
  std::vector<Incoming> incoming_;
  std::vector<RequestId> cancelled_;
  std::unordered_set<const Conversation*> conversations_in_use_;
  RequestId next_id_ = 1;
  std::atomic<int64_t> live_requests_{0};
};

}  // namespace lmx
