#!/usr/bin/env bash
# Runs a command on the GPU machine with the binaries packed by scripts/device_bundle.sh: unpacks
# .device/bundle.tar.xz, puts its bin/ on PATH and its libraries on the library path, and points the
# tests at this copy of the tree. Usage (on the GPU machine): scripts/device_run.sh CMD...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ -f .device/bundle.tar.xz ] && [ ! -d .device/bin ]; then tar -C .device -xJf .device/bundle.tar.xz; fi
export LD_LIBRARY_PATH="$root/.device/lib:${LD_LIBRARY_PATH:-}"
export PATH="$root/.device/bin:$PATH"
export LMX_SOURCE_DIR="$root"
exec "$@"
