#!/usr/bin/env bash
# Runs a command on the GPU machine with the binaries packed by scripts/device_bundle.sh: unpacks
# .device/bundle.tar.gz, puts its bin/ on PATH, its libraries and CUDA's cuBLAS on the library path,
# and points the tests at this copy of the tree. Usage (on the GPU machine): scripts/device_run.sh CMD...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ -f .device/bundle.tar.gz ] && [ ! -d .device/bin ]; then tar -C .device -xzf .device/bundle.tar.gz; fi
cublas_dirs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
pip_cublas=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$root/.device/lib:${cublas_dirs}${pip_cublas}:${LD_LIBRARY_PATH:-}"
export PATH="$root/.device/bin:$PATH"
export LMX_SOURCE_DIR="$root"
exec "$@"
