#!/usr/bin/env bash
# Same-run A/B of `lmx bench --device cuda` variants on the GPU machine: writes each preset's synthetic 4-bit
# checkpoint once (under --dir), then runs every variant in turn, --reps rounds (variants alternate within a
# round, so drift hits them alike), and prints one line per run: preset, variant, round, decode and prefill
# tok/s. A variant is NAME=BINARY[:VAR=VALUE[:VAR=VALUE...]], e.g. base=lmx_f1a67a5 or
# nopdl=lmx:LMX_TUNING=/tmp/nopdl.json (a tuning override file, docs/cuda.md "Tuning", e.g.
# {"cuda": {"launch": {"pdl": false}}}; binaries from scripts/device_bundle.sh and scripts/device_variants.sh,
# on PATH through scripts/device_run.sh; binaries older than the tuning table read LMX_* knobs instead).
# NAME=BINARY@JSON runs BINARY under the tuning file JSON, written to a temporary file, e.g.
# 'nopdl=lmx@{"cuda": {"launch": {"pdl": false}}}'.
# Usage: scripts/device_run.sh scripts/ab_gpu.sh [--presets "gemma4-e4b"] [--layers N] [--prompt 512]
#          [--gen 128] [--reps 2] [--dir /dev/shm/lmx-synth] VARIANT...
set -euo pipefail
presets="gemma4-e4b"
layers=""
prompt=512
gen=128
reps=2
dir=/dev/shm/lmx-synth
while (($#)); do
  case "$1" in
    --presets) presets="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --*) echo "ab_gpu: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
(($#)) || { echo "ab_gpu: no variants (NAME=BINARY[:VAR=VALUE...] or NAME=BINARY@JSON)" >&2; exit 2; }
tuning_dir=$(mktemp -d)
trap 'rm -rf "$tuning_dir"' EXIT
variants=()
for v in "$@"; do
  [[ "$v" == *=* ]] || { echo "ab_gpu: variant '$v' is not NAME=BINARY[:VAR=VALUE...] or NAME=BINARY@JSON" >&2; exit 2; }
  if [[ "$v" == *@* ]]; then  # NAME=BINARY@JSON: the JSON to a file, named by LMX_TUNING
    file="$tuning_dir/${#variants[@]}.json"
    printf '%s\n' "${v#*@}" >"$file"
    v="${v%%@*}:LMX_TUNING=$file"
  fi
  binary=${v#*=}
  binary=${binary%%:*}
  command -v "$binary" >/dev/null || { echo "ab_gpu: variant '$v': no binary '$binary' on PATH" >&2; exit 2; }
  variants+=("$v")
done
set -- "${variants[@]}"
synth=$(command -v lmx)
mkdir -p "$dir"
for preset in $presets; do
  model="$dir/$preset-q4${layers:+-l$layers}"
  if [ ! -f "$model/config.json" ]; then
    "$synth" synth --preset "$preset" ${layers:+--layers "$layers"} --out "$model" --seed 1 --quantize 4:64 >/dev/null
  fi
  for ((round = 1; round <= reps; ++round)); do
    for v in "$@"; do
      name=${v%%=*}
      spec=${v#*=}
      binary=${spec%%:*}
      envs=()
      [[ "$spec" == *:* ]] && IFS=: read -r -a envs <<<"${spec#*:}"
      json=$(env "${envs[@]}" "$binary" bench --device cuda --model "$model" --prompt-tokens "$prompt" \
        --gen-tokens "$gen" --json)
      decode=$(grep -o '"decode_tok_s":[0-9.]*' <<<"$json" | cut -d: -f2)
      prefill=$(grep -o '"prefill_tok_s":[0-9.]*' <<<"$json" | cut -d: -f2)
      printf '%s%s %s round %d: decode %.1f prefill %.0f tok/s\n' "$preset" "${layers:+ ($layers layers)}" "$name" \
        "$round" "$decode" "$prefill"
    done
  done
done
