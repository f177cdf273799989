# Shared by scripts/quickstart.sh and bench/serve.sh (sourced, not run).

# upodman runs podman as the sandbox user $SANDBOX_USER, with a clean
# environment and the user's runtime directory.
upodman() {
	local uid home
	uid=$(id -u "$SANDBOX_USER") || return 1
	home=$(getent passwd "$SANDBOX_USER" | cut -d: -f6)
	(cd / && runuser -u "$SANDBOX_USER" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" \
		XDG_RUNTIME_DIR="/run/user/$uid" podman "$@")
}

# free_pool_third prints a third octet N such that 198.19.N.0/24 is used by
# no local address or route, or fails.
free_pool_third() {
	local third
	for third in $(shuf -i 160-250 -n 40); do
		if ! ip -4 route show | grep -q "198\.19\.$third\." && ! ip -4 addr show | grep -q "198\.19\.$third\."; then
			echo "$third"
			return 0
		fi
	done
	return 1
}
