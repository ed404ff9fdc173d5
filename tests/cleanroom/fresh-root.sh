#!/usr/bin/env bash
# The README's two commands, run one after the other as written, as root on
# a fresh Debian 12 machine without CUDA headers: once from a clean clone,
# once from the release tarball (no git).  Run by hand before a release (it
# takes as long as .ci/run), not by every CI run.
#
#   tests/cleanroom/fresh-root.sh [--only clone|tarball] [--tarball FILE]
#                                 [--stop-after 1] [--timeout2 SECONDS] [--keep]
#
# "A fresh Debian 12 machine" is what the Debian installer leaves before any
# task is chosen: mmdebstrap's "important" variant (apt, bash, coreutils,
# the Priority: important tools), so no git, no compiler, no make, no CUDA.
# The source is already on its disk, as the user put it there: a `git clone`
# (with its .git) or the unpacked release tarball.  Both commands are read
# from README.md's "The two commands" section and run with bash from the top
# of the tree, as root, with a clean environment.  .ci/run's own clean-room
# stage is skipped inside (MOONCAKE_SEGMENT_CI_NESTED=1): a root inside this
# root adds nothing.  Each case gets its own root (tests/cleanroom/enter-root.sh:
# read-only /sys and /proc/sys, so the host's hugepage pool, THP mode and
# cgroups stay as they are; tests that need them skip).
#
# Prints each command's output with its time, then one "PASS|FAIL fresh root
# (CASE): command N" line per command; exits non-zero if any failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
cases=(clone tarball)
tarball='' keep='' stop_after=2 timeout2=0
while [ $# -gt 0 ]; do
	case $1 in
	--only) cases=("$2") && shift ;;
	--tarball) tarball=$(realpath "$2") && shift ;;
	--stop-after) stop_after=$2 && shift ;;
	--timeout2) timeout2=$2 && shift ;;
	--keep) keep=yes ;;
	*) echo "fresh-root.sh: unknown argument $1 (see the opening comment)" >&2 && exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || {
	echo "fresh-root.sh: run as root (it unpacks a root and chroots into it)" >&2
	exit 2
}

# The two fenced commands under "## The two commands", as written.
readme_command() {
	awk -v want="$1" '
		/^## The two commands/ { in_section = 1; next }
		/^## / { in_section = 0 }
		in_section && /^ *```sh/ { n++; in_block = (n == want); next }
		in_section && /^ *```/ { in_block = 0; next }
		in_block { sub(/^ +/, ""); print }' "$src/README.md"
}
commands=("$(readme_command 1)" "$(readme_command 2)")
for i in 0 1; do
	[ -n "${commands[i]}" ] || {
		echo "fresh-root.sh: no command $((i + 1)) under README.md's '## The two commands'" >&2
		exit 2
	}
done

work=$(mktemp -d /var/tmp/mooncake-segment-fresh.XXXXXX)
results=()
# shellcheck disable=SC2317 # run by the trap
cleanup() {
	[ ${#results[@]} -eq 0 ] || printf '%s\n' "${results[@]}"
	if findmnt -rn -o TARGET | grep -q "^$work"; then
		echo "fresh-root.sh: mounts remain under $work, not removing it" >&2
	elif [ -n "$keep" ]; then
		echo "fresh-root.sh: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

base=$("$here/make-root.sh" important)

# The release tarball: given, or `make dist` from a clean clone, outside the tree.
if [[ " ${cases[*]} " == *" tarball "* ]] && [ -z "$tarball" ]; then
	echo "=== fresh-root: making the release tarball (make dist in a clean clone)"
	git clone -q "$src" "$work/dist-src"
	(cd "$work/dist-src" && autoreconf -fi >/dev/null 2>&1 && mkdir _dist && cd _dist &&
		../configure -q PYTHON=/usr/bin/python3 >/dev/null && nice make -s dist >/dev/null)
	tarball=$(find "$work/dist-src/_dist" -maxdepth 1 -name 'mooncake-segment-*.tar.*' | head -1)
fi

status=0
for case in "${cases[@]}"; do
	root=$work/$case
	mkdir "$root"
	echo "=== fresh-root ($case): unpacking a fresh Debian 12 root ($(date +%T))"
	tar -xf "$base" -C "$root"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	case $case in
	clone) git clone -q "$src" "$root/root/mooncake-segment" ;;
	tarball)
		mkdir "$root/root/mooncake-segment"
		tar -xf "$tarball" -C "$root/root/mooncake-segment" --strip-components=1
		;;
	*) echo "fresh-root.sh: unknown case $case (clone or tarball)" >&2 && exit 2 ;;
	esac
	for n in 1 2; do
		[ "$n" -le "$stop_after" ] || break
		cmd=${commands[n - 1]}
		limit=()
		[ "$n" = 2 ] && [ "$timeout2" -gt 0 ] && limit=(timeout --kill-after=30 "$timeout2")
		echo "=== fresh-root ($case): command $n ($(date +%T)): $cmd"
		start=$SECONDS
		set +e
		MOONCAKE_SEGMENT_CI_NESTED=1 "${limit[@]}" "$here/enter-root.sh" "$root" \
			bash -c "cd /root/mooncake-segment && $cmd" 2>&1 | tee "$work/$case-command$n.log"
		rc=${PIPESTATUS[0]}
		set -e
		took=$((SECONDS - start))
		echo "=== fresh-root ($case): command $n exited $rc after $took s"
		if [ "$rc" = 0 ]; then
			results+=("PASS fresh root ($case): command $n ($took s)")
		else
			results+=("FAIL fresh root ($case): command $n (exit $rc after $took s)")
			status=1
			break
		fi
	done
	# The root is several GB after .ci/run; keep only what --keep asks for.
	if [ -z "$keep" ] && ! findmnt -rn -o TARGET | grep -q "^$root"; then rm -rf "$root"; fi
done
exit $status
