#!/usr/bin/env bash
# SDK round trips: `echo hi` through the Go client and the Python SDK over
# the unix socket and over TLS (one appliance, one sandbox, one run), and
# MCP run_command through `airlock mcp` on stdio and streamable HTTP and
# through the appliance's own /v1/mcp on TLS (20 calls each). Needs root, Podman
# and the sandbox image (make setup image) and the MCP test client (make
# sdk-deps). The whole test log is kept; its path is printed.
#   bench/sdk.sh [N]     N round trips each for Go and Python (default 50)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s sdk-deps
log=$(mktemp /tmp/airlock-bench-sdk.XXXXXX.log)
rc=0
AIRLOCK_SDK_BENCH="${1:-50}" go test -tags 'remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp' \
  -count=1 -timeout 20m -run 'TestSDKs|TestPrincipalsOnAppliance/mcp-ts' -v ./e2e >"$log" 2>&1 || rc=$?
grep -E '^ *(go client|python sdk|# mcp).* p50' "$log" | sed 's/^ *# *//; s/^ *//' | sort -u
grep -E '^ *--- (PASS|FAIL)|FAILED' "$log" || true
echo "full log: $log"
exit "$rc"
