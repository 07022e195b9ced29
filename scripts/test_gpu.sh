#!/usr/bin/env bash
# GPU test suite (needs an NVIDIA GPU): every CUDA kernel against its CPU reference, the CUDA model
# against the transformers goldens and the CPU, batch invariance on the GPU; optionally under
# compute-sanitizer memcheck. Usage: scripts/test_gpu.sh [--memcheck] [gtest args...]
# On the GPU machine with a bundle from scripts/device_bundle.sh: scripts/device_run.sh scripts/test_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(command -v test_gpu || echo build/release/tests/test_gpu)
[ -x "$binary" ] || scripts/build.sh release test_gpu
if [ "${1:-}" = "--memcheck" ]; then
  shift
  exec compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check no "$binary" "$@"
fi
exec "$binary" "$@"
