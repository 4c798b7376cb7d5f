#!/usr/bin/env bash
# Fails when `make generate` changes the working tree, i.e. when a generated
# file (bpf2go objects and bindings, mdatagen output) is stale, missing or
# hand-edited. It compares the tree before and after generation instead of
# running `git diff` so it also works in a tree with uncommitted work.
#
#   scripts/check-generate.sh make generate
set -euo pipefail

if (($# == 0)); then
	echo "usage: $0 <command that regenerates the code>" >&2
	exit 2
fi

cd "$(git rev-parse --show-toplevel)"

# snapshot prints a checksum of every tracked or untracked, non-ignored file,
# so new generated files count as well as modified and deleted ones.
snapshot() {
	git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			if [[ -f "$f" ]]; then
				sha256sum -- "$f"
			else
				echo "deleted  $f"
			fi
		done
}

before=$(mktemp)
after=$(mktemp)
trap 'rm -f "$before" "$after"' EXIT

snapshot >"$before"
"$@"
snapshot >"$after"

if ! diff -u "$before" "$after" >/dev/null; then
	echo >&2
	echo "error: '$*' changed these files; generated code is out of date." >&2
	echo "Run 'make generate' and commit the result (with clang $(clang -dumpversion 2>/dev/null || echo '?')):" >&2
	diff "$before" "$after" | sed -n 's/^[<>] \(deleted\|[0-9a-f]\{64\}\)  /  /p' | sort -u >&2
	exit 1
fi
echo "check-generate: generated code is up to date"
