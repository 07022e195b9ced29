#!/usr/bin/env bash
# GPU test suite (needs an NVIDIA GPU): every CUDA kernel against its CPU reference, the CUDA model
# against the transformers goldens and the CPU, batch invariance on the GPU; then the quantized
# projection and MoE expert tests again with each plan of the batch-1 4-bit kernel forced (ring depth LMX_Q4_STAGES,
# rows per warp LMX_Q4_TILES, blocks per row tile LMX_Q4_SPLIT, then lanes per row of the scale-window copy
# LMX_Q4_WINDOW_LANES), since a run picks one plan per shape, and the models with the per-layer-input block unfused
# and on clusters of 8 (LMX_PLE_FUSED=0, LMX_PLE_CLUSTER=8), and with the attention inputs of single-token steps in
# their own kernel (LMX_ATTN_FUSED_INPUTS=0); then the projections, MoE and models with the
# mma.sync prefill kernel instead of the wgmma one (LMX_PREFILL_WGMMA=0; sm_90 picks wgmma for 4-bit weights), and
# with the prefill grid order and the small-chunk kernel of the grouped prefill forced; then the MoE tests with the
# experts' gate/up x prepared per pair row and with the pair sort on a cluster of 8 blocks, with 8 expert segments
# and with the uncapped combine kernel; then the attention and models with the mma.sync prefill attention instead of
# the wgmma one (LMX_ATTN_WGMMA=0).
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
# run_pass VAR=VALUE... FILTER: the tests FILTER selects, with those settings in the environment.
run_pass() {
  env "${@:1:$#-1}" "${runner[@]}" "$binary" --gtest_filter="${!#}" --gtest_brief=1
}
if [ "$part" != 2 ]; then
"${runner[@]}" "$binary" "$@"
for stages in 2 4; do
  for tiles in 1 2; do
    for split in 1 2; do
      echo "== batch-1 4-bit kernel with LMX_Q4_STAGES=$stages LMX_Q4_TILES=$tiles LMX_Q4_SPLIT=$split"
      run_pass LMX_Q4_STAGES=$stages LMX_Q4_TILES=$tiles LMX_Q4_SPLIT=$split "$q4_tests"
    done
  done
done
# The decode attention with its chunk states folded by a combine kernel at every length (0), and inside
# portable clusters only (8); the default folds them inside each work item's cluster up to 16 chunk slots.
for fold in 0 8; do
  echo "== decode attention with LMX_ATTN_CLUSTER_FOLD=$fold"
  run_pass LMX_ATTN_CLUSTER_FOLD=$fold "$attention_tests"
done
# The per-layer-input block of single-token steps as four kernels (LMX_PLE_FUSED=0; the default runs the one fused
# kernel where it applies: the "ple-q4" tiny model), and the fused kernel on clusters of 8 blocks (the default takes
# 16 where the device holds them). Same bits either way.
echo "== per-layer-input block with LMX_PLE_FUSED=0, then LMX_PLE_CLUSTER=8"
run_pass LMX_PLE_FUSED=0 '*CudaTinyModels.*'
run_pass LMX_PLE_CLUSTER=8 'CudaPerLayerInput.*:*CudaTinyModels.*'
# A single-token step's attention inputs (per-head norms, RoPE, cache append) as their own kernel before the
# decode attention (LMX_ATTN_FUSED_INPUTS=0; the default takes them inside it where its rule says so, which in the
# tiny models is every layer). Same bits.
echo "== decode attention with LMX_ATTN_FUSED_INPUTS=0"
run_pass LMX_ATTN_FUSED_INPUTS=0 '*CudaTinyModels.*'
# The scale-window copy of the batch-1 4-bit kernel with one lane per row and with whole rows per
# instruction (q4_window_shift; the default mixes the two by block height).
for lanes in 1 32; do
  echo "== batch-1 4-bit kernel with LMX_Q4_WINDOW_LANES=$lanes"
  run_pass LMX_Q4_WINDOW_LANES=$lanes "$q4_tests"
done
fi
[ "$part" != 1 ] || exit 0
# The 4-bit prefill on the mma.sync kernel (the wgmma kernel is the default on sm_90; both give the same bits).
echo "== prefill with LMX_PREFILL_WGMMA=0"
run_pass LMX_PREFILL_WGMMA=0 "$prefill_tests"
# Every prefill launch in the rows-first grid order (the default takes it for the MoE's grouped launches and
# for projections whose prepared x outweighs the weight), and the grouped prefill with every chunk on 128-row
# tiles (the default gives chunks of at most 32 rows a 32-row-tile kernel). Same bits either way.
echo "== prefill with LMX_PREFILL_ROWS_FIRST=1, then the grouped prefill with LMX_PREFILL_SMALL_CHUNKS=0"
run_pass LMX_PREFILL_ROWS_FIRST=1 "$prefill_tests"
run_pass LMX_PREFILL_SMALL_CHUNKS=0 "$moe_tests"
# Plain prefill launches on 128-row x tiles only (the default runs a launch of one 128-row tile on the 32-row
# instance when those tiles fit one wave: most of the tiny models' projections and small linear cases; same bits).
echo "== prefill with LMX_PREFILL_SHORT_TILES=0"
run_pass LMX_PREFILL_SHORT_TILES=0 "$prefill_tests"
# Every plain prefill launch of several x tiles on 96-row tiles, and none (the default takes them where the 128-row
# grid ends in a partly filled wave and the 96-row one takes fewer waves; same bits).
echo "== prefill with LMX_PREFILL_NARROW_TILES=2, then =0"
run_pass LMX_PREFILL_NARROW_TILES=2 "$prefill_tests"
run_pass LMX_PREFILL_NARROW_TILES=0 'CudaLinear.*:*CudaTinyModels.*'
# The grouped prefill's chunks of at most 128 rows (sm_90 gives bf16-scaled 4-bit stacks chunks of up to 160 on the
# wgmma kernel's 160-row instance; same bits).
echo "== MoE with LMX_PREFILL_WIDE_CHUNKS=0"
run_pass LMX_PREFILL_WIDE_CHUNKS=0 "$moe_tests"
# The grouped gate/up projection's x prepared per pair row (the default prepares each token row once and stores it
# to its pairs' rows; same xp rows).
echo "== MoE with LMX_PREFILL_SCATTER=0"
run_pass LMX_PREFILL_SCATTER=0 "$moe_tests"
# The pair sort on a cluster of 8 blocks for every call (the default takes one block per 2048 pairs: one for the
# tests' small calls).
echo "== MoE with LMX_MOE_GROUP_BLOCKS=8"
run_pass LMX_MOE_GROUP_BLOCKS=8 "$moe_tests"
# The MoE tests with the "several segments over H" case's gate/up (256 x 2048) in 8 K segments, the most a block
# holds (expert_segments gives at most kExpertSegmentsMost = 3), and the combine on its uncapped kernel.
echo "== MoE with LMX_MOE_SEGMENTS=256x2048=8, then LMX_COMBINE_CAPPED=0"
run_pass LMX_MOE_SEGMENTS=256x2048=8 'CudaMoeTest.*'
run_pass LMX_COMBINE_CAPPED=0 "$moe_tests"
# The prefill attention of head dims 129..256 on the mma.sync kernel (sm_90 runs the wgmma one; same bits).
echo "== attention with LMX_ATTN_WGMMA=0"
run_pass LMX_ATTN_WGMMA=0 "$attention_tests"
