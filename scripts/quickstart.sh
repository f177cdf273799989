#!/usr/bin/env bash
# The main job (make run): a coding agent's real task in a sandbox, against
# a small hermetic "internet" on this machine.
#
#  1. start the world of Airlock's end-to-end tests (e2e/world): a network
#     namespace with DNS for .test, a git server, an npm registry, a Python
#     index, an internal API, a webhook sink and an evil server, all in the
#     benchmarking range 198.18.0.0/15;
#  2. start `airlock serve` pointed at it, with the e2e policy (registries
#     read-only, git fetch only, the internal API with an injected
#     credential, one webhook) and a warm pool of one sandbox of the
#     agent's template;
#  3. build that template from the Debian image (`airlock template build`:
#     a setup command checks the tools the task needs) and wait until the
#     pool holds a member, created and started ahead of demand;
#  4. run the agent's task with the Python SDK
#     (sdk/python/examples/agent_task.py): its create claims the pool's
#     member (it prints how long the create took), then clone, push
#     (refused), install an allowed and a denied npm package, call the
#     internal API, post the webhook, try two exfiltration tricks
#     (refused); then
#     `airlock run --template` claims the member the pool made next;
#  5. show what the world's servers received, the refusals in the audit
#     log and the review report; then stop everything and remove what it
#     put in the kernel, /run and /etc/netns, the pool's containers and the
#     template's image. The work directory (state, JSONL stream, logs,
#     report) is kept to explore.
#
# Needs root, `make setup` (host packages, the sandbox user) and `make image`
# (the sandbox images), and bin/airlock with bin/airlock-cli, bin/airlockd and bin/airlock-init (the
# in-sandbox agent, which a warm pool needs) from `make build` (make run does
# both); it builds the world's small server with `go build`. Nothing leaves
# this machine: the appliance's only upstream is the world.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${AIRLOCK_BIN:-$HERE/bin/airlock}
GO=${GO:-go}
IMAGE=${AIRLOCK_IMAGE:-localhost/airlock/debian:12}
SANDBOX_USER=airlock-sandbox
# shellcheck source=lib.sh
. "$HERE/scripts/lib.sh"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (the appliance loads eBPF programs and manages network devices)"
[ -x "$BIN" ] || die "$BIN not found: run 'make build' (make run does it)"
id -u "$SANDBOX_USER" >/dev/null 2>&1 || die "no sandbox user $SANDBOX_USER: run 'make setup'"
for tool in python3 git ip; do
	command -v "$tool" >/dev/null || die "$tool is not installed: run 'make setup'"
done
upodman image exists "$IMAGE" || die "the sandbox image $IMAGE is not built: run 'make image'"

WORK=$(mktemp -d /tmp/airlock-quickstart.XXXXXX)
ID=qs$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
PIN=/sys/fs/bpf/airlock-$ID
# The agent's template: its name is this run's, so two quick starts (or a
# test beside one) never share an image tag in the sandbox user's store.
TEMPLATE=agent-$ID
TEMPLATE_REPO=localhost/airlock/template
SERVE_PID= WORLD_PID= WORLD_NETNS= SB=

# stop_world ends the world's process (it prints what reached it and
# removes its namespace), then removes the namespace if it is still there.
stop_world() {
	if [ -n "$WORLD_PID" ] && kill -0 "$WORLD_PID" 2>/dev/null; then
		kill -TERM "$WORLD_PID"
		wait "$WORLD_PID" || echo "  the world exited with status $?; its errors: $WORK/world.err"
	fi
	WORLD_PID=
	if [ -n "$WORLD_NETNS" ] && ip netns list | grep -qw "$WORLD_NETNS"; then
		ip netns delete "$WORLD_NETNS" # its veth pair goes with it
		rm -rf "/etc/netns/$WORLD_NETNS"
		case ${WORLD_CA_FILE:-} in /tmp/airlock-world-*/world-ca.pem) rm -rf "$(dirname "$WORLD_CA_FILE")" ;; esac
	fi
}

cleanup() {
	set +e
	trap '' PIPE # finish cleaning up even if our reader went away
	if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
		say "stopping airlock serve and the world"
		kill -TERM "$SERVE_PID"
		wait "$SERVE_PID"
	fi
	# Warm pool members stay for the next start of an appliance
	# (docs/config.md, "Warm pools"); this one is gone for good, and so is
	# the template only it used.
	for c in $(upodman ps -aq --filter "label=io.airlock.instance=$ID"); do
		upodman rm -f -t 0 "$c" >/dev/null
	done
	for img in $(upodman images -q --filter "reference=$TEMPLATE_REPO/$TEMPLATE"); do
		upodman rmi -f "$img" >/dev/null
	done
	[ ! -f "$WORK/airlock.toml" ] ||
		"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" --teardown 2>&1 | sed 's/^/  /'
	rm -rf "/run/airlock-$ID" "$WORK/bin"
	stop_world >/dev/null
	say "kept for you to explore: $WORK (remove it with: rm -rf $WORK)"
	[ -z "$SB" ] || {
		echo "  $BIN logs --state-dir $WORK/state --sandbox $SB   # the task's audit log (add --verdict deny, -o compact, ...)"
		echo "  $BIN report --state-dir $WORK/state $SB --html $WORK/report-again.html   # its review report (--md for Markdown)"
	}
	[ ! -s "$WORK/events.jsonl" ] || {
		echo "  $BIN logs -i $WORK/events.jsonl -o compact   # the same from the JSONL stream"
		echo "  $BIN logs verify $WORK/events.jsonl   # its hash chain"
	}
}
trap cleanup EXIT

say "starting the hermetic world (e2e/world: DNS, git, npm, PyPI, internal API, webhooks, an evil server)"
mkdir -p "$WORK/bin" "$WORK/policies"
(cd "$HERE" && "$GO" build -o "$WORK/bin/airlock-world" ./e2e/world/cmd/airlock-world) || die "go build of the world failed"
"$WORK/bin/airlock-world" -env "$WORK/world.env" -policy "$WORK/policies/e2e.toml" -secrets "$WORK/secrets" \
	>"$WORK/world.out" 2>"$WORK/world.err" &
WORLD_PID=$!
for _ in $(seq 1 150); do
	[ -s "$WORK/world.env" ] && break
	kill -0 "$WORLD_PID" 2>/dev/null || { cat "$WORK/world.err"; die "the world exited during start"; }
	sleep 0.2
done
[ -s "$WORK/world.env" ] || die "the world did not come up within 30s: $WORK/world.err"
# shellcheck source=/dev/null
. "$WORK/world.env"
echo "  namespace $WORLD_NETNS, DNS $WORLD_DNS, evil server $WORLD_EVIL; policy: $WORK/policies/e2e.toml"

# A sandbox pool in the benchmarking range that no local address or route
# (the world's among them) uses.
THIRD=$(free_pool_third) || die "no free address pool in 198.19.160.0/19"
# shellcheck disable=SC2086 # one /32 per word
allow=$(printf '"%s", ' $WORLD_ALLOW)
cat >"$WORK/airlock.toml" <<EOF
version = 1
state_dir = "$WORK/state"
runtime_dir = "/run/airlock-$ID"
policy_dir = "$WORK/policies"
default_policy = "$WORLD_POLICY"

[network]
pool = "198.19.$THIRD.0/24"
gateway = "198.19.$THIRD.1"

[control]
socket = "$WORK/airlock.sock"

[upstream]
resolvers = ["$WORLD_DNS"]       # the world's DNS: nothing leaves this machine
allow = [${allow%, }]            # the world's servers the policy names, one /32 each (a lab's allow-range)
ca_files = ["$WORLD_CA_FILE"]    # the world's test CA, for the proxy's upstream TLS

[secrets]
file = "$WORK/secrets"           # the internal API's credential: the proxy injects it, the sandbox never sees it

[audit]
jsonl = "$WORK/events.jsonl"

[sandbox]
image = "$IMAGE"
exec_timeout = "2m"

[pool]
templates = { "$TEMPLATE" = 1 }  # built below; a create from it claims the member started ahead of demand
EOF
export AIRLOCK_SOCKET=$WORK/airlock.sock

say "starting airlock serve (config $WORK/airlock.toml)"
"$BIN" serve --config "$WORK/airlock.toml" --check
"$BIN" serve --config "$WORK/airlock.toml" --instance "$ID" --pin-dir "$PIN" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do
	[ -S "$AIRLOCK_SOCKET" ] && break
	kill -0 "$SERVE_PID" 2>/dev/null || { cat "$WORK/serve.log"; die "airlock serve exited during start"; }
	sleep 0.2
done
[ -S "$AIRLOCK_SOCKET" ] || { tail -20 "$WORK/serve.log"; die "airlock serve did not come up within 60s"; }

say "building the agent's template $TEMPLATE from $IMAGE (airlock template build) and its warm pool of one"
"$BIN" template build "$TEMPLATE" --from "$IMAGE" --policy "$WORLD_POLICY" \
	--setup 'git --version && node --version && npm --version && curl --version | head -n 1 && command -v dig' 2>&1 |
	sed 's/^/  /' || die "the template build failed (see above); serve log: $WORK/serve.log"
# pooled_member N waits up to 120s until the appliance has logged the
# pool's Nth member ready (lifecycle stage "pooled") and prints its id.
pooled_member() {
	local id
	for _ in $(seq 1 240); do
		id=$("$BIN" logs --state-dir "$WORK/state" --kind lifecycle -o jsonl 2>/dev/null |
			sed -n '/"stage":"pooled"/s/.*"sandbox":"\([0-9a-f]*\)".*/\1/p' | sed -n "$1p" || true)
		[ -n "$id" ] && { echo "$id"; return 0; }
		kill -0 "$SERVE_PID" 2>/dev/null || { tail -20 "$WORK/serve.log" >&2; die "airlock serve exited while the pool filled"; }
		sleep 0.5
	done
	grep -i 'warm pool' "$WORK/serve.log" | tail -5 >&2
	die "the warm pool made no member $1 within 120s: $WORK/serve.log"
}
WAITED=$SECONDS
MEMBER=$(pooled_member 1)
echo "  the warm pool is filled: sandbox $MEMBER of $TEMPLATE, created and started ahead of demand (waited $((SECONDS - WAITED))s),"
echo "  network-dead until a create claims it (the kernel path drops every packet of an unclaimed member)"

say "the agent's task in a sandbox (sdk/python/examples/agent_task.py, with the Python SDK; its create claims the pool's member)"
set +e
PYTHONPATH=$HERE/sdk/python python3 "$HERE/sdk/python/examples/agent_task.py" --evil "$WORLD_EVIL" \
	--template "$TEMPLATE" --policy "$WORLD_POLICY" --report "$WORK/report.html" 2>&1 | tee "$WORK/task.out"
RC=${PIPESTATUS[0]}
set -e
SB=$(sed -n 's/^sandbox: \([0-9a-zA-Z-]*\) .*/\1/p' "$WORK/task.out" | head -n 1)
[ -n "$SB" ] || die "the sandbox was not created (exit status $RC); serve log: $WORK/serve.log"

say "the same template from the command line: airlock run --template $TEMPLATE (the pool refilled after the task's claim)"
MEMBER2=$(pooled_member 2)
echo "  \$ airlock run --template $TEMPLATE -- git ls-remote https://git.example.test/acme/demo.git HEAD"
set +e
"$BIN" run --template "$TEMPLATE" -- git ls-remote https://git.example.test/acme/demo.git HEAD 2>&1 |
	sed 's/^/  /' | tee "$WORK/run.out"
[ "${PIPESTATUS[0]}" = 0 ] || RC=1
set -e
RUN_SB=$(sed -n 's/^  airlock: sandbox \([0-9a-f]*\) (.*/\1/p' "$WORK/run.out" | head -n 1)
if [ -n "$RUN_SB" ] && [ "$RUN_SB" = "$MEMBER2" ]; then
	echo "  sandbox $RUN_SB is the member the pool made after the task's claim: this create was a claim too"
else
	echo "  sandbox ${RUN_SB:-?} was not claimed from the pool (its member was $MEMBER2): see $WORK/serve.log"
fi

say "what the world's servers received (the appliance let through only what the policy allows)"
stop_world
sed 's/^/  /' "$WORK/world.out"
grep -q '^what reached the world' "$WORK/world.out" || { RC=1; echo "  the world printed no summary: $WORK/world.err"; }
! grep -q '^  LEAK' "$WORK/world.out" || RC=1

say "the refusals in the audit log (airlock logs --sandbox $SB --verdict deny)"
"$BIN" logs --state-dir "$WORK/state" --sandbox "$SB" --verdict deny -o compact || true

say "the review report (airlock report $SB --md; HTML in $WORK/report.html)"
"$BIN" report --state-dir "$WORK/state" "$SB" --md

[ "$RC" = 0 ] || die "the task did not go as the policy says (exit status $RC): see above and $WORK/serve.log"
say "done: every step went as the policy says; the appliance wrote $(wc -l <"$WORK/events.jsonl") events to its JSONL stream"
