#!/usr/bin/env bash
# Audit pipeline soak: offer events at 50,000/s, then at 100,000/s, for
# AIRLOCK_SOAK_SECONDS (default 60) each, into the SQLite store and a JSONL
# file, and print what was kept and what was dropped (counted in gap
# records). Not a test: numbers depend on the machine and its load.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${AIRLOCK_SOAK_SECONDS:-60}
for rate in 50000 100000; do
  AIRLOCK_SOAK_RATE=$rate AIRLOCK_SOAK_SECONDS=$secs \
    go test -run '^$' -bench '^BenchmarkSoak$' -benchtime 1x -timeout 30m ./audit | grep -E '^(soak|BenchmarkSoak)'
done
