# SPDX-License-Identifier: Apache-2.0
"""mooncake.engine: upstream's import path of the native class, and never a shadow of upstream's.

Real processes of a real gloo group use the native two-phase API as
upstream's callers do; the shadowing cases put a stand-in for Mooncake's
installed package (a regular package, its engine a package or a compiled
extension) on a fresh interpreter's path beside, before and after ours.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import mooncake
import mooncake.engine
from conftest import run_ranks
from mooncake import _segment

# The sys.path entries of our namespace package: its .py files (srcdir) and the extension (builddir).
OURS = list(dict.fromkeys(Path(p).parent for p in mooncake.__path__))


def test_the_native_class_is_ours():
    assert mooncake.engine.SharedSegment is _segment.SharedSegment
    assert mooncake.engine.__all__ == ["SharedSegment"]
    assert isinstance(mooncake.engine.SharedSegment.supported(), bool)


def test_the_rest_of_upstreams_engine_is_named_as_mooncakes():
    with pytest.raises(AttributeError, match="TransferEngine is in Mooncake's own package"):
        mooncake.engine.TransferEngine
    with pytest.raises(ImportError, match="cannot import name 'TransferEngine'"):
        from mooncake.engine import TransferEngine  # noqa: F401


@pytest.mark.parametrize("owner", [0, 2])
def test_ranks_of_a_gloo_group_share_pages_through_the_native_api(owner):
    pytest.importorskip("torch", reason="python3-torch is not installed; the ranks are a gloo group")
    results = run_ranks("engine_native", 3, owner=owner)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, f"rank {rank} failed: {r['stderr'][-2000:]}"
        assert r["ready"] and r["size"] == 1 << 20 and r["module"] == "mooncake._segment"
        assert r["seen"] == [100, 101, 102], r


UPSTREAM_INIT = '"""Stand-in for Mooncake\'s installed wheel: a regular package."""\n'


def fake_upstream(root, engine_kind):
    """A Mooncake-like regular package under @root whose engine is a package or an extension."""
    package = root / "mooncake"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(UPSTREAM_INIT)
    if engine_kind == "package":
        (package / "engine").mkdir()
        (package / "engine" / "__init__.py").write_text('SharedSegment = "upstream engine package"\n')
    else:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            pytest.skip("no C compiler to build the stand-in engine extension")
        source = root / "engine.c"
        source.write_text(
            textwrap.dedent(
                """
                #include <Python.h>
                static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "engine", NULL, -1, NULL};
                PyMODINIT_FUNC PyInit_engine(void) {
                    PyObject *m = PyModule_Create(&def);
                    if (m && PyModule_AddStringConstant(m, "SharedSegment", "upstream engine extension") < 0) {
                        Py_DECREF(m);
                        return NULL;
                    }
                    return m;
                }
                """
            )
        )
        target = package / ("engine" + sysconfig.get_config_var("EXT_SUFFIX"))
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], "-o", str(target), str(source)],
            check=True,
        )
    return root


def engine_seen(path):
    """What a fresh interpreter with @path first on sys.path gets as mooncake.engine.SharedSegment."""
    code = (
        f"import sys; sys.path[:0] = {[str(p) for p in path]!r}\n"
        "import mooncake.engine\n"
        "native = mooncake.engine.SharedSegment\n"
        "print(native if isinstance(native, str) else 'ours' if native.__module__ == 'mooncake._segment' else native)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_upstream_the_engine_is_ours():
    assert engine_seen(OURS) == "ours"


@pytest.mark.parametrize("engine_kind", ["package", "extension"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_an_installed_upstream_package_elsewhere_keeps_its_engine(tmp_path, engine_kind, where):
    # Our namespace package yields the whole name to a regular package, wherever it is on the path.
    upstream = fake_upstream(tmp_path / "upstream", engine_kind)
    path = [upstream, *OURS] if where == "before" else [*OURS, upstream]
    assert engine_seen(path) == f"upstream engine {engine_kind}"


@pytest.mark.parametrize("engine_kind", ["package", "extension"])
def test_both_wheels_in_one_directory_keep_upstreams_engine(tmp_path, engine_kind):
    # pip puts Mooncake's wheel and ours in one site-packages/mooncake/: our engine.py beside theirs.
    site = fake_upstream(tmp_path / "site-packages", engine_kind)
    for root in OURS:
        for item in (root / "mooncake").iterdir():
            if item.suffix in (".py", ".so") and not (site / "mooncake" / item.name).exists():
                shutil.copy(item, site / "mooncake" / item.name)
    assert (site / "mooncake" / "engine.py").exists()
    assert engine_seen([site]) == f"upstream engine {engine_kind}"
