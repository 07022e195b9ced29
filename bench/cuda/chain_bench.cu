// Benchmark of the boundary between two dependent kernels inside a CUDA graph: what a decode step pays per
// kernel besides its work. A chain of `length` kernels, each of `blocks` blocks of 128 threads, where every
// block reads the whole `width`-float output of the kernel before it (as a batch-1 projection reads its x)
// and writes its own slice of the next vector; optionally each block first streams `bytes_per_block` of
// never-written "weights" from HBM into shared memory (requested before its dependency wait, as
// q4_gemv_kernel requests its first ring chunks). Ways to wait for the kernel before:
//   plain  stream order (no programmatic launch): a block starts once the previous grid has finished;
//   pdl    programmatic dependent launch: blocks start early and sit in griddepcontrol.wait, which returns
//          once the previous grid has completed and flushed (what every lmx kernel does, launch.cuh);
//   early  as pdl, but each block lets the next kernel launch before its own wait (a deeper pipeline: kernels
//          two or more ahead may be resident and fetch their weights; lmx's contract does not allow it, since
//          its kernels read data written two kernels back before their wait);
//   flag   programmatic launch, but a block waits for a counter instead: every block of the previous kernel
//          adds one to its counter after writing its slice (fence, then a relaxed atomic), and thread 0 of
//          each block of the next one spins on an acquire load until the counter reaches the step's target.
//   tagged  no wait instruction: a vector element is one 64-bit word, the value and the tag of the step that
//           wrote it (one single-copy-atomic store publishes both), and each thread spins on its own
//           elements' loads until their tags are the step's (NCCL's "LL" protocol: the signal is the data,
//           no fence, counter or barrier). A block lets the next kernel launch once its inputs have arrived;
//   ahead   as tagged, but every block lets the next kernel launch at its start, so kernels many steps
//           ahead may be resident (with their weights requested), spinning until the chain reaches them.
// And, for comparison, no kernel boundaries at all:
//   persist  one persistent kernel (a cooperative launch: every block resident) that runs the chain's
//   `length`
//            steps as phases separated by a grid barrier (the same counter and acquire spin as flag); each
//            block requests the next phase's weights (double-buffered) as soon as it has read this phase's.
// Prints µs per kernel (graph replays of the whole chain, medians) and checks every value each block read:
// a stale read (a dependency that did not hold) makes the run fail. A tagged wait that spins ~4M times gives
// up and its cell reads "hang" (a chain that made no progress for ~seconds; before the barrier in
// tagged_link_kernel, `ahead` without weights did, see there).
//
// With `neighbours` n > 0 a block reads only the slices of blocks b - n .. b + n of the kernel before (a
// dependency on a few producers, as a head's attention has on its own q/k/v rows), and the flag and
// persistent waits spin on those blocks' own flags instead of one counter; stream order and PDL still wait
// for the whole previous grid.
//
// Usage: bench_cuda_chain [length] [width] [bytes_per_block] [neighbours]   (default 256 2560 0 0)
#include "bench_cuda_support.cuh"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using lmx::cuda::DeviceBuffer;

enum class Wait : int { kPlain, kPdl, kPdlEarly, kFlag, kTagged, kTaggedAhead };

constexpr int kThreads = 128;
constexpr int kMaxWeightBytes = 32 * 1024;  // (the persistent kernel holds two buffers)
constexpr int kMaxNeighbours = 63;          // (threads 0 .. 2n spin, one producer each)

struct Link {
  const float* in;
  float* out;
  const unsigned long long* tagged_in;  // (tagged: the vectors as tagged words instead of in and out)
  unsigned long long* tagged_out;
  int length;
  int width;
  int index;              // position in the chain; the values it reads are `index` (out = in + 1)
  const unsigned* epoch;  // replays of the chain so far + 1 (flag waits)
  unsigned* counters;     // [length]: blocks done, summed over replays (neighbours == 0)
  unsigned* flags;        // [length][blocks]: the epoch a block last finished in (neighbours > 0)
  int neighbours;
  const uint4* weights;  // this kernel's bytes (blocks * bytes_per_block), or null
  int weight_bytes;      // per block
  unsigned* errors;      // [0]: blocks that read a stale value; [1] (tagged): blocks that gave up waiting
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Tagged words (tagged): the value's bits low, the writing step's tag high. Relaxed gpu-scope accesses, so
// that a spinning load sees other SMs' stores (not a stale L1 line).
__device__ __forceinline__ unsigned long long load_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_tagged(unsigned long long* p, float value, unsigned tag) {
  const unsigned long long v = (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(value);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// The value at p once its tag is `tag`; NaN (a stale read) if it never comes (~a second of spinning), so that
// a broken wait fails the run instead of hanging it.
__device__ __forceinline__ float await_tagged(const unsigned long long* p, unsigned tag) {
  for (int spins = 0; spins < (1 << 22); ++spins) {
    const unsigned long long v = load_relaxed64(p);
    if (static_cast<unsigned>(v >> 32) == tag) return __uint_as_float(static_cast<unsigned>(v));
  }
  return __uint_as_float(0x7fc00000u);
}
// The tag of the values step k of replay `epoch` reads (step k writes tag + 1; the reset writes step 0's).
__device__ __forceinline__ unsigned step_tag(unsigned epoch, int length, int k) {
  return epoch * static_cast<unsigned>(length + 1) + static_cast<unsigned>(k);
}

// The input range block b reads: everything, or the slices of blocks b - n .. b + n (`per` values each).
struct ReadRange {
  int begin, end;
};
__device__ __forceinline__ ReadRange read_range(int width, int per, int neighbours) {
  if (neighbours == 0) return {0, width};
  const int b = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  return {max(b - neighbours, 0) * per, min(min(b + neighbours + 1, blocks) * per, width)};
}

// Spins (threads 0 .. 2n) until blocks b - n .. b + n of the step before have set their flags to `target`,
// then syncs the block.
__device__ __forceinline__ void wait_for_neighbours(const unsigned* step_flags, int neighbours,
                                                    unsigned target) {
  const int b = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  const int producer = b - neighbours + static_cast<int>(threadIdx.x);
  if (static_cast<int>(threadIdx.x) <= 2 * neighbours && producer >= 0 && producer < blocks)
    while (load_acquire(step_flags + producer) < target) {
    }
  __syncthreads();
}

// After the block's writes: sets its flag to `value` (neighbours > 0) or adds one to the step's counter.
__device__ __forceinline__ void signal_done(unsigned* counter, unsigned* step_flags, int neighbours,
                                            unsigned value) {
  __syncthreads();  // every thread's slice is written
  if (threadIdx.x == 0) {
    __threadfence();
    if (neighbours > 0)
      atomicExch(step_flags + blockIdx.x, value);
    else
      atomicAdd(counter, 1u);
  }
}

// Thread 0 spins until the counter reaches `target`, then the block syncs.
__device__ __forceinline__ void wait_for_count(const unsigned* counter, unsigned target) {
  if (threadIdx.x == 0)
    while (load_acquire(counter) < target) {
    }
  __syncthreads();
}

// Threads first_thread.. request `bytes` (a multiple of 16) from src into shared memory at dst, one commit
// group.
__device__ __forceinline__ void request_weights(unsigned char* dst, const uint4* src, int bytes,
                                                int first_thread) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < first_thread) return;
  for (int i = tid - first_thread; i < bytes / 16; i += kThreads - first_thread) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst + 16 * i));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src + i) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits for this thread's weight copies and the block's, then reads the weights (a value that keeps the reads
// alive).
__device__ __forceinline__ float fold_weights(const unsigned char* weights, int bytes) {
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const uint32_t* words = reinterpret_cast<const uint32_t*>(weights);
  float extra = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < bytes / 4; i += kThreads)
    extra += static_cast<float>(words[i] & 1u);
  return extra;
}

// Whether any of this thread's values of in[range] differs from `expected` (a dependency that did not hold).
__device__ __forceinline__ bool stale_input(const float* in, ReadRange range, float expected) {
  bool bad = false;
  for (int i = range.begin + static_cast<int>(threadIdx.x); i < range.end; i += kThreads)
    bad |= in[i] != expected;
  return bad;
}

// The block's slice of the next vector: out = in + 1 (`extra`, always finite, keeps the weight reads alive).
__device__ __forceinline__ void write_slice(const float* in, float* out, int width, int per, float extra) {
  const int begin = static_cast<int>(blockIdx.x) * per;
  for (int i = begin + static_cast<int>(threadIdx.x); i < begin + per && i < width; i += kThreads)
    out[i] = in[i] + 1.0f + 0.0f * extra;
}

// The block's weights of a link, if any, before its wait (never written, so allowed), 16 bytes per thread and
// copy.
__device__ __forceinline__ void request_link_weights(unsigned char* smem, const Link& l) {
  if (l.weights != nullptr)
    request_weights(smem, l.weights + static_cast<size_t>(blockIdx.x) * (l.weight_bytes / 16), l.weight_bytes,
                    0);
}

template <Wait kWait>
__global__ void __launch_bounds__(kThreads) link_kernel(Link l) {
  extern __shared__ __align__(16) unsigned char smem[];
  request_link_weights(smem, l);
  if constexpr (kWait == Wait::kFlag) {
    // (The first kernel follows reset_chain, which does not signal: it waits as pdl does.)
    if (l.index == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned epoch = *l.epoch;
    if (l.index > 0 && l.neighbours > 0)
      wait_for_neighbours(l.flags + static_cast<size_t>(l.index - 1) * gridDim.x, l.neighbours, epoch);
    else if (l.index > 0)
      wait_for_count(l.counters + l.index - 1,
                     epoch * gridDim.x);  // (every kernel of the chain has the same grid)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  } else if constexpr (kWait == Wait::kPdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  } else if constexpr (kWait == Wait::kPdlEarly) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  // Read the input (every value must be the chain position), fold in the weights, write a slice.
  const int per = (l.width + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  if (stale_input(l.in, read_range(l.width, per, l.neighbours), static_cast<float>(l.index)))
    atomicAdd(l.errors, 1u);
  const float extra = l.weights != nullptr ? fold_weights(smem, l.weight_bytes) : 0.0f;
  write_slice(l.in, l.out, l.width, per, extra);
  if constexpr (kWait == Wait::kFlag)
    signal_done(l.counters + l.index, l.flags + static_cast<size_t>(l.index) * gridDim.x, l.neighbours,
                *l.epoch);
}

// What a thread found in its share of a tagged input.
enum class Tagged : int { kGood, kStale, kGaveUp };

// Whether any value of in[range] (this thread's share) differs from `expected` once their tags are `tag`, or
// one never came (await_tagged gave up, or a value was already NaN from a producer that gave up). The loads
// go out kBatch at a time, so a thread's reads are in flight together (one spin per late value).
__device__ __forceinline__ Tagged check_tagged(const unsigned long long* in, ReadRange range, unsigned tag,
                                               float expected) {
  constexpr int kBatch = 8;
  Tagged found = Tagged::kGood;
  for (int i0 = range.begin + static_cast<int>(threadIdx.x); i0 < range.end; i0 += kBatch * kThreads) {
    unsigned long long v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      v[u] = i < range.end ? load_relaxed64(in + i) : 0;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= range.end) break;
      const float value = static_cast<unsigned>(v[u] >> 32) == tag
                              ? __uint_as_float(static_cast<unsigned>(v[u]))
                              : await_tagged(in + i, tag);
      if (value != value)
        found = Tagged::kGaveUp;
      else if (value != expected && found == Tagged::kGood)
        found = Tagged::kStale;
    }
  }
  return found;
}

// A link of the tagged chain: requests its weights, spins on its inputs' tags, writes its slice as tagged
// words. kAhead: it lets the next kernel launch at its start (kernels many steps ahead may be resident and
// spinning); otherwise once its inputs have arrived (one kernel ahead, as pdl). Only the first kernel waits
// (griddepcontrol) for the reset before it.
template <bool kAhead>
__global__ void __launch_bounds__(kThreads) tagged_link_kernel(Link l) {
  extern __shared__ __align__(16) unsigned char smem[];
  request_link_weights(smem, l);
  if (l.index == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (kAhead) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // (An acquire load, not a plain one: a block launched while older blocks run on its SM may otherwise read
  // the epoch of the replay before from L1, and spin forever on a tag nobody writes.)
  const unsigned tag = step_tag(load_acquire(l.epoch), l.length, l.index);
  const int per = (l.width + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const Tagged found =
      check_tagged(l.tagged_in, read_range(l.width, per, l.neighbours), tag, static_cast<float>(l.index));
  if (found != Tagged::kGood) atomicAdd(l.errors + (found == Tagged::kGaveUp ? 1 : 0), 1u);
  // Every thread of the block has read its inputs before any writes an output: the kernel after next
  // overwrites this input buffer once it has seen this kernel's outputs, so those must mean that every reader
  // is done, also the threads that write nothing (per < kThreads). Without this barrier `ahead` let them be
  // overtaken and spin on a tag that was gone ("hang" without weights; with weights fold_weights' barrier did
  // the same).
  __syncthreads();
  if constexpr (!kAhead) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const float extra = l.weights != nullptr ? fold_weights(smem, l.weight_bytes) : 0.0f;
  const int begin = static_cast<int>(blockIdx.x) * per;
  for (int i = begin + static_cast<int>(threadIdx.x); i < begin + per && i < l.width; i += kThreads)
    store_tagged(l.tagged_out + i, await_tagged(l.tagged_in + i, tag) + 1.0f + 0.0f * extra, tag + 1);
}

// The tagged chain's first input: zeros tagged for step 0 of this replay.
__global__ void reset_tagged(unsigned long long* v, int width, const unsigned* epoch, int length) {
  const unsigned tag = step_tag(load_acquire(epoch), length, 0);
  for (int i = static_cast<int>(threadIdx.x); i < width; i += blockDim.x) store_tagged(v + i, 0.0f, tag);
}

__global__ void bump_epoch(unsigned* epoch) {
  ++*epoch;
}

__global__ void reset_chain(float* v, int width) {
  for (int i = static_cast<int>(threadIdx.x); i < width; i += blockDim.x) v[i] = 0.0f;
}

const char* wait_name(Wait w) {
  switch (w) {
    case Wait::kPlain:
      return "plain";
    case Wait::kPdl:
      return "pdl";
    case Wait::kPdlEarly:
      return "early";
    case Wait::kFlag:
      return "flag";
    case Wait::kTagged:
      return "tagged";
    default:
      return "ahead";
  }
}

// A launch of `blocks` blocks of kThreads threads with one launch attribute, or none when `attribute` is
// null.
cudaLaunchConfig_t launch_config(int blocks, size_t smem, cudaStream_t stream,
                                 cudaLaunchAttribute* attribute) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = attribute != nullptr ? 1 : 0;
  return config;
}

template <Wait kWait>
void launch_link(const Link& l, int blocks, size_t smem, cudaStream_t stream) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  const cudaLaunchConfig_t config =
      launch_config(blocks, smem, stream, kWait == Wait::kPlain ? nullptr : &attribute);
  if constexpr (kWait == Wait::kTagged || kWait == Wait::kTaggedAhead)
    LMX_CUDA_CHECK(cudaLaunchKernelEx(&config, tagged_link_kernel<kWait == Wait::kTaggedAhead>, l));
  else
    LMX_CUDA_CHECK(cudaLaunchKernelEx(&config, link_kernel<kWait>, l));
}

// Never-written weights of `per_unit` bytes per kernel (or phase) in `regions` distinct copies, ≥ 512 MiB in
// all when used (so that they come from HBM); unit u reads copy u % regions.
struct Weights {
  DeviceBuffer buffer;
  int regions = 1;
};
Weights make_weights(size_t per_unit, int length) {
  Weights w;
  if (per_unit > 0)
    w.regions = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / per_unit, 1, length));
  w.buffer = DeviceBuffer(std::max<size_t>(per_unit * static_cast<size_t>(w.regions), 16));
  if (per_unit > 0) lmx::bench::fill_random(w.buffer.data(), w.buffer.bytes() & ~size_t{3}, 7, false);
  return w;
}

// Exits non-zero, naming the run, when a block counted a stale read.
void exit_if_stale(const DeviceBuffer& errors, const std::string& run) {
  unsigned bad = 0;
  LMX_CUDA_CHECK(cudaMemcpy(&bad, errors.data(), sizeof(bad), cudaMemcpyDeviceToHost));
  if (bad == 0) return;
  fmt::print(stderr, "bench_cuda_chain: {} blocks read a stale value ({})\n", bad, run);
  std::exit(1);
}

// µs per kernel of one chain configuration; exits non-zero on a stale read; negative when a tagged wait gave
// up (a chain that does not make progress: printed as "hang").
template <Wait kWait>
double time_chain(int length, int blocks, int width, int bytes_per_block, int neighbours,
                  cudaStream_t stream) {
  DeviceBuffer vectors(sizeof(float) * static_cast<size_t>(width) * 2);
  DeviceBuffer tagged(sizeof(unsigned long long) * static_cast<size_t>(width) * 2);
  DeviceBuffer counters(sizeof(unsigned) * static_cast<size_t>(length));
  DeviceBuffer flags(sizeof(unsigned) * static_cast<size_t>(length) * blocks);
  DeviceBuffer epoch(sizeof(unsigned)), errors(2 * sizeof(unsigned));
  LMX_CUDA_CHECK(cudaMemset(counters.data(), 0, counters.bytes()));
  LMX_CUDA_CHECK(cudaMemset(flags.data(), 0, flags.bytes()));
  LMX_CUDA_CHECK(cudaMemset(errors.data(), 0, errors.bytes()));
  const unsigned one = 1;
  LMX_CUDA_CHECK(cudaMemcpy(epoch.data(), &one, sizeof(one), cudaMemcpyHostToDevice));
  const size_t per_kernel = static_cast<size_t>(blocks) * bytes_per_block;
  const Weights weights = make_weights(per_kernel, length);
  const size_t smem = static_cast<size_t>(bytes_per_block);
  if (smem > 48 * 1024) {
    if constexpr (kWait == Wait::kTagged || kWait == Wait::kTaggedAhead)
      LMX_CUDA_CHECK(cudaFuncSetAttribute(tagged_link_kernel<kWait == Wait::kTaggedAhead>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    else
      LMX_CUDA_CHECK(cudaFuncSetAttribute(link_kernel<kWait>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  }

  float* v = vectors.as<float>();
  unsigned long long* tv = tagged.as<unsigned long long>();
  cudaGraph_t graph;
  LMX_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  if constexpr (kWait == Wait::kTagged || kWait == Wait::kTaggedAhead)
    reset_tagged<<<1, 256, 0, stream>>>(tv, width, epoch.as<unsigned>(), length);
  else
    reset_chain<<<1, 256, 0, stream>>>(v, width);
  for (int k = 0; k < length; ++k) {
    Link l{};
    l.in = v + (k % 2) * width;
    l.out = v + ((k + 1) % 2) * width;
    l.tagged_in = tv + (k % 2) * width;
    l.tagged_out = tv + ((k + 1) % 2) * width;
    l.length = length;
    l.width = width;
    l.index = k;
    l.epoch = epoch.as<unsigned>();
    l.counters = counters.as<unsigned>();
    l.flags = flags.as<unsigned>();
    l.neighbours = neighbours;
    l.weights = per_kernel == 0
                    ? nullptr
                    : reinterpret_cast<const uint4*>(weights.buffer.as<unsigned char>() +
                                                     per_kernel * static_cast<size_t>(k % weights.regions));
    l.weight_bytes = bytes_per_block;
    l.errors = errors.as<unsigned>();
    launch_link<kWait>(l, blocks, smem, stream);
  }
  bump_epoch<<<1, 1, 0, stream>>>(epoch.as<unsigned>());
  LMX_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  LMX_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double seconds =
      lmx::bench::median_seconds(stream, 7, 4, [&](int) { LMX_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  LMX_CUDA_CHECK(cudaStreamSynchronize(stream));
  LMX_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LMX_CUDA_CHECK(cudaGraphDestroy(graph));
  exit_if_stale(errors,
                fmt::format("{} wait, {} blocks, {} neighbours", wait_name(kWait), blocks, neighbours));
  unsigned gave_up = 0;
  LMX_CUDA_CHECK(cudaMemcpy(&gave_up, errors.as<unsigned>() + 1, sizeof(gave_up), cudaMemcpyDeviceToHost));
  return gave_up > 0 ? -1.0 : seconds * 1e6 / length;
}

// The whole chain in one kernel (persist): phase k reads vector k % 2, checks it holds k, writes vector (k +
// 1) % 2.
struct Phases {
  float* vectors;  // [2][width]
  int width, length;
  unsigned* flags;  // [length][blocks]: 1 once a block finished the phase (neighbours > 0; zeroed too)
  int neighbours;
  unsigned* arrived;     // blocks that finished a phase, summed over phases (zeroed before each launch)
  const uint4* weights;  // [regions][blocks][weight_bytes], or null
  int weight_bytes, regions;
  unsigned* errors;
};

__global__ void __launch_bounds__(kThreads) persistent_chain(Phases c) {
  extern __shared__ __align__(16) unsigned char smem[];  // two weight buffers
  // Phase `phase`'s weights into buffer phase % 2. Warps 1.. copy, so that thread 0's fence before it signals
  // never waits for copies in flight.
  auto request = [&](int phase) {
    if (c.weights == nullptr || phase >= c.length) return;
    const int words16 = c.weight_bytes / 16;
    request_weights(smem + (phase % 2) * c.weight_bytes,
                    c.weights + (static_cast<size_t>(phase % c.regions) * gridDim.x + blockIdx.x) * words16,
                    c.weight_bytes, 32);
  };
  request(0);
  const int per = (c.width + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  for (int k = 0; k < c.length; ++k) {
    if (k > 0 && c.neighbours > 0)
      wait_for_neighbours(c.flags + static_cast<size_t>(k - 1) * gridDim.x, c.neighbours, 1u);
    else if (k > 0)
      wait_for_count(c.arrived, static_cast<unsigned>(k) * gridDim.x);
    const float* in = c.vectors + (k % 2) * c.width;
    float* out = c.vectors + ((k + 1) % 2) * c.width;
    if (stale_input(in, read_range(c.width, per, c.neighbours), static_cast<float>(k)))
      atomicAdd(c.errors, 1u);
    float extra = 0.0f;
    if (c.weights != nullptr) {
      extra = fold_weights(smem + (k % 2) * c.weight_bytes, c.weight_bytes);
      __syncthreads();  // (buffer k % 2 is free for phase k + 2)
      request(k + 1);
    }
    write_slice(in, out, c.width, per, extra);
    signal_done(c.arrived, c.flags + static_cast<size_t>(k) * gridDim.x, c.neighbours, 1u);
  }
}

// µs per phase of persistent_chain, or a negative value when the blocks cannot all be resident.
double time_persistent(int length, int blocks, int width, int bytes_per_block, int neighbours,
                       cudaStream_t stream) {
  const size_t smem = 2 * static_cast<size_t>(bytes_per_block);
  if (smem > 48 * 1024)
    LMX_CUDA_CHECK(cudaFuncSetAttribute(persistent_chain, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  int per_sm = 0, device = 0, sms = 0;
  LMX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_chain, kThreads, smem));
  LMX_CUDA_CHECK(cudaGetDevice(&device));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (per_sm * sms < blocks) return -1.0;
  DeviceBuffer vectors(sizeof(float) * static_cast<size_t>(width) * 2);
  DeviceBuffer arrived(sizeof(unsigned)), errors(sizeof(unsigned));
  DeviceBuffer flags(sizeof(unsigned) * static_cast<size_t>(length) * blocks);
  LMX_CUDA_CHECK(cudaMemset(errors.data(), 0, errors.bytes()));
  const size_t per_phase = static_cast<size_t>(blocks) * bytes_per_block;
  const Weights weights = make_weights(per_phase, length);
  Phases c{};
  c.vectors = vectors.as<float>();
  c.width = width;
  c.length = length;
  c.arrived = arrived.as<unsigned>();
  c.flags = flags.as<unsigned>();
  c.neighbours = neighbours;
  c.weights = per_phase == 0 ? nullptr : weights.buffer.as<const uint4>();
  c.weight_bytes = bytes_per_block;
  c.regions = weights.regions;
  c.errors = errors.as<unsigned>();
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  const cudaLaunchConfig_t config = launch_config(blocks, smem, stream, &attribute);
  const double seconds = lmx::bench::median_seconds(stream, 7, 4, [&](int) {
    LMX_CUDA_CHECK(cudaMemsetAsync(c.vectors, 0, sizeof(float) * static_cast<size_t>(width), stream));
    LMX_CUDA_CHECK(cudaMemsetAsync(c.arrived, 0, sizeof(unsigned), stream));
    LMX_CUDA_CHECK(cudaMemsetAsync(c.flags, 0, flags.bytes(), stream));
    LMX_CUDA_CHECK(cudaLaunchKernelEx(&config, persistent_chain, c));
  });
  LMX_CUDA_CHECK(cudaStreamSynchronize(stream));
  exit_if_stale(errors, fmt::format("persistent, {} blocks, {} neighbours", blocks, neighbours));
  return seconds * 1e6 / length;
}

}  // namespace

int main(int argc, char** argv) {
  const int length = argc > 1 ? std::atoi(argv[1]) : 256;
  const int width = argc > 2 ? std::atoi(argv[2]) : 2560;
  const int bytes_per_block = argc > 3 ? std::atoi(argv[3]) : 0;
  const int neighbours = argc > 4 ? std::atoi(argv[4]) : 0;
  if (argc > 5 || length < 2 || width < 1 || bytes_per_block < 0 || bytes_per_block % 16 != 0 ||
      bytes_per_block > kMaxWeightBytes || neighbours < 0 || neighbours > kMaxNeighbours) {
    fmt::print(stderr,
               "usage: bench_cuda_chain [length >= 2] [width >= 1] [bytes_per_block: multiple of 16, <= {}] "
               "[neighbours: 0 .. {}]\n",
               kMaxWeightBytes, kMaxNeighbours);
    return 2;
  }
  cudaStream_t stream;
  LMX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  fmt::print("chain of {} kernels, {} floats per vector, {} weight bytes per block, {}; µs per kernel\n",
             length, width, bytes_per_block,
             neighbours == 0
                 ? std::string("every block reads everything")
                 : fmt::format("each block reads {} neighbours' slices on either side", neighbours));
  fmt::print("{:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "blocks", "bytes µs", "plain", "pdl",
             "early", "flag", "tagged", "ahead", "persist");
  for (const int blocks : {16, 132, 264, 640}) {
    const double plain = time_chain<Wait::kPlain>(length, blocks, width, bytes_per_block, neighbours, stream);
    const double pdl = time_chain<Wait::kPdl>(length, blocks, width, bytes_per_block, neighbours, stream);
    const double early =
        time_chain<Wait::kPdlEarly>(length, blocks, width, bytes_per_block, neighbours, stream);
    const double flag = time_chain<Wait::kFlag>(length, blocks, width, bytes_per_block, neighbours, stream);
    const double tagged =
        time_chain<Wait::kTagged>(length, blocks, width, bytes_per_block, neighbours, stream);
    const double ahead =
        time_chain<Wait::kTaggedAhead>(length, blocks, width, bytes_per_block, neighbours, stream);
    // The weights alone at the H200's measured read bandwidth (4.53 TB/s; docs/benchmarks.md, "Machines").
    const double bytes_us = static_cast<double>(blocks) * bytes_per_block / 4.53e6;
    const double persist = time_persistent(length, blocks, width, bytes_per_block, neighbours, stream);
    auto cell = [](double us, const char* missing) {
      return us < 0 ? std::string(missing) : fmt::format("{:.2f}", us);
    };
    fmt::print("{:>7} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8} {:>8} {:>8}\n", blocks, bytes_us,
               plain, pdl, early, flag, cell(tagged, "hang"), cell(ahead, "hang"), cell(persist, "-"));
    std::fflush(stdout);  // (a row at a time, should a later configuration fail)
  }
  LMX_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
