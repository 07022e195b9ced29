#!/usr/bin/env bash
# Per-shape plan sweep of the batch-1 4-bit GEMV inside a model (docs/cuda.md, "The batch-1 4-bit GEMV"): runs
# scripts/ab_gpu.sh with a plain `lmx` and one variant per (shape, plan), the plan S/T/P set for that shape alone
# by a tuning file's q4_gemv.shapes entry {"n": N, "k": K, "stages": S, "tiles": T, "split": P} (ring S chunks, T
# 16-row tiles per warp, P blocks per row tile; 0 keeps the rules' choice; every plan gives the same bits), then
# prints per variant the decode tok/s (mean over the rounds) and its change against the plain run.
# A shape the model does not have changes nothing (~0 %); a GeGLU projection (a stacked gate_up) with T = 1 falls
# back to the unfused path. Each variant-round costs one `lmx bench` (E4B: ~8 s), so sweep a few shapes per call.
# The shapes a model runs, with their current plans: `bench_cuda_q4_plans MODEL_DIR` (bench/cuda/q4_plans.cpp;
# bundle it with `scripts/device_bundle.sh lmx bench_cuda_q4_plans`).
# Usage: scripts/device_run.sh scripts/plan_sweep_gpu.sh --preset gemma4-e4b [--plans "4/1/1 2/2/1 ..."]
#          [--layers N] [--prompt 512] [--gen 128] [--reps 2] [--dir /dev/shm/lmx-synth] NxK [NxK...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=""
plans="2/1/1 2/1/2 2/2/1 2/2/2 4/1/1 4/1/2 4/2/1 4/2/2"
pass=()
while (($#)); do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --plans) plans="$2"; shift 2 ;;
    --layers | --dir | --prompt | --gen | --reps) pass+=("$1" "$2"); shift 2 ;;
    --*) echo "plan_sweep_gpu: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ -n "$preset" ] || { echo "plan_sweep_gpu: --preset is required" >&2; exit 2; }
(($#)) || { echo "plan_sweep_gpu: no shapes (NxK, e.g. 2560x10240)" >&2; exit 2; }
variants=(base=lmx)
for shape in "$@"; do
  [[ "$shape" =~ ^[0-9]+x[0-9]+$ ]] || { echo "plan_sweep_gpu: shape '$shape' is not NxK" >&2; exit 2; }
  for plan in $plans; do
    [[ "$plan" =~ ^[024]/[012]/[012]$ ]] || { echo "plan_sweep_gpu: plan '$plan' is not S/T/P" >&2; exit 2; }
    IFS=/ read -r stages tiles split <<<"$plan"
    entry="{\"n\": ${shape%x*}, \"k\": ${shape#*x}, \"stages\": $stages, \"tiles\": $tiles, \"split\": $split}"
    variants+=("$shape-${plan//\//-}=lmx@{\"cuda\": {\"q4_gemv\": {\"shapes\": [$entry]}}}")
  done
done
runs=$(scripts/ab_gpu.sh --presets "$preset" "${pass[@]}" "${variants[@]}")
echo "$runs"
echo
printf '%-24s %10s %9s\n' "shape-S-T-P" "tok/s" "vs base"
# Lines: "<preset>[ (N layers)] <variant> round <r>: decode <tok/s> prefill <tok/s> tok/s".
awk '
  {
    for (i = 2; i <= NF; ++i) if ($i == "round") break
    for (j = i; j <= NF; ++j) if ($j == "decode") break
    v = $(i - 1)
    if (!(v in count)) order[++n] = v
    sum[v] += $(j + 1); count[v] += 1
  }
  END {
    if (!count["base"]) { print "plan_sweep_gpu: no base runs" > "/dev/stderr"; exit 1 }
    base = sum["base"] / count["base"]
    for (k = 1; k <= n; ++k) {
      v = order[k]; tps = sum[v] / count[v]
      printf "%-24s %10.1f %+8.1f%%\n", v, tps, 100 * (tps / base - 1)
    }
  }' <<<"$runs"
