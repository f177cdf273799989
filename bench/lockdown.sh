#!/usr/bin/env bash
# The kill switch's latency (needs root): 20 sandboxes (network namespaces
# with veth pairs attached to the real kernel path, a fake proxy and dnsd)
# kept busy with DNS queries and TCP connections; the time from
# SetLockdown(true) (what `airlock lockdown` ends in) to the moment every one
# of them has had a packet dropped with reason lockdown, 11 rounds, median
# and max. Target <= 100 ms. Run it alone: flock /tmp/airlock-team/bench.lock bench/lockdown.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "bench/lockdown.sh: needs root (BPF, netns); skipped"
	exit 0
fi
AIRLOCK_BENCH_LOCKDOWN=1 go test -count=1 -run '^TestLockdownLatency$' -v ./bpf | grep -E 'lockdown of|FAIL|ok|target'
