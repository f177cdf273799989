#!/usr/bin/env bash
# Checks that bpf/c still compiles with the pinned clang and that the committed
# bpf2go output (bpf/*_bpfel.go, bpf/*_bpfel.o) is byte-identical to a fresh
# generation. Leaves the working tree as it found it. Exit 0 = current.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in clang-14 llvm-strip-14; do
	command -v "$tool" >/dev/null || { echo "generate-check: $tool not found (apt-get install clang-14 llvm-14 libbpf-dev)" >&2; exit 2; }
done
[ -f /usr/include/bpf/bpf_helpers.h ] || { echo "generate-check: libbpf-dev headers missing" >&2; exit 2; }

mapfile -t files < <(git ls-files 'bpf/*_bpfel.go' 'bpf/*_bpfel.o')
if [ "${#files[@]}" -eq 0 ]; then
	echo "generate-check: no committed generated files under bpf/" >&2
	exit 1
fi

saved=$(mktemp -d)
trap 'for f in "${files[@]}"; do cp "$saved/$(basename "$f")" "$f"; done; rm -rf "$saved"' EXIT
for f in "${files[@]}"; do cp "$f" "$saved/$(basename "$f")"; done

# The committed copies must equal HEAD (no uncommitted edits hiding a stale commit).
for f in "${files[@]}"; do
	if ! git diff --quiet HEAD -- "$f"; then
		echo "generate-check: $f differs from the committed version" >&2
		exit 1
	fi
done

if ! go generate ./bpf/...; then
	echo "generate-check: the C in bpf/c does not compile with clang-14" >&2
	exit 1
fi

status=0
for f in "${files[@]}"; do
	if ! cmp -s "$f" "$saved/$(basename "$f")"; then
		echo "generate-check: $f is stale: run 'make generate' and commit" >&2
		status=1
	fi
done
untracked=$(git ls-files --others --exclude-standard 'bpf/*_bpfel.go' 'bpf/*_bpfel.o')
if [ -n "$untracked" ]; then
	echo "generate-check: generated but not committed: $untracked" >&2
	status=1
fi
[ "$status" -eq 0 ] && echo "generate-check: bpf objects are current"
exit "$status"
