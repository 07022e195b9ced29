#!/usr/bin/env bash
# Builds the libFuzzer targets (the fuzz preset: clang, ASan + UBSan) and runs each for SECONDS
# (default 20, what CI runs) from its committed seed corpus. New inputs accumulate in
# build/fuzz/fuzz/runs/<target>/corpus; a crash, leak, timeout or out-of-memory input is written to
# build/fuzz/fuzz/runs/<target>/artifacts/ and fails the run. See docs/hardening.md.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET-REGEX]     e.g. scripts/fuzz.sh 3600 tokenize
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
filter="${2:-.}"
[ -f build/fuzz/build.ninja ] || cmake --preset fuzz >/dev/null
cmake -S . -B build/fuzz -DLMX_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build --preset fuzz
ctest --preset fuzz -j "$(nproc)" -R "fuzz\.($filter)" --timeout $((seconds + 300))
