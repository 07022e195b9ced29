#!/usr/bin/env bash
# Builds lmx and runs every test suite (unit, parity, invariants, CLI) in parallel through CTest.
# Usage: scripts/test.sh [preset]   (release by default; "asan" for the sanitizer build)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/fetch_fixtures.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)" --timeout 600
