#!/usr/bin/env bash
# The main job (make run): start `airlock serve` with an example policy, run
# one agent task in a sandbox under it, show what the appliance recorded,
# then stop the appliance and remove what it put in the kernel and /run. The
# work directory (state, JSONL stream, serve log, report) is kept to explore.
#
# Needs root, `make setup` (host packages, the sandbox user) and `make image`
# (the sandbox images). Builds nothing: it uses bin/airlock from `make build`.
# Nothing leaves this machine: the appliance's upstream resolver is an
# address in the benchmarking range that nobody answers, so allowed names
# fail to resolve and everything else is refused — which is what this
# demo shows.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${AIRLOCK_BIN:-$HERE/bin/airlock}
POLICY=${AIRLOCK_POLICY:-coding-agent}
IMAGE=${AIRLOCK_IMAGE:-localhost/airlock/busybox:1}
SANDBOX_USER=airlock-sandbox
# shellcheck source=lib.sh
. "$HERE/scripts/lib.sh"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (the appliance loads eBPF programs and manages network devices)"
[ -x "$BIN" ] || die "$BIN not found: run 'make build' (make run does it)"
id -u "$SANDBOX_USER" >/dev/null 2>&1 || die "no sandbox user $SANDBOX_USER: run 'make setup'"
if ! upodman image exists "$IMAGE"; then
	die "the sandbox image $IMAGE is not built: run 'make image'"
fi

WORK=$(mktemp -d /tmp/airlock-quickstart.XXXXXX)
ID=qs$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
PIN=/sys/fs/bpf/airlock-$ID
# A pool in the benchmarking range that no local address or route uses.
THIRD=$(free_pool_third) || die "no free address pool in 198.19.160.0/19"

SERVE_PID=
cleanup() {
	set +e
	trap '' PIPE # finish cleaning up even if our reader went away
	if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
		say "stopping airlock serve"
		kill -TERM "$SERVE_PID"
		wait "$SERVE_PID"
	fi
	"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" --teardown 2>&1 | sed 's/^/  /'
	rm -rf "/run/airlock-$ID"
	say "kept for you to explore: $WORK (remove it with: rm -rf $WORK)"
	echo "  airlock logs --state-dir $WORK/state            the audit log (-o compact, --verdict deny, ...)"
	echo "  airlock logs -i $WORK/events.jsonl              the same from the JSONL stream"
	echo "  airlock logs verify $WORK/events.jsonl          its hash chain"
	[ -z "${SB:-}" ] || echo "  airlock report --state-dir $WORK/state $SB --html report.html"
}
trap cleanup EXIT

mkdir -p "$WORK/policies"
cp "$HERE/policies/examples/$POLICY.toml" "$WORK/policies/"
cat >"$WORK/airlock.toml" <<EOF
version = 1
state_dir = "$WORK/state"
runtime_dir = "/run/airlock-$ID"
policy_dir = "$WORK/policies"
default_policy = "$POLICY"

[network]
pool = "198.19.$THIRD.0/24"
gateway = "198.19.$THIRD.1"

[control]
socket = "$WORK/airlock.sock"

[upstream]
resolvers = ["198.18.0.53"]   # nobody answers here: nothing leaves this machine

[audit]
jsonl = "$WORK/events.jsonl"

[sandbox]
image = "$IMAGE"
exec_timeout = "2m"
EOF
export AIRLOCK_SOCKET=$WORK/airlock.sock

say "starting airlock serve (config $WORK/airlock.toml, policy $POLICY)"
"$BIN" serve --config "$WORK/airlock.toml" --check
"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do
	[ -S "$AIRLOCK_SOCKET" ] && break
	kill -0 "$SERVE_PID" 2>/dev/null || { cat "$WORK/serve.log"; die "airlock serve exited during start"; }
	sleep 0.2
done
[ -S "$AIRLOCK_SOCKET" ] || { tail -20 "$WORK/serve.log"; die "airlock serve did not come up within 60s"; }

say "running an agent task in a sandbox under policy $POLICY"
# The task: look up a name the policy allows and one it does not, then try
# to reach an address directly, ignoring every proxy setting.
TASK='echo "hello from $(hostname) at $(ip -4 -o addr show eth0 | awk "{print \$4}")"
echo "--- a registry the policy allows (no upstream answers in this demo):"; nslookup registry.example.test 2>&1 | tail -n 2
echo "--- a paste site the policy denies:"; nslookup bin.paste.example.test 2>&1 | tail -n 2
echo "--- a resolver of its own choosing (the kernel path hands the query to Airlock):"; nslookup evil.test 198.18.0.10 2>&1 | tail -n 2
echo "--- a direct connection to an address, no proxy (the proxy takes it, denies it, closes it):"; echo hi | nc -w 3 198.18.0.10 443; echo "nc exit $?: nc reports 0 because the connection was accepted, by Airlock'"'"'s proxy, which denied it and closed it without a byte back (the log shows it: close ... denied)"'
set +e
"$BIN" run --keep "$IMAGE" -- sh -c "$TASK" 2>&1 | tee "$WORK/run.out"
RC=${PIPESTATUS[0]}
set -e
SB=$(sed -n 's/^airlock: sandbox \([0-9a-f]*\) (policy.*/\1/p' "$WORK/run.out" | head -n 1)
[ -n "$SB" ] || die "the sandbox was not created (exit status $RC); serve log: $WORK/serve.log"

say "what is under /workspace now (airlock sandbox diff $SB)"
"$BIN" sandbox exec "$SB" -- sh -c 'echo "result of the task" > /workspace/result.txt'
"$BIN" sandbox diff "$SB" --patch || true

say "removing the sandbox"
"$BIN" sandbox rm "$SB"

say "its audit log (airlock logs --sandbox $SB)"
sleep 1
"$BIN" logs --state-dir "$WORK/state" --sandbox "$SB" || true

say "the review report (airlock report --state-dir $WORK/state $SB --md; HTML in $WORK/report-$SB.html)"
"$BIN" report --state-dir "$WORK/state" "$SB" --md
"$BIN" report --state-dir "$WORK/state" "$SB" --html "$WORK/report-$SB.html"

say "done: the task exited with status $RC; the appliance wrote $(wc -l <"$WORK/events.jsonl") events to its JSONL stream"
