# SPDX-License-Identifier: Apache-2.0
"""PEP 517 build of the Python package against the INSTALLED C library.

`pip install .` (from this tree or the release tarball) compiles
bindings/python/mooncake/_segment*.c and links it to the system's
libmooncake-segment, found with pkg-config; it never builds a copy of lib/.
The version is configure.ac's AC_INIT, the one project version.  The automake
build (`make`, the deb and rpm) does not use this file.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DEV_PACKAGES = (
    "Debian/Ubuntu: apt install libmooncake-segment-dev; Fedora/RHEL: dnf install mooncake-segment-devel; "
    "from source: ./configure && make && make install, then set PKG_CONFIG_PATH to its lib/pkgconfig"
)


def project_version():
    text = (HERE / "configure.ac").read_text()
    return re.search(r"AC_INIT\(\[mooncake-segment\],\s*\[([^\]]+)\]", text).group(1)


def pkg_config(*args):
    try:
        done = subprocess.run(["pkg-config", *args], capture_output=True, text=True)
    except FileNotFoundError:
        return None, "pkg-config is not installed (apt install pkg-config / dnf install pkgconf)"
    return (done.stdout if done.returncode == 0 else None), (done.stderr.strip().splitlines() or [""])[0]


def library_flags(version):
    """Compiler and linker flags of the installed library, or one clear message and exit."""
    found, why = pkg_config("--modversion", "mooncake-segment")
    if found is None:
        sys.exit(
            f"error: the C library mooncake-segment {version} (mooncake-segment.pc) was not found by pkg-config "
            f"({why or 'no output'}). Install its development package first ({DEV_PACKAGES})."
        )
    if pkg_config(f"--atleast-version={version}", "mooncake-segment")[0] is None:
        sys.exit(
            f"error: the installed C library mooncake-segment is {found.strip()}, this binding needs {version} "
            f"or later. Install a matching development package ({DEV_PACKAGES})."
        )
    cflags, _ = pkg_config("--cflags", "mooncake-segment")
    libs, _ = pkg_config("--libs", "mooncake-segment")
    return shlex.split(cflags), shlex.split(libs)


class BuildExtAgainstInstalledLibrary(build_ext):
    """Flags come from pkg-config when the extension is compiled, so metadata
    queries (egg_info, dist_info) work without the library."""

    def build_extensions(self):
        cflags, libs = library_flags(VERSION)
        for ext in self.extensions:
            ext.extra_compile_args = cflags + ["-fvisibility=hidden"]
            ext.extra_link_args = libs
        super().build_extensions()


class BuildPyWithBundledCopy(build_py):
    """mooncake_segment/ carries a copy of mooncake/shared_segment.py and of its
    private parts (_shared_segment_*.py): pip puts Mooncake's wheel and ours in
    one site-packages/mooncake/, where the last one installed overwrites that
    file, and `import mooncake_segment` must still find ours.  Copies made
    here, so the source tree keeps one file of each."""

    def run(self):
        super().run()
        package = HERE / "bindings/python/mooncake"
        for source in [package / "shared_segment.py", *sorted(package.glob("_shared_segment_*.py"))]:
            self.copy_file(str(source), str(Path(self.build_lib) / "mooncake_segment" / source.name))


VERSION = project_version()
NATIVE_SOURCES = [
    f"bindings/python/mooncake/{name}.c"
    for name in ("_segment", "_segment_errors", "_segment_object", "_segment_buffer", "_segment_slots")
]
NATIVE_HEADERS = ["bindings/python/mooncake/_segment.h"]
setup(
    version=VERSION,
    package_dir={"": "bindings/python"},
    packages=["mooncake", "mooncake_segment"],
    package_data={"mooncake": ["py.typed", "_segment.pyi"], "mooncake_segment": ["py.typed"]},
    # The same native module twice: mooncake._segment for the drop-in import,
    # mooncake_segment._segment for the bundled copy (see BuildPyWithBundledCopy).
    ext_modules=[
        Extension("mooncake._segment", sources=NATIVE_SOURCES, depends=NATIVE_HEADERS),
        Extension("mooncake_segment._segment", sources=NATIVE_SOURCES, depends=NATIVE_HEADERS),
    ],
    cmdclass={"build_ext": BuildExtAgainstInstalledLibrary, "build_py": BuildPyWithBundledCopy},
    include_package_data=False,  # package_data only: no C source in the wheel
    zip_safe=False,
)
