#!/usr/bin/env bash
# GPU test suite (needs an NVIDIA GPU): every CUDA kernel against its CPU reference, the CUDA model
# against the transformers goldens and the CPU, batch invariance on the GPU; then tests again under tuning
# tables that force other plans (docs/cuda.md, "Tuning"; each pass's "cuda" section is written to a file that
# LMX_TUNING names), since a run picks one plan per shape: the quantized projection and MoE expert tests with
# each plan of the batch-1 4-bit kernel forced (ring depth q4_gemv.stages, rows per warp q4_gemv.tiles, blocks
# per row tile q4_gemv.split, then lanes per row of the scale-window copy q4_gemv.window_lanes), and the models
# with the per-layer-input block unfused and on clusters of 8 (per_layer_input.fused false,
# per_layer_input.cluster_blocks 8), and with the attention inputs of single-token steps in their own kernel
# (attention.fused_inputs "never"), and with projections of up to 32 rows on the decode kernel (linear.decode_max_rows
# 32); then the projections, MoE and models with the mma.sync prefill kernel
# instead of the wgmma one (prefill.wgmma false; sm_90 picks wgmma for 4-bit weights), and with the prefill grid
# order and the small-chunk kernel of the grouped prefill forced; then the MoE tests with the experts' gate/up
# x prepared per pair row and with the pair sort on a cluster of 8 blocks, with 8 expert segments and with the
# uncapped combine kernel, and the models with the MoE routing on the main stream (moe.routing_stream false);
# then the attention and models with the mma.sync prefill attention instead of the wgmma one
# (attention.prefill_wgmma false).
# Optionally under compute-sanitizer memcheck. The whole suite takes ~13 minutes on the H200, past the device tool's
# 10 minutes per command: --part 1 runs the first pass and the batch-1 4-bit and decode attention passes (~7 min),
# --part 2 the prefill, MoE and prefill attention passes (~6 min).
# Usage: scripts/test_gpu.sh [--memcheck] [--part 1|2] [gtest args...]   (gtest args: the first pass only)
# On the GPU machine with a bundle from scripts/device_bundle.sh: scripts/device_run.sh scripts/test_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(command -v test_gpu || echo build/release/tests/test_gpu)
[ -x "$binary" ] || scripts/build.sh release test_gpu
runner=()
part=all
while (($#)); do
  case "$1" in
    --memcheck) runner=(compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check no); shift ;;
    --part)
      [[ "${2:-}" =~ ^[12]$ ]] || { echo "test_gpu: --part takes 1 or 2" >&2; exit 2; }
      part="$2"; shift 2 ;;
    *) break ;;
  esac
done
# The test sets the passes below rerun.
q4_tests='CudaLinear.Quantized*:CudaMoeTest.Quantized*'
prefill_tests='CudaLinear.*:CudaMoeTest.*:*CudaTinyModels.*'
moe_tests='CudaMoeTest.*:*CudaTinyModels.*'
attention_tests='CudaAttention.*:*CudaTinyModels.*'
# The first pass runs the built-in tables, whatever the caller's environment says.
unset LMX_TUNING
tuning_dir=$(mktemp -d)
trap 'rm -rf "$tuning_dir"' EXIT
passes=0
# run_pass CUDA_SECTION FILTER: the tests FILTER selects, under a tuning file {"cuda": CUDA_SECTION}.
run_pass() {
  passes=$((passes + 1))
  local file="$tuning_dir/pass$passes.json"
  printf '{"cuda": %s}\n' "$1" >"$file"
  echo "== tuning {\"cuda\": $1}"
  LMX_TUNING="$file" "${runner[@]}" "$binary" --gtest_filter="$2" --gtest_brief=1
}
if [ "$part" != 2 ]; then
"${runner[@]}" "$binary" "$@"
for stages in 2 4; do
  for tiles in 1 2; do
    for split in 1 2; do
      run_pass "{\"q4_gemv\": {\"stages\": $stages, \"tiles\": $tiles, \"split\": $split}}" "$q4_tests"
    done
  done
done
# The decode attention with its chunk states folded by a combine kernel at every length (0), and inside
# portable clusters only (8); the default folds them inside each work item's cluster up to 16 chunk slots.
for fold in 0 8; do
  run_pass "{\"attention\": {\"cluster_fold_slots\": $fold}}" "$attention_tests"
done
# The per-layer-input block of single-token steps as four kernels (the default runs the one fused kernel where it
# applies: the "ple-q4" tiny model), and the fused kernel on clusters of 8 blocks (the default takes 16 where the
# device holds them). Same bits either way.
run_pass '{"per_layer_input": {"fused": false}}' '*CudaTinyModels.*'
run_pass '{"per_layer_input": {"cluster_blocks": 8}}' 'CudaPerLayerInput.*:*CudaTinyModels.*'
# A single-token step's attention inputs (per-head norms, RoPE, cache append) as their own kernel before the
# decode attention (the default takes them inside it where its rule says so, which in the tiny models is every
# layer). Same bits.
run_pass '{"attention": {"fused_inputs": "never"}}' '*CudaTinyModels.*'
# Projections of up to 32 x rows on the decode kernel (its 32-row x tiles: the default sends more than 8 rows to
# the prefill tiles; same bits).
run_pass '{"linear": {"decode_max_rows": 32}}' 'CudaLinear.*:*CudaTinyModels.*'
# The scale-window copy of the batch-1 4-bit kernel with one lane per row and with whole rows per
# instruction (q4_window_shift; the default mixes the two by block height).
for lanes in 1 32; do
  run_pass "{\"q4_gemv\": {\"window_lanes\": $lanes}}" "$q4_tests"
done
fi
[ "$part" != 1 ] || exit 0
# The 4-bit prefill on the mma.sync kernel (the wgmma kernel is the default on sm_90; both give the same bits).
run_pass '{"prefill": {"wgmma": false}}' "$prefill_tests"
# Every prefill launch in the rows-first grid order (the default takes it for the MoE's grouped launches and
# for projections whose prepared x outweighs the weight), and the grouped prefill with every chunk on 128-row
# tiles (the default gives chunks of at most 32 rows a 32-row-tile kernel). Same bits either way.
run_pass '{"prefill": {"rows_first": "always"}}' "$prefill_tests"
run_pass '{"prefill": {"small_chunk_kernel": false}}' "$moe_tests"
# Plain prefill launches on 128-row x tiles only (the default runs a launch of one 128-row tile on the 32-row
# instance when those tiles fit one wave: most of the tiny models' projections and small linear cases; same bits).
run_pass '{"prefill": {"short_tiles": false}}' "$prefill_tests"
# Every plain prefill launch of several x tiles on 96-row tiles, and none (the default takes them where the 128-row
# grid ends in a partly filled wave and the 96-row one takes fewer waves; same bits).
run_pass '{"prefill": {"narrow_tiles": "always"}}' "$prefill_tests"
run_pass '{"prefill": {"narrow_tiles": "never"}}' 'CudaLinear.*:*CudaTinyModels.*'
# The grouped prefill's chunks of at most 128 rows (sm_90 gives bf16-scaled 4-bit stacks chunks of up to 160 on the
# wgmma kernel's 160-row instance; same bits).
run_pass '{"prefill": {"wide_chunks": false}}' "$moe_tests"
# The grouped gate/up projection's x prepared per pair row (the default prepares each token row once and stores it
# to its pairs' rows; same xp rows).
run_pass '{"moe": {"prefill_scatter": false}}' "$moe_tests"
# The pair sort on a cluster of 8 blocks for every call (the default takes one block per 2048 pairs: one for the
# tests' small calls).
run_pass '{"moe": {"group_blocks": 8}}' "$moe_tests"
# The MoE tests with the "several segments over H" case's gate/up (256 x 2048) in 8 K segments, the most a block
# holds (expert_segments gives at most kExpertSegmentsMost = 3), and the combine on its uncapped kernel.
run_pass '{"moe": {"segments": [{"n": 256, "k": 2048, "segments": 8}]}}' 'CudaMoeTest.*'
run_pass '{"moe": {"combine_capped": false}}' "$moe_tests"
# The MoE routing on the main stream before the dense MLP (the default runs it on the backend's side stream beside
# the dense MLP; same bits).
run_pass '{"moe": {"routing_stream": false}}' '*CudaTinyModels.*'
# The prefill attention of head dims 129..256 on the mma.sync kernel (sm_90 runs the wgmma one; same bits).
run_pass '{"attention": {"prefill_wgmma": false}}' "$attention_tests"
