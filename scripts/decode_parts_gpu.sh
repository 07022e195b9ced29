#!/usr/bin/env bash
# Where a CUDA decode step goes, part by part (docs/cuda.md, "Profiling"): runs scripts/ab_gpu.sh with a plain
# `lmx` and one variant per LMX_DEBUG_SKIP part (the model leaves that part out of every single-token step),
# then prints, per preset and part, the decode tok/s (mean over the rounds), the µs per step, and the µs per
# step and per layer that leaving the part out saves. Timing only: the skipped runs' tokens are meaningless.
# A part a model does not have (experts without MoE, ple without per-layer inputs) saves ~0.
# Usage: scripts/device_run.sh scripts/decode_parts_gpu.sh [--presets "gemma4-e4b"] [--parts "rn qkv ..."]
#          [--layers N] [--prompt 512] [--gen 128] [--reps 2] [--dir /dev/shm/lmx-synth]
set -euo pipefail
cd "$(dirname "$0")/.."
presets="gemma4-e4b"
parts="rn qkv inputs attention o mlp experts ple layers"
layers=""
dir=/dev/shm/lmx-synth
pass=()
while (($#)); do
  case "$1" in
    --presets) presets="$2"; shift 2 ;;
    --parts) parts="$2"; shift 2 ;;
    --layers) layers="$2"; pass+=(--layers "$2"); shift 2 ;;
    --dir) dir="$2"; pass+=(--dir "$2"); shift 2 ;;
    --prompt | --gen | --reps) pass+=("$1" "$2"); shift 2 ;;
    *) echo "decode_parts_gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
variants=(base=lmx)
for part in $parts; do variants+=("$part=lmx:LMX_DEBUG_SKIP=$part"); done
runs=$(scripts/ab_gpu.sh --presets "$presets" "${pass[@]}" "${variants[@]}" 2> >(grep -v 'LMX_DEBUG_SKIP=' >&2))
echo "$runs"
echo
printf '%-16s %-10s %10s %12s %14s %14s\n' preset part "tok/s" "us/step" "saved us/step" "saved us/layer"
for preset in $presets; do
  config="$dir/$preset-q4${layers:+-l$layers}/config.json"
  n=$(grep -o '"num_hidden_layers": *[0-9]*' "$config" | grep -o '[0-9]*$')
  # Lines: "<preset>[ (N layers)] <variant> round <r>: decode <tok/s> prefill <tok/s> tok/s".
  awk -v preset="$preset" -v n="$n" -v order="base $parts" '
    $1 == preset {
      for (i = 2; i <= NF; ++i) if ($i == "round") break
      for (j = i; j <= NF; ++j) if ($j == "decode") break
      sum[$(i - 1)] += $(j + 1); count[$(i - 1)] += 1
    }
    END {
      if (!count["base"]) { print "decode_parts_gpu: no base runs for " preset > "/dev/stderr"; exit 1 }
      base = 1e6 * count["base"] / sum["base"]
      split(order, names, " ")
      for (k = 1; k in names; ++k) {
        v = names[k]
        if (!count[v]) continue
        tps = sum[v] / count[v]; us = 1e6 / tps
        printf "%-16s %-10s %10.1f %12.0f %14.0f %14.2f\n", preset, v, tps, us, base - us, (base - us) / n
      }
    }' <<<"$runs"
done
