# SPDX-License-Identifier: Apache-2.0
"""host_register=True on Ascend from Python, against the fake AscendCL runtime.

The fake (tests/fakes/ascend) stands in for libascendcl.so through
MOONCAKE_SEGMENT_ASCEND_LIBRARY, in a subprocess.  As upstream, the views of
an Ascend-registered segment are NPU tensors built with torch_npu, and
without torch_npu the error says so.
"""

import os
import subprocess
import sys
import textwrap

import pytest

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
                seg.tensors("k")
            except s.SharedSegmentError as exc:
                print("NPU VIEWS:", exc)
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
    if "NPU VIEWS" in result.stdout:
        assert "torch_npu is required to expose device-mapped shared-segment tensors" in result.stdout
    text = log.read_text()
    assert "register 1" in text and "unregister" in text and "ERROR" not in text
