# SPDX-License-Identifier: Apache-2.0
"""host_register=True on CUDA from Python: against the fake driver here, for real on a GPU.

The fake driver (tests/fakes/cuda) stands in for libcuda.so.1 through
MOONCAKE_SEGMENT_CUDA_LIBRARY, in a subprocess so that this process's own
driver choice is not fixed by it.  The GPU tests run where torch sees CUDA
(tests/gpu/run.sh on a GPU machine) and skip elsewhere, saying why.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import run_ranks

FAKE = os.environ.get("FAKE_CUDA_LIBRARY", "")
needs_fake = pytest.mark.skipif(
    not FAKE or not os.path.exists(FAKE), reason="this build has no CUDA support (no cuda.h at configure time)"
)


def run_with_fake_driver(body, tmp_path, devices="2"):
    log = tmp_path / "cuda.log"
    env = dict(os.environ, MOONCAKE_SEGMENT_CUDA_LIBRARY=FAKE, FAKE_CUDA_LOG=str(log), FAKE_CUDA_DEVICES=devices)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True, timeout=60
    )
    return result, log.read_text() if log.exists() else ""


@needs_fake
def test_registered_segment_from_python(tmp_path):
    result, log = run_with_fake_driver(
        """
        import mooncake.shared_segment as s
        assert s.shared_segment_supported(host_register=True)
        seg = s.create_shared_segment("kv", {"k": {"count": 2, "shape": (1024,), "dtype": "uint8"}}, 1, 0,
                                      device_id=1, host_register=True)
        info = seg.info()
        assert info["registered"] and info["accelerator"] == "cuda", info
        assert seg.device_base == seg.base_addr()
        buffers = seg.buffers("k")
        buffers[1][0] = 7
        assert seg.buffers("k")[1][0] == 7
        del buffers
        try:
            import torch
        except ModuleNotFoundError:
            torch = None
        if torch is not None:
            t = seg.tensors("k")
            assert t[0].device.type == "cpu"
            del t
            if not torch.cuda.is_available():
                # A registered segment, but a torch without CUDA: refused, saying what is missing.
                try:
                    seg.tensors("k", device="cuda")
                except s.SharedSegmentError as exc:
                    assert str(exc) == "CUDA tensor views need a torch built with CUDA and a visible GPU", exc
                else:
                    raise AssertionError("tensors(device='cuda') gave views without CUDA in torch")
        seg.close()
        print("OK")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout
    assert "retain 1" in log and "register 1" in log and "unregister" in log and "release 1" in log
    assert "ERROR" not in log


@needs_fake
def test_no_device_means_the_upstream_capability_error(tmp_path):
    result, _ = run_with_fake_driver(
        """
        import mooncake.shared_segment as s
        assert not s.shared_segment_supported(host_register=True)
        try:
            s.create_shared_segment("kv", {"k": {"count": 1, "shape": (8,), "dtype": "uint8"}}, 1, 0,
                                    host_register=True)
        except s.SharedSegmentError as exc:
            print("ERROR:", exc)
        else:
            print("CREATED")
        """,
        tmp_path,
        devices="0",
    )
    assert "ERROR: This mooncake build cannot HostRegister shared-segment pages" in result.stdout, result.stderr


def test_cuda_views_need_registration():
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    from mooncake.shared_segment import SharedSegmentError, create_shared_segment

    seg = create_shared_segment("kv", {"k": {"count": 1, "shape": (8,), "dtype": torch.float16}}, 1, 0)
    with pytest.raises(SharedSegmentError, match="host_register=True"):
        seg.tensors("k", device="cuda")
    with pytest.raises(SharedSegmentError, match="only 'cpu', 'cuda' and 'npu'"):
        seg.tensors("k", device="xpu")
    with pytest.raises(SharedSegmentError, match="registered with Ascend"):
        seg.tensors("k", device="npu")
    seg.close()


def _torch_with_cuda():
    try:
        import torch
    except ModuleNotFoundError:
        return None
    return torch if torch.cuda.is_available() else None


gpu = pytest.mark.skipif(_torch_with_cuda() is None, reason="needs torch with CUDA and a GPU (tests/gpu/run.sh)")


@gpu
def test_registered_pages_are_pinned_and_reachable_from_the_gpu():
    torch = _torch_with_cuda()
    from mooncake.shared_segment import create_shared_segment

    seg = create_shared_segment(
        "gpu", {"k": {"count": 2, "shape": (1 << 20,), "dtype": torch.float32}}, 1, 0, device_id=0, host_register=True
    )
    host = seg.tensors("k")
    assert all(t.is_pinned() for t in host)
    host[1].fill_(3.0)
    on_gpu = host[1].to("cuda:0", non_blocking=True)
    torch.cuda.synchronize()
    assert bool((on_gpu == 3.0).all())
    device_views = seg.tensors("k", device="cuda")
    assert device_views[1].device.type == "cuda"
    device_views[1].add_(1.0)
    torch.cuda.synchronize()
    assert bool((host[1] == 4.0).all())  # the GPU wrote the shared host pages
    del host, on_gpu, device_views
    seg.close()


def fake_vmm_driver_available():
    """The fake driver has the VMM entry points (a build whose cuda.h declares them)."""
    if not FAKE or not os.path.exists(FAKE):
        return False
    import ctypes

    return hasattr(ctypes.CDLL(FAKE), "cuMemCreate")


needs_fake_vmm = pytest.mark.skipif(
    not fake_vmm_driver_available(), reason="this build has no CUDA VMM backend (cuda.h of CUDA 12.4 or later needed)"
)


@needs_fake_vmm
@pytest.mark.parametrize("owner", [0, 2])
def test_vmm_segment_gives_host_views_of_one_copy_in_every_rank(owner, fake_cuda_ranks, monkeypatch):
    pytest.importorskip("torch", reason="python3-torch is not installed; the gloo ranks need it")
    log = fake_cuda_ranks
    monkeypatch.setenv("FAKE_CUDA_REFUSE_REOPEN", "1")  # peers must get a duplicate, as from the real driver
    results = run_ranks("cuda_vmm", 3, owner=owner)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, f"rank {rank} failed: {r['stderr'][-2000:]}"
        assert r["saw_all"], f"rank {rank} did not see another rank's write"
        assert (r["backend"], r["accelerator"], r["same_address"]) == ("cuda-vmm", "cuda", True)
        assert r["default_error"] == (
            "CUDA tensor views need a torch built with CUDA and a visible GPU; "
            "tensors(block, device='cpu') gives host views of the same pages"
        )
    # One pinned copy for the group: three private copies would be 3x.
    total_pss, size = sum(r["pss"] for r in results), results[0]["total"]
    assert 0.95 * size <= total_pss <= 1.05 * size, (total_pss, size)
    text = log.read_text()
    lines = text.splitlines()
    assert sum(line.startswith("create ") for line in lines) == 1, text
    assert sum(line.startswith("import posix") for line in lines) == 2, text
    assert sum(line.startswith("access host rw") for line in lines) == 3, text
    # Every rank gave back what it took (the ranks exit without the fake's leak report).
    took = sum(line.startswith(("create ", "import ", "reserve ", "map ")) for line in lines)
    gave = sum(line.startswith(("release created", "release imported", "free-address ", "unmap ")) for line in lines)
    assert took == gave == 1 + 2 + 3 + 3, text  # create, imports, reservations, mappings
    assert "ERROR" not in text


@needs_fake_vmm
def test_vmm_cuda_views_hand_torch_the_device_address(tmp_path):
    """What can be checked without a GPU: torch is asked for CUDA tensors at the segment's device address."""
    pytest.importorskip("torch", reason="python3-torch is not installed")
    result, log = run_with_fake_driver(
        """
        import torch
        import mooncake.shared_segment as s
        seg = s.create_shared_segment("kv", {"k": {"count": 3, "shape": (4096,), "dtype": torch.float16}}, 1, 0,
                                      device_id=1, mmap=False)
        asked = []
        def as_tensor(obj, device=None):
            face = obj.__cuda_array_interface__
            asked.append((face["data"][0], face["shape"][0], str(device)))
            return torch.zeros(face["shape"][0], dtype=torch.uint8)  # stands in for the CUDA tensor
        torch.cuda.is_available = lambda: True
        torch.as_tensor = as_tensor
        views = seg.tensors("k")
        assert [v.shape for v in views] == [torch.Size([4096])] * 3
        stride = seg.stride
        assert asked == [(seg.device_base + i * stride, 8192, "cuda:1") for i in range(3)], (asked, seg.device_base)
        assert seg.device_base == seg.base_addr()
        del views
        seg.close()
        print("OK")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout
    assert "ERROR" not in log


def _torch_with_a_vmm_gpu():
    torch = _torch_with_cuda()
    if torch is None:
        return None
    from mooncake.shared_segment import shared_segment_supported

    return torch if shared_segment_supported(mmap=False) else None


@pytest.mark.skipif(
    _torch_with_a_vmm_gpu() is None,
    reason="needs torch with CUDA and a GPU whose driver supports host NUMA VMM (tests/gpu/run.sh)",
)
def test_vmm_pages_are_written_by_the_gpu_and_read_by_the_cpu():
    torch = _torch_with_cuda()
    from mooncake.shared_segment import create_shared_segment

    seg = create_shared_segment(
        "gpu-vmm", {"k": {"count": 2, "shape": (1 << 20,), "dtype": torch.float32}}, 1, 0, device_id=0, mmap=False
    )
    on_gpu = seg.tensors("k")
    assert on_gpu[1].device.type == "cuda"
    on_gpu[1].fill_(5.0)
    torch.cuda.synchronize()
    host = seg.tensors("k", device="cpu")
    assert bool((host[1] == 5.0).all())  # the GPU wrote the pinned host pages
    del on_gpu, host
    seg.close()
