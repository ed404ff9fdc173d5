#!/usr/bin/env bash
# Build the libFuzzer target with clang (ASan+UBSan) against the library's
# sources that BUILDDIR's configuration compiles, and run it for SECONDS
# (default 120) on a seed corpus that BUILDDIR makes from the current blob
# format (make fuzz-corpus: real blob sets, never stale).
# Any crash, leak, hang or sanitizer report fails; the last line reports the
# executions and the coverage reached.
#   usage: tests/fuzz/run.sh [SECONDS] [BUILDDIR]   (BUILDDIR holds config.h)
set -euo pipefail
seconds=${1:-120}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
builddir=$(cd "${2:-$top}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The headers configure found (cuda.h for lib/accel/accel-cuda.c), from the build's Makefile.
read -r -a accel_cppflags <<<"$(sed -n 's/^\(CUDA\|ASCEND\)_CPPFLAGS = //p' "$builddir/Makefile" | tr '\n' ' ')"
mapfile -t sources < <(make -s -C "$builddir" print-lib-sources)

clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$builddir" -I"$top/lib" "${accel_cppflags[@]}" "${sources[@]}" "$here/fuzz-complete.c" -lnuma -lpthread \
	-o "$work/fuzz-complete"
# Work on a copy: new inputs stay out of the build tree.
make -s -C "$builddir" fuzz-corpus >/dev/null
cp -r "$builddir/tests/fuzz/corpus" "$work/corpus"
"$work/fuzz-complete" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=1100 \
	-print_final_stats=1 "$work/corpus" 2>"$work/log" || { tail -60 "$work/log"; exit 1; }
grep -E '^#[0-9]+.*(DONE|pulse)' "$work/log" | tail -1
grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$work/log"
