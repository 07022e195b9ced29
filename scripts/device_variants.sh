#!/usr/bin/env bash
# Adds `lmx` binaries built at other commits to the device bundle, for same-run A/Bs and bisection on the
# GPU machine: each commit is checked out in its own worktree (build/variants/<commit>/src) and built
# there like scripts/device_bundle.sh builds (sm_90, compressed fatbins; kept, so a second call is
# incremental), and its stripped `lmx` joins .device/bundle.tar.xz as bin/lmx_<commit>. Each variant adds
# ~4 MB to the bundle (its fatbins are compressed, so xz finds little in common with the others), and the
# device tool carries 64 MiB with the tree (~55 MB): with an lmx-only bundle (`scripts/device_bundle.sh lmx`,
# ~6 MB) that is one variant per run. The script warns past 11 MB.
# An argument NAME=PATH adds a binary already built (e.g. the previous build's lmx, saved before rebuilding:
# `cp build/device/lmx /tmp/lmx_prev`) as bin/lmx_NAME instead, for A/Bs of uncommitted changes.
# A variant built before the tuning table (docs/cuda.md, "Tuning") reads the former LMX_* environment knobs,
# not LMX_TUNING: in scripts/ab_gpu.sh give it the knobs (NAME=lmx_<commit>:LMX_...=...) and newer binaries
# the table (NAME=lmx@JSON).
# Usage: scripts/device_bundle.sh lmx && scripts/device_variants.sh COMMIT|NAME=PATH...
#        (then run lmx_<commit> or lmx_NAME there)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
(($#)) || { echo "usage: scripts/device_variants.sh COMMIT|NAME=PATH..." >&2; exit 2; }
[ -f .device/bundle.tar.xz ] || { echo "device_variants: no .device/bundle.tar.xz (run scripts/device_bundle.sh)" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tar -C "$stage" -xJf .device/bundle.tar.xz
for rev in "$@"; do
  if [[ "$rev" == *=* ]]; then
    name=${rev%%=*} path=${rev#*=}
    [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "device_variants: bad variant name '$name'" >&2; exit 2; }
    [ -f "$path" ] || { echo "device_variants: no binary at $path" >&2; exit 1; }
    strip -o "$stage/bin/lmx_$name" "$path"
    echo "device_variants: bin/lmx_$name (from $path)"
    continue
  fi
  commit=$(git rev-parse --short=7 "$rev^{commit}")
  dir="$root/build/variants/$commit"
  if [ ! -d "$dir/src" ]; then
    mkdir -p "$dir"
    git worktree add --detach "$dir/src" "$commit" >/dev/null
  fi
  if [ ! -f "$dir/build/build.ninja" ]; then
    cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMX_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS="-Xfatbin=-compress-all" >/dev/null
  fi
  cmake --build "$dir/build" --target lmx
  strip -o "$stage/bin/lmx_$commit" "$dir/build/lmx"
  echo "device_variants: bin/lmx_$commit"
done
tar -C "$stage" -cf - bin lib | xz -9e -T2 > .device/bundle.tar.xz.new
mv .device/bundle.tar.xz.new .device/bundle.tar.xz
ls -la .device/bundle.tar.xz
bytes=$(stat -c %s .device/bundle.tar.xz)
if ((bytes > 11 * 1024 * 1024)); then
  echo "device_variants: warning: the bundle is $((bytes >> 20)) MiB; with the tree it may exceed what the device tool carries" >&2
fi
