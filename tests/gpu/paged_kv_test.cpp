// The paged KV cache on CUDA through the model: f32 KV (the exactness reference) against transformers' f32
// goldens at the CPU's tolerance; the demo model's greedy continuations equal the CPU's; block sizes change
// no bits; forks share blocks and copy a shared partial block on write; pool exhaustion is a typed error that
// changes nothing. Skips without a GPU.
#include "lmx/engine/greedy.h"
#include "lmx/io/fingerprint.h"
#include "lmx/kv/block_pool.h"
#include "lmx/kv/snapshot.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/cuda/device_memory.h"
#include "support/goldens.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace lmx {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);
constexpr float kCpuParityTolerance = 1e-3f;  // tests/parity/transformers_parity_test.cpp

std::vector<int32_t> prompt_of(int length, int vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < length; ++i)
    ids.push_back(static_cast<int32_t>(3 + (i * 7919 + salt * 104729) % (vocab - 3)));
  return ids;
}

Tensor run(LanguageModel& model, Sequence& seq, std::span<const int32_t> tokens, bool all = false) {
  StepRow row{&seq, tokens};
  return model.forward({&row, 1}, all);
}

ModelOptions f32_kv() {
  ModelOptions o;
  o.kv_codec = KvCodec(KvCodecKind::kF32);
  return o;
}

class CudaExactness : public ::testing::TestWithParam<std::string> {};

// With --kv-cache f32 the GPU computes in f32 throughout and matches transformers like the CPU does.
TEST_P(CudaExactness, F32KvMatchesTransformersAtTheCpuTolerance) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::reference_model_dir(GetParam());
  auto model = test::load_model(dir, kGpu, f32_kv());
  float worst = 0;
  for (const auto& g : test::load_goldens(dir)) {
    auto seq = model->new_sequence();
    Tensor logits = run(*model, *seq, g.prompt, true);
    ASSERT_EQ(logits.shape(), g.logits.shape());
    const float diff = test::max_abs_diff(logits, g.logits);
    EXPECT_LE(diff, kCpuParityTolerance) << "prompt of " << g.prompt.size() << " tokens";
    worst = std::max(worst, diff);
    GreedyOptions options;
    options.max_new_tokens = static_cast<int>(g.greedy.size());
    EXPECT_EQ(generate_greedy(*model, g.prompt, options).tokens, g.greedy) << "prompt of " << g.prompt.size();
  }
  std::printf("%s on CUDA with f32 KV: max |Δlogit| = %.3g\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, CudaExactness,
                         ::testing::Values("tiny-e2b", "tiny-26b-moe", "tiny-31b", "tiny-e2b-q4",
                                           "tiny-26b-moe-q4", "tiny-31b-q4", "models/demo"),
                         test::ParamName());

// The demo model's greedy continuations on CUDA (bf16 KV, the default) are the CPU's.
TEST(CudaPagedKv, DemoGreedyMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::reference_model_dir("models/demo");
  auto cpu = test::load_model(dir), gpu = test::load_model(dir, kGpu);
  for (int salt = 1; salt <= 4; ++salt) {
    const auto prompt = prompt_of(20 * salt, cpu->description().vocab_size, salt);
    GreedyOptions options;
    options.max_new_tokens = 40;
    EXPECT_EQ(generate_greedy(*gpu, prompt, options).tokens, generate_greedy(*cpu, prompt, options).tokens)
        << "prompt " << salt;
  }
}

class CudaPagedModels : public ::testing::TestWithParam<std::string> {};

// Blocks of 64, 128 and 256 tokens: the kernels address keys through the tables, so the bits do not move.
TEST_P(CudaPagedModels, BlockSizeChangesNoBits) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::tiny_model_dir(GetParam());
  std::vector<Tensor> results;
  for (int block : {64, 128, 256}) {
    ModelOptions o;
    o.kv_block_tokens = block;
    auto model = test::load_model(dir, kGpu, o);
    const auto prompt = prompt_of(330, model->description().vocab_size, 3);
    auto seq = model->new_sequence();
    run(*model, *seq, std::span<const int32_t>(prompt).first(200));
    Tensor last;
    for (size_t i = 200; i < prompt.size(); ++i) last = run(*model, *seq, {&prompt[i], 1});
    results.push_back(last);
    // Sliding groups hold only the blocks their window reaches (on the device too).
    const KvLayout& layout = model->kv_cache().layout();
    for (int g = 0; g < layout.num_groups(); ++g) {
      if (layout.group(g).window > 0) {
        EXPECT_LE(model->kv_cache().pool().used_blocks(g), (layout.group(g).window - 1) / block + 2) << block;
      }
    }
  }
  EXPECT_EQ(test::max_abs_diff(results[0], results[1]), 0.0f);
  EXPECT_EQ(test::max_abs_diff(results[0], results[2]), 0.0f);
}

// A fork shares the source's blocks; whichever sequence writes into the shared partial block first copies
// it. Each sequence's logits are those of a fresh sequence fed the same steps.
TEST_P(CudaPagedModels, ForksShareBlocksAndCopyOnWrite) {
  SKIP_WITHOUT_GPU();
  auto model = test::load_model(test::tiny_model_dir(GetParam()), kGpu);
  const int vocab = model->description().vocab_size;
  const auto prefix = prompt_of(100, vocab, 5), a_tail = prompt_of(30, vocab, 6),
             b_tail = prompt_of(30, vocab, 7);
  auto a = model->new_sequence();
  run(*model, *a, prefix);
  const int64_t used = model->kv_cache().pool().used_bytes();
  auto b = model->fork(*a, 100);
  EXPECT_EQ(model->kv_cache().pool().used_bytes(), used) << "a fork copies nothing";
  auto c = model->fork(*a, 70);
  auto decode = [&](Sequence& seq, const std::vector<int32_t>& tail) {
    Tensor last;
    for (int32_t t : tail) last = run(*model, seq, {&t, 1});
    return last;
  };
  const Tensor got_b = decode(*b, b_tail), got_a = decode(*a, a_tail), got_c = decode(*c, a_tail);
  auto fresh = [&](size_t prefix_len, const std::vector<int32_t>& tail) {
    auto seq = model->new_sequence();
    run(*model, *seq, std::span<const int32_t>(prefix).first(prefix_len));
    return decode(*seq, tail);
  };
  EXPECT_EQ(test::max_abs_diff(got_a, fresh(100, a_tail)), 0.0f);
  EXPECT_EQ(test::max_abs_diff(got_b, fresh(100, b_tail)), 0.0f);
  EXPECT_EQ(test::max_abs_diff(got_c, fresh(70, a_tail)), 0.0f);
}

// A budget of a few blocks: a step that does not fit throws KvPoolExhausted and appends nothing; after
// another sequence is gone the same step runs.
TEST_P(CudaPagedModels, PoolExhaustionIsTyped) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::tiny_model_dir(GetParam());
  size_t one_of_each = 0;
  {
    auto probe = test::load_model(dir, kGpu);
    for (int g = 0; g < probe->kv_cache().layout().num_groups(); ++g)
      one_of_each += probe->kv_cache().layout().group(g).block_bytes;
  }
  ModelOptions o;
  o.kv_budget_bytes = 2 * one_of_each;  // 128 tokens of every group
  auto model = test::load_model(dir, kGpu, o);
  const auto prompt = prompt_of(100, model->description().vocab_size, 9);
  auto first = model->new_sequence(), second = model->new_sequence();
  run(*model, *first, prompt);
  EXPECT_THROW(run(*model, *second, prompt), KvPoolExhausted);
  EXPECT_EQ(second->length(), 0);
  first.reset();
  Tensor logits = run(*model, *second, prompt);
  auto fresh = test::load_model(dir, kGpu);
  auto seq = fresh->new_sequence();
  EXPECT_EQ(test::max_abs_diff(logits, run(*fresh, *seq, prompt)), 0.0f);
}

// Snapshots across backends: a device sequence saved, loaded into a CPU cache of the same codec and saved
// again gives the same file bytes; loaded into another device model it continues with the same logits.
TEST_P(CudaPagedModels, SnapshotsMoveBetweenBackends) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::tiny_model_dir(GetParam());
  ModelOptions bf16;
  bf16.kv_codec = KvCodec(KvCodecKind::kBf16);
  auto gpu = test::load_model(dir, kGpu, bf16), gpu2 = test::load_model(dir, kGpu, bf16);
  auto cpu = test::load_model(dir, Device::cpu(), bf16);
  const KvSnapshotIdentity id{model_fingerprint(dir), tokenizer_fingerprint(dir)};
  const auto prompt = prompt_of(150, gpu->description().vocab_size, 3);
  auto seq = gpu->new_sequence();
  run(*gpu, *seq, prompt);
  test::TempDir tmp;
  save_kv_snapshot(tmp.file("gpu"), gpu->kv_cache(), gpu->kv_cache().own(seq.get()), prompt, id);
  KvSnapshot on_cpu = load_kv_snapshot(tmp.file("gpu"), cpu->kv_cache(), id);
  save_kv_snapshot(tmp.file("cpu"), cpu->kv_cache(), *on_cpu.sequence, on_cpu.tokens, id);
  std::FILE* a = std::fopen(tmp.file("gpu").c_str(), "rb");
  std::FILE* b = std::fopen(tmp.file("cpu").c_str(), "rb");
  ASSERT_TRUE(a && b);
  std::vector<char> bytes_a(1 << 20), bytes_b(1 << 20);
  size_t na = 0, nb = 0;
  bool same = true;
  do {
    na = std::fread(bytes_a.data(), 1, bytes_a.size(), a);
    nb = std::fread(bytes_b.data(), 1, bytes_b.size(), b);
    same = same && na == nb &&
           std::equal(bytes_a.begin(), bytes_a.begin() + static_cast<std::ptrdiff_t>(na), bytes_b.begin());
  } while (na > 0 && same);
  std::fclose(a);
  std::fclose(b);
  EXPECT_TRUE(same) << "the CPU's copy of the device's KV differs";
  KvSnapshot on_gpu = load_kv_snapshot(tmp.file("cpu"), gpu2->kv_cache(), id);
  const std::vector<int32_t> next = {7, 11, 13};
  for (int32_t t : next) {
    const Tensor x = run(*gpu, *seq, std::span(&t, 1)), y = run(*gpu2, *on_gpu.sequence, std::span(&t, 1));
    EXPECT_EQ(test::max_abs_diff(x, y), 0.0f);
  }
}

// The quantized codecs through the model: a device sequence's coded KV saved and loaded into a second device
// model continues with the same logits (bit for bit); loaded into a CPU model of the same codec — the same
// stored bytes, read by the CPU's attention — it continues with logits within the demo model's bf16
// CPU-to-CUDA distance (0.07 measured; bound 0.25) or, where larger, within what the codec itself changes
// (the CPU's logits with the codec against bf16 KV): each backend codes its new tokens' K and V, computed a
// little differently, and with 4-bit keys a code can round the other way — a change of the codec's own size.
// (The codes themselves and attention over them are compared exactly in CudaKvCodecs.)
TEST(CudaPagedKv, QuantizedCodecsContinueOnEitherBackend) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::reference_model_dir("models/demo");
  const KvSnapshotIdentity id{model_fingerprint(dir), tokenizer_fingerprint(dir)};
  for (const char* spec : {"affine4", "affine8:g32", "turbo", "turbo:k4v3", "turbo:k8v2"}) {
    SCOPED_TRACE(spec);
    ModelOptions o;
    o.kv_codec = KvCodec::parse(spec);
    auto gpu = test::load_model(dir, kGpu, o), gpu2 = test::load_model(dir, kGpu, o);
    auto cpu = test::load_model(dir, Device::cpu(), o);
    ModelOptions bf16;
    bf16.kv_codec = KvCodec(KvCodecKind::kBf16);
    auto cpu_bf16 = test::load_model(dir, Device::cpu(), bf16);
    const auto prompt = prompt_of(150, gpu->description().vocab_size, 5);
    auto seq = gpu->new_sequence(), plain = cpu_bf16->new_sequence();
    run(*gpu, *seq, prompt);
    run(*cpu_bf16, *plain, prompt);
    test::TempDir tmp;
    save_kv_snapshot(tmp.file("kv"), gpu->kv_cache(), gpu->kv_cache().own(seq.get()), prompt, id);
    KvSnapshot on_gpu = load_kv_snapshot(tmp.file("kv"), gpu2->kv_cache(), id);
    KvSnapshot on_cpu = load_kv_snapshot(tmp.file("kv"), cpu->kv_cache(), id);
    for (int32_t t : {7, 11, 13, 17}) {
      const Tensor x = run(*gpu, *seq, std::span(&t, 1));
      EXPECT_EQ(test::max_abs_diff(x, run(*gpu2, *on_gpu.sequence, std::span(&t, 1))), 0.0f);
      const Tensor y = run(*cpu, *on_cpu.sequence, std::span(&t, 1));
      const float across = test::max_abs_diff(x, y);
      const float codec = test::max_abs_diff(y, run(*cpu_bf16, *plain, std::span(&t, 1)));
      std::printf("%s token %d: CPU-CUDA %.3f, codec vs bf16 on the CPU %.3f\n", spec, t, across, codec);
      EXPECT_LE(across, std::max(0.25f, codec));
    }
  }
}

// A KV quantization start on the device: below it the logits are the bf16 cache's bit for bit and within the
// bf16 CPU-to-CUDA distance of the CPU; decode steps (graphed) run up to it, and the sequence converts there
// (on the host, through the device memory) and decodes on. The conversion is checked from one bf16 history:
// the device sequence's, saved at the start and loaded into a second device model and into a CPU model, which
// convert the same bytes. The second device model continues bit for bit like the first; the CPU within the
// bf16 distance or, where larger, what the codec itself changes there (the CPU's logits against bf16 KV; as
// in QuantizedCodecsContinueOnEitherBackend: each backend codes its new tokens itself). (Two backends that
// each convert their own bf16 history differ by more — 4-bit codes of slightly different values round apart —
// measured on an H100, 2026-12-06: up to 1.4 for affine4 against a codec change of 1.0-2.0.)
TEST(CudaPagedKv, QuantStartMatchesItsBf16PrefixAndTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::reference_model_dir("models/demo");
  const KvSnapshotIdentity id{model_fingerprint(dir), tokenizer_fingerprint(dir)};
  constexpr int64_t kStart = 100;
  for (const char* spec : {"affine4", "turbo"}) {
    SCOPED_TRACE(spec);
    ModelOptions o;
    o.kv_codec = KvCodec::parse(spec);
    o.kv_quant_start = kStart;
    ModelOptions bf16;
    bf16.kv_codec = KvCodec(KvCodecKind::kBf16);
    auto gpu = test::load_model(dir, kGpu, o), gpu2 = test::load_model(dir, kGpu, o);
    auto plain = test::load_model(dir, kGpu, bf16);
    auto cpu = test::load_model(dir, Device::cpu(), o), cpu_bf16 = test::load_model(dir, Device::cpu(), bf16);
    std::vector<int32_t> tokens = prompt_of(90, gpu->description().vocab_size, 9);
    auto seq = gpu->new_sequence(), ref = plain->new_sequence(), host = cpu->new_sequence();
    const Tensor a = run(*gpu, *seq, tokens, true), b = run(*plain, *ref, tokens, true);
    EXPECT_EQ(test::max_abs_diff(a, b), 0.0f);
    run(*cpu, *host, tokens);
    auto next = [](int i) { return static_cast<int32_t>(5 + i * 13); };
    for (int i = 0; i < 10; ++i) {  // positions 90 .. 99: decode graphs below the start
      const int32_t t = next(i);
      tokens.push_back(t);
      const Tensor x = run(*gpu, *seq, std::span(&t, 1));
      EXPECT_EQ(test::max_abs_diff(x, run(*plain, *ref, std::span(&t, 1))), 0.0f) << "position " << 90 + i;
      EXPECT_LE(test::max_abs_diff(x, run(*cpu, *host, std::span(&t, 1))), 0.25f) << "position " << 90 + i;
    }
    ASSERT_TRUE(gpu->kv_cache().own(seq.get()).before_quant_start());
    test::TempDir tmp;
    save_kv_snapshot(tmp.file("kv"), gpu->kv_cache(), gpu->kv_cache().own(seq.get()), tokens, id);
    KvSnapshot on_gpu = load_kv_snapshot(tmp.file("kv"), gpu2->kv_cache(), id);
    KvSnapshot on_cpu = load_kv_snapshot(tmp.file("kv"), cpu->kv_cache(), id);
    auto host_bf16 = cpu_bf16->new_sequence();
    run(*cpu_bf16, *host_bf16, tokens);
    for (int i = 10; i < 20; ++i) {  // positions 100 .. 109: the conversion, then decode past it
      const int32_t t = next(i);
      const Tensor x = run(*gpu, *seq, std::span(&t, 1));
      EXPECT_EQ(test::max_abs_diff(x, run(*gpu2, *on_gpu.sequence, std::span(&t, 1))), 0.0f)
          << "position " << 90 + i;
      const Tensor y = run(*cpu, *on_cpu.sequence, std::span(&t, 1));
      const float across = test::max_abs_diff(x, y);
      const float codec = test::max_abs_diff(y, run(*cpu_bf16, *host_bf16, std::span(&t, 1)));
      std::printf("%s position %d: CPU-CUDA %.3f, codec vs bf16 on the CPU %.3f\n", spec, 90 + i, across,
                  codec);
      EXPECT_LE(across, std::max(0.25f, codec)) << "position " << 90 + i;
    }
    EXPECT_FALSE(gpu->kv_cache().own(seq.get()).before_quant_start());
    EXPECT_EQ(gpu->kv_cache().own(seq.get()).min_reusable_offset(), kStart);
    EXPECT_EQ(on_gpu.sequence->min_reusable_offset(), kStart);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaPagedModels, ::testing::Values("e2b", "moe", "dense", "moe-q4"),
                         test::ParamName());

}  // namespace
}  // namespace lmx
