#!/usr/bin/env bash
# Installs every Debian package the lmx build and tests need (the npm tokenizer fixtures for the
# tests come from scripts/fetch_fixtures.sh, which scripts/test.sh runs).
# Idempotent: prints nothing and does nothing when everything is already present.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git python3 python3-jinja2
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwy-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libspdlog-dev libfmt-dev
  libpcre2-dev libutf8proc-dev libopenblas-dev
  clang libclang-rt-14-dev
  nodejs npm
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere than Debian (e.g. a preinstalled Node): accept working binaries.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]}"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
