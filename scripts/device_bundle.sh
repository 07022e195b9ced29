#!/usr/bin/env bash
# Builds the CUDA-enabled binaries here and packs them for the GPU machine as .device/bundle.tar.xz
# (ignored by git; pass ".device" in the device tool's `carry`). The GPU machine runs another OS image
# without our Debian libraries, so the non-system shared libraries travel too; scripts/device_run.sh
# unpacks and runs there. The bundle's build (build/device) holds sm_90 machine code only, with
# compressed fatbins, to fit the 64 MiB the device tool carries.
# Usage: scripts/device_bundle.sh [target...]   (default: lmx test_gpu and the CUDA benches)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
((${#targets[@]})) || targets=(lmx test_gpu bench_cuda_linear bench_cuda_attention bench_cuda_moe bench_cuda_chain)
if [ ! -f build/device/build.ninja ]; then
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMX_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS="-Xfatbin=-compress-all" >/dev/null
fi
cmake --build build/device --target "${targets[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find build/device -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "device_bundle: no binary for target $t" >&2; exit 1; }
  strip -o "$stage/bin/$t" "$f"
done
# Shared libraries the binaries need that are not part of glibc or the CUDA driver/toolkit. OpenSSL 3 stays
# behind too: the GPU machine's image has libssl.so.3 and libcrypto.so.3 (ldconfig there, 2026-12-06), and the
# 5 MB they add would push lmx's bundle past the 64 MiB the device tool carries beside the tree.
for lib in $(ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libssl.so.3|libcrypto.so.3) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
# (Only the bundle and what device_run.sh unpacked from it: run scripts kept in .device survive a rebuild.)
rm -rf .device/bundle.tar.xz .device/bin .device/lib && mkdir -p .device
# xz -9: a 64 MiB dictionary, so the binaries' shared bytes (their CUDA code) compress once; the default 8 MiB
# window sees each ~10 MB binary alone.
XZ_OPT=-9 tar -C "$stage" -cJf .device/bundle.tar.xz bin lib
ls -la .device/bundle.tar.xz
