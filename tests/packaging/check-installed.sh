#!/usr/bin/env bash
# Check an installed mooncake-segment as its users meet it: the Python module
# from / with no PYTHONPATH, the C library through pkg-config, the CLI.
#
#   check-installed.sh                     the packages installed on this system (deb)
#   check-installed.sh --root DIR --libdir usr/lib64 --sitedir usr/lib64/python3.11/site-packages
#                                          an RPM payload unpacked under DIR
#
# Prints one "PASS name" / "FAIL name" line per check; exits 1 if any failed.
set -u
root=/ libdir='' sitedir=''
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=$2; shift 2 ;;
	--libdir) libdir=$2; shift 2 ;;
	--sitedir) sitedir=$2; shift 2 ;;
	*) echo "usage: $0 [--root DIR --libdir REL --sitedir REL]" >&2; exit 2 ;;
	esac
done
here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

check() { # name command...
	local name=$1
	shift
	if "$@" >"$work/out" 2>&1; then
		echo "PASS $name"
	else
		echo "FAIL $name"
		sed 's/^/    /' "$work/out" | tail -20
		failed=1
	fi
}

if [ "$root" = / ]; then
	python=(/usr/bin/python3 -I) # isolated: no PYTHONPATH, no user site, no cwd
	cli=mooncake-segment
	lib_path=
else
	root=$(cd "$root" && pwd)
	python=(/usr/bin/python3 -I -c "import sys, runpy; sys.path.insert(0, '$root/$sitedir'); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
	cli=$root/usr/bin/mooncake-segment
	lib_path=$root/$libdir
	export LD_LIBRARY_PATH=$lib_path PKG_CONFIG_SYSROOT_DIR=$root PKG_CONFIG_PATH=$root/$libdir/pkgconfig
fi

cat >"$work/smoke.py" <<'PY'
import sys
import mooncake.shared_segment as s
print(s.__file__)
assert isinstance(s.shared_segment_supported(), bool) and s.shared_segment_supported()
seg = s.create_shared_segment("smoke", {"page": {"count": 2, "shape": (4096,), "dtype": "uint8"}}, 1, 0)
buffers = seg.buffers("page")
buffers[1][:5] = b"hello"
assert bytes(seg.buffers("page")[1][:5]) == b"hello"
del buffers
seg.close()
PY
cat >"$work/torch.py" <<'PY'
import torch
import mooncake.shared_segment as s
seg = s.create_shared_segment("smoke", {"k": {"count": 2, "shape": (8, 8), "dtype": torch.bfloat16}}, 1, 0)
t = seg.tensors("k")
t[1].fill_(2)
assert bool((seg.tensors("k")[1] == 2).all())
del t
seg.close()
PY

in_root() { (cd / && "$@"); }
check "python: import from / without PYTHONPATH, probe, one-rank buffers" in_root "${python[@]}" "$work/smoke.py"
if in_root /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	check "python: tensors with python3-torch" in_root "${python[@]}" "$work/torch.py"
else
	echo "SKIP python: tensors (python3-torch not installed)"
fi
check "C: example compiles and links with pkg-config" \
	sh -c "cc '$srcdir/examples/fork-pair.c' \$(pkg-config --cflags --libs mooncake-segment) -o '$work/fork-pair'"
check "C: example runs (two processes share a page)" sh -c "'$work/fork-pair' | grep -q 'owner read: hello'"
check "CLI: info" "$cli" info
check "CLI: demo" "$cli" demo --ranks 2 --size 8M
check "CLI: list as a table, JSON and Prometheus text" \
	sh -c "'$cli' list && '$cli' list --json && '$cli' list --prometheus"
# shellcheck disable=SC2317 # called through check()
textfile_units() {
	local dir
	for dir in "${root%/}/lib/systemd/system" "${root%/}/usr/lib/systemd/system"; do
		if [ -f "$dir/mooncake-segment-textfile.timer" ] && [ -f "$dir/mooncake-segment-textfile.service" ]; then
			# Shipped disabled: nothing enables the timer at install.
			local wants="${root%/}/etc/systemd/system/timers.target.wants/mooncake-segment-textfile.timer"
			! [ -e "$wants" ] && ! [ -L "$wants" ]
			return
		fi
	done
	echo "no mooncake-segment-textfile.{service,timer} under $root"
	return 1
}
check "textfile timer for node_exporter shipped, not enabled" textfile_units
# shellcheck disable=SC2317 # called through check()
keeper_units() {
	local dir unit
	for dir in "${root%/}/lib/systemd/system" "${root%/}/usr/lib/systemd/system"; do
		if [ -f "$dir/mooncake-segmentd.service" ] && [ -f "$dir/mooncake-segmentd.socket" ]; then
			grep -qx 'FileDescriptorStoreMax=[1-9][0-9]*' "$dir/mooncake-segmentd.service" || {
				echo "mooncake-segmentd.service has no descriptor store"
				return 1
			}
			# Shipped disabled and stopped: nothing enables them at install.
			for unit in sockets.target.wants/mooncake-segmentd.socket multi-user.target.wants/mooncake-segmentd.service; do
				if [ -e "${root%/}/etc/systemd/system/$unit" ] || [ -L "${root%/}/etc/systemd/system/$unit" ]; then
					echo "enabled at install: $unit"
					return 1
				fi
			done
			[ "$root" != / ] || ! systemctl is-active --quiet mooncake-segmentd.socket 2>/dev/null
			return
		fi
	done
	echo "no mooncake-segmentd.{service,socket} under $root"
	return 1
}
check "keeper units shipped, not enabled" keeper_units
# shellcheck disable=SC2317 # called through check()
no_libsystemd() { # the library and what links it only: libsystemd is the keeper's alone
	local f
	for f in "$@"; do
		if readelf -d "$f" | grep NEEDED | grep -q libsystemd; then
			echo "$f links libsystemd"
			return 1
		fi
	done
}
# shellcheck disable=SC2317 # called through check()
no_gpu_stack() {
	local f
	for f in "$@"; do
		[ -e "$f" ] || { echo "missing $f"; return 1; }
		if readelf -d "$f" | grep NEEDED | grep -Eiq 'cuda|ascend|acl|nvidia'; then
			readelf -d "$f" | grep NEEDED
			return 1
		fi
	done
}
libs=$(ls "${lib_path:-/usr/lib/$(gcc -print-multiarch)}"/libmooncake-segment.so.0 2>/dev/null)
ext=$(in_root "${python[@]}" -c 'import mooncake._segment as n; print(n.__file__)' 2>/dev/null || true)
if [ "$root" != / ]; then
	ext=$(ls "$root/$sitedir"/mooncake/_segment*.so 2>/dev/null)
fi
check "no CUDA or Ascend library in NEEDED" no_gpu_stack "$libs" "$ext" "$(command -v "$cli" || echo "$cli")"
check "the library, the module and the CLI do not link libsystemd" no_libsystemd "$libs" "$ext" \
	"$(command -v "$cli" || echo "$cli")"
exit $failed
