// lmx::Scheduler: what each engine step runs. One step is one ragged batch: a row per running sequence
// (one token for a sequence past its prompt, a prefill chunk otherwise) under a token budget, with
// sequences admitted in arrival order while their KV blocks fit and the newest preempted (blocks
// released, recomputed later) when running sequences outgrow the pool.
//
// Chunking is a property of the sequence, never of the step: a prompt runs in chunks of exactly
// prefill_chunk_tokens from where its KV starts (the last chunk shorter), and every token after the
// prompt runs alone — also when a preempted sequence recomputes its generated tokens. So a sequence's
// logits never depend on which other sequences share its steps or on preemption (with the model's batch
// invariance, they are bit-identical), and neither do its sampled tokens. Under a KV quantization start
// (KvCache) chunks also end at the start, and a step runs the sequences of one side of it: while both
// sides have sequences to run, steps alternate between them.
#pragma once

#include "lmx/kv/kv_cache.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace lmx {

struct SchedulerOptions {
  // Tokens per step. Rows of sequences past their prompt (one token each) always run; prefill chunks
  // fill what is left, and at least one chunk runs per step when one is waiting.
  int64_t step_tokens = 2048;
  int64_t prefill_chunk_tokens = 512;  // ≥ 1
  int max_rows = 256;                  // running sequences (rows per step), ≥ 1
};
// InvalidArgument naming the bad field.
void validate(const SchedulerOptions& options);

// One sequence as the scheduler sees it. The engine owns it and fills `tokens`; the scheduler moves it
// between waiting and running and manages `kv`.
struct ScheduledSequence {
  uint64_t order = 0;              // arrival: smaller is older, admitted first and preempted last
  std::vector<int32_t> tokens;     // every token the sequence must hold: the prompt, then generated ones
  int64_t prompt_tokens = 0;       // ≥ 1
  std::unique_ptr<KvSequence> kv;  // null until admitted and after preemption (it then starts over)
  int preemptions = 0;
  int64_t cached_tokens = 0;  // tokens whose KV the prefix cache gave it at its first admission

  // Tokens whose KV is held.
  int64_t computed() const { return kv ? kv->length() : 0; }
};

struct ScheduledRow {
  ScheduledSequence* sequence = nullptr;
  int64_t begin = 0, count = 0;  // the row runs tokens[begin, begin + count); begin == computed()
  // Whether the row ends at the last known token, so its logits give the sequence's next token.
  bool samples = false;
};

struct StepPlan {
  std::vector<ScheduledRow> rows;  // running sequences in arrival order; their KV blocks are reserved
  std::vector<ScheduledSequence*> preempted;  // moved back to waiting this step, KV released
  int64_t tokens = 0;
  bool empty() const { return rows.empty(); }
};

class Scheduler {
 public:
  // InvalidArgument for bad options. The cache must outlive the scheduler.
  Scheduler(KvCache& cache, SchedulerOptions options);

  const SchedulerOptions& options() const { return options_; }
  // Queues a sequence (new, or with KV it already holds: a conversation's, a fork's).
  void add(ScheduledSequence* sequence);
  // Forgets a sequence (finished, cancelled); its KV stays with it.
  void remove(ScheduledSequence* sequence);

  // Plans the next step and reserves its KV blocks (KvCache::try_prepare): running sequences first,
  // oldest first, preempting the newest running ones while a row's blocks do not fit; then waiting ones
  // in arrival order while their first row fits the budget and the pool (a waiting sequence whose row
  // does not fit stops admission: no overtaking). A waiting sequence without KV starts from the longest
  // prefix of its tokens the KV cache's prefix cache holds (all but its last token at most). After the step
  // the caller commits the rows (LanguageModel::forward does) and appends sampled tokens.
  StepPlan schedule();

  const std::vector<ScheduledSequence*>& running() const { return running_; }
  const std::vector<ScheduledSequence*>& waiting() const { return waiting_; }

 private:
  // The row a sequence runs next: a prefill chunk or one token.
  ScheduledRow next_row(ScheduledSequence* sequence) const;
  bool reserve(const ScheduledRow& row);
  // Gives a waiting sequence without KV the longest cached prefix of its tokens, or a new sequence.
  void give_kv(ScheduledSequence* sequence);
  // The KV side (KvCache::step_phase) this step runs when sequences on both sides wait to, else -1.
  int choose_phase();
  // Adds to `plan` the rows of one step restricted to KV side `phase` (-1: whichever the first row has).
  void plan_step(StepPlan& plan, int phase);
  void preempt(ScheduledSequence* sequence, StepPlan& plan);

  KvCache& cache_;
  SchedulerOptions options_;
  std::vector<ScheduledSequence*> running_, waiting_;  // each in arrival order
  int last_phase_ = 0;
};

}  // namespace lmx
