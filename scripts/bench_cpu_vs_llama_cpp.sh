#!/usr/bin/env bash
# lmx against llama.cpp on the CPU, side by side in one run: prefill at 64, 512 and 2048 tokens (PROMPTS) and
# decode after 64, alternating the two engines test by test (which one goes first alternates by round), ROUNDS
# rounds; prints each measurement as a JSON line, then the medians as a markdown table.
#
#   scripts/bench_cpu_vs_llama_cpp.sh LMX_MODEL_DIR MODEL.gguf [ROUNDS]
#   (default 3 rounds; env THREADS, default nproc; PROMPTS, default "64 512 2048")
#
# Same weights: LMX_MODEL_DIR from `lmx synth --preset P --seed S [--quantize 4:64]`, the GGUF made from the bf16
# checkpoint of the same preset and seed by scripts/bench_llama_cpp.sh (Q4_0 for 4-bit: both store 4.5 bits per
# weight). llama.cpp (LLAMA_BUILD, default /tmp/llama.cpp/build) as that script's header builds it.
# lmx: `lmx bench --device cpu` (warm-up, then one timed prefill; decode = 32 steps after a 64-token prompt);
# llama.cpp: `llama-bench -r 1` (a warm-up run, then one timed; decode = `-n 32 -d 64`, 32 steps after 64).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
model="$1"; gguf="$2"; rounds="${3:-3}"
threads="${THREADS:-$(nproc)}"
read -r -a prompts <<<"${PROMPTS:-64 512 2048}"
lmx="${LMX:-$root/build/release/lmx}"
bench="${LLAMA_BUILD:-/tmp/llama.cpp/build}/bin/llama-bench"
for f in "$lmx" "$bench"; do [ -x "$f" ] || { echo "bench_cpu_vs_llama_cpp: no $f" >&2; exit 1; }; done
[ -f "$gguf" ] || { echo "bench_cpu_vs_llama_cpp: no $gguf" >&2; exit 1; }

emit() { printf '{"round":%d,"engine":"%s","test":"%s","tok_s":%s}\n' "$1" "$2" "$3" "$4"; }
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
lmx_run() {  # round prompt gen: prefill (and decode when gen > 1)
  local out
  out=$("$lmx" bench --model "$model" --device cpu --threads "$threads" --prompt-tokens "$2" --gen-tokens "$3" --json)
  emit "$1" lmx "prefill $2" "$(json_field prefill_tok_s <<<"$out")"
  if [ "$3" -gt 1 ]; then emit "$1" lmx "decode after $2" "$(json_field decode_tok_s <<<"$out")"; fi
}
llama_run() {  # round test-name llama-bench args...
  local round="$1" name="$2"; shift 2
  emit "$round" llama.cpp "$name" "$("$bench" -m "$gguf" -t "$threads" -r 1 -o jsonl "$@" | json_field avg_ts)"
}
tests() {  # round engine
  if [ "$2" = lmx ]; then
    lmx_run "$1" 64 32
    for p in "${prompts[@]}"; do [ "$p" = 64 ] || lmx_run "$1" "$p" 1; done
  else
    llama_run "$1" "decode after 64" -p 0 -n 32 -d 64
    for p in "${prompts[@]}"; do llama_run "$1" "prefill $p" -p "$p" -n 0; done
  fi
}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then order=(lmx llama.cpp); else order=(llama.cpp lmx); fi
  for engine in "${order[@]}"; do tests "$r" "$engine" | tee -a "$results"; done
done
python3 - "$results" "$model" "$gguf" "$threads" "${prompts[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n{sys.argv[2]} vs {sys.argv[3]}, {sys.argv[4]} threads, medians of {max(r['round'] for r in rows)} rounds (tok/s)\n")
print("| test | lmx | llama.cpp | lmx / llama.cpp |\n| --- | --- | --- | --- |")
for test in [f"prefill {p}" for p in sys.argv[5:]] + ["decode after 64"]:
    med = {e: statistics.median(r["tok_s"] for r in rows if r["engine"] == e and r["test"] == test) for e in ("lmx", "llama.cpp")}
    print(f"| {test} | {med['lmx']:.1f} | {med['llama.cpp']:.1f} | {med['lmx'] / med['llama.cpp']:.2f}× |")
PY
