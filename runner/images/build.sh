#!/usr/bin/env bash
# Build Airlock's sandbox images locally and import them into the sandbox
# user's Podman storage. No container registry is needed: the busybox image is
# made from Debian's busybox-static package, the Debian image with debootstrap.
#
# Idempotent and cached, keyed on each image's recipe: the recipe (package
# list, suite, recipe version) is hashed; the hash names the rootfs tarball in
# $AIRLOCK_IMAGE_CACHE (default /var/cache/airlock/images) and is recorded in
# the image's airlock.recipe label. An image whose label matches is kept; a
# different or missing label rebuilds (or re-imports from a cached tarball
# with the same hash) under the same stable tag. Tarballs of other recipes
# are removed, and so is the superseded image when nothing uses it.
# FORCE=1 rebuilds everything. Bump a *_RECIPE_VERSION when the steps below
# change in a way the package list does not show.
#
# Usage: runner/images/build.sh [busybox] [debian]   (default: both)
set -euo pipefail

SANDBOX_USER=${AIRLOCK_SANDBOX_USER:-airlock-sandbox}
CACHE=${AIRLOCK_IMAGE_CACHE:-/var/cache/airlock/images}
SUITE=bookworm
BUSYBOX_TAG=localhost/airlock/busybox:1
DEBIAN_TAG=localhost/airlock/debian:12
DEBIAN_PACKAGES=curl,git,python3,python3-pip,python3-venv,ca-certificates,nodejs,npm,dnsutils,netcat-openbsd,openssl,iproute2,jq
BUSYBOX_RECIPE_VERSION=2
DEBIAN_RECIPE_VERSION=3
RECIPE_LABEL=airlock.recipe
HERE=$(cd "$(dirname "$0")" && pwd)

# Work directories are removed at exit, pass or fail (a chroot's /proc is
# unmounted first).
CLEANUP=()
cleanup() {
	local d
	for d in "${CLEANUP[@]}"; do
		if mountpoint -q "$d/rootfs/proc" 2>/dev/null; then umount "$d/rootfs/proc" || continue; fi
		rm -rf "$d"
	done
}
trap cleanup EXIT

step() { printf '==> %s\n' "$*"; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it runs debootstrap and podman as $SANDBOX_USER)"
id -u "$SANDBOX_USER" >/dev/null 2>&1 || die "user $SANDBOX_USER does not exist: run 'make setup' first"
for tool in podman runuser apt-get dpkg-deb; do
	command -v "$tool" >/dev/null || die "$tool not found: run 'make setup' first"
done

SB_UID=$(id -u "$SANDBOX_USER")
SB_HOME=$(getent passwd "$SANDBOX_USER" | cut -d: -f6)
RUNTIME_DIR=/run/user/$SB_UID

# Podman as the sandbox user, with the same runtime dir and containers.conf the
# runner uses (runner/podman/containers.conf, which the runner installs too).
ensure_user_podman() {
	install -d -m 0700 -o "$SANDBOX_USER" -g "$(id -g "$SANDBOX_USER")" "$RUNTIME_DIR"
	local confdir=$SB_HOME/.config/containers
	if [ ! -f "$confdir/containers.conf" ]; then
		runuser -u "$SANDBOX_USER" -- mkdir -p "$confdir"
		runuser -u "$SANDBOX_USER" -- tee "$confdir/containers.conf" >/dev/null <"$HERE/../podman/containers.conf"
	fi
	if ! cmp -s "$confdir/storage.conf" "$HERE/../podman/storage.conf"; then
		runuser -u "$SANDBOX_USER" -- mkdir -p "$confdir"
		runuser -u "$SANDBOX_USER" -- tee "$confdir/storage.conf" >/dev/null <"$HERE/../podman/storage.conf"
	fi
}
upodman() {
	(cd / && runuser -u "$SANDBOX_USER" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		HOME="$SB_HOME" XDG_RUNTIME_DIR="$RUNTIME_DIR" podman "$@")
}
# ensure_podman_state: podman works as the sandbox user, after repairing the
# two states this machine has been seen in:
# - "invalid internal status": rootless Podman keeps its user namespace alive
#   in a pause process; when that process and the containers' conmons are gone
#   (a host that killed the user's processes) but the state still lists running
#   containers, every command fails. `podman system migrate` is Podman's own
#   reset for that state.
# - "database configuration mismatch": the storage was created with another
#   driver (vfs, before runner/podman/storage.conf chose native overlay).
#   Podman cannot open it with the new one; reset it with the old driver (its
#   containers and images go; the images are imported again from the cache,
#   templates built on the old storage must be built again).
# Each repair runs once and says so; anything else fails with Podman's words.
ensure_podman_state() {
	local out was tries=0
	while :; do
		if out=$(upodman info --format '{{.Store.GraphDriverName}}' 2>/dev/null); then
			# Podman 4.3 keeps the database's driver over storage.conf's
			# and only logs it ("overwritten by graph driver ... from
			# database").
			[ "$out" != overlay ] || return 0
			out="database storage graph driver \"$out\" (want overlay): database configuration mismatch"
		else
			out=$(upodman info --format '{{.Store.GraphDriverName}}' 2>&1)
		fi
		tries=$((tries + 1))
		[ $tries -le 2 ] || die "podman as $SANDBOX_USER does not work: $out"
		case $out in
		*"database configuration mismatch"*)
			was=$(printf '%s\n' "$out" | sed -n 's/.*database storage graph driver "\([a-z0-9_-]*\)".*/\1/p' | head -n1)
			[ -n "$was" ] || die "podman as $SANDBOX_USER: $out"
			step "migrating $SANDBOX_USER's podman storage from $was to overlay: its containers and images are removed (images are imported again from the cache; rebuild templates made before)"
			upodman --storage-driver "$was" ps -a --format '    removing container {{.Names}} ({{.Status}})' 2>/dev/null || true
			upodman --storage-driver "$was" system reset --force >/dev/null 2>&1 ||
				die "podman system reset of $SANDBOX_USER's $was storage failed"
			;;
		*"system migrate"*)
			step "podman state for $SANDBOX_USER is stale (its pause process is gone); running podman system migrate"
			upodman system migrate >/dev/null 2>&1 || true
			;;
		*) die "podman as $SANDBOX_USER does not work: $out" ;;
		esac
	done
}
# recipe_hash words...: a short hash of an image's recipe.
recipe_hash() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
# image_current tag hash: the tag exists and was built from this recipe.
image_current() {
	[ "${FORCE:-0}" != 1 ] || return 1
	upodman image exists "$1" || return 1
	local have
	have=$(upodman image inspect --format "{{index .Labels \"$RECIPE_LABEL\"}}" "$1" 2>/dev/null) || return 1
	[ "$have" = "$2" ]
}
# prune_cache prefix keep: remove cached tarballs of superseded recipes.
prune_cache() {
	local f
	for f in "$CACHE/$1"-*.tar; do
		[ -e "$f" ] && [ "$f" != "$2" ] || continue
		step "removing superseded cache $f"
		rm -f "$f"
	done
}

# The Debian mirror is read from the host's apt sources at run time.
debian_mirror() {
	local m=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		m=$(awk -v suite="$SUITE" '
			/^[[:space:]]*$/ { if (uris != "" && suites ~ "(^| )" suite "( |$)") { print uris; exit } uris=""; suites=""; next }
			/^URIs:/   { uris=$2 }
			/^Suites:/ { $1=""; suites=$0 }
			END { if (uris != "" && suites ~ "(^| )" suite "( |$)") print uris }
		' /etc/apt/sources.list.d/*.sources | head -n1)
	fi
	if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
		m=$(awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' /etc/apt/sources.list)
	fi
	[ -n "$m" ] || die "no apt source for $SUITE found in /etc/apt/sources.list{,.d}"
	printf '%s\n' "$m"
}

import_tarball() { # tarball tag cmd hash
	local tarball=$1 tag=$2 cmd=$3 hash=$4 old=""
	old=$(upodman image inspect --format '{{.Id}}' "$tag" 2>/dev/null) || old=""
	step "importing $tag (recipe $hash) into $SANDBOX_USER's storage"
	upodman import --quiet --change "CMD $cmd" --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'WORKDIR /workspace' --change "LABEL $RECIPE_LABEL=$hash" "$tarball" "$tag" >/dev/null
	local new; new=$(upodman image inspect --format '{{.Id}}' "$tag")
	if [ -n "$old" ] && [ "$old" != "$new" ]; then
		# The old image lost its tag; remove it unless a container still uses it.
		if upodman image rm "$old" >/dev/null 2>&1; then
			step "removed superseded image ${old:0:12}"
		else
			step "superseded image ${old:0:12} is still in use; left in place"
		fi
	fi
	upodman image inspect --format "$tag {{.Id}} {{.Size}} bytes recipe={{index .Labels \"$RECIPE_LABEL\"}}" "$tag"
}

# tar_rootfs dir out: a reproducible-ish tarball readable by the sandbox user.
tar_rootfs() {
	local dir=$1 out=$2
	tar --numeric-owner --sort=name -C "$dir" -cf "$out.tmp" .
	chmod 0644 "$out.tmp"
	mv "$out.tmp" "$out"
}

# patch_busybox_wget bin: Debian's busybox-static 1.35 is built without wget's
# timeout feature but still parses -T as a number into a NULL pointer:
# 'wget -T 5 URL' dies with SIGSEGV (exit 139) on any host. Its option string
# "T:+" becomes "T::" (same length, same option bits): -T's argument is then
# optional and ignored, never stored. The image's /bin/wget wrapper gives -T
# its meaning back (busybox-wget.sh); this patch covers shells that run the
# wget applet directly (busybox sh prefers applets over PATH).
patch_busybox_wget() {
	local bin=$1 old='^cqSO:o:P:Y:U:T:+t:n::' new='^cqSO:o:P:Y:U:T::t:n::'
	if [ "$(grep -c -a -F "$old" "$bin" || true)" != 1 ]; then
		step "busybox: wget option string not found (another busybox version?); not patched"
	else
		step "busybox: patching wget's -T option (SIGSEGV in busybox 1.35)"
		OLD=$old NEW=$new perl -0777 -pi -e 's/\Q$ENV{OLD}\E\0/$ENV{NEW}\0/' "$bin"
	fi
	local rc=0
	"$bin" wget -q -T 1 -O /dev/null http://127.0.0.1:1/ 2>/dev/null || rc=$?
	[ "$rc" != 139 ] || die "busybox wget -T still crashes after the patch"
}

build_busybox() {
	local hash; hash=$(recipe_hash busybox "$SUITE" busybox-static "$BUSYBOX_RECIPE_VERSION" "$(sha256sum <"$HERE/busybox-wget.sh")" "$(declare -f patch_busybox_wget | sha256sum)")
	local tarball=$CACHE/busybox-$hash.tar
	prune_cache busybox "$tarball"
	rm -f "$CACHE/busybox-rootfs.tar" # the unhashed name of recipe version 1
	if image_current "$BUSYBOX_TAG" "$hash"; then step "$BUSYBOX_TAG: up to date (recipe $hash)"; return; fi
	if [ ! -f "$tarball" ] || [ "${FORCE:-0}" = 1 ]; then
		local work; work=$(mktemp -d /var/tmp/airlock-busybox.XXXXXX); chmod 0755 "$work"
		CLEANUP+=("$work")
		step "busybox: downloading busybox-static from the Debian archive"
		if ! (cd "$work" && apt-get download -q busybox-static >/dev/null 2>&1); then
			step "busybox: refreshing the apt lists"
			apt-get update -qq
			(cd "$work" && apt-get download -q busybox-static >/dev/null) ||
				die "apt-get download busybox-static failed"
		fi
		local root=$work/rootfs
		mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,var/tmp,proc,sys,dev,run,workspace}
		dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
		cp "$work/deb/bin/busybox" "$root/bin/busybox"
		patch_busybox_wget "$root/bin/busybox"
		step "busybox: installing applet links"
		for applet in $("$root/bin/busybox" --list); do
			[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
		done
		# busybox-static's wget crashes on -T (see busybox-wget.sh): wrap it.
		rm -f "$root/bin/wget"
		install -m 0755 "$HERE/busybox-wget.sh" "$root/bin/wget"
		chmod 1777 "$root/tmp" "$root/var/tmp"
		printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
		printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
		printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
		tar_rootfs "$root" "$tarball"
	else
		step "busybox: using cached $tarball"
	fi
	import_tarball "$tarball" "$BUSYBOX_TAG" '["/bin/sh"]' "$hash"
}

# chroot_install root: install DEBIAN_PACKAGES with apt inside the rootfs.
chroot_install() {
	local root=$1
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
	mount -t proc proc "$root/proc"
	local rc=0
	chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
		sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends ${DEBIAN_PACKAGES//,/ }" |
		awk '/^(Get|Unpacking|Setting up|Selecting|Preparing|\(Reading)/{n++; if (n % 50 != 0) next} {print "    " $0; fflush()}' || rc=1
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
	umount "$root/proc"
	rm -f "$root/usr/sbin/policy-rc.d"
	[ "$rc" = 0 ] || die "apt-get install in the debian rootfs failed"
	: >"$root/etc/resolv.conf"
}

build_debian() {
	local hash; hash=$(recipe_hash debian "$SUITE" "$DEBIAN_PACKAGES" "$DEBIAN_RECIPE_VERSION")
	local tarball=$CACHE/debian-$SUITE-$hash.tar
	prune_cache "debian-$SUITE" "$tarball"
	rm -f "$CACHE/debian-$SUITE-rootfs.tar" # the unhashed name of recipe version 1
	if image_current "$DEBIAN_TAG" "$hash"; then step "$DEBIAN_TAG: up to date (recipe $hash)"; return; fi
	if [ ! -f "$tarball" ] || [ "${FORCE:-0}" = 1 ]; then
		command -v debootstrap >/dev/null || die "debootstrap not found: run 'make setup' first"
		local mirror; mirror=$(debian_mirror)
		local work; work=$(mktemp -d /var/tmp/airlock-debian.XXXXXX)
		CLEANUP+=("$work")
		# debootstrap's --include cannot resolve the virtual packages npm needs,
		# so the base system comes first and apt installs the rest in a chroot.
		step "debian: debootstrap --variant=minbase $SUITE (a few minutes)"
		debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$work/rootfs" "$mirror" |
			awk '/^I: (Retrieving|Validating|Unpacking|Configuring) /{n++; if (n % 25 != 0) next} {print "    " $0; fflush()}'
		[ "${PIPESTATUS[0]}" = 0 ] || die "debootstrap failed (see $work/rootfs/debootstrap/debootstrap.log)"
		step "debian: apt-get install ${DEBIAN_PACKAGES//,/ } (a few minutes)"
		chroot_install "$work/rootfs"
		step "debian: trimming caches"
		# A sandbox is disposable: let pip install into the system Python
		# (PEP 668's marker would refuse 'pip install' without a venv).
		rm -f "$work"/rootfs/usr/lib/python3*/EXTERNALLY-MANAGED
		rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* \
			"$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/* "$work"/rootfs/var/log/*.log
		mkdir -p "$work/rootfs/workspace"
		: >"$work/rootfs/etc/resolv.conf"
		step "debian: packing rootfs"
		tar_rootfs "$work/rootfs" "$tarball"
	else
		step "debian: using cached $tarball"
	fi
	import_tarball "$tarball" "$DEBIAN_TAG" '["/bin/bash"]' "$hash"
}

install -d -m 0755 "$CACHE"
# One build at a time (make image may run from several shells).
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	step "another image build is running; waiting for it"
	flock 9
fi
ensure_user_podman
ensure_podman_state
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(busybox debian)
for t in "${targets[@]}"; do
	case $t in
	busybox) build_busybox ;;
	debian) build_debian ;;
	*) die "unknown image $t (want busybox or debian)" ;;
	esac
done
step "images ready"
