#!/usr/bin/env bash
# Builds lmx and runs every test suite (unit, parity, invariants, CLI) in parallel through CTest,
# then builds the libFuzzer targets and runs each for LMX_FUZZ_SECONDS (default 20; LMX_SKIP_FUZZ=1
# skips them).
# Usage: scripts/test.sh [preset]   (release by default; "asan" for the sanitizer build)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/fetch_fixtures.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)" --timeout 600
if [ "${LMX_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh "${LMX_FUZZ_SECONDS:-20}"
fi
