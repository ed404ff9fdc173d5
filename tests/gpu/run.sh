#!/usr/bin/env bash
# The GPU check, for a bare NVIDIA machine: gcc, make, the CUDA toolkit and a
# Python with torch are there; autotools, libnuma headers and check may not
# be, and nothing can be downloaded.
#
# Prepare on the development machine, then carry tests/gpu/dist and
# tests/gpu/debs to the GPU machine:
#   make dist && mkdir -p tests/gpu/dist && cp mooncake-segment-*.tar.xz tests/gpu/dist/
#   tests/gpu/fetch-debs.sh
# Then, on the GPU machine, from the repository root:
#   tests/gpu/run.sh            (results in $OUT/*.json when OUT is set)
#
# It builds the dist tarball with --with-cuda against the system Python, then
# (slots_stream_check.py) hands 256 blocks from one process's GPU to another
# process's GPU through the publish slots in stream order (copy, publish on
# the writer's stream, wait on the reader's stream, compare the bytes), and
# (gpu_check.py) shares a 2 GiB segment between 4 processes three ways: mmap
# with host_register=True (every rank pins the pages again), the CUDA host
# VMM backend (mmap=False: pinned once by the owner), and host_register with
# background=True (registration behind the commit front).  Every rank's GPU and CPU
# read and write all of it; it measures the time until every rank can use the
# segment on its GPU, VMM against registration, and H2D/D2H bandwidth of the
# shared pages against cudaMallocHost and pageable memory in the same run
# (target: >= 0.95 x cudaMallocHost), printing JSON.  The Python GPU tests run
# too.  Without a GPU, `gpu_check.py --smoke` exercises the same steps on CPU
# views (tests/python/test_gpu_script.py does, against the fake driver).
# To re-check one thing within a short device lease: GPU_CHECK_MODES (default
# "register vmm background") picks gpu_check.py's modes, and GPU_CHECK_QUICK=1
# leaves out the two benches and the slots check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${OUT:-$here/out}
work=$(mktemp -d /tmp/mooncake-segment-gpu.XXXXXX)
python=${PYTHON:-$(command -v python3)}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out"
log() { printf '=== %s\n' "$*"; }

log "tools"
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv || true
"$python" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count())'

# libnuma: the system's, or the Debian packages brought along, unpacked.
if ! printf '#include <numa.h>\n' | gcc -E - >/dev/null 2>&1; then
	log "libnuma from tests/gpu/debs"
	mkdir -p "$work/numa"
	for deb in "$here"/debs/libnuma*.deb; do
		[ -e "$deb" ] || { echo "no libnuma headers and no tests/gpu/debs/*.deb (run tests/gpu/fetch-debs.sh)"; exit 1; }
		(cd "$work/numa" && ar x "$deb" && tar -xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary)
	done
	numa_lib=$(dirname "$(find "$work/numa" -name 'libnuma.so.1' | head -1)")
	ln -sf libnuma.so.1 "$numa_lib/libnuma.so"
	export CPPFLAGS="-I$work/numa/usr/include ${CPPFLAGS:-}" LDFLAGS="-L$numa_lib ${LDFLAGS:-}"
	export LD_LIBRARY_PATH="$numa_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Without Python's headers the binding cannot be built: the C checks still run.
python_configure=
if ! "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))'; then
	log "no Python.h for $python: building without the binding, the Python checks are skipped"
	python_configure=--disable-python
fi

log "build"
tarball=$(find "$here/dist" -name 'mooncake-segment-*.tar.xz' 2>/dev/null | sort | tail -1)
if [ -n "$tarball" ]; then
	tar -C "$work" -xf "$tarball"
	src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'mooncake-segment-*' | head -1)
else
	command -v autoreconf >/dev/null || { echo "no tests/gpu/dist/*.tar.xz and no autotools"; exit 1; }
	src=$top
	(cd "$src" && autoreconf -fi >/dev/null)
fi
mkdir -p "$work/build"
(cd "$work/build" && "$src/configure" -q PYTHON="$python" --with-cuda="$cuda" --disable-dependency-tracking $python_configure &&
	make -s -j"$(nproc)") >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
build=$work/build
export LD_LIBRARY_PATH="$build/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$src/bindings/python:$build/bindings/python"

log "info and doctor"
"$build/tools/mooncake-segment" info
"$build/tools/mooncake-segment" doctor || true

quick=${GPU_CHECK_QUICK:-0}
if [ "$quick" != 1 ]; then
	log "bench with registration"
	# Text to the log, JSON to $OUT; a failure here must not cost the checks below.
	"$build/tools/mooncake-segment" bench --sizes 1G,4G --repeat 2 --register 0 --json >"$out/bench.json" ||
		log "bench --register failed (exit $?)"
	cat "$out/bench.json" || true
fi

status=0
first_failure() { [ "$status" -ne 0 ] || status=$1; }

if [ -n "$python_configure" ]; then
	exit 1
fi

if [ "$quick" != 1 ]; then
	log "publish slots in stream order: 3 ranks, 256 blocks of 4 MiB"
	# A stream wait that never ends would hold the run: bounded.
	PYTHONUNBUFFERED=1 timeout 180 "$python" "$here/slots_stream_check.py" --blocks 256 --block-mib 4 |
		tee "$out/slots.json" || first_failure $?

	log "bench --slots (publish-to-wake latency, publishes/s, seqlock read against memcpy)"
	timeout 120 "$build/tools/mooncake-segment" bench --slots --json >"$out/bench-slots.json" ||
		log "bench --slots failed (exit $?)"
	cat "$out/bench-slots.json" || true
fi

for mode in ${GPU_CHECK_MODES:-register vmm background}; do
	log "4 ranks, $mode (gpu_check.py)"
	PYTHONUNBUFFERED=1 timeout 200 "$python" "$here/gpu_check.py" --ranks 4 --size-gib "${GPU_CHECK_GIB:-2}" \
		--modes "$mode" | tee "$out/gpu-$mode.json" || first_failure $?
done

log "Python GPU tests"
"$python" -m pytest -q -p no:cacheprovider -rs "$src/tests/python/test_cuda.py" | tee "$out/pytest.txt" || first_failure $?
exit "$status"
