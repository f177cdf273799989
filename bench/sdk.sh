#!/usr/bin/env bash
# SDK round trips: `echo hi` through the Go client and the Python SDK over
# the unix socket (one appliance, one sandbox, one run), and MCP
# run_command through `airlock mcp` on stdio. Needs root, Podman and the
# sandbox image (make setup image) and the MCP test client (make sdk-deps).
#   bench/sdk.sh [N]     N round trips each (default 50)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s sdk-deps
AIRLOCK_SDK_BENCH="${1:-50}" go test -tags 'remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp' \
  -count=1 -timeout 20m -run 'TestSDKs' -v ./e2e 2>&1 | grep -E 'p50|^ *(--- |ok|FAIL)|FAILED|Error'
