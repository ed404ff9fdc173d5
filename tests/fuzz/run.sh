#!/usr/bin/env bash
# Build the libFuzzer targets with clang (ASan+UBSan) and run them, SECONDS
# in all (default 120), split between them:
#  - fuzz-complete (two thirds): the blob decoder and complete(), against the
#    library's sources that BUILDDIR's configuration compiles, on a seed
#    corpus that BUILDDIR makes from the current blob format (make
#    fuzz-corpus: real blob sets, never stale);
#  - fuzz-keeper-wire (one sixth): the keeper's request and reply decoders
#    (lib/route/keeper-wire.c alone), on seeds that the same file, built as
#    the seed writer, makes with this build's encoders;
#  - fuzz-keeper-state (one sixth): the keeper's saved state, the bytes a
#    restarted mooncake-segmentd reads back from the descriptor store
#    (keeper/state.c), on seeds made the same way.
# Any crash, leak, hang or sanitizer report fails; for each target the last
# lines report the executions and the coverage reached.
#   usage: tests/fuzz/run.sh [SECONDS] [BUILDDIR] [TARGET]
#          (BUILDDIR holds config.h; TARGET complete, keeper-wire or keeper-state: only it, for all SECONDS)
set -euo pipefail
seconds=${1:-120}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
builddir=$(cd "${2:-$top}" && pwd)
only=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sanitize=(-g -O1 "-fsanitize=fuzzer,address,undefined" -fno-sanitize-recover=all)

case $only in
'') keeper_seconds=$((seconds / 6)) state_seconds=$((seconds / 6))
	complete_seconds=$((seconds - 2 * (seconds / 6))) ;;
complete) keeper_seconds=0 state_seconds=0 complete_seconds=$seconds ;;
keeper-wire) keeper_seconds=$seconds state_seconds=0 complete_seconds=0 ;;
keeper-state) keeper_seconds=0 state_seconds=$seconds complete_seconds=0 ;;
*)
	echo "run.sh: unknown target '$only' (complete, keeper-wire or keeper-state)" >&2
	exit 2
	;;
esac

# run NAME SECONDS MAX_LEN CORPUS: fuzz, then print its figures.
run() {
	"$work/$1" -max_total_time="$2" -timeout=10 -rss_limit_mb=2048 -max_len="$3" \
		-print_final_stats=1 "$4" 2>"$work/$1.log" || {
		tail -60 "$work/$1.log"
		exit 1
	}
	echo "$1:"
	grep -E '^#[0-9]+.*(DONE|pulse)' "$work/$1.log" | tail -1
	grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$work/$1.log"
}

if [ "$complete_seconds" -gt 0 ]; then
	# The headers configure found (cuda.h for lib/accel/accel-cuda.c), from the build's Makefile.
	read -r -a accel_cppflags <<<"$(sed -n 's/^\(CUDA\|ASCEND\)_CPPFLAGS = //p' "$builddir/Makefile" | tr '\n' ' ')"
	mapfile -t sources < <(make -s -C "$builddir" print-lib-sources)
	clang "${sanitize[@]}" \
		-I"$builddir" -I"$top/lib" "${accel_cppflags[@]}" "${sources[@]}" "$here/fuzz-complete.c" -lnuma -lpthread \
		-o "$work/fuzz-complete"
	# Work on a copy: new inputs stay out of the build tree.
	make -s -C "$builddir" fuzz-corpus >/dev/null
	cp -r "$builddir/tests/fuzz/corpus" "$work/corpus"
	run fuzz-complete "$complete_seconds" 1100 "$work/corpus"
fi

if [ "$keeper_seconds" -gt 0 ]; then
	wire=("$top/lib/route/keeper-wire.c" "$here/fuzz-keeper-wire.c")
	clang "${sanitize[@]}" -I"$builddir" -I"$top/lib" "${wire[@]}" -o "$work/fuzz-keeper-wire"
	clang -g -O1 -DMC_FUZZ_WRITE_SEEDS -I"$builddir" -I"$top/lib" "${wire[@]}" -o "$work/keeper-wire-seeds"
	mkdir "$work/keeper-corpus"
	"$work/keeper-wire-seeds" "$work/keeper-corpus"
	# A packet is at most MC_KEEPER_MESSAGE_MAX (16384) bytes; a little more tests "over-long".
	run fuzz-keeper-wire "$keeper_seconds" 16400 "$work/keeper-corpus"
fi

if [ "$state_seconds" -gt 0 ]; then
	state=("$top/keeper/state.c" "$top/keeper/log.c" "$top/lib/route/keeper-wire.c" "$here/fuzz-keeper-state.c")
	clang "${sanitize[@]}" -I"$builddir" -I"$top/lib" -I"$top/keeper" "${state[@]}" -o "$work/fuzz-keeper-state"
	clang -g -O1 -DMC_FUZZ_WRITE_SEEDS -I"$builddir" -I"$top/lib" -I"$top/keeper" "${state[@]}" \
		-o "$work/keeper-state-seeds"
	mkdir "$work/state-corpus"
	"$work/keeper-state-seeds" "$work/state-corpus"
	# Seeds are a few KiB; the decoder reads files up to 64 MiB, lengths beyond the input are its job.
	run fuzz-keeper-state "$state_seconds" 16384 "$work/state-corpus"
fi
