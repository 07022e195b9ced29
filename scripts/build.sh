#!/usr/bin/env bash
# Configures and builds lmx with a CMake preset (default: release), optionally only some targets.
# Usage: scripts/build.sh [preset] [target...]     e.g. scripts/build.sh release lmx
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
[ -f "build/$preset/build.ninja" ] || cmake --preset "$preset" >/dev/null
if (($#)); then
  cmake --build --preset "$preset" --target "$@"
else
  cmake --build --preset "$preset"
fi
