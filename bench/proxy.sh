#!/usr/bin/env bash
# bench/proxy.sh — side-by-side, in one run, on loopback only: an HTTPS origin
# reached directly (the limit), through Airlock MITM, Airlock splice, Debian's
# squid (squid-openssl) with ssl-bump, and squid splicing CONNECT; at 1 and 32
# connections, keep-alive and a new connection per request (small bodies), and
# 1 MiB bodies. The client pins TLS key exchange to X25519 (squid's OpenSSL has
# no post-quantum exchange). Prints a table and the ratios the targets use.
#
# Usage: bench/proxy.sh            (DURATION=2s, ROUNDS=3 by default; CONNS="1 32")
#        ONLY="direct airlock-splice" bench/proxy.sh
#   ONLY is a space-separated list of the parts to run (default: all):
#   direct airlock-mitm airlock-splice squid-bump squid-splice floor-tls floor-splice idle snis
#   floor-tls and floor-splice are the least a proxy can do on this machine
#   (bench/proxy floor): end TLS and copy the plaintext, or copy the bytes,
#   with no HTTP, policy, log or upstream pool; their ratios show what the
#   machine itself leaves for each target.
#   BEFORE=REV adds the rows "airlock MITM @REV" and "airlock splice @REV":
#   the same bench helper built from git revision REV (a detached worktree
#   under the work directory), a second appliance beside the first, run in
#   the same interleaved rounds; the ratios then include now / REV, the
#   before-and-after of a change measured in one run.
#   SNI_INTERVAL (default 20ms) paces the unique-name run: one new
#   connection per interval, so the load generator does not saturate the
#   machine and the numbers show the mint, not a queue.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-2s}
PARTS="direct airlock-mitm airlock-splice squid-bump squid-splice floor-tls floor-splice idle snis"
ONLY=${ONLY:-$PARTS}
for part in $ONLY; do
	if [[ " $PARTS " != *" $part "* ]]; then
		echo "bench: unknown part $part in ONLY (want: $PARTS)" >&2
		exit 2
	fi
done
want() { [[ " $ONLY " == *" $1 "* ]]; }
# Each idle tunnel costs the proxy two descriptors (its two sockets; no
# splice pipe waits with an idle tunnel). Raise the limit as far as this
# process may: to 65536 when it may raise the hard limit (CAP_SYS_RESOURCE),
# else to the hard limit; then hold as many tunnels as fit, at most 10,000.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
max_tunnels=$(( ($(ulimit -n) - 64) / 2 ))
IDLE_TUNNELS=${IDLE_TUNNELS:-$(( max_tunnels < 10000 ? max_tunnels : 10000 ))}
CONNS=${CONNS:-"1 32"}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d /tmp/airlock-bench-proxy.XXXXXX)
chmod 755 "$work"
pids=()
BEFORE=${BEFORE:-}
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$BEFORE" ] && [ -d "$work/before" ]; then git worktree remove --force "$work/before" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

wait_port() { # host:port
	for _ in $(seq 1 100); do
		if (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "bench: nothing listening on $1" >&2
	return 1
}

echo "bench: building helper" >&2
go build -o "$work/benchproxy" ./bench/proxy
B="$work/benchproxy"
"$B" mkcerts -dir "$work"
if [ -n "$BEFORE" ]; then
	rev=$(git rev-parse --short "$BEFORE^{commit}") || { echo "bench: BEFORE=$BEFORE is not a commit" >&2; exit 2; }
	echo "bench: building helper at $rev" >&2
	git worktree add --detach -q "$work/before" "$rev"
	(cd "$work/before" && go build -o "$work/benchproxy-before" ./bench/proxy)
fi

# The origin.
oport=$(free_port)
"$B" origin -addr "127.0.0.1:$oport" -cert "$work/origin.pem" >/dev/null &
opid=$!
pids+=($opid)
wait_port "127.0.0.1:$oport"

# Airlock (explicit listener: CONNECT, then MITM or splice by category).
# start_airlock BIN NAME sets al_port, al_pid and al_ca (its CA, once written).
start_airlock() {
	al_port=$(free_port)
	mkdir -m 700 "$work/$2-state"
	"$1" airlock -addr "127.0.0.1:$al_port" -state-dir "$work/$2-state" -origin-ca "$work/origin-ca.pem" >/dev/null &
	al_pid=$!
	pids+=($al_pid)
	wait_port "127.0.0.1:$al_port"
	al_ca="$work/$2-state/ca.crt"
	for _ in $(seq 1 50); do [ -s "$al_ca" ] && break; sleep 0.1; done
}
start_airlock "$B" airlock
aport=$al_port apid=$al_pid airlock_ca=$al_ca
bport="" bpid="" before_ca=""
if [ -n "$BEFORE" ]; then
	start_airlock "$work/benchproxy-before" before
	bport=$al_port bpid=$al_pid before_ca=$al_ca
fi

# The floors: the least a proxy can do (see bench/proxy floor).
# start_floor MODE sets floor_port and floor_pid.
start_floor() {
	floor_port=$(free_port)
	"$B" floor -mode "$1" -addr "127.0.0.1:$floor_port" -origin "127.0.0.1:$oport" -cert "$work/origin.pem" -origin-ca "$work/origin-ca.pem" >/dev/null &
	floor_pid=$!
	pids+=($floor_pid)
	wait_port "127.0.0.1:$floor_port"
}
ftls_port="" ftls_pid="" fspl_port="" fspl_pid=""
if want floor-tls; then start_floor tls; ftls_port=$floor_port ftls_pid=$floor_pid; fi
if want floor-splice; then start_floor splice; fspl_port=$floor_port fspl_pid=$floor_pid; fi

# squid: one instance, one ssl-bump port and one plain CONNECT port.
squid_bump="" squid_splice="" squid_pid=""
if ! want squid-bump && ! want squid-splice; then
	: # not asked for
elif [ -x /usr/sbin/squid ] && [ -x /usr/lib/squid/security_file_certgen ] && /usr/sbin/squid -v | grep -q -- '--with-openssl'; then
	sport_bump=$(free_port)
	sport_splice=$(free_port)
	/usr/lib/squid/security_file_certgen -c -s "$work/ssl_db" -M 16MB >/dev/null
	chown -R proxy:proxy "$work/ssl_db" 2>/dev/null || true
	echo "127.0.0.1 origin.example.test splice.example.test" > "$work/hosts"
	cat > "$work/squid.conf" <<CONF
http_port 127.0.0.1:$sport_splice
http_port 127.0.0.1:$sport_bump ssl-bump tls-cert=$work/squid-ca.pem generate-host-certificates=on dynamic_cert_mem_cache_size=64MB
sslcrtd_program /usr/lib/squid/security_file_certgen -s $work/ssl_db -M 16MB
sslcrtd_children 8 startup=2 idle=1
acl step1 at_step SslBump1
acl bumpport myportname 127.0.0.1:$sport_bump
ssl_bump peek step1
ssl_bump bump bumpport
ssl_bump splice all
tls_outgoing_options cafile=$work/origin-ca.pem
hosts_file $work/hosts
acl SSL_ports port 1-65535
acl Safe_ports port 1-65535
acl CONNECT method CONNECT
http_access allow localhost
http_access deny all
cache deny all
access_log none
cache_store_log none
cache_log $work/squid-cache.log
pid_filename $work/squid.pid
coredump_dir $work
shutdown_lifetime 0 seconds
max_filedescriptors 65536
workers 1
CONF
	chmod 644 "$work"/*.pem "$work/squid.conf" "$work/hosts"
	/usr/sbin/squid -N -f "$work/squid.conf" >/dev/null 2>&1 &
	squid_pid=$!
	pids+=($squid_pid)
	if wait_port "127.0.0.1:$sport_bump" && wait_port "127.0.0.1:$sport_splice"; then
		squid_bump="127.0.0.1:$sport_bump"
		squid_splice="127.0.0.1:$sport_splice"
	else
		echo "bench: squid did not start; see its log:" >&2
		tail -5 "$work/squid-cache.log" >&2 || true
	fi
else
	echo "bench: squid-openssl is not installed: skipping the squid rows (apt-get install squid-openssl)" >&2
fi

ca="$work/origin-ca.pem,$airlock_ca,$work/squid-ca.pem${before_ca:+,$before_ca}"
declare -A R

# cpu_tree PID...: CPU seconds used so far by each PID and its children
# (squid's certificate helpers), summed.
cpu_tree() {
	python3 - "$@" <<'PY'
import os, sys
want, tick, total = set(sys.argv[1:]), os.sysconf("SC_CLK_TCK"), 0
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if d in want or f[1] in want:  # f[1] is the parent's pid
        total += int(f[11]) + int(f[12])
print(total / tick)
PY
}

run() { # row key proxypid -- load args...
	local row=$1 key=$2 ppid=$3
	shift 3
	local out o0 p0
	o0=$(cpu_tree "$opid")
	p0=$(cpu_tree $ppid)
	out=$("$B" load -d "$DURATION" -ca "$ca" "$@") || { echo "bench: $row $key failed" >&2; out='{}'; }
	R[$row,$key]=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["origin_cpu_s"]=float(sys.argv[3])-float(sys.argv[2]); d["proxy_cpu_s"]=float(sys.argv[5])-float(sys.argv[4]); print(json.dumps(d))' \
		"$out" "$o0" "$(cpu_tree "$opid")" "$p0" "$(cpu_tree $ppid)")
}

# The rows, each with the host its requests name and how the load reaches it.
rows=() hosts=() vias=() ppids=()
addrow() { rows+=("$1"); hosts+=("$2"); vias+=("$3"); ppids+=("$4"); }
want direct && addrow "direct" origin.example.test "-dial 127.0.0.1:$oport" ""
want airlock-mitm && addrow "airlock MITM" origin.example.test "-proxy 127.0.0.1:$aport" "$apid"
want airlock-splice && addrow "airlock splice" splice.example.test "-proxy 127.0.0.1:$aport" "$apid"
if [ -n "$BEFORE" ]; then
	want airlock-mitm && addrow "airlock MITM @$rev" origin.example.test "-proxy 127.0.0.1:$bport" "$bpid"
	want airlock-splice && addrow "airlock splice @$rev" splice.example.test "-proxy 127.0.0.1:$bport" "$bpid"
fi
[ -n "$squid_bump" ] && want squid-bump && addrow "squid ssl-bump" origin.example.test "-proxy $squid_bump" "$squid_pid"
[ -n "$squid_splice" ] && want squid-splice && addrow "squid splice" origin.example.test "-proxy $squid_splice" "$squid_pid"
want floor-tls && addrow "floor: TLS relay" origin.example.test "-proxy 127.0.0.1:$ftls_port" "$ftls_pid"
want floor-splice && addrow "floor: splice" origin.example.test "-proxy 127.0.0.1:$fspl_port" "$fspl_pid"

# Interleaved rounds: each cell (connections x kind) runs every row back to
# back, and the whole grid is repeated ROUNDS times. A ratio compares two
# rows of the same round, measured seconds apart, and the table reports the
# median over rounds: on a machine whose speed drifts, drift then moves
# both sides of a ratio alike instead of deciding it.
for ((round = 1; round <= ROUNDS; round++)); do
	for c in $CONNS; do
		for kind in ka new bulk; do
			echo "bench: round $round/$ROUNDS, $c connection(s), $kind" >&2
			for i in "${!rows[@]}"; do
				case $kind in
				ka) extra=(-url "https://${hosts[$i]}:$oport/small") ;;
				new) extra=(-new-conn -url "https://${hosts[$i]}:$oport/small") ;;
				bulk) extra=(-url "https://${hosts[$i]}:$oport/1m") ;;
				esac
				# shellcheck disable=SC2086 # vias hold a flag and its value
				run "${rows[$i]}" "$kind$c#$round" "${ppids[$i]}" -c "$c" "${extra[@]}" ${vias[$i]}
			done
		done
	done
done

# The table.
if [ ${#rows[@]} -gt 0 ]; then
{
	for k in "${!R[@]}"; do printf '%s\t%s\n' "$k" "${R[$k]}"; done
} > "$work/results.tsv"
PYTHONPATH=bench/lib python3 - "$work/results.tsv" "$CONNS" "$ROUNDS" "$DURATION" "${rows[@]}" <<'PY'
import json, mdtable, statistics, sys
path, conns, rounds, dur, rows = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
runs = {}  # (row, col) -> {round: result}
for line in open(path):
    key, js = line.rstrip("\n").split("\t", 1)
    row, rest = key.rsplit(",", 1)
    col, rnd = rest.split("#")
    runs.setdefault((row, col), {})[int(rnd)] = json.loads(js or "{}")
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def g(row, col, f):
    return med(r.get(f) for r in runs.get((row, col), {}).values())
print(f"median of {rounds} interleaved round(s), {dur} per run; ratios are medians of per-round ratios [min-max]")
print()
cols = []
for c in conns:
    cols += [(f"ka{c}", "req_per_s", f"keep-alive c={c} req/s"),
             (f"new{c}", "req_per_s", f"new conn c={c} /s"),
             (f"bulk{c}", "mib_per_s", f"1MiB c={c} MiB/s")]
def print_table(hdr, table):
    mdtable.print_table(hdr, table)
    print()
hdr = ["path"] + [c[2] for c in cols] + [f"p50 µs (c={conns[0]} ka)", "errors"]
table = []
for row in rows:
    line = [row]
    for col, f, _ in cols:
        v = g(row, col, f)
        line.append("-" if v is None else f"{v:,.0f}")
    p50 = g(row, f"ka{conns[0]}", "p50_us")
    line.append("-" if p50 is None else f"{p50:,.0f}")
    errs = sum((r.get("errors") or 0) for col, _, _ in cols for r in runs.get((row, col), {}).values())
    line.append(str(errs))
    table.append(line)
print_table(hdr, table)
# CPU per unit of work: the machine's two cores are shared by the load
# generator, the origin and the proxy, so at c=32 the rates follow the CPU
# each path spends per request or MiB; these hold steadier between rounds
# than the rates do.
def unit(r, kind):
    cpu = [r.get("client_cpu_s"), r.get("origin_cpu_s"), r.get("proxy_cpu_s")]
    if None in cpu or not r.get("requests"):
        return None, None
    if kind == "bulk":
        mib = (r.get("mib_per_s") or 0) * (r.get("seconds") or 0)
        return (sum(cpu) / mib * 1e3, cpu[2] / mib * 1e3) if mib else (None, None)
    return sum(cpu) / r["requests"] * 1e6, cpu[2] / r["requests"] * 1e6
bigc = conns[-1]
ucols = [(f"ka{bigc}", "ka", f"keep-alive c={bigc} µs/req"), (f"new{bigc}", "new", f"new conn c={bigc} µs/conn"), (f"bulk{bigc}", "bulk", f"1MiB c={bigc} ms/MiB")]
uhdr = ["CPU per unit: all (proxy)"] + [c[2] for c in ucols]
utable = []
for row in rows:
    line = [row]
    for col, kind, _ in ucols:
        vals = [unit(r, kind) for r in runs.get((row, col), {}).values()]
        tot, prx = med(v[0] for v in vals), med(v[1] for v in vals)
        line.append("-" if tot is None else (f"{tot:,.2f} ({prx:,.2f})" if kind == "bulk" else f"{tot:,.0f} ({prx:,.0f})"))
    utable.append(line)
print_table(uhdr, utable)
def paired(a, acol, b, bcol, f, op):
    """op over the runs of rows a and b in the same round."""
    ra, rb = runs.get((a, acol), {}), runs.get((b, bcol), {})
    out = []
    for k in sorted(set(ra) & set(rb)):
        x, y = ra[k].get(f), rb[k].get(f)
        if x is not None and y is not None:
            v = op(x, y)
            if v is not None:
                out.append(v)
    return out
def show(name, xs, unit):
    if not xs:
        print(f"  {name}: -")
        return
    m = statistics.median(xs)
    if unit == "x":
        print(f"  {name}: {m:.2f}x [{min(xs):.2f}-{max(xs):.2f}]")
    else:
        print(f"  {name}: {m:,.0f} µs [{min(xs):,.0f}-{max(xs):,.0f}]")
big = conns[-1]
print(f"ratios (c={big} unless noted):")
div = lambda x, y: x / y if y else None
checks = [
    ("MITM keep-alive / squid ssl-bump (target >= 2.0x)", "airlock MITM", f"ka{big}", "squid ssl-bump", "req_per_s"),
    ("MITM new conn / squid ssl-bump (target >= 3.5x)", "airlock MITM", f"new{big}", "squid ssl-bump", "req_per_s"),
    ("MITM 1MiB / direct (target >= 0.7x)", "airlock MITM", f"bulk{big}", "direct", "mib_per_s"),
    ("splice keep-alive / squid splice (target >= 1.0x)", "airlock splice", f"ka{big}", "squid splice", "req_per_s"),
    ("splice new conn / squid splice (target >= 1.0x)", "airlock splice", f"new{big}", "squid splice", "req_per_s"),
    ("splice 1MiB / squid splice (target >= 1.0x)", "airlock splice", f"bulk{big}", "squid splice", "mib_per_s"),
    ("splice 1MiB / direct (target >= 0.9x)", "airlock splice", f"bulk{big}", "direct", "mib_per_s"),
]
for name, a, col, b, f in checks:
    show(name, paired(a, col, b, col, f, div), "x")
floors = [
    ("floor: TLS relay keep-alive / squid ssl-bump (a relay that does nothing else; MITM target >= 2.0x)", "floor: TLS relay", f"ka{big}", "squid ssl-bump", "req_per_s"),
    ("floor: TLS relay 1MiB / direct (a relay that does nothing else; MITM target >= 0.7x)", "floor: TLS relay", f"bulk{big}", "direct", "mib_per_s"),
    ("floor: splice 1MiB / direct (a relay that does nothing else; splice target >= 0.9x)", "floor: splice", f"bulk{big}", "direct", "mib_per_s"),
    ("airlock MITM keep-alive / floor: TLS relay", "airlock MITM", f"ka{big}", "floor: TLS relay", "req_per_s"),
    ("airlock splice 1MiB / floor: splice", "airlock splice", f"bulk{big}", "floor: splice", "mib_per_s"),
]
if any(r.startswith("floor:") for r in rows):
    print("floors, the least a proxy can do here (no HTTP, policy, log or pool):")
    for name, a, col, b, f in floors:
        if a in rows and b in rows:
            show(name, paired(a, col, b, col, f, div), "x")
befores = [r for r in rows if " @" in r]
if befores:
    print("now / before (the same proxy built at the earlier revision, same rounds):")
    for b in befores:
        now = b.split(" @")[0]
        for kind, f in (("ka", "req_per_s"), ("new", "req_per_s"), ("bulk", "mib_per_s")):
            for c in conns:
                show(f"{now} {kind} c={c} / {b}", paired(now, f"{kind}{c}", b, f"{kind}{c}", f, div), "x")
c1 = conns[0]
who = "one keep-alive client" if c1 == "1" else f"{c1} keep-alive clients (the target is for one)"
for row in rows:
    if row != "direct" and not row.startswith("floor:"):
        show(f"added p50 latency, {who}, {row} (MITM target <= 150 µs)",
             paired(row, f"ka{c1}", "direct", f"ka{c1}", "p50_us", lambda x, y: x - y), "us")
PY
fi

idle_out='{}' sni_out='{}'
if want idle; then
	echo
	echo "Airlock, $IDLE_TUNNELS idle spliced TLS tunnels (target: RSS under 300 MB):"
	idle_out=$("$B" idle -proxy "127.0.0.1:$aport" -target "splice.example.test:$oport" -n "$IDLE_TUNNELS" -pid "$apid" -ca "$work/origin-ca.pem" || echo '{}')
fi
if want snis; then
	echo "Airlock MITM, 1,000 unique server names, one new connection each, paced one connection every ${SNI_INTERVAL:=20ms},"
	echo "taking turns with a cached name; every request closes its upstream connection too (target: no spikes above 5 ms p99):"
	sni_out=$("$B" snis -proxy "127.0.0.1:$aport" -port "$oport" -n 1000 -interval "$SNI_INTERVAL" -ca "$work/origin-ca.pem,$airlock_ca" || echo '{}')
fi
python3 - "$idle_out" "$sni_out" "$(ulimit -n)" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
if d:
    print("  idle: tunnels held {tunnels} (failed {failed}, set up in {setup_s:.1f} s); proxy RSS {rss_before_mib:.0f} MiB before, {rss_mib:.0f} MiB with them".format(**d))
    if d["tunnels"]:
        per = (d["rss_mib"] - d["rss_before_mib"]) / d["tunnels"]
        print("  idle: {:.1f} KiB per tunnel; at 10,000 tunnels {:.0f} MiB ({:.0f} MB)".format(per * 1024, d["rss_before_mib"] + per * 10000, (d["rss_before_mib"] + per * 10000) * 1.048576))
        if d["tunnels"] < 10000:
            print("  idle: fewer than 10,000 tunnels: the descriptor limit here is {} (ulimit -Hn; raising it needs CAP_SYS_RESOURCE)".format(sys.argv[3]))
s = json.loads(sys.argv[2])
if s:
    print("  snis: unique names p50 {unique_p50_us:,.0f} us, p99 {unique_p99_us:,.0f} us (errors {unique_errors}); one cached name p50 {cached_p50_us:,.0f} us, p99 {cached_p99_us:,.0f} us (errors {cached_errors})".format(**s))
    print("  snis: TLS handshake with the proxy (where the mint is): unique p50 {unique_tls_p50_us:,.0f} us, p99 {unique_tls_p99_us:,.0f} us; cached p50 {cached_tls_p50_us:,.0f} us, p99 {cached_tls_p99_us:,.0f} us".format(**s))
    print("  snis: minting adds to the handshake p50 {:,.0f} us, p99 {:,.0f} us".format(s["unique_tls_p50_us"] - s["cached_tls_p50_us"], s["unique_tls_p99_us"] - s["cached_tls_p99_us"]))
PY
