#!/usr/bin/env bash
# Sandbox create latency, side by side in one run, through `airlock serve`
# with a warm pool of POOL busybox sandboxes:
#   floor    an API round trip of the CLI (`airlock sandbox ls`): no create
#            can be faster than this
#   claimed  `sandbox create` served by claiming a warm member, and create
#            plus the first exec (`echo hi`)
#   cold     `sandbox create --read-only` (read-only root: a pool miss, so a
#            container is made) and create plus the first exec
#   bare     `podman run --rm --network none echo hi` of the same image
#   burst    BURST creates at once against the pool of POOL (the rest are
#            misses, made while the pool refills): every create must
#            succeed; p50 and p99 of each create
#   reset    `sandbox reset` of one sandbox, N times (target p50 under 1 s)
#   pause    `sandbox pause` then `sandbox resume` of one sandbox, N times
# N runs each, p50 and p99; the pool refills in the background meanwhile (a
# claimed run waits for one ready member). Targets (issue 17): claimed
# create + first exec p50 at most 50 ms and p99 at most 150 ms; a miss (cold
# create + first exec) no slower than 1.2 x bare podman run (p50); reset
# p50 under 1 s.
#
# Needs root, make setup, make image and bin/airlock, bin/airlock-cli,
# bin/airlockd and bin/airlock-init (make build: a claim binds a member
# through the agent).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${AIRLOCK_BIN:-$HERE/bin/airlock}
IMAGE=${AIRLOCK_IMAGE:-localhost/airlock/busybox:1}
N=${N:-20}
POOL=${POOL:-10}
BURST=${BURST:-50}
SANDBOX_USER=airlock-sandbox
# shellcheck source=../scripts/lib.sh
. "$HERE/scripts/lib.sh"

die() { printf 'bench/lifecycle.sh: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench/lifecycle.sh: skipped (needs root)"; exit 0; }
[ -x "$BIN" ] || die "$BIN not found: make build"
[ -x "$(dirname "$BIN")/airlock-init" ] || die "no airlock-init beside $BIN: make build"
id -u "$SANDBOX_USER" >/dev/null 2>&1 || die "no sandbox user: make setup"
upodman image exists "$IMAGE" || { echo "bench/lifecycle.sh: skipped ($IMAGE not built: make image)"; exit 0; }

WORK=$(mktemp -d /tmp/airlock-bench.XXXXXX)
ID=bl$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
PIN=/sys/fs/bpf/airlock-$ID
THIRD=$(free_pool_third) || die "no free address pool in 198.19.160.0/19"
PORT=$((20000 + RANDOM % 20000))
SERVE_PID=
cleanup() {
	set +e
	for sb in $("$BIN" sandbox ls --json 2>/dev/null | sed -n 's/.*"id": "\([0-9a-f]*\)".*/\1/p'); do
		"$BIN" sandbox rm "$sb" >/dev/null 2>&1
	done
	[ -n "$SERVE_PID" ] && kill -TERM "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID"
	# warm members stay for the next start of an appliance; this one is gone
	for c in $(upodman ps -aq --filter "label=io.airlock.instance=$ID"); do upodman rm -f -t 0 "$c" >/dev/null 2>&1; done
	"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" --teardown >/dev/null 2>&1
	rm -rf "$WORK" "/run/airlock-$ID"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # runs the EXIT trap

mkdir -p "$WORK/policies"
cp "$HERE/policies/examples/coding-agent.toml" "$WORK/policies/bench.toml"
cat >"$WORK/airlock.toml" <<EOF
version = 1
state_dir = "$WORK/state"
runtime_dir = "/run/airlock-$ID"
policy_dir = "$WORK/policies"
default_policy = "bench"
[network]
pool = "198.19.$THIRD.0/24"
gateway = "198.19.$THIRD.1"
[control]
socket = "$WORK/airlock.sock"
[upstream]
resolvers = ["198.18.0.53"]
[audit]
jsonl = "$WORK/events.jsonl"
[metrics]
listen = "127.0.0.1:$PORT"
[sandbox]
image = "$IMAGE"
max = 64
[pool]
images = { "$IMAGE" = $POOL }
refill = "200ms"
EOF
export AIRLOCK_SOCKET=$WORK/airlock.sock
"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do [ -S "$AIRLOCK_SOCKET" ] && break; sleep 0.2; done
[ -S "$AIRLOCK_SOCKET" ] || { tail "$WORK/serve.log"; die "airlock serve did not start"; }

now() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f\n", (b - a) / 1e6 }'; }
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100+0.999); if (i<1) i=1; print a[i]}'; }
ready() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^airlock_pool_ready /{print $2}'; }
wait_ready() { # at least $1 members ready (the refill goes on meanwhile, as in use)
	for _ in $(seq 1 3000); do [ "$(ready)" -ge "$1" ] 2>/dev/null && return; sleep 0.1; done
	die "the pool did not reach $1 ready members (ready: $(ready)); see $WORK/serve.log"
}

# Warm every path once (image layers, the podman service, page cache).
upodman run --rm --network none --runtime runc "$IMAGE" echo hi >/dev/null
wait_ready "$POOL"
sb=$("$BIN" sandbox create --read-only)
"$BIN" sandbox exec "$sb" -- echo hi >/dev/null
"$BIN" sandbox rm "$sb" >/dev/null 2>&1

for f in floor bare claimed claimed_exec cold cold_exec burst reset pause; do : >"$WORK/$f"; done
rm_sb() { "$BIN" sandbox rm "$1" >/dev/null 2>>"$WORK/rm.err" || { echo "bench/lifecycle.sh: rm $1 failed:" >&2; tail -2 "$WORK/rm.err" >&2; }; }
claimed() { # the claimed record of sandbox $1 (the stream is written asynchronously)
	for _ in $(seq 1 50); do grep -q "\"sandbox\":\"$1\".*\"stage\":\"claimed\"" "$WORK/events.jsonl" && return; sleep 0.1; done
	return 1
}
one() { # one create (flags $@): create time and create+first-exec time
	local t0 t1 t2 sb
	t0=$(now)
	sb=$("$BIN" sandbox create "$@")
	t1=$(now)
	"$BIN" sandbox exec "$sb" -- echo hi >/dev/null
	t2=$(now)
	echo "$(ms "$t0" "$t1") $(ms "$t0" "$t2") $sb"
}
for _ in $(seq 1 "$N"); do
	t0=$(now); "$BIN" sandbox ls >/dev/null; t1=$(now); ms "$t0" "$t1" >>"$WORK/floor"
	t0=$(now); upodman run --rm --network none --runtime runc "$IMAGE" echo hi >/dev/null; t1=$(now)
	ms "$t0" "$t1" >>"$WORK/bare"

	wait_ready 1
	read -r c ce sb < <(one)
	echo "$c" >>"$WORK/claimed"; echo "$ce" >>"$WORK/claimed_exec"
	claimed "$sb" || die "create $sb was not a claim"
	rm_sb "$sb"

	read -r c ce sb < <(one --read-only)
	echo "$c" >>"$WORK/cold"; echo "$ce" >>"$WORK/cold_exec"
	rm_sb "$sb"
done

# A burst: BURST creates at once, the pool full at the start.
wait_ready "$POOL"
pids=()
for i in $(seq 1 "$BURST"); do
	( t0=$(now); if sb=$("$BIN" sandbox create 2>"$WORK/burst.$i.err"); then echo "$(ms "$t0" "$(now)") $sb" >"$WORK/burst.$i"; fi ) &
	pids+=($!)
done
wait "${pids[@]}" # not serve's
fails=0
for i in $(seq 1 "$BURST"); do
	if [ -s "$WORK/burst.$i" ]; then
		read -r c sb <"$WORK/burst.$i"; echo "$c" >>"$WORK/burst"; rm_sb "$sb"
	else
		fails=$((fails + 1)); echo "bench/lifecycle.sh: burst create $i failed: $(tail -1 "$WORK/burst.$i.err")" >&2
	fi
done

# Reset and pause+resume of one busybox sandbox.
sb=$("$BIN" sandbox create --read-only)
for _ in $(seq 1 "$N"); do
	t0=$(now); "$BIN" sandbox reset "$sb" >/dev/null; t1=$(now); ms "$t0" "$t1" >>"$WORK/reset"
	t0=$(now); "$BIN" sandbox pause "$sb" >/dev/null; "$BIN" sandbox resume "$sb" >/dev/null; t1=$(now)
	ms "$t0" "$t1" >>"$WORK/pause"
done
"$BIN" sandbox exec "$sb" -- echo hi >/dev/null || die "sandbox $sb does not run a command after resets and pauses"
rm_sb "$sb"

row() { printf '  %-52s %8s %8s ms\n' "$1" "$(pct 50 <"$WORK/$2")" "$(pct 99 <"$WORK/$2")"; }
printf '\nsandbox create latency (%s, pool of %d, %d runs each):\n' "$IMAGE" "$POOL" "$N"
printf '  %-52s %8s %8s\n' "" p50 p99
row "floor: airlock sandbox ls (one API round trip)" floor
row "claimed: sandbox create (warm member)" claimed
row "claimed: create + first exec (echo hi)" claimed_exec
row "cold: sandbox create --read-only (pool miss)" cold
row "cold: create + first exec (echo hi)" cold_exec
row "bare: podman run --rm --network none echo hi" bare
row "burst: $BURST creates at once, pool of $POOL (each)" burst
row "reset: sandbox reset (busybox)" reset
row "pause: sandbox pause + resume round trip" pause
printf '  burst: %d of %d creates succeeded\n' "$((BURST - fails))" "$BURST"
printf '  load average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
awk -v c="$(pct 50 <"$WORK/claimed_exec")" -v d="$(pct 99 <"$WORK/claimed_exec")" 'BEGIN {
	printf "  claimed create + first exec p50 %s ms (target <= 50 ms): %s\n", c, (c <= 50 ? "met" : "NOT met")
	printf "  claimed create + first exec p99 %s ms (target <= 150 ms): %s\n", d, (d <= 150 ? "met" : "NOT met") }'
awk -v c="$(pct 50 <"$WORK/cold_exec")" -v b="$(pct 50 <"$WORK/bare")" 'BEGIN {
	printf "  miss: cold create + first exec p50 %s ms vs 1.2 x bare %.1f ms: %s\n", c, 1.2 * b, (c <= 1.2 * b ? "met" : "NOT met") }'
awk -v c="$(pct 50 <"$WORK/reset")" 'BEGIN { printf "  reset p50 %s ms (target < 1000 ms): %s\n", c, (c < 1000 ? "met" : "NOT met") }'
[ "$fails" = 0 ] || die "$fails of $BURST burst creates failed"
