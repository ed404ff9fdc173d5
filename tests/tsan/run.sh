#!/usr/bin/env bash
# Build the library and each driver with clang -fsanitize=thread and run it;
# any data race report fails (halt_on_error).
#   usage: tests/tsan/run.sh [BUILDDIR]   (BUILDDIR holds config.h)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
builddir=$(cd "${1:-$top}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The headers configure found (cuda.h for lib/accel/accel-cuda.c), from the build's Makefile.
read -r -a accel_cppflags <<<"$(sed -n 's/^\(CUDA\|ASCEND\)_CPPFLAGS = //p' "$builddir/Makefile" | tr '\n' ' ')"
# The library's sources this configuration compiles (no accelerator file without its headers).
mapfile -t sources < <(make -s -C "$builddir" print-lib-sources)
for driver in commit-threads peer-route front; do
	clang -g -O1 -fsanitize=thread -I"$builddir" -I"$top/lib" "${accel_cppflags[@]}" "${sources[@]}" \
		"$here/$driver.c" -lnuma -lpthread -o "$work/$driver"
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$work/$driver"
done
