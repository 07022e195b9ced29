// lmx::Scheduler on a real KvCache (host blocks): token budgets and chunking, admission by blocks in
// arrival order, preemption of the newest and its recompute (prompt chunks, then one token at a time),
// max rows, removal freeing blocks.
#include "lmx/engine/scheduler.h"
#include "lmx/core/error.h"
#include "lmx/kv/host_kv.h"

#include <gtest/gtest.h>

#include <deque>

namespace lmx {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  // One full-attention layer (1 head of 4 f32: 32 bytes per token) in blocks of 4 tokens (128 bytes),
  // under a budget of `blocks` blocks.
  void make_cache(int blocks) {
    const std::vector<KvLayerGeometry> layers = {{1, 4, 0, -1}};
    KvCacheOptions options;
    options.block_tokens = 4;
    options.budget_bytes = static_cast<size_t>(blocks) * 128;
    cache_ = std::make_unique<KvCache>(layers, options, host_kv_memory());
  }
  ScheduledSequence* add(Scheduler& scheduler, int64_t prompt) {
    auto& s = sequences_.emplace_back();
    s.order = sequences_.size();
    s.tokens.assign(static_cast<size_t>(prompt), 5);
    s.prompt_tokens = prompt;
    scheduler.add(&s);
    return &s;
  }
  // Commits the plan's rows as the model would, and appends a token to every row that samples.
  static void run(const StepPlan& plan) {
    std::vector<KvRow> rows;
    for (const ScheduledRow& r : plan.rows) rows.push_back({r.sequence->kv.get(), r.count});
    KvCache::commit(rows);
    for (const ScheduledRow& r : plan.rows)
      if (r.samples) r.sequence->tokens.push_back(7);
  }
  static std::vector<std::pair<int64_t, int64_t>> spans(const StepPlan& plan) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const ScheduledRow& r : plan.rows) out.emplace_back(r.begin, r.count);
    return out;
  }

  std::unique_ptr<KvCache> cache_;
  std::deque<ScheduledSequence> sequences_;
};

TEST_F(SchedulerTest, ChunksPromptsUnderTheTokenBudget) {
  make_cache(100);
  Scheduler scheduler(*cache_, {.step_tokens = 8, .prefill_chunk_tokens = 4, .max_rows = 8});
  ScheduledSequence* a = add(scheduler, 10);
  ScheduledSequence* b = add(scheduler, 6);
  ScheduledSequence* c = add(scheduler, 3);
  StepPlan p = scheduler.schedule();
  using Spans = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(spans(p), (Spans{{0, 4}, {0, 4}}));  // c's chunk does not fit the 8 tokens
  EXPECT_EQ(p.tokens, 8);
  EXPECT_FALSE(p.rows[0].samples);
  run(p);
  p = scheduler.schedule();
  EXPECT_EQ(spans(p), (Spans{{4, 4}, {4, 2}}));  // c's 3 tokens wait: 2 left after a and b
  EXPECT_TRUE(p.rows[1].samples);
  run(p);
  // b decodes (1 token), a's last chunk (2) and c's prompt (3) share the rest.
  p = scheduler.schedule();
  EXPECT_EQ(spans(p), (Spans{{8, 2}, {6, 1}, {0, 3}}));
  EXPECT_EQ(p.rows[0].sequence, a);
  EXPECT_EQ(p.rows[1].sequence, b);
  EXPECT_EQ(p.rows[2].sequence, c);
  EXPECT_TRUE(p.rows[0].samples && p.rows[1].samples && p.rows[2].samples);
  run(p);
  EXPECT_EQ(scheduler.running().size(), 3u);
  EXPECT_TRUE(scheduler.waiting().empty());
}

TEST_F(SchedulerTest, DecodeRowsAlwaysRunAndOneChunkFits) {
  make_cache(100);
  Scheduler scheduler(*cache_, {.step_tokens = 2, .prefill_chunk_tokens = 4, .max_rows = 8});
  for (int i = 0; i < 3; ++i) add(scheduler, 1);
  StepPlan p = scheduler.schedule();
  ASSERT_EQ(p.rows.size(), 3u);  // one-token prompts; at least one chunk's worth always fits
  run(p);
  add(scheduler, 5);
  p = scheduler.schedule();
  // Three decode rows exceed the budget of 2, yet all run, and the waiting prompt still gets a chunk.
  ASSERT_EQ(p.rows.size(), 4u);
  EXPECT_EQ(p.rows[3].count, 4);
  EXPECT_EQ(p.tokens, 7);
}

TEST_F(SchedulerTest, AdmitsInArrivalOrderWhileBlocksFit) {
  make_cache(4);  // 16 tokens
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 16, .max_rows = 8});
  ScheduledSequence* a = add(scheduler, 9);  // 3 blocks
  ScheduledSequence* b = add(scheduler, 6);  // 2 blocks: does not fit beside a
  ScheduledSequence* c = add(scheduler, 2);  // 1 block would fit, but may not overtake b
  StepPlan p = scheduler.schedule();
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].sequence, a);
  EXPECT_EQ(scheduler.waiting().size(), 2u);
  run(p);
  // a finishes: its blocks return and b, then c, are admitted.
  scheduler.remove(a);
  a->kv.reset();
  p = scheduler.schedule();
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0].sequence, b);
  EXPECT_EQ(p.rows[1].sequence, c);
  EXPECT_EQ(cache_->pool().used_blocks(0), 3);
}

TEST_F(SchedulerTest, PreemptsTheNewestAndRecomputesItExactly) {
  make_cache(4);
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 3, .max_rows = 8});
  ScheduledSequence* a = add(scheduler, 4);
  ScheduledSequence* b = add(scheduler, 5);
  // a: rows (0,3) (3,1); b: (0,3) (3,2); both then decode one token per step.
  for (int step = 0; step < 2; ++step) run(scheduler.schedule());
  EXPECT_EQ(a->computed(), 4);
  EXPECT_EQ(b->computed(), 5);
  // a needs its 2nd block at position 4 (after 1 decode), b its 2nd at once: 4 blocks in use.
  run(scheduler.schedule());
  EXPECT_EQ(cache_->pool().used_blocks(0), 4);
  // Decode until a needs a third block: the pool is full, so b (the newest) is preempted.
  StepPlan p;
  while (p.preempted.empty()) {
    p = scheduler.schedule();
    ASSERT_FALSE(p.empty());
    run(p);
  }
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], b);
  EXPECT_EQ(b->kv, nullptr);
  EXPECT_EQ(b->preemptions, 1);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].sequence, a);
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  const int64_t b_tokens = static_cast<int64_t>(b->tokens.size());
  // a finishes; b recomputes: its prompt in the same chunks (3, 2), then each generated token alone, and
  // only the row that reaches its last token samples.
  scheduler.remove(a);
  a->kv.reset();
  std::vector<std::pair<int64_t, int64_t>> recompute;
  for (;;) {
    p = scheduler.schedule();
    ASSERT_EQ(p.rows.size(), 1u);
    recompute.emplace_back(p.rows[0].begin, p.rows[0].count);
    const bool samples = p.rows[0].samples;
    EXPECT_EQ(samples, p.rows[0].begin + p.rows[0].count == b_tokens);
    run(p);
    if (samples) break;
  }
  std::vector<std::pair<int64_t, int64_t>> expected = {{0, 3}, {3, 2}};
  for (int64_t t = 5; t < b_tokens; ++t) expected.emplace_back(t, 1);
  EXPECT_EQ(recompute, expected);
}

TEST_F(SchedulerTest, ASequenceThatAloneOutgrowsThePoolPreemptsItself) {
  make_cache(2);
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 8, .max_rows = 8});
  ScheduledSequence* a = add(scheduler, 8);
  run(scheduler.schedule());
  const StepPlan p = scheduler.schedule();  // position 8 needs a third block
  EXPECT_TRUE(p.empty());
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], a);
  EXPECT_EQ(cache_->pool().used_blocks(0), 0);
}

TEST_F(SchedulerTest, MaxRowsCapsRunningSequences) {
  make_cache(100);
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 8, .max_rows = 2});
  for (int i = 0; i < 5; ++i) add(scheduler, 2);
  const StepPlan p = scheduler.schedule();
  EXPECT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(scheduler.running().size(), 2u);
  EXPECT_EQ(scheduler.waiting().size(), 3u);
}

TEST_F(SchedulerTest, RemovingASequenceFreesItsBlocks) {
  make_cache(100);
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 64, .max_rows = 8});
  ScheduledSequence* a = add(scheduler, 10);
  ScheduledSequence* b = add(scheduler, 10);
  run(scheduler.schedule());
  EXPECT_EQ(cache_->pool().used_blocks(0), 6);
  scheduler.remove(a);
  a->kv.reset();
  EXPECT_EQ(cache_->pool().used_blocks(0), 3);
  const StepPlan p = scheduler.schedule();
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].sequence, b);
}

TEST_F(SchedulerTest, RefusesBadOptions) {
  make_cache(4);
  EXPECT_THROW(Scheduler(*cache_, {.step_tokens = 8, .prefill_chunk_tokens = 0, .max_rows = 1}),
               InvalidArgument);
  EXPECT_THROW(Scheduler(*cache_, {.step_tokens = 0, .prefill_chunk_tokens = 1, .max_rows = 1}),
               InvalidArgument);
  EXPECT_THROW(Scheduler(*cache_, {.step_tokens = 8, .prefill_chunk_tokens = 1, .max_rows = 0}),
               InvalidArgument);
}

// Under a KV quantization start: chunks end at the start, a sequence at it converts with its next row, and
// while sequences on both sides have work the steps alternate between the sides.
TEST_F(SchedulerTest, QuantStartChunksEndThereAndSidesAlternate) {
  const std::vector<KvLayerGeometry> layers = {{1, 32, 0, -1}};
  KvCacheOptions options;
  options.codec = KvCodec::affine(8, 32);
  options.block_tokens = 4;
  options.budget_bytes = 1 << 20;
  options.quant_start = 6;
  cache_ = std::make_unique<KvCache>(layers, options, host_kv_memory());
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 4, .max_rows = 8});
  using Spans = std::vector<std::pair<int64_t, int64_t>>;
  ScheduledSequence* a = add(scheduler, 10);
  StepPlan p = scheduler.schedule();
  EXPECT_EQ(spans(p), (Spans{{0, 4}}));
  run(p);
  p = scheduler.schedule();
  EXPECT_EQ(spans(p), (Spans{{4, 2}}));  // the chunk ends at the start
  run(p);
  EXPECT_TRUE(a->kv->before_quant_start());
  ScheduledSequence* b = add(scheduler, 3);
  // a (at the start: the converted side) and b (before it) alternate.
  std::vector<ScheduledSequence*> ran;
  for (int step = 0; step < 4; ++step) {
    p = scheduler.schedule();
    ASSERT_EQ(p.rows.size(), 1u) << "step " << step;
    ran.push_back(p.rows[0].sequence);
    run(p);
  }
  EXPECT_FALSE(a->kv->before_quant_start());
  EXPECT_NE(ran[0], ran[1]);
  EXPECT_EQ(ran[0], ran[2]);
  EXPECT_EQ(ran[1], ran[3]);
  EXPECT_TRUE(ran[0] == a || ran[0] == b);
}

// When the side whose turn it is can run nothing (its only sequence does not fit the pool), the other side
// runs: the step is never empty while something could run.
TEST_F(SchedulerTest, QuantStartTheOtherSideRunsWhenItsTurnCannot) {
  const std::vector<KvLayerGeometry> layers = {{1, 32, 0, -1}};
  KvCacheOptions options;
  options.codec = KvCodec::affine(8, 32);
  options.block_tokens = 4;
  options.budget_bytes = 1164;  // a's 3 converted blocks (864 bytes) and not b's first bf16 block (512)
  options.prefix_cache_bytes = 0;
  options.quant_start = 4;
  cache_ = std::make_unique<KvCache>(layers, options, host_kv_memory());
  Scheduler scheduler(*cache_, {.step_tokens = 64, .prefill_chunk_tokens = 4, .max_rows = 8});
  ScheduledSequence* a = add(scheduler, 10);
  while (a->computed() < 10) run(scheduler.schedule());
  EXPECT_FALSE(a->kv->before_quant_start());
  ScheduledSequence* b = add(scheduler, 4);
  for (int step = 0; step < 3; ++step) {
    const StepPlan p = scheduler.schedule();
    ASSERT_EQ(p.rows.size(), 1u) << "step " << step;
    EXPECT_EQ(p.rows[0].sequence, a) << "step " << step;
    run(p);
  }
  EXPECT_EQ(scheduler.waiting().front(), b);
}

}  // namespace
}  // namespace lmx
