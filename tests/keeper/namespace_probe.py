# SPDX-License-Identifier: Apache-2.0
"""What namespaces this environment lets a test make, asked of the kernel.

A chroot (pbuilder, a buildd, a container without user namespaces) refuses
some of them even to root: the kernel refuses CLONE_NEWUSER to a chrooted
process, and `unshare --mount-proc` cannot make "/" private where the root is
no mount point.  A test that needs one skips naming what is missing, as the
cgroup and hugetlb tests do; where the namespace can be made it runs."""

import os
import shutil
import subprocess

import pytest


def refusal(*unshare_args):
    """Why `unshare UNSHARE_ARGS true` fails here; None when it runs."""
    unshare = shutil.which("unshare")
    if not unshare:
        return "util-linux's unshare(1) is not installed"
    done = subprocess.run([unshare, *unshare_args, "true"], capture_output=True, text=True, timeout=30)
    if done.returncode == 0:
        return None
    return done.stderr.strip() or f"unshare exited {done.returncode}"


def require(*unshare_args, why):
    """Skip the calling test unless root can make these namespaces here;
    @why says what the test needs them for."""
    if os.geteuid() != 0:
        pytest.skip(f"needs root: {why}")
    refused = refusal(*unshare_args)
    if refused:
        pytest.skip(
            f"{why}, and this environment refuses `unshare {' '.join(unshare_args)}` ({refused}): "
            "a chroot or a container without that namespace; run it on a host or in a full container"
        )
