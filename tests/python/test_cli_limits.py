# SPDX-License-Identifier: Apache-2.0
"""The mooncake-segment CLI under the resource limits batch schedulers set (ulimit -f, ulimit -v), for real:
a clean exit with the library's message naming the limit and the fix, never death by SIGXFSZ."""

import json
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", Path(__file__).resolve().parents[2]))
# The program itself, not libtool's wrapper script (LD_LIBRARY_PATH points at the build's library).
CLI = BUILDDIR / "tools" / ".libs" / "mooncake-segment"
MiB = 1 << 20

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"the CLI is not built ({CLI} is missing)")


def run_cli(args, limit, value):
    def set_limit():
        _, hard = resource.getrlimit(limit)
        resource.setrlimit(limit, (value, hard))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # as a shell leaves it: SIGXFSZ kills

    return subprocess.run(
        [str(CLI), *args], preexec_fn=set_limit, capture_output=True, text=True, timeout=120, check=False
    )


def test_demo_under_a_file_size_limit_exits_with_the_cause_not_sigxfsz():
    result = run_cli(["demo", "--ranks", "2", "--size", "64M"], resource.RLIMIT_FSIZE, 16 * MiB)
    assert result.returncode == 1, (result.returncode, result.stderr)  # 153 was SIGXFSZ through a shell
    assert "RLIMIT_FSIZE, ulimit -f" in result.stderr
    assert "ulimit -f unlimited" in result.stderr
    assert "killed" not in result.stderr and "status 153" not in result.stderr


def test_demo_where_every_rank_fails_create_prints_the_real_error():
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("ASan reserves terabytes of address space: RLIMIT_AS cannot be set under it")
    # Every rank, owner and peers, needs 1 GiB of address space: none gets it.
    result = run_cli(["demo", "--ranks", "3", "--size", "1G"], resource.RLIMIT_AS, 512 * MiB)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "complete needs a segment" not in result.stderr
    for rank in range(3):
        assert f"rank {rank}: create: " in result.stderr, result.stderr
    assert result.stderr.count("RLIMIT_AS, ulimit -v") == 3, result.stderr


def test_doctor_warns_about_a_file_size_limit_with_the_fix():
    limited = run_cli(["doctor", "--json"], resource.RLIMIT_FSIZE, 16 * MiB)
    finding = next(f for f in json.loads(limited.stdout)["findings"] if f["check"] == "RLIMIT_FSIZE")
    assert finding["status"] == "warn"
    assert "16.0 MiB" in finding["value"] and "ulimit -f unlimited" in finding["fix"]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY:
        pytest.skip("the hard RLIMIT_FSIZE of this test run is finite: the unlimited case cannot be shown")
    unlimited = run_cli(["doctor", "--json"], resource.RLIMIT_FSIZE, resource.RLIM_INFINITY)
    finding = next(f for f in json.loads(unlimited.stdout)["findings"] if f["check"] == "RLIMIT_FSIZE")
    assert finding["status"] == "ok" and finding["value"] == "unlimited"
