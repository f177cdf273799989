#!/usr/bin/env bash
# Audit pipeline soak: offer events at 50,000/s, then at 100,000/s, for
# AIRLOCK_SOAK_SECONDS (default 60) each, into the SQLite store and a JSONL
# file, and print for each rate the events offered, written and dropped,
# the gap records that reported the drops, the CPU used, the store's size
# and the peak RSS, then a table of the same. Not a test: the numbers depend
# on the machine and its load (the last column is the 1-minute load average
# at the end of the run); CPU per event is the figure that travels.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${AIRLOCK_SOAK_SECONDS:-60}
rates=${AIRLOCK_SOAK_RATES:-"50000 100000"}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/audit.test" ./audit
rows=()
for rate in $rates; do
  out=$(cd audit && AIRLOCK_SOAK_RATE=$rate AIRLOCK_SOAK_SECONDS=$secs \
    "$bin/audit.test" -test.run '^$' -test.bench '^BenchmarkSoak$' -test.benchtime 1x -test.timeout 30m)
  grep -E '^soak ' <<<"$out"
  rows+=("$(grep -E '^soak-row' <<<"$out")")
done
echo
echo "audit soak, ${secs}s per rate, $(nproc) CPUs"
printf '%s\n' "${rows[@]}" | awk -F'\t' '
  BEGIN { printf "%-8s %10s %10s %8s %5s %9s %9s %7s %9s %7s %7s %5s\n",
    "target/s", "offered", "written", "dropped", "gaps", "cpu-µs/ev", "store-MiB", "rss-MiB", "zero-loss", "at-rate", "drain-s", "load" }
  { printf "%-8s %10s %10s %8s %5s %9s %9s %7s %9s %7s %7s %5s\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 }'
