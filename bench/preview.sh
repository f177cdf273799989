#!/usr/bin/env bash
# bench/preview.sh — the preview listener side by side, in one run: requests/s
# (keep-alive, 1 and 32 connections) and p50 through the listener vs a client
# connecting to the app inside its network namespace directly, with a bare TLS
# reverse proxy as the floor; then RSS with 1,000 idle WebSockets. Root (it
# makes a network namespace with unshare, removed when the bench ends).
#
# Usage: bench/preview.sh          (DURATION=3s, WS=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "bench/preview.sh: skipped: needs root (a network namespace for the app)" >&2
	exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/bench-preview" ./bench/preview
"$out/bench-preview" -d "${DURATION:-3s}" -ws "${WS:-1000}"
