# SPDX-License-Identifier: Apache-2.0
"""Source-tree checks of the packaging: one source of truth for each fact."""

import ast
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_install import make_env, make_install  # noqa: E402

SRCDIR = Path(os.environ.get("MOONCAKE_SEGMENT_SRCDIR", Path(__file__).resolve().parents[2]))
BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", SRCDIR))
# (build, dist and *.egg-info: what `pip install .` / `python3 -m build` leave in the tree)
BUILD_DIRS = {"_build", ".git", "autom4te.cache", "debian/tmp", ".libs", "build", "dist"}


def source_files():
    for root, dirs, files in os.walk(SRCDIR):
        rel = Path(root).relative_to(SRCDIR)
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(("_build", ".", "mooncake-segment-"))
            and not d.endswith(".egg-info")
            and str(rel / d) not in BUILD_DIRS
            and not (rel == Path("debian") and d != "source")
        ]
        for name in files:
            yield rel / name


def configure_version():
    text = (SRCDIR / "configure.ac").read_text()
    return re.search(r"AC_INIT\(\[mooncake-segment\],\s*\[([^\]]+)\]", text).group(1)


def test_one_authoritative_source_for_the_python_module():
    files = list(source_files())
    modules = [f for f in files if f.name == "shared_segment.py"]
    assert modules == [Path("bindings/python/mooncake/shared_segment.py")]
    # Its private parts, which mooncake_segment loads beside it when `mooncake` is not ours.
    parts = sorted(f for f in files if f.name.startswith("_shared_segment_") and f.suffix == ".py")
    assert all(f.parent == Path("bindings/python/mooncake") for f in parts), parts
    # Read, not imported: importing mooncake_segment would import the API.
    locate = ast.parse((SRCDIR / "bindings/python/mooncake_segment/_locate.py").read_text())
    (declared,) = [
        ast.literal_eval(node.value)
        for node in locate.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PRIVATE_PARTS"]
    ]
    assert sorted(declared) == [f.stem for f in parts]
    assert not [
        f for f in files if f.name == "__init__.py" and f.parent.name == "mooncake"
    ], "mooncake must stay a namespace package"
    assert (SRCDIR / "bindings/python/mooncake/_segment.c").exists()


def test_version_agrees_everywhere():
    version = configure_version()
    changelog = (SRCDIR / "debian/changelog").read_text().splitlines()[0]
    assert re.match(rf"mooncake-segment \({re.escape(version)}(-\d+)?\) ", changelog), changelog
    spec_in = (SRCDIR / "rpm/mooncake-segment.spec.in").read_text()
    assert re.search(r"^Version:\s+@PACKAGE_VERSION@$", spec_in, re.M), "the spec's version must come from configure"
    assert re.search(rf"^\* .* - {re.escape(version)}-\d+$", spec_in, re.M), "the spec's changelog lacks this version"
    spec = BUILDDIR / "rpm/mooncake-segment.spec"
    if spec.exists():
        assert re.search(rf"^Version:\s+{re.escape(version)}$", spec.read_text(), re.M)
    header = (SRCDIR / "lib/mooncake/segment.h").read_text()
    parts = [
        re.search(rf"#define MOONCAKE_SEGMENT_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "MICRO")
    ]
    assert ".".join(parts) == version
    for page in ("doc/mooncake-segment.1", "doc/libmooncake-segment.3", "doc/mooncake-segmentd.8"):
        assert f'"mooncake-segment {version}"' in (SRCDIR / page).read_text(), page


def test_python_package_takes_the_project_version():
    """pip's metadata comes from setup.py, which reads configure.ac: never a second copy."""
    pyproject = (SRCDIR / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]$', pyproject, re.M), "pyproject.toml must leave the version to setup.py"
    assert not re.search(r"^version\s*=", pyproject, re.M), "pyproject.toml must not hold a version of its own"


def test_setup_py_reports_the_project_version():
    pytest.importorskip("setuptools", reason="python3-setuptools is not installed (the pip build needs it)")
    done = subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=SRCDIR, capture_output=True, text=True, check=True
    )
    assert done.stdout.split()[-1] == configure_version(), done.stdout


def install_tree():
    """Run `make install` into a scratch DESTDIR; map each file to a canonical path."""
    env = make_env()
    dirs = dict(
        line.split("=", 1)
        for line in subprocess.run(
            ["make", "-s", "-C", str(BUILDDIR), "print-install-dirs"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    )
    dest = tempfile.mkdtemp(prefix="mooncake-segment-install-")
    make_install(BUILDDIR, dest)
    files = []
    for root, _, names in os.walk(dest):
        for name in names:
            files.append("/" + str(Path(root, name).relative_to(dest)))
    subprocess.run(["rm", "-rf", dest], check=True)
    return dirs, files


@pytest.fixture(scope="module")
def installed():
    return install_tree()


def canonical(path, dirs, layout):
    """Rewrite a configured install path into the distribution's layout."""
    # systemdunitdir lies below libdir when both follow the prefix: look at it first.
    for key in ("systemdunitdir", "pyexecdir", "pythondir", "libdir", "bindir", "sbindir", "includedir", "mandir"):
        if not dirs.get(key):  # --with-systemdsystemunitdir=no
            continue
        prefix = dirs[key].rstrip("/") + "/"
        if path.startswith(prefix):
            return layout[key] + "/" + path[len(prefix) :]
    raise AssertionError(f"{path} is outside every known install directory")


def claims(pattern, path):
    if pattern.endswith("/"):
        return path.startswith(pattern) or fnmatch.fnmatch(path, pattern + "*")
    return fnmatch.fnmatch(path, pattern)


def check_exactly_one_owner(paths, packages, excluded):
    problems = []
    for path in paths:
        if any(claims(p, path) for p in excluded):
            continue
        owners = [name for name, patterns in packages.items() if any(claims(p, path) for p in patterns)]
        if len(owners) != 1:
            problems.append(f"{path}: claimed by {owners or 'no package'}")
    assert not problems, "\n".join(problems)


def test_every_installed_file_is_in_exactly_one_debian_package(installed):
    dirs, files = installed
    layout = {
        "libdir": "usr/lib/x86_64-linux-gnu",
        "bindir": "usr/bin",
        "sbindir": "usr/sbin",
        "includedir": "usr/include",
        "mandir": "usr/share/man",
        "pythondir": "usr/lib/python3/dist-packages",
        "pyexecdir": "usr/lib/python3/dist-packages",
        "systemdunitdir": "lib/systemd/system",  # debian/rules installs the units there
    }
    paths = [canonical(f, dirs, layout) for f in files]
    packages = {}
    for install in (SRCDIR / "debian").glob("*.install"):
        packages[install.stem] = [
            line.strip() for line in install.read_text().splitlines() if line.strip() and not line.startswith("#")
        ]
    excluded = [
        line.strip()
        for line in (SRCDIR / "debian/not-installed").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # dh_python3 drops byte code; py3compile rebuilds it on the target.
    excluded.append("usr/lib/python3/dist-packages/mooncake/__pycache__/")
    excluded.append("usr/lib/python3/dist-packages/mooncake_segment/__pycache__/")
    assert set(packages) == {
        "libmooncake-segment0",
        "libmooncake-segment-dev",
        "python3-mooncake-segment",
        "mooncake-segment-tools",
        "mooncake-segmentd",
    }
    check_exactly_one_owner(paths, packages, excluded)


def spec_files_sections(text, macros):
    sections, current = {}, None
    for line in text.splitlines():
        header = re.match(r"^%files(?:\s+(-n\s+)?(\S+))?\s*$", line)
        if header:
            name = header.group(2) and header.group(2).replace("%{name}", macros["name"])
            current = "main" if not name else (name if header.group(1) else f"main-{name}")
            sections[current] = []
            continue
        if current is None:
            continue
        if line.startswith(
            ("%changelog", "%package", "%description", "%prep", "%build", "%install", "%check", "%post")
        ):
            current = None
            continue
        line = line.strip()
        if not line or line.startswith("#") or line.startswith(("%license", "%doc", "%dir")):
            continue
        for macro, value in macros.items():
            line = line.replace("%{" + macro + "}", value)
        sections[current].append(line.lstrip("/"))
    return sections


def test_every_installed_file_is_in_exactly_one_rpm_package(installed):
    dirs, files = installed
    sitearch = "usr/lib64/python3.11/site-packages"
    layout = {
        "libdir": "usr/lib64",
        "bindir": "usr/bin",
        "sbindir": "usr/sbin",
        "includedir": "usr/include",
        "mandir": "usr/share/man",
        "pythondir": sitearch,
        "pyexecdir": sitearch,
        "systemdunitdir": "usr/lib/systemd/system",
    }
    paths = [canonical(f, dirs, layout) for f in files]
    macros = {
        "_libdir": "/usr/lib64",
        "_bindir": "/usr/bin",
        "_sbindir": "/usr/sbin",
        "_unitdir": "/usr/lib/systemd/system",
        "_includedir": "/usr/include",
        "_mandir": "/usr/share/man",
        "python3_sitearch": "/" + sitearch,
        "python3_ext_suffix": dirs["PYTHON_EXT_SUFFIX"],
        "name": "mooncake-segment",
        "_prefix": "/usr",
    }
    sections = spec_files_sections((SRCDIR / "rpm/mooncake-segment.spec.in").read_text(), macros)
    assert set(sections) == {"main", "main-devel", "python3-mooncake-segment", "mooncake-segmentd"}, sections.keys()
    # %install deletes the libtool archives.
    check_exactly_one_owner(paths, sections, ["*.la"])
