#!/usr/bin/env bash
# .ci/run's clean-room stage: the Debian and RPM packages built with their
# tests in a Debian 12 root holding only the declared Build-Depends
# (build-packages.sh).  Prints "PASS name", "FAIL name" or "SKIP name reason"
# lines on stdout, as .ci/run's stages do; the build's progress goes to
# stderr.  Exits 0 whatever the outcome: the lines carry it.
#
#   tests/cleanroom/ci-stage.sh [--tarball DIST-TARBALL]
#
# In .ci/run (mmdebstrap added to its apt-get install list), after distcheck:
#   step "clean-room package builds (Debian 12 root, only the Build-Depends)"
#   "$top/tests/cleanroom/ci-stage.sh" ${tarball:+--tarball "$tarball"} | tee -a "$stages"
#
# Skipped, with the reason, where it cannot run: inside the fresh-machine run
# of tests/cleanroom/fresh-root.sh (MOONCAKE_SEGMENT_CI_NESTED=1: a root
# inside a root adds nothing and doubles the time), when not root, or without
# mmdebstrap.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name="clean room: package builds"
if [ -n "${MOONCAKE_SEGMENT_CI_NESTED-}" ]; then
	echo "SKIP $name: nested in tests/cleanroom/fresh-root.sh (MOONCAKE_SEGMENT_CI_NESTED is set)"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "SKIP $name: needs root to unpack and enter a Debian root"
	exit 0
fi
for tool in mmdebstrap unshare; do
	if ! command -v $tool >/dev/null; then
		echo "SKIP $name: $tool not found (apt-get install mmdebstrap)"
		exit 0
	fi
done

log=$(mktemp /tmp/mooncake-segment-cleanroom.XXXXXX.log)
"$here/build-packages.sh" "$@" >"$log" 2>&1
status=$?
grep -v -E '^(PASS|FAIL) clean room: ' "$log" >&2
lines=$(grep -E '^(PASS|FAIL) clean room: ' "$log")
if [ -n "$lines" ]; then
	echo "$lines"
else # it stopped before any package build (no root, no mirror...)
	echo "FAIL $name (build-packages.sh exited $status before building; see above)"
fi
rm -f "$log"
exit 0
