# SPDX-License-Identifier: Apache-2.0
"""Beside a regular `mooncake` package (as Mooncake's wheel installs it):
`import mooncake_segment` still gives ours, `mooncake` is left alone, and
which_shared_segment() / `python3 -m mooncake_segment` name the shadowing."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Resolved: make distcheck's srcdir is "_build/sub/..", which sys.path normalizes.
SRCDIR = Path(os.environ.get("MOONCAKE_SEGMENT_SRCDIR", Path(__file__).parents[2])).resolve()
OUR_MODULE = SRCDIR / "bindings/python/mooncake/shared_segment.py"
TWO_RANKS = SRCDIR / "tests/packaging/two_ranks.py"


@pytest.fixture
def upstream(tmp_path):
    """A stand-in for Mooncake's wheel: a regular mooncake package with an engine module."""
    package = tmp_path / "upstream" / "mooncake"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("IMPORTED_UPSTREAM = True\n")
    (package / "engine.py").write_text("class TransferEngine:\n    pass\n")
    return package


def run(code: str, extra_path=(), where: str = "after", args=None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run @code (or `python3 ARGS`) with @extra_path before or after our entries of PYTHONPATH, from /."""
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    extra = [str(p) for p in extra_path]
    path = extra + ours if where == "before" else ours + extra
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    code = "from os.path import realpath\n" + textwrap.dedent(code)
    command = [sys.executable] + (args if args is not None else ["-c", code])
    return subprocess.run(command, env=env, cwd="/", capture_output=True, text=True, timeout=timeout)


def test_without_upstream_both_names_give_one_module():
    done = run(
        f"""
        import mooncake_segment as m
        import mooncake.shared_segment as s
        assert m.create_shared_segment is s.create_shared_segment and m.SharedSegment is s.SharedSegment
        assert set(s.__all__) <= set(m.__all__) and m.alignment == s.alignment
        r = m.which_shared_segment()
        assert r.is_ours and realpath(r.resolves_to) == {str(OUR_MODULE)!r} and r.ours == r.resolves_to, r
        assert r.reason == "" and r.fix == "" and r.shadowed_by is None
        """
    )
    assert done.returncode == 0, done.stderr
    done = run("", args=["-m", "mooncake_segment", "--doctor"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok\t") and str(OUR_MODULE) in done.stdout


@pytest.mark.parametrize("where", ["before", "after"])
def test_mooncake_segment_is_ours_beside_a_regular_mooncake(upstream, where):
    done = run(
        f"""
        import sys
        import mooncake_segment as m
        assert "mooncake" not in sys.modules, "mooncake_segment must not import upstream's package"
        assert realpath(m._impl.__file__) == {str(OUR_MODULE)!r}, m._impl.__file__
        assert m.shared_segment_supported() is True
        seg = m.create_shared_segment("c", {{"p": {{"count": 2, "shape": (4096,), "dtype": "uint8"}}}}, 1, 0)
        seg.buffers("p")[1][:3] = b"abc"
        assert bytes(seg.buffers("p")[1][:3]) == b"abc"
        seg.close()
        try:
            m.create_shared_segment("c", {{}}, 1, 0)
        except m.SharedSegmentError:
            pass
        else:
            raise AssertionError("no error for zero blocks")

        import mooncake.engine
        assert mooncake.IMPORTED_UPSTREAM and mooncake.engine.TransferEngine
        assert mooncake.__file__ == {str(upstream / "__init__.py")!r}
        try:
            import mooncake.shared_segment
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("the stand-in has no shared_segment: the import must fail")

        r = m.which_shared_segment()
        assert not r.is_ours and r.resolves_to is None, r
        assert r.shadowed_by == {str(upstream)!r} and realpath(r.ours) == {str(OUR_MODULE)!r}, r
        assert "regular package" in r.reason and {str(upstream)!r} in r.reason, r.reason
        assert "import mooncake_segment" in r.fix, r.fix
        assert "why: " in str(r) and "fix: " in str(r)
        """,
        [upstream.parent],
        where,
    )
    assert done.returncode == 0, done.stderr
    shared = run("", [upstream.parent], where, args=[str(TWO_RANKS), "mooncake_segment"])
    assert shared.returncode == 0, shared.stderr
    report = run("", [upstream.parent], where, args=["-m", "mooncake_segment"])
    assert report.returncode == 1, report.stdout + report.stderr
    assert f"why: `mooncake` at {upstream} is a regular package" in report.stdout
    doctor = run("", [upstream.parent], where, args=["-m", "mooncake_segment", "--doctor"])
    status, seen, fix = doctor.stdout.rstrip("\n").split("\t")
    assert (status, doctor.returncode) == ("warn", 1) and str(upstream) in seen and "mooncake_segment" in fix


def test_upstream_shared_segment_imported_first(upstream):
    """Upstream's own mooncake.shared_segment, already imported: reported as what the import gives."""
    (upstream / "shared_segment.py").write_text("UPSTREAM = True\n")
    done = run(
        f"""
        import mooncake.shared_segment as upstream_module
        import mooncake_segment as m
        assert upstream_module.UPSTREAM and m._impl is not upstream_module
        assert realpath(m._impl.__file__) == {str(OUR_MODULE)!r} and m.shared_segment_supported()
        r = m.which_shared_segment()
        assert not r.is_ours and r.resolves_to == {str(upstream / "shared_segment.py")!r}, r
        """,
        [upstream.parent],
        "before",
    )
    assert done.returncode == 0, done.stderr


def test_our_files_missing_is_a_clear_import_error(upstream, tmp_path):
    """mooncake_segment alone, without our mooncake/ directory: the error says what is missing."""
    alone = tmp_path / "alone"
    alone.mkdir()
    os.symlink(SRCDIR / "bindings/python/mooncake_segment", alone / "mooncake_segment")
    env = dict(os.environ, PYTHONPATH=f"{alone}{os.pathsep}{upstream.parent}")
    done = subprocess.run(
        [sys.executable, "-c", "import mooncake_segment"], env=env, cwd="/", capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "cannot find mooncake-segment's mooncake/shared_segment.py on sys.path" in done.stderr, done.stderr
    assert "regular package" in done.stderr


@pytest.mark.parametrize(
    "failure, hint",
    [
        ("libmooncake-segment.so.0: cannot open shared object file: No such file or directory", True),
        ("libnuma.so.1: cannot open shared object file: No such file or directory", False),
    ],
)
def test_a_missing_c_library_names_the_package_to_install(tmp_path, failure, hint):
    """The extension is there but the system library is not (a pip install on a bare machine):
    the ImportError names the package; any other import failure passes through unchanged."""
    package = tmp_path / "mooncake"
    package.mkdir()
    for part in (SRCDIR / "bindings/python/mooncake").glob("*.py"):
        shutil.copy(part, package / part.name)
    (package / "_segment.py").write_text(f"raise ImportError({failure!r})\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", "import mooncake.shared_segment"], env=env, cwd="/", capture_output=True, text=True
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert failure in last, done.stderr
    if hint:
        assert "ImportError: mooncake.shared_segment needs the C library libmooncake-segment.so.0" in last
        assert "apt install libmooncake-segment0" in last and "dnf install mooncake-segment" in last
    else:
        assert last == f"ImportError: {failure}"


def doctor_python_finding(env):
    builddir = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", SRCDIR))
    done = subprocess.run(
        [str(builddir / "tools/mooncake-segment"), "doctor", "--json"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "python"]
    assert len(findings) == 1, done.stdout
    return findings[0]


def test_doctor_names_the_shadowing_package(upstream):
    base = dict(os.environ, MOONCAKE_SEGMENT_PYTHON=sys.executable)
    ours = doctor_python_finding(base)
    assert ours["status"] == "ok" and str(OUR_MODULE) in ours["value"], ours
    shadowed = doctor_python_finding(dict(base, PYTHONPATH=f"{upstream.parent}{os.pathsep}{base['PYTHONPATH']}"))
    assert shadowed["status"] == "warn", shadowed
    assert f"regular `mooncake` package (with __init__.py) at {upstream} hides ours" in shadowed["value"]
    assert "import mooncake_segment" in shadowed["fix"]


def test_doctor_without_python_or_without_our_package(upstream):
    missing = doctor_python_finding(dict(os.environ, MOONCAKE_SEGMENT_PYTHON="/nonexistent/python3"))
    assert missing == {
        "check": "python",
        "status": "ok",
        "value": "/nonexistent/python3 not found: only the Python binding needs it",
        "fix": "",
    }
    bare = doctor_python_finding(dict(os.environ, MOONCAKE_SEGMENT_PYTHON=sys.executable, PYTHONPATH=str(upstream)))
    assert bare["status"] == "ok" and "cannot import mooncake_segment" in bare["value"], bare
    assert "python3-mooncake-segment" in bare["fix"]


def test_a_hand_made_mooncake_module_does_not_break_the_import():
    done = run(
        f"""
        import sys, types
        sys.modules["mooncake"] = types.ModuleType("mooncake")  # no __spec__, as some test doubles do
        import mooncake_segment as m
        assert realpath(m._impl.__file__) == {str(OUR_MODULE)!r} and m.shared_segment_supported()
        r = m.which_shared_segment()
        assert not r.is_ours and "no import spec" in r.reason, r
        """
    )
    assert done.returncode == 0, done.stderr


def test_wheel_layout_survives_upstream_in_the_same_site_packages(tmp_path):
    """pip put both wheels in one site-packages: upstream's mooncake/__init__.py and its
    shared_segment.py over ours; mooncake_segment uses the copy the wheel bundles."""
    builddir = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", SRCDIR))
    site = tmp_path / "site-packages"
    shutil.copytree(SRCDIR / "bindings/python/mooncake_segment", site / "mooncake_segment")
    for module in [OUR_MODULE, *OUR_MODULE.parent.glob("_shared_segment_*.py")]:  # as setup.py bundles them
        shutil.copy(module, site / "mooncake_segment" / module.name)
    (native,) = (builddir / "bindings/python/mooncake").glob("_segment.*.so")
    shutil.copy(native, site / "mooncake_segment" / native.name)
    (site / "mooncake").mkdir()
    shutil.copy(native, site / "mooncake" / native.name)
    (site / "mooncake/__init__.py").write_text("")
    (site / "mooncake/shared_segment.py").write_text("UPSTREAM = True\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    code = f"""
import mooncake_segment as m
import mooncake.shared_segment as upstream_module
assert upstream_module.UPSTREAM
assert m._impl.__name__ == "mooncake_segment.shared_segment" and m._segment.__file__.startswith({str(site)!r})
assert m._impl.__file__ == {str(site / "mooncake_segment/shared_segment.py")!r} and m.shared_segment_supported()
r = m.which_shared_segment()
assert not r.is_ours and r.shadowed_by == {str(site / "mooncake")!r} and r.ours == m._impl.__file__, r
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shared = subprocess.run(
        [sys.executable, str(TWO_RANKS), "mooncake_segment"], env=env, cwd="/", capture_output=True, text=True
    )
    assert shared.returncode == 0, shared.stderr
