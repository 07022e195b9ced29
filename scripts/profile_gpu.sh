#!/usr/bin/env bash
# Per-kernel GPU times of an `lmx bench --device cuda` run, from Nsight Compute (ncu), for finding where
# a decode step's time goes. Writes a synthetic 4-bit checkpoint of the preset (if absent), runs the
# bench once plainly (its tok/s) and once under ncu collecting only each kernel's duration, then prints
# the kernels of the last decode steps grouped by name: count, total µs per token, share.
# Runs on the GPU machine (through scripts/device_run.sh); needs ncu on PATH and hardware counters.
# With --prefill the table is the prompt's prefill step instead (kernel_times.py --prefill); --layers N
# profiles a checkpoint of the first N layers (lmx synth --layers); --concurrency N profiles the engine's
# steps of N sequences (lmx bench --concurrency, every prompt in the first step, so that every later step
# decodes all N rows).
# Usage: scripts/profile_gpu.sh [--preset gemma4-e4b] [--prompt 64] [--gen 4] [--dir /dev/shm/lmx-synth]
#                               [--csv FILE] [--prefill] [--layers N] [--concurrency N]
set -euo pipefail
preset=gemma4-e4b
prompt=64
gen=4
dir=/dev/shm/lmx-synth
csv=
prefill=()
layers=""
concurrency=()
while (($#)); do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --csv) csv="$2"; shift 2 ;;
    --prefill) prefill=(--prefill); shift ;;
    --layers) layers="$2"; shift 2 ;;
    --concurrency) concurrency=("$2"); shift 2 ;;
    *) echo "profile_gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
# (Every prompt in one step: a step budget of all the prompt tokens.)
((${#concurrency[@]})) && concurrency=(--concurrency "${concurrency[0]}" --step-tokens $((concurrency[0] * prompt > 2048 ? concurrency[0] * prompt : 2048)))
lmx=$(command -v lmx || echo build/release/lmx)
model="$dir/$preset-q4${layers:+-l$layers}"
mkdir -p "$dir"
[ -f "$model/config.json" ] ||
  "$lmx" synth --preset "$preset" ${layers:+--layers "$layers"} --out "$model" --seed 1 --quantize 4:64 >/dev/null
"$lmx" bench --device cuda --model "$model" --prompt-tokens "$prompt" --gen-tokens 64 "${concurrency[@]}" --json
csv=${csv:-$(mktemp --suffix=.csv)}
ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$csv" \
  "$lmx" bench --device cuda --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" "${concurrency[@]}" --json >/dev/null
# (The engine's first step of the round samples the first tokens: gen - 1 decode steps follow it.)
steps=$gen
((${#concurrency[@]})) && steps=$((gen > 1 ? gen - 1 : 1))
python3 "$(dirname "$0")/../tools/kernel_times.py" "$csv" --steps "$steps" "${prefill[@]}"
