#!/usr/bin/env bash
# Side-by-side measurements of the eBPF steering path (needs root):
#  1. per-packet cost of every branch with BPF_PROG_TEST_RUN (BENCH_REPEAT
#     repeats per call, >= 1,000,000) against the empty program on the same
#     packet with the same repeat, interleaved in the same run: 11 rounds,
#     order alternating, medians of this thread's CPU time per packet;
#  2. iperf3 throughput from a sandbox netns steered by the program to a
#     splice listener, against the same listener reached at the gateway with
#     no program, interleaved in one run.
# Targets: <= 50 ns/pkt and <= 3x empty; throughput ratio >= 0.97.
# Env: BENCH_REPEAT (default 2000000), AIRLOCK_BENCH_BASE (another build of
# bpf/c/steer.c, e.g. `git show REV:bpf/steer_bpfel.o > base.o`, measured in
# the same rounds: a before/after from one run), AIRLOCK_BENCH_SECONDS
# (default 2) and AIRLOCK_BENCH_ROUNDS (default 6) for iperf3.
# Run it alone: flock /tmp/airlock-team/bench.lock bench/bpf.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench/bpf.sh: needs root (BPF, netns); skipped"
	exit 0
fi
repeat=${BENCH_REPEAT:-2000000}

echo "== per-packet cost (BPF_PROG_TEST_RUN, ${repeat} repeats per call, median of 11 interleaved rounds vs the empty program)"
go test -count=1 -run '^$' -bench '^BenchmarkProgram$' -benchtime "${repeat}x" ./bpf |
	awk '/^BenchmarkProgram\// {
		name=$1; sub(/^BenchmarkProgram\//, "", name); sub(/-[0-9]+$/, "", name)
		p=e=r=bp=br=""
		for (i = 3; i < NF; i++) {
			if ($(i+1) == "ns/pkt") p=$i; if ($(i+1) == "empty-ns/pkt") e=$i; if ($(i+1) == "x-empty") r=$i
			if ($(i+1) == "base-ns/pkt") bp=$i; if ($(i+1) == "base-x-empty") br=$i
		}
		flag = (p <= 50 && r <= 3) ? "" : "  (over target)"
		base = (bp == "") ? "" : sprintf("   base %5.1f ns %5.2fx", bp, br)
		printf "  %-34s %5.1f ns/pkt   empty %5.1f ns   %5.2fx%s%s\n", name, p, e, r, base, flag
	}
	/^(ok|FAIL|---)/ { print "  " $0 }'

echo "== throughput (iperf3, interleaved, same run)"
AIRLOCK_BENCH_IPERF=1 go test -count=1 -run '^TestIperfThroughput$' -v ./bpf | grep -E '^(iperf3|--- |FAIL|ok)|round'
