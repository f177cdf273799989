#!/usr/bin/env bash
# Side by side, in one run, on one busybox sandbox of a private `airlock
# serve`: the `echo hi` round trip through the in-sandbox agent (the agent
# channel itself, the control API's Go client, the CLI) against `podman
# exec` of the same container (Podman API through the bindings, and the
# podman CLI); a 1 MiB file written and read back through the agent
# against `airlock sandbox cp` in and out (tar through Podman); a 4 KiB
# file; 100 concurrent commands in one sandbox; 20 sandboxes x 10 commands.
#
# Targets (issue 16): Go API p50 <= 3 ms, p99 <= 10 ms; CLI p50 <= 10 ms;
# >= 40x faster than podman exec; files >= 10x faster than sandbox cp;
# 4 KiB p50 <= 10 ms.
#
# The CLI row is bin/airlock, which runs `sandbox exec` itself
# (cmd/airlock-front); bin/airlock-cli, the thin CLI it hands every other
# command line to, is timed beside it in the same loop (CLI_BEFORE).
#
# Needs root, make setup, make image and make build (bin/airlock,
# bin/airlock-cli, bin/airlockd and bin/airlock-init). Everything is removed
# at the end.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${AIRLOCK_BIN:-$HERE/bin/airlock}
IMAGE=${AIRLOCK_IMAGE:-localhost/airlock/busybox:1}
N=${N:-300}      # agent round trips per path
NP=${NP:-30}     # podman round trips per path
NCLI=${NCLI:-100}
# CLI_BEFORE: another airlock CLI (default bin/airlock-cli; e.g. an older
# build: go build -o DIR/airlock ./cmd/airlock) whose sandbox exec is timed
# in the same loop, interleaved; CLI_BEFORE= (empty) leaves it out.
CLI_BEFORE=${CLI_BEFORE-$(dirname "$BIN")/airlock-cli}
MANY=${MANY:-20}
SANDBOX_USER=airlock-sandbox
GOTAGS=${GOTAGS:-remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp}
# shellcheck source=../scripts/lib.sh
. "$HERE/scripts/lib.sh"

die() { printf 'bench/exec.sh: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench/exec.sh: skipped (needs root)"; exit 0; }
[ -x "$BIN" ] || die "$BIN not found: make build"
[ -x "$(dirname "$BIN")/airlock-init" ] || die "$(dirname "$BIN")/airlock-init not found: make build"
[ -z "$CLI_BEFORE" ] || [ -x "$CLI_BEFORE" ] || die "$CLI_BEFORE not found: make build (or CLI_BEFORE= to leave it out)"
id -u "$SANDBOX_USER" >/dev/null 2>&1 || die "no sandbox user: make setup"
upodman image exists "$IMAGE" || { echo "bench/exec.sh: skipped ($IMAGE not built: make image)"; exit 0; }

WORK=$(mktemp -d /tmp/airlock-bench.XXXXXX)
ID=bx$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
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
cat >"$WORK/airlock.toml" <<EOT
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
EOT
export AIRLOCK_SOCKET=$WORK/airlock.sock
"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do [ -S "$AIRLOCK_SOCKET" ] && break; sleep 0.2; done
[ -S "$AIRLOCK_SOCKET" ] || { tail "$WORK/serve.log"; die "airlock serve did not start"; }
(cd "$HERE" && go build -tags "$GOTAGS" -o "$WORK/bench-exec" ./bench/exec) || die "build bench/exec"
# The floor of a CLI round trip: a static Go binary that only prints "hi",
# started and timed as the CLIs are.
printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("hi\\n") }\n' >"$WORK/hi.go"
CGO_ENABLED=0 go build -o "$WORK/hi" "$WORK/hi.go" || die "build the floor binary"

sb=$("$BIN" sandbox create 2>/dev/null)
"$BIN" sandbox ls --json | grep -q '"agent": "airlock-init"' || die "the sandbox does not run the agent: $("$BIN" sandbox ls --json)"
CTR=airlock-$sb
PID1=$(upodman inspect -f '{{.State.Pid}}' "$CTR")
PSOCK=/run/user/$(id -u "$SANDBOX_USER")/podman/podman.sock
[ -S "$PSOCK" ] || die "no podman service at $PSOCK"

# now VAR sets VAR to the time in ns, without a fork (a `date` per stamp
# added ~1 ms to every CLI row; bash's EPOCHREALTIME is microseconds).
now() { printf -v "$1" '%s000' "${EPOCHREALTIME/./}"; }
us() { echo $((($2 - $1) / 1000)); }
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p+0.5); if (i<1) i=1; printf "%.2f", a[i]/1000}'; }
row() { printf '  %-52s p50 %8s ms   p99 %8s ms   (n=%d)\n' "$1" "$(pct 0.5 <"$2")" "$(pct 0.99 <"$2")" "$(wc -l <"$2")"; }

echo
echo "exec round trip, echo hi, one sandbox ($IMAGE):"
"$WORK/bench-exec" -mode latency -socket "$AIRLOCK_SOCKET" -podman "$PSOCK" -sandbox "$sb" -container "$CTR" -pid "$PID1" -n "$N" -np "$NP"

: >"$WORK/cli" >"$WORK/pcli" >"$WORK/cli0" >"$WORK/hi.t"
"$BIN" sandbox exec "$sb" -- echo hi >/dev/null
[ -z "$CLI_BEFORE" ] || "$CLI_BEFORE" sandbox exec "$sb" -- echo hi >/dev/null
for _ in $(seq 1 "$NCLI"); do
	now t0; out=$("$BIN" sandbox exec "$sb" -- echo hi); now t1
	[ "$out" = hi ] || die "cli echo: $out"
	us "$t0" "$t1" >>"$WORK/cli"
	now t0; out=$("$WORK/hi" sandbox exec "$sb" -- echo hi); now t1
	us "$t0" "$t1" >>"$WORK/hi.t"
	[ -n "$CLI_BEFORE" ] || continue
	now t0; out=$("$CLI_BEFORE" sandbox exec "$sb" -- echo hi); now t1
	[ "$out" = hi ] || die "cli echo ($CLI_BEFORE): $out"
	us "$t0" "$t1" >>"$WORK/cli0"
done
for _ in $(seq 1 "$NP"); do
	now t0; out=$(upodman exec "$CTR" echo hi); now t1
	[ "$out" = hi ] || die "podman exec: $out"
	us "$t0" "$t1" >>"$WORK/pcli"
done
row "CLI: airlock sandbox exec (agent), echo hi" "$WORK/cli"
[ -z "$CLI_BEFORE" ] || row "CLI_BEFORE: the same, $(basename "$(dirname "$CLI_BEFORE")")/$(basename "$CLI_BEFORE")" "$WORK/cli0"
row "floor: a static Go binary that prints hi (start only)" "$WORK/hi.t"
row "CLI: podman exec (as the sandbox user), echo hi" "$WORK/pcli"
awk -v a="$(pct 0.5 <"$WORK/cli")" -v p="$(pct 0.5 <"$WORK/pcli")" 'BEGIN { printf "  %-52s %8.1fx  (target >= 40x)\n", "podman exec p50 / airlock CLI p50", p / a }'

echo
echo "files, one sandbox:"
out=$("$WORK/bench-exec" -mode files -socket "$AIRLOCK_SOCKET" -sandbox "$sb" -n "$N")
echo "$out" | grep -v '^MIB_P50_MS'
mib=$(echo "$out" | sed -n 's/^MIB_P50_MS //p')
head -c 1048576 /dev/urandom >"$WORK/f.bin"
: >"$WORK/cp"
for _ in $(seq 1 10); do
	now t0
	"$BIN" sandbox cp "$WORK/f.bin" "$sb:/tmp/" >/dev/null
	rm -rf "$WORK/back"; mkdir "$WORK/back"
	"$BIN" sandbox cp "$sb:/tmp/f.bin" "$WORK/back/" >/dev/null
	now t1
	cmp -s "$WORK/f.bin" "$WORK/back/f.bin" || die "sandbox cp changed the file"
	us "$t0" "$t1" >>"$WORK/cp"
done
row "CLI: sandbox cp in + cp out, 1 MiB (tar via Podman)" "$WORK/cp"
awk -v a="$mib" -v p="$(pct 0.5 <"$WORK/cp")" 'BEGIN { printf "  %-52s %8.1fx  (target >= 10x)\n", "sandbox cp p50 / agent files p50 (1 MiB)", p / a }'

echo
echo "concurrency:"
"$WORK/bench-exec" -mode concurrent -socket "$AIRLOCK_SOCKET" -sandbox "$sb"
pids=()
for i in $(seq 1 "$MANY"); do
	"$BIN" sandbox create >"$WORK/c$i" 2>"$WORK/c$i.err" &
	pids+=($!)
done
wait "${pids[@]}" || true
list=$(for i in $(seq 1 "$MANY"); do cat "$WORK/c$i"; done | paste -sd, -)
"$WORK/bench-exec" -mode many -socket "$AIRLOCK_SOCKET" -sandboxes "$list"
