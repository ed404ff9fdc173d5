# SPDX-License-Identifier: Apache-2.0
"""`make install DESTDIR=...` of this build, one at a time.

Several test files install the build into scratch DESTDIRs, and `make -j
check` runs them at once; libtool relinks the Python extension inside the
build directory during an install, so two installs at once can break each
other.  An flock on a file in the build directory serialises them."""

import fcntl
import os
import subprocess
from pathlib import Path


def make_env():
    """The environment without the outer make's flags (its jobserver is not ours)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def make_install(builddir, dest):
    """Install @builddir into @dest; an AssertionError with make's output when it fails."""
    with open(Path(builddir) / ".make-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            ["make", "-s", "-C", str(builddir), "install", f"DESTDIR={dest}"],
            env=make_env(),
            capture_output=True,
            text=True,
        )
    assert done.returncode == 0, f"make install failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
