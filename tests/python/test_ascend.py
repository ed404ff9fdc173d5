# SPDX-License-Identifier: Apache-2.0
"""host_register=True and mmap=False on Ascend from Python, against the fake AscendCL runtime.

The fake (tests/fakes/ascend) stands in for libascendcl.so through
MOONCAKE_SEGMENT_ASCEND_LIBRARY, in subprocesses.  As upstream, the views of
an Ascend-registered or VMM segment are NPU tensors built with torch_npu, and
without torch_npu the error says so.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import run_ranks

FAKE = os.environ.get("FAKE_ASCEND_LIBRARY", "")
pytestmark = pytest.mark.skipif(
    not FAKE or not os.path.exists(FAKE),
    reason="this build has no Ascend support (configure --with-ascend=tests/fakes/ascend to test it)",
)


def test_registered_segment_and_the_torch_npu_error(tmp_path):
    log = tmp_path / "acl.log"
    env = dict(
        os.environ,
        MOONCAKE_SEGMENT_ASCEND_LIBRARY=FAKE,
        MOONCAKE_SEGMENT_CUDA_LIBRARY="/nonexistent/libcuda.so.1",
        FAKE_ACL_LOG=str(log),
        FAKE_ACL_CURRENT_DEVICE="0",
    )
    body = """
        import mooncake.shared_segment as s
        assert s.shared_segment_supported(host_register=True)
        seg = s.create_shared_segment("kv", {"k": {"count": 2, "shape": (512,), "dtype": "float16"}}, 1, 0,
                                      device_id=0, host_register=True)
        info = seg.info()
        assert info["registered"] and info["accelerator"] == "ascend", info
        assert seg.device_base and seg.device_base != seg.base_addr()
        try:
            import torch  # noqa: F401
        except ModuleNotFoundError:
            torch = None
        if torch is not None:
            try:
                import torch_npu  # noqa: F401
            except ModuleNotFoundError:
                # Without torch_npu the NPU views must be refused, with the package named.
                try:
                    seg.tensors("k")
                except s.SharedSegmentError as exc:
                    assert str(exc) == "torch_npu is required to expose device-mapped shared-segment tensors", exc
                else:
                    raise AssertionError("tensors() gave NPU views without torch_npu")
            host = seg.tensors("k", device="cpu")
            assert host[0].device.type == "cpu"
            del host
        seg.close()
        print("OK")
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout
    text = log.read_text()
    assert "register 1" in text and "unregister" in text and "ERROR" not in text


def fake_env(monkeypatch, log):
    monkeypatch.setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", FAKE)
    monkeypatch.setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    monkeypatch.setenv("FAKE_ACL_LOG", str(log))
    monkeypatch.setenv("FAKE_ACL_DEVICES", "4")


def test_vmm_segment_shared_by_a_gloo_group(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    log = tmp_path / "acl.log"
    fake_env(monkeypatch, log)
    results = run_ranks("vmm", 3, owner=1)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, (rank, r["stderr"])
        assert r["saw_owner"] and r["same_address"] and r["backend"] == "ascend-vmm", r
        assert r["npu_error"] == "torch_npu is required to expose device-mapped shared-segment tensors"
    text = log.read_text()
    assert "ERROR" not in text, text
    lines = text.splitlines()
    assert sum(line.startswith("malloc ") for line in lines) == 1
    assert sum(line.startswith("import ") for line in lines) == 2
    assert sum(line.startswith("free ") for line in lines) == 3
    assert sorted(line for line in lines if line.startswith("access ")) == [
        f"access logical device {d}" for d in range(3)
    ]


def test_vmm_supported_follows_the_runtime(tmp_path, monkeypatch):
    fake_env(monkeypatch, tmp_path / "acl.log")
    probe = "import mooncake.shared_segment as s; print(s.shared_segment_supported(mmap=False))"
    run = [sys.executable, "-c", probe]
    assert subprocess.run(run, capture_output=True, text=True, timeout=60).stdout.strip() == "True"
    monkeypatch.setenv("FAKE_ACL_DEVICES", "0")
    assert subprocess.run(run, capture_output=True, text=True, timeout=60).stdout.strip() == "False"
