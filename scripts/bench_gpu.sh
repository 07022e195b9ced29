#!/usr/bin/env bash
# GPU benchmarks for docs/benchmarks.md: writes synthetic 4-bit (group 64) checkpoints of the given
# Gemma 4 presets and runs `lmx bench --device cuda` at each prompt length, one JSON line per run (and
# how long each checkpoint took to write, on stderr). tools/bench_table.py turns the JSON lines into the table of
# docs/benchmarks.md (prefill TFLOP/s as a share of the bf16 peak, decode as a share of its roofline).
# Usage: scripts/bench_gpu.sh [--presets "gemma4-e4b gemma4-26b-a4b"] [--prompts "512 2048 8192"]
#                             [--gen 128] [--dir /dev/shm/lmx-synth]
set -euo pipefail
presets="gemma4-e2b gemma4-e4b gemma4-26b-a4b gemma4-31b"
prompts="512 2048 8192"
gen=128
dir=/dev/shm/lmx-synth
while (($#)); do
  case "$1" in
    --presets) presets="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "bench_gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
lmx=$(command -v lmx || echo build/release/lmx)
mkdir -p "$dir"
for preset in $presets; do
  model="$dir/$preset-q4"
  if [ ! -f "$model/config.json" ]; then
    start=$SECONDS
    "$lmx" synth --preset "$preset" --out "$model" --seed 1 --quantize 4:64 >/dev/null
    echo "bench_gpu: synth $preset took $((SECONDS - start)) s" >&2
  fi
  for p in $prompts; do
    "$lmx" bench --device cuda --model "$model" --prompt-tokens "$p" --gen-tokens "$gen" --json
  done
  rm -rf "$model"  # host memory: one checkpoint at a time
done
