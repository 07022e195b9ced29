#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: new inputs go to a scratch corpus under WORK (the
# committed seeds are only read), a crashing input to WORK/artifacts. Exits non-zero on a finding.
# Usage: fuzz/run_fuzzer.sh BINARY SECONDS SEED_DIR DICT WORK [extra libFuzzer flags...]
set -euo pipefail
binary=$1 seconds=$2 seeds=$3 dict=$4 work=$5
shift 5
mkdir -p "$work/corpus" "$work/artifacts"
# -timeout: one input may take at most 10 s (a hang is a finding); -rss_limit_mb: memory growth
# past 2 GiB is one too; -max_len: inputs stay below 64 KiB unless a seed is larger.
exec "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -dict="$dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$@" "$work/corpus" "$seeds"
