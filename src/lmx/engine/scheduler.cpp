// lmx::Scheduler: step planning, admission by KV blocks and preemption by recompute.
#include "lmx/engine/scheduler.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <cassert>

namespace lmx {

void validate(const SchedulerOptions& options) {
  LMX_REQUIRE(InvalidArgument, options.prefill_chunk_tokens >= 1,
              "scheduler: prefill chunk must be ≥ 1, got {}", options.prefill_chunk_tokens);
  LMX_REQUIRE(InvalidArgument, options.step_tokens >= 1, "scheduler: step tokens must be ≥ 1, got {}",
              options.step_tokens);
  LMX_REQUIRE(InvalidArgument, options.max_rows >= 1, "scheduler: max rows must be ≥ 1, got {}",
              options.max_rows);
}

namespace {
// Inserts `s` into `list` keeping arrival order.
void insert_in_order(std::vector<ScheduledSequence*>& list, ScheduledSequence* s) {
  auto at = std::upper_bound(
      list.begin(), list.end(), s,
      [](const ScheduledSequence* a, const ScheduledSequence* b) { return a->order < b->order; });
  list.insert(at, s);
}

bool in_prefill(const ScheduledSequence& s) {
  return s.computed() < s.prompt_tokens;
}
}  // namespace

Scheduler::Scheduler(KvCache& cache, SchedulerOptions options) : cache_(cache), options_(options) {
  validate(options_);
}

void Scheduler::add(ScheduledSequence* sequence) {
  assert(sequence->prompt_tokens >= 1 &&
         static_cast<int64_t>(sequence->tokens.size()) >= sequence->prompt_tokens);
  insert_in_order(waiting_, sequence);
}

void Scheduler::remove(ScheduledSequence* sequence) {
  std::erase(running_, sequence);
  std::erase(waiting_, sequence);
}

ScheduledRow Scheduler::next_row(ScheduledSequence* s) const {
  const int64_t begin = s->computed();
  const int64_t count =
      std::min(begin < s->prompt_tokens ? std::min(options_.prefill_chunk_tokens, s->prompt_tokens - begin)
                                        : int64_t{1},
               cache_.step_limit(*s->kv));
  assert(begin + count <= static_cast<int64_t>(s->tokens.size()));
  return {s, begin, count, begin + count == static_cast<int64_t>(s->tokens.size())};
}

bool Scheduler::reserve(const ScheduledRow& row) {
  const KvRow kv_row{row.sequence->kv.get(), row.count};
  return cache_.try_prepare({&kv_row, 1});
}

void Scheduler::preempt(ScheduledSequence* s, StepPlan& plan) {
  s->kv.reset();
  ++s->preemptions;
  std::erase(running_, s);
  insert_in_order(waiting_, s);
  plan.preempted.push_back(s);
}

void Scheduler::give_kv(ScheduledSequence* s) {
  if (s->kv) return;
  s->kv = cache_.reuse_prefix(s->tokens, static_cast<int64_t>(s->tokens.size()) - 1);
  if (s->kv && s->preemptions == 0) s->cached_tokens = s->kv->length();
  if (!s->kv) s->kv = cache_.new_sequence();
}

int Scheduler::choose_phase() {
  if (cache_.quant_start() == 0) return -1;
  bool before = false, after = false;
  auto note = [&](const ScheduledSequence* s) { (cache_.step_phase(*s->kv) == 0 ? before : after) = true; };
  for (const ScheduledSequence* s : running_) note(s);
  if (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_rows) {
    give_kv(waiting_.front());
    note(waiting_.front());
  }
  return before && after ? 1 - last_phase_ : -1;
}

StepPlan Scheduler::schedule() {
  // Under a KV quantization start a step's rows share one side of it: while sequences on both sides run,
  // steps alternate between them (and when the side whose turn it is can run nothing — its only candidate
  // does not fit the pool — the other side runs); otherwise the first row placed decides.
  const int turn = choose_phase();
  StepPlan plan;
  plan_step(plan, turn);
  if (plan.rows.empty() && turn >= 0) plan_step(plan, 1 - turn);
  return plan;
}

void Scheduler::plan_step(StepPlan& plan, int phase) {
  auto fits_phase = [&](const ScheduledSequence* s) {
    return phase < 0 || cache_.step_phase(*s->kv) == phase;
  };
  const auto decoding = std::count_if(running_.begin(), running_.end(),
                                      [](const ScheduledSequence* s) { return !in_prefill(*s); });
  // Prefill chunks share what decode rows leave, but one chunk always fits.
  int64_t prefill_budget = std::max(options_.step_tokens - decoding, options_.prefill_chunk_tokens);
  auto place = [&](const ScheduledRow& row) {
    if (cache_.quant_start() > 0 && phase < 0) phase = cache_.step_phase(*row.sequence->kv);
    plan.rows.push_back(row);
    plan.tokens += row.count;
    if (in_prefill(*row.sequence)) prefill_budget -= row.count;
  };

  for (size_t i = 0; i < running_.size();) {
    ScheduledSequence* s = running_[i];
    if (!fits_phase(s)) {
      ++i;  // the other side of the quantization start runs next step
      continue;
    }
    const ScheduledRow row = next_row(s);
    if (in_prefill(*s) && row.count > prefill_budget) {
      ++i;  // its chunk waits for a step with room
      continue;
    }
    bool reserved = reserve(row);
    while (!reserved) {
      ScheduledSequence* victim = running_.back();
      preempt(victim, plan);
      if (victim == s) break;
      reserved = reserve(row);
    }
    if (!reserved) break;  // s itself was the newest: nothing after it remains
    place(row);
    ++i;
  }

  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_rows) {
    ScheduledSequence* s = waiting_.front();
    // One preempted this step stays out: taking it back now would recompute it every step.
    if (std::find(plan.preempted.begin(), plan.preempted.end(), s) != plan.preempted.end()) break;
    give_kv(s);
    if (!fits_phase(s)) break;
    const ScheduledRow row = next_row(s);
    if (in_prefill(*s) && row.count > prefill_budget) break;
    if (!reserve(row)) break;
    waiting_.erase(waiting_.begin());
    insert_in_order(running_, s);
    place(row);
  }
  if (phase >= 0) last_phase_ = phase;
}

}  // namespace lmx
