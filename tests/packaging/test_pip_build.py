# SPDX-License-Identifier: Apache-2.0
"""The PEP 517 build (setup.py): a wheel from only the Python sources and the
project metadata, compiled against an installed libmooncake-segment found with
pkg-config, offline, with Debian's setuptools and no build isolation."""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_install import make_install  # noqa: E402

SRCDIR = Path(os.environ.get("MOONCAKE_SEGMENT_SRCDIR", Path(__file__).resolve().parents[2]))
BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", SRCDIR))
# What the Python build may read: no lib/ source, so it cannot compile a copy of the library.
PYTHON_SOURCES = ["setup.py", "pyproject.toml", "configure.ac", "README.md", "LICENSE", "bindings/python"]


def configure_version():
    text = (SRCDIR / "configure.ac").read_text()
    return re.search(r"AC_INIT\(\[mooncake-segment\],\s*\[([^\]]+)\]", text).group(1)


def build_tools_missing():
    for module in ("pip", "setuptools", "wheel"):
        if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode:
            return module
    return None


@pytest.fixture(scope="module")
def python_sources(tmp_path_factory):
    missing = build_tools_missing()
    if missing:
        pytest.skip(f"{sys.executable} has no {missing} (apt install python3-pip python3-setuptools python3-wheel)")
    if not shutil.which("pkg-config"):
        pytest.skip("pkg-config is not installed")
    tree = tmp_path_factory.mktemp("python-sources")
    for name in PYTHON_SOURCES:
        source = SRCDIR / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(source, tree / name)
    return tree


@pytest.fixture(scope="module")
def installed_library(tmp_path_factory):
    """This build's library, `make install`ed into a scratch DESTDIR: the pkg-config environment pointing at it."""
    dest = tmp_path_factory.mktemp("destdir")
    make_install(BUILDDIR, dest)
    (pc,) = dest.rglob("mooncake-segment.pc")
    return dict(
        PKG_CONFIG_PATH=str(pc.parent),
        PKG_CONFIG_LIBDIR=str(pc.parent),
        PKG_CONFIG_SYSROOT_DIR=str(dest),
        LD_LIBRARY_PATH=str(pc.parent.parent),
    )


def pip_wheel(sources, out, env):
    command = [sys.executable, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps", "-w", out]
    command += ["--no-cache-dir", "--disable-pip-version-check"]
    return subprocess.run(
        command + [str(sources)], env=dict(os.environ, **env), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def wheel(python_sources, installed_library, tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    done = pip_wheel(python_sources, out, installed_library)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("mooncake_segment-*.whl")
    return built


def test_wheel_holds_the_package_and_the_project_version(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "mooncake/shared_segment.py" in names and "mooncake_segment/__init__.py" in names
    assert "mooncake/engine.py" in names  # never hides Mooncake's engine (tests/python/test_engine.py)
    assert [n for n in names if re.fullmatch(r"mooncake/_segment\..*\.so", n)], names
    # mooncake_segment's own copy, for a site-packages shared with Mooncake's wheel
    assert [n for n in names if re.fullmatch(r"mooncake_segment/_segment\..*\.so", n)], names
    modules = sorted((SRCDIR / "bindings/python/mooncake").glob("*shared_segment*.py"))
    assert len(modules) > 1, modules  # shared_segment.py and its private parts
    for module in modules:
        assert f"mooncake/{module.name}" in names, names
        copy = zipfile.ZipFile(wheel).read(f"mooncake_segment/{module.name}")
        assert copy == module.read_bytes()
    assert "mooncake/__init__.py" not in names, "mooncake must stay a namespace package"
    assert not [n for n in names if n.endswith((".c", ".h"))], names
    metadata = zipfile.ZipFile(wheel).read(f"mooncake_segment-{configure_version()}.dist-info/METADATA").decode()
    assert f"\nVersion: {configure_version()}\n" in metadata
    assert "\nRequires-Python: >=3.9\n" in metadata


def test_extension_links_the_installed_library(wheel, installed_library, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path)
    extensions = sorted(tmp_path.glob("*/_segment.*.so"))
    assert [e.parent.name for e in extensions] == ["mooncake", "mooncake_segment"]
    for extension in extensions:
        dynamic = subprocess.run(["readelf", "-d", str(extension)], capture_output=True, text=True, check=True).stdout
        assert "Shared library: [libmooncake-segment.so.0]" in dynamic
        assert "RPATH" not in dynamic and "RUNPATH" not in dynamic, "the system's loader must find the library"
    probe = "import mooncake.shared_segment as s; assert s.shared_segment_supported(); print(s.__file__)"
    env = dict(os.environ, PYTHONPATH=str(tmp_path), LD_LIBRARY_PATH=installed_library["LD_LIBRARY_PATH"])
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd="/", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "mooncake/shared_segment.py")


def test_twine_check_passes(wheel):
    if not shutil.which("twine"):
        pytest.skip("twine is not installed (apt install twine)")
    done = subprocess.run(["twine", "check", "--strict", str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_missing_library_is_one_clear_error(python_sources, tmp_path):
    nowhere = str(tmp_path / "no-pkgconfig")
    done = pip_wheel(python_sources, tmp_path, dict(PKG_CONFIG_PATH=nowhere, PKG_CONFIG_LIBDIR=nowhere))
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "mooncake-segment 0" in output and "was not found by pkg-config" in output, output
    assert "apt install libmooncake-segment-dev" in output and "dnf install mooncake-segment-devel" in output
    assert not list(tmp_path.glob("*.whl"))
