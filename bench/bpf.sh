#!/usr/bin/env bash
# Side-by-side measurements of the eBPF steering path (needs root):
#  1. per-packet cost of every branch with BPF_PROG_TEST_RUN (>= 1,000,000
#     repeats) against the empty program on the same packet, in the same run;
#  2. iperf3 throughput from a sandbox netns steered by the program to a
#     splice listener, against the same listener reached at the gateway with
#     no program, interleaved in one run.
# Targets: <= 50 ns/pkt and <= 3x empty; throughput ratio >= 0.97.
# Env: BENCH_REPEAT (default 5000000, split over 5 rounds), AIRLOCK_BENCH_SECONDS (default 2)
# and AIRLOCK_BENCH_ROUNDS (default 6) for iperf3.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench/bpf.sh: needs root (BPF, netns); skipped"
	exit 0
fi
repeat=${BENCH_REPEAT:-5000000}

echo "== per-packet cost (BPF_PROG_TEST_RUN, ${repeat} repeats per branch, min of 5 interleaved rounds vs the empty program)"
go test -count=1 -run '^$' -bench '^BenchmarkProgram$' -benchtime "${repeat}x" ./bpf |
	awk '/^BenchmarkProgram\// {
		name=$1; sub(/^BenchmarkProgram\//, "", name); sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i++) { if ($(i+1) == "ns/pkt") p=$i; if ($(i+1) == "empty-ns/pkt") e=$i; if ($(i+1) == "x-empty") r=$i }
		flag = (p <= 50 && r <= 3) ? "" : "  (over target)"
		printf "  %-34s %7.1f ns/pkt   empty %5.1f ns   %5.2fx%s\n", name, p, e, r, flag
	}
	/^(ok|FAIL|---)/ { print "  " $0 }'

echo "== throughput (iperf3, interleaved, same run)"
AIRLOCK_BENCH_IPERF=1 go test -count=1 -run '^TestIperfThroughput$' -v ./bpf | grep -E '^(iperf3|--- |FAIL|ok)|round'
