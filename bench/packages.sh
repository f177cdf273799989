#!/usr/bin/env bash
# bench/packages.sh — the package gate and the shared verified cache
# (issue 20), side by side in one run, on loopback only, through the real
# proxy with real npm and pip, against the fake registry of the proxy's
# tests (e2e/world/pkgreg): no client ever reaches the internet.
#
#   meta   an npm packument of 200 versions (abbreviated): direct from the
#          world registry (which builds it per request), the same bytes
#          served static (the least a round trip of them takes here),
#          through the proxy in a category without package rules (MITM
#          alone), rewritten by the gate on every request (no cache), and
#          a metadata cache hit of the gate; N requests each per round, one
#          of each in turn, keep-alive. Target: added p50 <= 2 ms on a hit.
#   npm    a second sandbox's install of the same 50-package tree
#   pip    (npm: cache-root and its 49 dependencies; pip: 50 wheels,
#          --no-deps, as pkgreg serves no Python dependencies) with the
#          artifact cache, at each registry latency of LATENCIES (0s: the
#          loopback world; 50ms: a registry 50 ms away). Targets: second /
#          first <= 0.5x, >= 90 % of artifacts from the cache. The FLOOR row
#          is the client's own work with no network at all, the least a
#          second install can take here: npm install --offline from the npm
#          cache the first install primed; pip install --no-index
#          --find-links DIR of the same wheels. floor/first above 0.5x
#          means the 0.5x target is out of reach of any cache here. The
#          CPU columns split each install's time: the client's own, and
#          the proxy's (with the world registry: one test process).
#   index  the cache index with ENTRIES artifacts: heap and RSS in the
#          process that stored them, and in a fresh process that reopened
#          the index from disk (issue 20: "bounded"; the test's bar is a
#          heap of at most 16 MiB).
#
# Usage: bench/packages.sh                 (ROUNDS=3, N=1000, LATENCIES="0s 50ms", ENTRIES=10000)
#        ONLY="meta index" bench/packages.sh
#   ONLY: the parts to run (default all): meta npm pip index
#   Each figure is the median over ROUNDS rounds [min-max]; a ratio or a
#   difference is taken within a round, then the median.
# The helpers are the proxy's test binaries (TestPackageBench and
# pkgcache's TestBenchIndexMemory, run when AIRLOCK_BENCH_* are set): the
# same harness the cache tests use. The clients run on the host with an
# environment of their own (the tests' cleanEnv: PATH, HOME and the
# clients' settings; no SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE
# or proxy variable of the host) and are given the appliance CA with
# --cafile / --cert. Needs go and python3 (the summary); npm and python3 -m
# pip (a missing one skips its part, said so); not root.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
N=${N:-1000}
LATENCIES=${LATENCIES:-"0s 50ms"}
ENTRIES=${ENTRIES:-10000}
PARTS="meta npm pip index"
ONLY=${ONLY:-$PARTS}
GOTAGS=${GOTAGS:-remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp}
die() { printf 'bench/packages.sh: %s\n' "$*" >&2; exit 1; }
want() { [[ " $ONLY " == *" $1 "* ]]; }
for part in $ONLY; do
	case " $PARTS " in *" $part "*) ;; *) die "unknown part $part in ONLY (want: $PARTS)" ;; esac
done

if want npm && ! npm --version >/dev/null 2>&1; then
	echo "bench/packages.sh: skipping npm (npm does not run)" >&2
	ONLY=${ONLY//npm/}
fi
if want pip && ! python3 -m pip --version >/dev/null 2>&1; then
	echo "bench/packages.sh: skipping pip (python3 -m pip does not run)" >&2
	ONLY=${ONLY//pip/}
fi

work=$(mktemp -d /tmp/airlock-bench-packages.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM # runs the EXIT trap
mkdir "$work/tmp"
load_start=$(uptime)

echo "bench/packages.sh: building the helpers (test binaries of proxy and proxy/internal/pkgcache)" >&2
go test -c -tags "$GOTAGS" -o "$work/proxy.test" ./proxy || die "build the proxy test binary"
go test -c -tags "$GOTAGS" -o "$work/pkgcache.test" ./proxy/internal/pkgcache || die "build the pkgcache test binary"

: >"$work/results"
# bench ROUND DIR BINARY TEST VAR=VALUE...: runs one measurement in the
# package's directory DIR (as go test does: testdata/ is relative) and
# keeps its BENCH lines.
bench() {
	local round=$1 dir=$2 bin=$3 test=$4 out
	shift 4
	if ! out=$(cd "$dir" && env TMPDIR="$work/tmp" "$@" "$bin" -test.run "^$test\$" -test.count=1 2>&1); then
		printf '%s\n' "$out" | tail -40 >&2
		die "$test $* failed"
	fi
	printf '%s\n' "$out" | sed -n "s/^BENCH /$round\t/p" >>"$work/results"
}

for ((round = 1; round <= ROUNDS; round++)); do
	if want meta; then
		echo "bench/packages.sh: round $round/$ROUNDS, metadata" >&2
		bench "$round" proxy "$work/proxy.test" TestPackageBench AIRLOCK_BENCH_PACKAGES=meta AIRLOCK_BENCH_N="$N"
	fi
	for lat in $LATENCIES; do
		for client in npm pip; do
			want "$client" || continue
			echo "bench/packages.sh: round $round/$ROUNDS, $client, registry latency $lat" >&2
			bench "$round" proxy "$work/proxy.test" TestPackageBench AIRLOCK_BENCH_PACKAGES="$client" AIRLOCK_BENCH_LATENCY="$lat"
		done
	done
done
if want index; then
	echo "bench/packages.sh: the cache index, $ENTRIES artifacts" >&2
	for mode in fill reopen; do
		bench 1 proxy/internal/pkgcache "$work/pkgcache.test" TestBenchIndexMemory AIRLOCK_BENCH_PKGCACHE=$mode \
			AIRLOCK_BENCH_PKGCACHE_DIR="$work/index" AIRLOCK_BENCH_PKGCACHE_N="$ENTRIES"
	done
fi

echo
echo "load average at the start: ${load_start##*load average: }; at the end: $(uptime | sed 's/.*load average: //')"
PYTHONPATH=bench/lib python3 - "$work/results" "$ROUNDS" "$N" <<'PY'
import json, statistics, sys
from mdtable import print_table as table
path, rounds, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = []  # (round, dict)
for line in open(path):
    rnd, js = line.rstrip("\n").split("\t", 1)
    res.append((int(rnd), json.loads(js)))

def med(xs):
    """median [min-max] of xs, formatted by f."""
    return statistics.median(xs), min(xs), max(xs)

def fmt(xs, f="{:.2f}"):
    if not xs:
        return "-"
    m, lo, hi = med(xs)
    return f.format(m) if len(xs) == 1 else f"{f.format(m)} [{f.format(lo)}-{f.format(hi)}]"

print(f"each figure: median of {rounds} round(s) [min-max]; a ratio or difference is taken within a round")

meta = {}  # row -> {round: result}
for rnd, d in res:
    if d["part"] == "meta":
        meta.setdefault(d["row"], {})[rnd] = d
if meta:
    print()
    print(f"1. metadata: npm packument of 200 versions (abbreviated; one version gated), {n} requests per path per round, keep-alive")
    names = [("direct", "direct from the world registry (builds it per request)"),
             ("static", "direct, the same bytes served static (least a round trip takes)"),
             ("mitm", "through the proxy, category without package rules (MITM alone)"),
             ("rewrite", "through the gate, rewritten on every request (no cache)"),
             ("hit", "through the gate, metadata cache hit")]
    rows = []
    for key, label in names:
        rs = list(meta.get(key, {}).values())
        rows.append([label, fmt([r["p50_us"] / 1e3 for r in rs], "{:.3f}"), fmt([r["p99_us"] / 1e3 for r in rs], "{:.3f}"),
                     f"{rs[-1]['bytes']:,}" if rs else "-"])
    table(["path", "p50 ms", "p99 ms", "bytes"], rows)
    def diff(a, b, f):
        ra, rb = meta.get(a, {}), meta.get(b, {})
        return [(ra[k][f] - rb[k][f]) / 1e3 for k in sorted(set(ra) & set(rb))]
    for base, what in (("direct", "the world registry"), ("static", "the same bytes served static")):
        p50, p99 = diff("hit", base, "p50_us"), diff("hit", base, "p99_us")
        if p50:
            verdict = "met" if statistics.median(p50) <= 2 else "NOT MET"
            print(f"  added by the gate on a cache hit, vs {what}: p50 {fmt(p50, '{:+.3f}')} ms, p99 {fmt(p99, '{:+.3f}')} ms (target p50 <= 2 ms: {verdict})")
    p50 = diff("rewrite", "direct", "p50_us")
    if p50:
        print(f"  added by the gate rewriting every request (no cache), vs the world registry: p50 {fmt(p50, '{:+.3f}')} ms")
    print("  (the proxy answers a hit itself, with no upstream round trip: a hit can be faster than the registry)")

inst = {}  # (client, latency) -> {round: result}
for rnd, d in res:
    if d["part"] in ("npm", "pip"):
        inst.setdefault((d["part"], d["latency_ms"]), {})[rnd] = d
if inst:
    print()
    size = next(iter(inst.values()))
    size = next(iter(size.values()))["packages"]
    print(f"2. a second sandbox's install of the same {size}-package tree, with the artifact cache (seconds)")
    floors = {"npm": "FLOOR npm: install --offline from the first install's npm cache",
              "pip": "FLOOR pip: install --no-index --find-links DIR of the wheels"}
    rows, notes = [], []
    for (client, lat), by in sorted(inst.items()):
        rs = list(by.values())
        where = "loopback (0 ms)" if lat == 0 else f"{lat:g} ms away"
        first = [r["first_ms"] / 1e3 for r in rs]
        ratio = [r["second_ms"] / r["first_ms"] for r in rs]
        fratio = [r["floor_ms"] / r["first_ms"] for r in rs]
        hits = [100 * r["hits"] / r["artifacts"] if r["artifacts"] else 0 for r in rs]
        cpu = lambda run, who: fmt([r[f"{run}_{who}_cpu_ms"] / 1e3 for r in rs])
        rows.append([f"{client}: first, then second install", where, fmt(first), fmt([r["second_ms"] / 1e3 for r in rs]),
                     fmt(ratio, "{:.2f}x"), cpu("second", "client"), cpu("second", "proxy"),
                     fmt(hits, "{:.0f} %") + f" ({rs[-1]['hits']}/{rs[-1]['artifacts']})"])
        rows.append([floors[client], where, fmt(first), fmt([r["floor_ms"] / 1e3 for r in rs]), fmt(fratio, "{:.2f}x"),
                     cpu("floor", "client"), cpu("floor", "proxy"), "no network"])
        r50, f50 = statistics.median(ratio), statistics.median(fratio)
        v = f"{client}, {where}: second/first {r50:.2f}x (target <= 0.5x: {'met' if r50 <= 0.5 else 'NOT MET'}); "
        v += f"from the cache {statistics.median(hits):.0f} % (target >= 90 %: {'met' if statistics.median(hits) >= 90 else 'NOT MET'}); "
        v += f"floor/first {f50:.2f}x"
        if f50 > 0.5:
            v += ": the client's own work alone is over 0.5x of the first install, so <= 0.5x is out of reach of any cache here"
        elif r50 > 0.5:
            v += f": the cache path leaves {statistics.median([(r['second_ms'] - r['floor_ms']) / 1e3 for r in rs]):.2f} s above the floor"
            c = lambda f: statistics.median([r[f] / 1e3 for r in rs])
            v += (f"; the proxy's CPU in the second install {c('second_proxy_cpu_ms'):.2f} s, the client's {c('second_client_cpu_ms'):.2f} s"
                  f" against {c('floor_client_cpu_ms'):.2f} s in the floor")
        notes.append(v)
    table(["install", "registry", "first s", "second (FLOOR) s", "ratio to first", "client CPU s", "proxy CPU s", "from the cache (target >= 90 %)"], rows)
    print("  CPU: of the second install (FLOOR rows: of the floor); the client's, and the proxy's (with the world registry, in one process)")
    for v in notes:
        print("  " + v)

idx = {d["mode"]: d for _, d in res if d["part"] == "index"}
if idx:
    print()
    n_ = next(iter(idx.values()))["entries"]
    print(f"3. the cache index with {n_:,} artifacts (heap and RSS after a collection that returns free memory; issue 20: bounded; the test's bar: heap <= 16 MiB)")
    MiB = 1 << 20
    rows = []
    for mode, label in (("fill", "filled (the process that stored them)"), ("reopen", "reopened from disk (a fresh process)")):
        d = idx.get(mode)
        if not d:
            continue
        heap, rss = d["heap_after"] - d["heap_before"], d["rss_after"] - d["rss_before"]
        e = d["entries"] or 1
        rows.append([label, f"{heap / MiB:.2f}", f"{heap / e:,.0f}", f"{d['rss_before'] / MiB:.1f}", f"{d['rss_after'] / MiB:.1f}",
                     f"{rss / MiB:.2f}", f"{rss / e:,.0f}", f"{d['index_file_bytes'] / MiB:.2f}"])
    table(["index", "heap MiB", "heap B/entry", "RSS before MiB", "RSS after MiB", "RSS added MiB", "RSS B/entry", "journal on disk MiB"], rows)
PY
