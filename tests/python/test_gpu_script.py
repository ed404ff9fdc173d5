# SPDX-License-Identifier: Apache-2.0
"""tests/gpu/gpu_check.py, the device run's script, exercised where there is no GPU.

A GPU run is rare and short (see DEVELOPERS.md): the script must not meet its
first bug there.  --smoke runs every step that needs no GPU (several ranks in
a gloo group, create in each mode, the CPU side of the sharing check, the
time until every rank is ready, the JSON report) against the fake driver.
"""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (the script's ranks are torch processes)")

FAKE = os.environ.get("FAKE_CUDA_LIBRARY", "")
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "gpu", "gpu_check.py")
pytestmark = pytest.mark.skipif(
    not FAKE or not os.path.exists(FAKE), reason="this build has no CUDA support (no cuda.h at configure time)"
)


def smoke(tmp_path, *args):
    log = tmp_path / "cuda.log"
    env = dict(os.environ, MOONCAKE_SEGMENT_CUDA_LIBRARY=FAKE, FAKE_CUDA_LOG=str(log))
    result = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--ranks", "3", "--size-gib", "0.005", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return result, log.read_text() if log.exists() else ""


def test_register_mode_shares_one_copy_between_three_ranks(tmp_path):
    result, log = smoke(tmp_path, "--modes", "register")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    mode = report["modes"]["register"]
    assert report["all_correct"] and mode["all_correct"], mode
    assert [r["rank"] for r in mode["ranks"]] == [0, 1, 2]
    assert {r["backend"] for r in mode["ranks"]} == {"memfd"}
    # Every rank pinned the pages itself: the cost VMM removes.
    assert sum(line.startswith("register ") for line in log.splitlines()) == 3, log
    assert 0 < mode["seconds_until_all_ready"] < 240
    assert "ready_vmm_over_register" not in report


def test_both_modes_report_vmm_against_registration(tmp_path):
    result, log = smoke(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    vmm = report["modes"]["vmm"]
    assert report["all_correct"] and vmm["all_correct"], vmm
    assert {r["backend"] for r in vmm["ranks"]} == {"cuda-vmm"}
    # Pinned once: one cuMemCreate by the owner, an import by each of the two others.
    lines = log.splitlines()
    assert sum(line.startswith("create ") for line in lines) == 1, log
    assert sum(line.startswith("import posix ") for line in lines) == 2, log
    assert report["ready_vmm_over_register"] == pytest.approx(
        vmm["seconds_until_all_ready"] / report["modes"]["register"]["seconds_until_all_ready"]
    )


def test_unknown_mode_is_refused_with_the_choices(tmp_path):
    result, _ = smoke(tmp_path, "--modes", "register,zerocopy")
    assert result.returncode == 2
    assert "unknown mode(s) zerocopy: choose from register, vmm" in result.stderr


SLOTS_SCRIPT = os.path.join(os.path.dirname(__file__), "..", "gpu", "slots_stream_check.py")


def test_slots_stream_script_hands_blocks_over_in_stream_order(tmp_path):
    log = tmp_path / "cuda.log"
    env = dict(os.environ, MOONCAKE_SEGMENT_CUDA_LIBRARY=FAKE, FAKE_CUDA_LOG=str(log))
    result = subprocess.run(
        [sys.executable, SLOTS_SCRIPT, "--smoke", "--blocks", "8", "--block-mib", "0.0625"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["all_correct"], report
    assert (report["stream_reader_wrong_blocks"], report["cpu_reader_wrong_blocks"]) == (0, 0)
    text = log.read_text()
    assert text.count("stream-write stream") == 8 and text.count("stream-waited stream") == 8
    assert "ERROR" not in text
