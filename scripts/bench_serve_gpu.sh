#!/usr/bin/env bash
# The serving benchmark on a GPU: for each preset writes a synthetic 4-bit (group 64) checkpoint with the demo
# model's tokenizer (`lmx synth --tokenizer`, vocabulary padded so every id decodes), starts `lmx serve
# --device cuda` on it, runs bench_serve_bench against it (markdown rows on stdout) and stops the server with
# SIGTERM. The server's log goes to DIR/PRESET.log. Run on the GPU machine through scripts/device_run.sh
# with a bundle of lmx and bench_serve_bench (scripts/device_bundle.sh lmx bench_serve_bench).
# Usage: scripts/bench_serve_gpu.sh [--presets "gemma4-e4b gemma4-26b-a4b"] [--rates 4,16,64,inf]
#          [--requests 128] [--output-tokens 128] [--prompt-words 200] [--shared-words 400]
#          [--dir /dev/shm/lmx-serve] [--port 18190] [--device cuda] [--layers N] [-- extra lmx serve flags]
# (--device cpu --layers 2 with a small workload smoke-tests the script without a GPU.)
set -euo pipefail
cd "$(dirname "$0")/.."
presets="gemma4-e4b gemma4-26b-a4b"
rates=4,16,64,inf
requests=128
output=128
prompt_words=200
shared_words=400
dir=/dev/shm/lmx-serve
port=18190
device=cuda
layers=()
serve_flags=()
while (($#)); do
  case "$1" in
    --presets) presets="$2"; shift 2 ;;
    --rates) rates="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --output-tokens) output="$2"; shift 2 ;;
    --prompt-words) prompt_words="$2"; shift 2 ;;
    --shared-words) shared_words="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --layers) layers=(--layers "$2"); shift 2 ;;
    --) shift; serve_flags=("$@"); break ;;
    *) echo "bench_serve_gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
lmx=$(command -v lmx || echo build/release/lmx)
client=$(command -v bench_serve_bench || echo build/release/bench/bench_serve_bench)
mkdir -p "$dir"
for preset in $presets; do
  model="$dir/$preset-q4"
  start=$SECONDS
  "$lmx" synth --preset "$preset" "${layers[@]}" --out "$model" --seed 1 --quantize 4:64 --tokenizer models/demo \
    --force >/dev/null
  echo "bench_serve_gpu: synth $preset took $((SECONDS - start)) s" >&2
  "$lmx" serve --model "$model" --device "$device" --port "$port" --max-concurrent 1024 "${serve_flags[@]}" \
    >"$dir/$preset.log" 2>&1 &
  server=$!
  echo "### $preset"
  status=0
  "$client" --url "http://127.0.0.1:$port" --wait-seconds 300 --rates "$rates" --requests "$requests" \
    --prompt-words "$prompt_words" --output-tokens "$output" --shared-words "$shared_words" || status=$?
  kill -TERM "$server"
  wait "$server" || true
  ((status == 0)) || { echo "bench_serve_gpu: client failed on $preset; server log:" >&2; tail -20 "$dir/$preset.log" >&2; exit 1; }
  rm -rf "$model"  # host memory: one checkpoint at a time
done
