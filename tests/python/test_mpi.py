# SPDX-License-Identifier: Apache-2.0
"""Three ranks under mpirun share a segment through an mpi4py communicator."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

MPIRUN = shutil.which("mpirun")


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found: install openmpi-bin and python3-mpi4py")
def test_three_mpi_ranks_share_a_segment():
    pytest.importorskip("mpi4py", reason="python3-mpi4py is not installed")
    # CI runs as root; Open MPI refuses that unless told it is deliberate.
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [MPIRUN, "-n", "3", "--oversubscribe", sys.executable, "-m", "mpi4py", str(HERE / "mpi_worker.py")]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # mpirun forwards the ranks' output interleaved, lines may run together.
    verdicts = sorted(re.findall(r"rank (\d+): (ok|FAILED)", result.stdout))
    assert verdicts == [(str(r), "ok") for r in range(3)], result.stdout + result.stderr
