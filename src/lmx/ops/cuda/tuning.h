// The CUDA backend's tuning table: every launch-plan choice of its kernels as typed data, one table per
// device, built in per architecture (the sm_90 table measured on the H200; a generic one for other devices),
// overridable by the "cuda" section of the tuning override file (lmx/ops/tuning.h) and printed by
// `lmx info --json`. Rules are stated in shape properties (rows, columns, blocks, chunks); per-shape entries
// are keyed by the weight's [N, K].
//
// Most choices change no bits (which kernel, grid or tile height computes the same sums). The exceptions are
// the K segments (linear.q4_*, moe.target_warps, moe.segments): other segments sum in another order, so
// other bits — the same in every kernel of a process, so batch invariance holds whatever the table says.
// (C++17: included by the .cu sources.)
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace lmx::ops {
struct TuningFile;
}

namespace lmx::cuda {

// How a rule-governed choice is made: by its rule, never, or always (where the kernel can run).
enum class Choice : int { kAuto, kNever, kAlways };

// K segments for every weight of one shape.
struct ShapeSegments {
  int64_t n = 0, k = 0;  // the weight's rows (output features) and columns
  int segments = 0;      // at least 1; at most what the weight's 128-column chunks and the kernels allow
};

// A plan of the batch-1 4-bit GEMV for single projections of one shape (0: the rules' choice).
struct ShapePlan {
  int64_t n = 0, k = 0;
  int stages = 0;  // chunks in flight per warp: 2 or 4
  int tiles = 0;   // 16-row mma tiles per warp: 1 or 2
  int split = 0;   // blocks per row tile (a cluster): 1 or 2
};

// The most K segments a projection's decode block holds (linear::kMaxSegments) and an expert projection's
// (moe::kMaxExpertSegments); the kernels' headers check they agree.
constexpr int kTuningMaxSegments = 16;
// The most x rows linear.decode_max_rows may send to the decode kernel (linear::kDecodeMaxRows).
constexpr int kTuningMaxDecodeRows = 32;
constexpr int kTuningMaxExpertSegments = 8;

struct CudaTuning {
  // Kernel launches (launch.cuh).
  struct Launch {
    // Programmatic dependent launch: each kernel's blocks may start while the previous one finishes.
    bool pdl = true;
  } launch;

  // K segments of the quantized projections (quantized_linear.cu, linear_tiles.cuh); these change bits.
  struct Linear {
    // Run 4-bit weights whose scales are all small (DeviceQuantized::small_scales) on the shorter
    // dequantization (same bits); false ignores the flag.
    bool small_scales = true;
    // x rows up to which a projection runs the decode kernel (from one more row: the prefill tiles; both give
    // the same bits). Batch 1 always runs the decode kernels. Measured on the H200 (E4B 4-bit, engine decode
    // of N rows): the decode kernel wins at 2-8 rows (527 against 244 tok/s at 2, 1290 against 906 at 8), the
    // 32-row prefill tile from 16 (1712 against 1587 at 16, 3037 against 1768 at 32); the decode kernel reads
    // its f32 x rows once per 16 weight rows, so its time grows with the rows.
    int64_t decode_max_rows = 8;
    // Warps (16 rows x one segment each) a 4-bit weight's segments aim for at batch 1.
    int64_t q4_target_warps = 4096;
    // 4-bit weights of at least this many 16-row tiles get one segment (0: no such rule).
    int64_t q4_one_segment_tiles = 0;
    // Segments of every 4-bit weight of a listed shape, in place of the rules (1..16).
    std::vector<ShapeSegments> q4_segments;
  } linear;

  // The batch-1 4-bit GEMV's plan (q4_gemv_plan, linear_decode_q4.cuh). Every plan gives the same bits.
  struct Q4Gemv {
    // A ring depth (2, 4), tiles per warp (1, 2) or blocks per row tile (1, 2) for every shape; 0: per shape.
    int stages = 0, tiles = 0, split = 0;
    // Lanes per row of the scale-window copy (1, 2, 4, 8, 16, 32; at least 32 / rows); 0: the rule (two
    // lanes for 16-row blocks, else the power of two that covers a row's window).
    int window_lanes = 0;
    // Plans of single projections of listed shapes (not the MoE's gathered GEMVs).
    std::vector<ShapePlan> shapes;
    // Two 16-row tiles per warp for matrices of more rows than this.
    int64_t tall_rows = 16384;
    // ... and for matrices of at least min_rows rows of min_cols..max_cols columns, where enabled. Measured
    // on the H200: 16384 x 5376 went from 48.6 to 61.4 % of read bandwidth and 5376 x 8192 from 41.3 to
    // 49.0 %, while 5376 x 21504 lost (52.8 to 49.3 %) and two tiles for every shape lost 1-3 % of decode.
    struct WideTiles {
      bool enabled = true;
      int64_t min_rows = 4096, min_cols = 4096, max_cols = 8192;
    } wide_tiles;
    // Grids of split_blocks_from to split_blocks_below row blocks (one to two per SM of a 132-SM H200) with
    // at least split_min_segments segments split each row tile over two blocks: 160-block grids +3.7 %
    // decode, 96 blocks -0.8 % (not split), 176 neutral.
    int64_t split_blocks_from = 132, split_blocks_below = 264;
    int split_min_segments = 4;
    // Grids of fewer blocks than this (one wave with at most one block per SM) whose segments have at least
    // deep_ring_min_chunks chunks run a ring of 4: 96 blocks of 6-chunk segments +3.7 % decode, 3-chunk
    // segments -0.5 %, larger grids -1 to -5 %.
    int64_t deep_ring_blocks_below = 132;
    int deep_ring_min_chunks = 4;
    // The stacked gate/up projection forms its GeGLU in one kernel (quantized_linear_geglu) from this many
    // rows per half: I = 2112 ran 2 % slower than the down projection's GeGLU input, 6144 and 10240 4-5 %
    // faster.
    int64_t geglu_min_rows = 4096;
  } q4_gemv;

  // The prefill GEMM (quantized_gemm.cu, sm90a/prefill_wgmma.cu). Every choice gives the same bits.
  struct Prefill {
    // The wgmma kernel for 4-bit weights, on devices that run sm_90a code (else the mma.sync kernel).
    bool wgmma = true;
    // The grid order: rows-first (weight tiles re-read per x tile) where the rule says so — the MoE's grouped
    // launches, and projections whose prepared x outweighs the weight — never, or always.
    Choice rows_first = Choice::kAuto;
    // The grouped launches' chunks of at most 32 rows on a 32-row-tile kernel of their own.
    bool small_chunk_kernel = true;
    // Plain launches of one 128-row x tile on 32-row tiles where those fit one wave.
    bool short_tiles = true;
    // Plain launches of several x tiles on 96-row tiles: where a 96-row grid takes fewer waves, weighed by
    // narrow_tile_cost (a 96-row block's time over a 128-row block's), never, or always.
    Choice narrow_tiles = Choice::kAuto;
    double narrow_tile_cost = 0.8;
    // The grouped launches' chunks of up to 160 rows (bf16-scaled 4-bit stacks on the wgmma kernel).
    bool wide_chunks = true;
  } prefill;

  // Attention (attention.cu, attention_decode.cu, attention_inputs.cu, sm90a/attention_prefill_wgmma.cu).
  // Every choice gives the same bits.
  struct Attention {
    // The wgmma prefill attention for head dims 129..512, on devices that run sm_90a code.
    bool prefill_wgmma = true;
    // Chunk slots up to which the decode kernel's clusters fold their own chunk states (0..16; 0: the
    // combine kernel always).
    int cluster_fold_slots = 16;
    // A single-token step's attention inputs (norms, RoPE, cache append) inside the decode kernel: where the
    // rule says so (its clusters fold over at most fused_inputs_max_cluster_blocks blocks), never, or always.
    Choice fused_inputs = Choice::kAuto;
    int fused_inputs_max_cluster_blocks = 64;
    // Heads per warp of the attention-inputs kernel (0: by the token count).
    int inputs_heads_per_warp = 0;
  } attention;

  // Mixture-of-experts (moe_experts.cu, moe_norms.cu).
  struct Moe {
    // The routing (router norm, projection, top-k) on a side stream beside the dense MLP (cuda_backend.cpp;
    // same bits either way).
    bool routing_stream = true;
    // Warps an expert projection's K segments aim for (expert_segments; changes bits).
    int64_t target_warps = 512;
    // Segments of every expert matrix of a listed shape (1..8; changes bits).
    std::vector<ShapeSegments> segments;
    // The most (token, expert) pairs per pass of the expert dispatch (0: the rule, by activation bytes).
    int64_t pass_pairs = 0;
    // Blocks of the pair sort's cluster (1..8; 0: one per 2048 pairs).
    int group_blocks = 0;
    // The grouped gate/up projection's x prepared once per token row and stored to its pairs' rows (else
    // per pair row).
    bool prefill_scatter = true;
    // The combine-with-norms kernel with at most 40 registers per thread (two blocks per SM).
    bool combine_capped = true;
  } moe;

  // The per-layer-input block of single-token steps (per_layer_input.cu).
  struct PerLayerInput {
    // Its one fused kernel, where it applies (else four kernels; same bits).
    bool fused = true;
    // The fused kernel's cluster size (8 or 16; 0: the largest the device holds).
    int cluster_blocks = 0;
    // The most warps per block of the fused kernel (1..16).
    int max_warps = 16;
  } per_layer_input;
};

// The built-in tables by name: "sm_90" (measured on the H200), for devices of compute capability 9.0, and
// "generic" for every other (the same rules, without the sm_90a kernels). InvalidArgument for another name.
std::vector<std::string> builtin_tuning_names();
CudaTuning builtin_tuning(const std::string& name);
// The name of the built-in table for a device of compute capability major.minor, and for device `device`.
const char* builtin_tuning_name(int major, int minor);
const char* device_tuning_name(int device);

// `table` with the "cuda" section of `file` applied: InvalidArgument naming the file and the key path for an
// unknown key, a value of the wrong type or out of range.
CudaTuning apply_tuning(CudaTuning table, const ops::TuningFile& file);

// The table in use on `device`: its built-in table with the override file's section (ops::tuning_file()),
// built on first use and fixed for the process. Thread-safe.
const CudaTuning& tuning_for_device(int device);
// The table of the current device. Cheap after the first call: a pointer read where every visible device
// uses the same built-in table, else one cudaGetDevice and an array read.
const CudaTuning& tuning();

// The table as JSON in the override section's form (lmx info --json).
nlohmann::ordered_json tuning_json(const CudaTuning& table);

// Where a projection of shape [n, k] has its segments set by `entries` (a table list named `key`, e.g.
// "cuda.linear.q4_segments"): those, else 0. InvalidArgument naming the key when they exceed `most`.
int shape_segments(const std::vector<ShapeSegments>& entries, const char* key, int64_t n, int64_t k,
                   int64_t most);

}  // namespace lmx::cuda
