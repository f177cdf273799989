#!/usr/bin/env bash
# Side by side, in one run: create-to-first-exec of a busybox sandbox through
# `airlock serve` (create with the network path in place, then `echo hi`),
# against a bare rootless `podman run --rm --network none` of the same image
# (runc); the exec round trip through the appliance; and twenty sandboxes
# created at once, each running a command. Prints p50s and the ratio
# (target: serve / bare <= 1.2).
#
# Needs root, make setup, make image and make build (bin/airlock, which
# hands serve to bin/airlock-cli and that to bin/airlockd). Like the
# quickstart, the appliance gets a private pin directory, instance and
# runtime directory, and everything is removed at the end.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${AIRLOCK_BIN:-$HERE/bin/airlock}
IMAGE=${AIRLOCK_IMAGE:-localhost/airlock/busybox:1}
N=${N:-10}
CONCURRENT=${CONCURRENT:-20}
SANDBOX_USER=airlock-sandbox
# shellcheck source=../scripts/lib.sh
. "$HERE/scripts/lib.sh"

die() { printf 'bench/serve.sh: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench/serve.sh: skipped (needs root)"; exit 0; }
[ -x "$BIN" ] || die "$BIN not found: make build"
id -u "$SANDBOX_USER" >/dev/null 2>&1 || die "no sandbox user: make setup"
upodman image exists "$IMAGE" || { echo "bench/serve.sh: skipped ($IMAGE not built: make image)"; exit 0; }

WORK=$(mktemp -d /tmp/airlock-bench.XXXXXX)
ID=bn$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
PIN=/sys/fs/bpf/airlock-$ID
THIRD=$(free_pool_third) || die "no free address pool in 198.19.160.0/19"
SERVE_PID=
cleanup() {
	set +e
	for sb in $("$BIN" sandbox ls --json 2>/dev/null | sed -n 's/.*"id": "\([0-9a-f]*\)".*/\1/p'); do
		"$BIN" sandbox rm "$sb" >/dev/null 2>&1
	done
	[ -n "$SERVE_PID" ] && kill -TERM "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID"
	"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" --teardown >/dev/null 2>&1
	rm -rf "$WORK" "/run/airlock-$ID"
}
trap cleanup EXIT

mkdir -p "$WORK/policies"
cp "$HERE/policies/examples/locked-down.toml" "$WORK/policies/" 2>/dev/null ||
	cp "$HERE/policies/examples/coding-agent.toml" "$WORK/policies/locked-down.toml"
cat >"$WORK/airlock.toml" <<EOF
version = 1
state_dir = "$WORK/state"
runtime_dir = "/run/airlock-$ID"
policy_dir = "$WORK/policies"
default_policy = "locked-down"
[network]
pool = "198.19.$THIRD.0/24"
gateway = "198.19.$THIRD.1"
[control]
socket = "$WORK/airlock.sock"
[upstream]
resolvers = ["198.18.0.53"]
[audit]
jsonl = "$WORK/events.jsonl"
[sandbox]
image = "$IMAGE"
max = 64
EOF
export AIRLOCK_SOCKET=$WORK/airlock.sock
"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do [ -S "$AIRLOCK_SOCKET" ] && break; sleep 0.2; done
[ -S "$AIRLOCK_SOCKET" ] || { tail "$WORK/serve.log"; die "airlock serve did not start"; }

now() { date +%s%N; }
ms() { echo $((($2 - $1) / 1000000)); }
p50() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Warm both paths once (image layers, the podman service, page cache).
upodman run --rm --network none --runtime runc "$IMAGE" echo hi >/dev/null
sb=$("$BIN" sandbox create 2>/dev/null)
"$BIN" sandbox exec "$sb" -- echo hi >/dev/null
"$BIN" sandbox rm "$sb" >/dev/null 2>&1

: >"$WORK/bare" >"$WORK/serve" >"$WORK/exec"
for _ in $(seq 1 "$N"); do
	t0=$(now)
	upodman run --rm --network none --runtime runc "$IMAGE" echo hi >/dev/null
	t1=$(now)
	ms "$t0" "$t1" >>"$WORK/bare"

	t0=$(now)
	sb=$("$BIN" sandbox create 2>/dev/null)
	"$BIN" sandbox exec "$sb" -- echo hi >/dev/null
	t1=$(now)
	"$BIN" sandbox exec "$sb" -- echo hi >/dev/null
	t2=$(now)
	ms "$t0" "$t1" >>"$WORK/serve"
	ms "$t1" "$t2" >>"$WORK/exec"
	"$BIN" sandbox rm "$sb" >/dev/null 2>&1
done
bare=$(p50 <"$WORK/bare")
served=$(p50 <"$WORK/serve")
execp=$(p50 <"$WORK/exec")

# Twenty at once: create in parallel, run a command in each, count successes.
# (wait on these PIDs only: the appliance is a background job too)
t0=$(now)
pids=()
for i in $(seq 1 "$CONCURRENT"); do
	"$BIN" sandbox create >"$WORK/c$i" 2>"$WORK/c$i.err" &
	pids+=($!)
done
wait "${pids[@]}" || true
t1=$(now)
ok=0
for i in $(seq 1 "$CONCURRENT"); do
	sb=$(cat "$WORK/c$i")
	[ -n "$sb" ] && "$BIN" sandbox exec "$sb" -- sh -c "ip -4 -o addr show eth0 >/dev/null && echo ok" 2>/dev/null | grep -q ok && ok=$((ok + 1))
done
t2=$(now)
pids=()
for i in $(seq 1 "$CONCURRENT"); do
	sb=$(cat "$WORK/c$i")
	[ -n "$sb" ] && { "$BIN" sandbox rm "$sb" >/dev/null 2>&1 & pids+=($!); }
done
wait "${pids[@]}" || true

printf '\nairlock serve vs bare podman (%s, %d runs, p50):\n' "$IMAGE" "$N"
printf '  %-48s %6d ms\n' "bare: podman run --rm --network none echo hi" "$bare"
printf '  %-48s %6d ms\n' "serve: sandbox create + first exec (echo hi)" "$served"
printf '  %-48s %6d ms\n' "serve: exec round trip (echo hi)" "$execp"
awk -v s="$served" -v b="$bare" 'BEGIN { printf "  %-48s %6.2f   (target <= 1.20)\n", "ratio create-to-first-exec / bare", s / b }'
printf '  %-48s %6d ms (%d/%d sandboxes ran a command)\n' "$CONCURRENT concurrent creates" "$(ms "$t0" "$t1")" "$ok" "$CONCURRENT"
[ "$ok" = "$CONCURRENT" ] || { echo "bench/serve.sh: some concurrent sandboxes failed:"; cat "$WORK"/c*.err | sort | uniq -c | head; exit 1; }
