#!/usr/bin/env bash
# Check the pip-installed Python package in virtualenvs, against the C library
# installed on this system (run it after the debs, or `make install`):
#
#   check-venv.sh SOURCE      SOURCE: the source tree or the release tarball
#
#  1. a fresh venv WITHOUT system site packages, pip and setuptools from
#     Debian's wheels (ensurepip), nothing from an index: build the wheel from
#     SOURCE with --no-build-isolation, install it with --no-deps, then from /
#     under `python -I`: import, probe, two processes sharing pages, the
#     extension resolving libmooncake-segment.so.0 from the system, no torch;
#  2. a venv WITH --system-site-packages, `pip install SOURCE` into it (the
#     system's setuptools build it): torch (when the system has python3-torch)
#     and ours from the venv;
#     then a stand-in of Mooncake's wheel pip-installed into the same venv
#     (overwriting mooncake/shared_segment.py): import mooncake_segment still
#     shares pages and names the shadowing;
#  3. `python3 -m build --wheel --no-isolation` and `twine check`, when
#     python3-build and twine are installed;
#  4. a venv with --system-site-packages and nothing installed in it: the
#     system's package (the deb), when one is installed.
#
# Prints "PASS name" / "FAIL name" / "SKIP name reason" lines; exits 1 if any failed.
set -u
[ $# -eq 1 ] || { echo "usage: $0 SOURCE-TREE-OR-TARBALL" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
source=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
wheels=/usr/share/python-wheels

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
# shellcheck disable=SC2317 # called through check()
from_root() { (cd / && "$@"); }

if ! pkg-config --exists mooncake-segment; then
	echo "SKIP venv: every check (pkg-config finds no mooncake-segment.pc: install libmooncake-segment-dev first)"
	exit 0
fi
if ! ls "$wheels"/wheel-*.whl >/dev/null 2>&1; then
	echo "SKIP venv: every check (no $wheels/wheel-*.whl: apt install python3-wheel-whl)"
	exit 0
fi

# pip builds a source directory in place: build a copy, never the caller's tree.
if [ -d "$source" ]; then
	mkdir "$work/src"
	(cd "$source" && tar --exclude=./.git --exclude=./build -cf - .) | (cd "$work/src" && tar -xf -)
	source=$work/src
fi

cat >"$work/probe.py" <<'PY'
import os, sys
import mooncake.shared_segment as s
import mooncake_segment
assert s.__file__.startswith(sys.prefix + os.sep), f"{s.__file__} is not in the venv {sys.prefix}"
assert s.shared_segment_supported() is True
assert mooncake_segment.create_shared_segment is s.create_shared_segment
assert mooncake_segment.which_shared_segment().is_ours
PY
cat >"$work/no-torch.py" <<'PY'
try:
    import torch  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("torch is importable: this venv must not see it")
PY
cat >"$work/torch.py" <<'PY'
import sys
import torch
import mooncake.shared_segment as s
assert s.__file__.startswith(sys.argv[1]), f"{s.__file__} is not under {sys.argv[1]}"
seg = s.create_shared_segment("venv", {"k": {"count": 2, "shape": (8, 8), "dtype": torch.bfloat16}}, 1, 0)
t = seg.tensors("k")
t[1].fill_(2)
assert bool((seg.tensors("k")[1] == 2).all())
del t
seg.close()
PY

# ldd of the installed extension: libmooncake-segment.so.0 from outside the venv.
# shellcheck disable=SC2317 # called through check()
system_library() {
	local ext
	ext=$(from_root "$1" -I -c 'import mooncake._segment as n; print(n.__file__)') || return 1
	ldd "$ext"
	ldd "$ext" | grep -q 'not found' && return 1
	ldd "$ext" | grep -E '^\s*libmooncake-segment\.so\.0 => /' | grep -vq "$(dirname "$(dirname "$1")")"
}
# shellcheck disable=SC2317 # called through check()
wheel_metadata() {
	local version
	version=$(sed -n 's/^AC_INIT(\[mooncake-segment\], *\[\([^]]*\)\].*/\1/p' "$here/../../configure.ac")
	/usr/bin/python3 - "$1" "$version" <<'PY' || return 1
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
metadata = [n for n in names if n.endswith(".dist-info/METADATA")]
text = zipfile.ZipFile(sys.argv[1]).read(metadata[0]).decode()
assert f"\nVersion: {sys.argv[2]}\n" in text, f"the wheel's version is not {sys.argv[2]}"
bad = [n for n in names if n == "mooncake/__init__.py" or n.endswith((".c", ".h"))]
assert not bad, f"the wheel must not hold {bad}"
PY
	if command -v twine >/dev/null; then twine check --strict "$1"; fi
}

bare=$work/bare
check "venv: python3 -m venv without system site packages (pip from Debian's wheels)" /usr/bin/python3 -m venv "$bare"
check "venv: wheel from $wheels, no index" \
	"$bare/bin/python" -m pip install -q --no-index --find-links "$wheels" wheel
check "venv: pip wheel --no-build-isolation --no-index of $(basename "$1")" \
	"$bare/bin/python" -m pip wheel -q --no-index --no-build-isolation --no-deps -w "$work/wheels" "$source"
wheel=$(find "$work/wheels" -name 'mooncake_segment-*.whl' 2>/dev/null | head -1)
check "venv: wheel metadata (version, no __init__.py, no C source, twine check)" wheel_metadata "$wheel"
check "venv: pip install --no-deps --no-index the wheel" \
	"$bare/bin/python" -m pip install -q --no-index --no-deps "$wheel"
check "venv: no torch visible" from_root "$bare/bin/python" -I "$work/no-torch.py"
check "venv: import from / under python -I, probe, mooncake_segment" from_root "$bare/bin/python" -I "$work/probe.py"
check "venv: two processes share pages (no torch)" from_root "$bare/bin/python" -I "$here/two_ranks.py"
check "venv: the extension uses the system libmooncake-segment.so.0 (ldd)" system_library "$bare/bin/python"

# A stand-in for Mooncake's wheel (a regular mooncake package with its own
# shared_segment.py), pip-installed after ours into the same site-packages.
mkdir -p "$work/upstream/mooncake"
cat >"$work/upstream/pyproject.toml" <<'TOML'
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "standin-mooncake-transfer-engine"
version = "0.0.1"

[tool.setuptools]
packages = ["mooncake"]
TOML
echo 'UPSTREAM = True' >"$work/upstream/mooncake/__init__.py"
echo 'class TransferEngine: pass' >"$work/upstream/mooncake/engine.py"
echo 'UPSTREAM = True' >"$work/upstream/mooncake/shared_segment.py"
# shellcheck disable=SC2317 # called through check()
shadowed() {
	from_root "$bare/bin/python" -I -c 'import mooncake.shared_segment as s, mooncake.engine; assert s.UPSTREAM' &&
		from_root "$bare/bin/python" -I "$here/two_ranks.py" mooncake_segment &&
		! from_root "$bare/bin/python" -I -m mooncake_segment >"$work/which" &&
		cat "$work/which" && grep -q 'is a regular package' "$work/which"
}
check "venv + Mooncake's wheel (stand-in) in the same site-packages: pip install it" \
	"$bare/bin/python" -m pip install -q --no-index --no-build-isolation --no-deps "$work/upstream"
check "venv + Mooncake's wheel (stand-in): mooncake_segment shares pages, names the shadowing" shadowed

# shellcheck disable=SC2317 # called through check()
python_build() { # python3-build takes a directory, not a tarball
	local tree=$source
	if [ -f "$source" ]; then
		mkdir "$work/unpacked" && tar -xf "$source" -C "$work/unpacked" || return 1
		tree=$(find "$work/unpacked" -mindepth 1 -maxdepth 1 -type d)
	fi
	(cd / && /usr/bin/python3 -m build --wheel --no-isolation --outdir "$work/build" "$tree") || return 1
	if command -v twine >/dev/null; then twine check --strict "$work"/build/*.whl; fi
}
if /usr/bin/python3 -c 'import build' 2>/dev/null; then
	check "build: python3 -m build --wheel --no-isolation, twine check" python_build
else
	echo "SKIP build: python3 -m build (python3-build not installed)"
fi

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	echo "SKIP venv: with torch (python3-torch not installed)"
else
	over=$work/over
	check "venv --system-site-packages: pip install --no-build-isolation --no-index $(basename "$1")" sh -c \
		"/usr/bin/python3 -m venv --system-site-packages '$over' &&
		'$over/bin/python' -m pip install -q --no-index --no-build-isolation --no-deps '$source'"
	check "venv --system-site-packages + pip install: ours from the venv, torch tensors" \
		from_root "$over/bin/python" -I "$work/torch.py" "$over/"
	check "venv --system-site-packages + pip install: two processes share pages" \
		from_root "$over/bin/python" -I "$here/two_ranks.py"
fi

deb_module=$(/usr/bin/python3 -I -c 'import mooncake.shared_segment as s; print(s.__file__)' 2>/dev/null)
if [ -z "$deb_module" ]; then
	echo "SKIP venv: over the system package (no mooncake.shared_segment in the system Python)"
else
	plain=$work/plain
	check "venv --system-site-packages over the system package: create" \
		/usr/bin/python3 -m venv --system-site-packages "$plain"
	check "venv --system-site-packages over the system package: import, probe, mooncake_segment" \
		from_root "$plain/bin/python" -I -c \
		"import mooncake.shared_segment as s, mooncake_segment as m; assert s.__file__ == '$deb_module'; assert s.shared_segment_supported() and m.which_shared_segment().is_ours"
	check "venv --system-site-packages over the system package: two processes share pages" \
		from_root "$plain/bin/python" -I "$here/two_ranks.py"
	if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
		check "venv --system-site-packages over the system package: torch tensors" \
			from_root "$plain/bin/python" -I "$work/torch.py" "$(dirname "$(dirname "$deb_module")")"
	fi
fi
exit $failed
