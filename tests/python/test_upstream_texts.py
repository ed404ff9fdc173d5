# SPDX-License-Identifier: Apache-2.0
"""Every error text upstream has (shared/UPSTREAM.md) leads ours, each triggered for real.

Callers written for upstream match on its messages (``"requires mmap=True"``,
``"InvalidArgument: Shared segment declaration of rank 1 ..."``), so where
upstream has a message for a failure, ours starts with it verbatim, code
prefix included, and our detail (numbers, the rank, the fix) follows.  Each
case below makes the failure happen with the real native module: the Python
helper, the native class (upstream's ``mooncake.engine.SharedSegment``, ours
``mooncake._segment.SharedSegment``), the fake CUDA/Ascend runtimes for the
accelerator cases, real gloo ranks for the consensus.

Two kinds of text are not plain ``startswith`` checks, each said where it is:
- DIFFERENCES: upstream texts with no counterpart here, or deliberately
  changed; each must be listed with its reason in doc/upstream-differences.md.
- Two helper branches no real host reaches (an mmap-less build, a native create
  returning nothing) run with the probe or the native class stubbed.
"""

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mooncake import _segment, shared_segment
from mooncake.shared_segment import SharedSegmentError, create_shared_segment

from conftest import run_ranks

BLOCK = {"count": 2, "shape": (1024,), "dtype": "uint8"}
BLOCKS = {"k": BLOCK}
Native = _segment.SharedSegment
DIFFERENCES_DOC = Path(__file__).resolve().parents[2] / "doc" / "upstream-differences.md"
FAKE_ASCEND = os.environ.get("FAKE_ASCEND_LIBRARY", "")
FAKE_CUDA = os.environ.get("FAKE_CUDA_LIBRARY", "")


def raised(call):
    with pytest.raises(Exception) as info:
        call()
    return info.value


def assert_leads(exc, upstream_type, upstream_text):
    assert isinstance(exc, upstream_type), f"{type(exc).__name__} is not a {upstream_type.__name__}: {exc}"
    assert str(exc).startswith(upstream_text), f"{str(exc)!r} does not start with {upstream_text!r}"


def run_python(body, **env):
    """Run @body in a fresh interpreter with @env; it prints one JSON line, returned parsed."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# What a subprocess body uses to report the exception a call raised (indented as the bodies are).
REPORT = """
        import json
        def report(call):
            try:
                call()
            except Exception as exc:
                print(json.dumps({"types": [c.__name__ for c in type(exc).__mro__], "text": str(exc)}))
            else:
                print(json.dumps({"types": [], "text": "no exception"}))
"""


def assert_reported(report, upstream_type, upstream_text):
    assert upstream_type.__name__ in report["types"], report
    assert report["text"].startswith(upstream_text), f"{report['text']!r} does not start with {upstream_text!r}"


# ---- The Python helper (UPSTREAM.md 1.2-1.8) ----


def test_host_register_requires_mmap():
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 1, 0, mmap=False, host_register=True))
    assert_leads(exc, SharedSegmentError, "host_register requires mmap=True")


def test_no_vmm_backend(monkeypatch):
    monkeypatch.setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "/nonexistent/libascendcl.so")
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 1, 0, mmap=False))
    assert_leads(exc, SharedSegmentError, "This mooncake build has no VMM backend for shared segments")


def test_cannot_host_register(monkeypatch):
    monkeypatch.setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    monkeypatch.setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "/nonexistent/libascendcl.so")
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 1, 0, host_register=True))
    assert_leads(exc, SharedSegmentError, "This mooncake build cannot HostRegister shared-segment pages")


def test_no_mmap_backend(monkeypatch):
    # Every Linux the library builds on has memfd, so the probe is stubbed to reach this branch.
    monkeypatch.setattr(shared_segment, "shared_segment_supported", lambda **kwargs: False)
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 1, 0))
    assert_leads(exc, SharedSegmentError, "This mooncake build has no mmap shared-segment backend")


@pytest.mark.parametrize(
    "spec",
    [
        {"shape": (4,), "dtype": "uint8"},  # a missing key
        {"count": 1, "shape": 4, "dtype": "uint8"},  # a shape that is not iterable
    ],
    ids=["missing-key", "shape-not-iterable"],
)
def test_block_needs_count_shape_and_dtype(spec):
    exc = raised(lambda: create_shared_segment("c", {"b": spec}, 1, 0))
    assert_leads(exc, SharedSegmentError, "Block 'b' needs count, shape and dtype")


def test_block_needs_a_positive_count():
    exc = raised(lambda: create_shared_segment("c", {"b": dict(BLOCK, count=0)}, 1, 0))
    assert_leads(exc, SharedSegmentError, "Block 'b' needs a positive count")


@pytest.mark.parametrize("shape", [(), (4, 0)], ids=["empty", "zero-dim"])
def test_block_needs_a_positive_shape(shape):
    exc = raised(lambda: create_shared_segment("c", {"b": dict(BLOCK, shape=shape)}, 1, 0))
    assert_leads(exc, SharedSegmentError, "Block 'b' needs a positive shape")


def test_needs_at_least_one_block():
    exc = raised(lambda: create_shared_segment("c", {}, 1, 0))
    assert_leads(exc, SharedSegmentError, "Shared segment needs at least one block")


def test_comm_group_is_required_when_world_size_above_one():
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 2, 0))
    assert_leads(exc, SharedSegmentError, "comm_group is required when world_size > 1")


def test_world_size_zero_without_a_group():
    # Upstream's native create refuses 0, then its consensus finds no group.
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 0, 0))
    assert_leads(exc, SharedSegmentError, "comm_group is required when world_size > 1")


@pytest.mark.parametrize(
    "block",
    [
        {"count": 2**35, "shape": (4096,), "dtype": "uint8"},
        {"count": 1, "shape": (2**24, 2**23), "dtype": "uint8"},
    ],
    ids=["count", "shape"],
)
def test_a_layout_above_the_largest_segment(block):
    # Upstream's native size check, reached with the layout's total.
    exc = raised(lambda: create_shared_segment("c", {"k": block}, 1, 0))
    assert_leads(exc, SharedSegmentError, "InvalidArgument: Shared segment size must be in (0, 70368744177664]")


def test_create_returned_no_segment(monkeypatch):
    # Defensive in upstream too: the real native create returns a segment or raises, so it is stubbed.
    class NoSegment:
        supported = staticmethod(_segment.SharedSegment.supported)

        @staticmethod
        def create(*args, **kwargs):
            return None, b""

    monkeypatch.setattr(shared_segment, "_native", type("Native", (), {"SharedSegment": NoSegment}))
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 1, 0))
    assert_leads(exc, SharedSegmentError, "Shared segment create returned no segment")


def test_unknown_block():
    seg = create_shared_segment("c", BLOCKS, 1, 0)
    try:
        assert_leads(raised(lambda: seg.tensors("x")), SharedSegmentError, "Unknown shared segment block 'x'")
        assert_leads(raised(lambda: seg.buffers("x")), SharedSegmentError, "Unknown shared segment block 'x'")
    finally:
        seg.close()


def test_a_native_error_reaches_a_single_rank_verbatim():
    # world_size == 1: upstream raises SharedSegmentError(str(RuntimeError)), code prefix and all.
    exc = raised(lambda: create_shared_segment("c", BLOCKS, 1, 3))
    assert_leads(exc, SharedSegmentError, "InvalidArgument: Shared segment rank_id")


def test_tensors_without_torch_names_the_missing_package():
    # A deliberate difference: upstream's fix ("install mooncake-transfer-engine[hardware]") would
    # install upstream's wheel, whose mooncake package hides ours; the text up to the fix is upstream's.
    from test_no_torch import run_without_torch

    result = run_without_torch(
        REPORT
        + """
        import mooncake.shared_segment as s
        seg = s.create_shared_segment("c", {"k": {"count": 1, "shape": (8,), "dtype": "uint8"}}, 1, 0)
        report(lambda: seg.tensors("k"))
        """
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert_reported(report, SharedSegmentError, "PyTorch is required to create shared-segment tensor views; install ")
    assert "mooncake-transfer-engine" not in report["text"]


needs_fake_ascend = pytest.mark.skipif(
    not FAKE_ASCEND or not os.path.exists(FAKE_ASCEND),
    reason="this build has no Ascend support (configure --with-ascend=tests/fakes/ascend to test it)",
)


def ascend_env(tmp_path, current_device="0"):
    return {
        "MOONCAKE_SEGMENT_ASCEND_LIBRARY": FAKE_ASCEND,
        "MOONCAKE_SEGMENT_CUDA_LIBRARY": "/nonexistent/libcuda.so.1",
        "FAKE_ACL_LOG": str(tmp_path / "acl.log"),
        "FAKE_ACL_DEVICES": "2",
        "FAKE_ACL_CURRENT_DEVICE": current_device,
    }


@needs_fake_ascend
def test_torch_npu_is_required_for_device_views(tmp_path):
    pytest.importorskip("torch", reason="python3-torch is not installed; NPU views are torch tensors")
    report = run_python(
        REPORT
        + """
        import sys
        sys.modules["torch_npu"] = None  # absent, whatever is installed
        import mooncake.shared_segment as s
        seg = s.create_shared_segment("c", {"k": {"count": 1, "shape": (8,), "dtype": "uint8"}}, 1, 0,
                                      device_id=0, host_register=True)
        report(lambda: seg.tensors("k"))
        """,
        **ascend_env(tmp_path),
    )
    assert_reported(report, SharedSegmentError, "torch_npu is required to expose device-mapped shared-segment tensors")


@needs_fake_ascend
def test_a_broken_torch_npu_is_required_for_device_views(tmp_path):
    # Installed but failing to load (its CANN libraries missing): any ImportError, as upstream.
    pytest.importorskip("torch", reason="python3-torch is not installed; NPU views are torch tensors")
    report = run_python(
        REPORT
        + """
        import importlib.abc, sys

        class BrokenTorchNpu(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch_npu":
                    raise ImportError("libascend_hal.so: cannot open shared object file")
                return None

        sys.modules.pop("torch_npu", None)
        sys.meta_path.insert(0, BrokenTorchNpu())
        import mooncake.shared_segment as s
        seg = s.create_shared_segment("c", {"k": {"count": 1, "shape": (8,), "dtype": "uint8"}}, 1, 0,
                                      device_id=0, host_register=True)
        report(lambda: seg.tensors("k"))
        """,
        **ascend_env(tmp_path),
    )
    assert_reported(report, SharedSegmentError, "torch_npu is required to expose device-mapped shared-segment tensors")
    assert "libascend_hal.so" in report["text"]


# ---- The consensus over a real gloo group (UPSTREAM.md 1.5, 1.6) ----

needs_torch = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="python3-torch is not installed; gloo needs it"
)


def one_error(results):
    errors = {r.get("error") for r in results}
    assert all(r["returncode"] == 0 for r in results), [r["stderr"][-2000:] for r in results]
    assert len(errors) == 1 and None not in errors, errors
    return errors.pop()


@needs_torch
def test_declaration_mismatch_in_a_group():
    # Upstream's complete consensus would say "... complete failed: rank 0: InvalidArgument: Shared
    # segment declaration of rank 1 differs ..."; ours finds it at create, naming the odd rank.
    message = one_error(run_ranks("mismatch", 2, odd_rank=1))
    assert message.startswith(
        "Shared segment create failed: rank 1: "
        "InvalidArgument: Shared segment declaration of rank 1 differs from the local one"
    ), message


@needs_torch
def test_alias_conflict_in_a_group():
    message = one_error(run_ranks("alias", 2, mode="conflict", odd_rank=1))
    assert message.startswith(
        "Shared segment create failed: rank 1: pass only comm_group; tp_group is a deprecated alias of comm_group"
    ), message


@needs_torch
def test_a_one_rank_group_raises_upstreams_text_verbatim():
    # vLLM passes its group at TP=1 too; upstream ignores it when world_size == 1 and raises verbatim.
    assert one_error(run_ranks("local_raise", 1, odd_rank=0)).startswith("Block 'k' needs a positive count")
    assert one_error(run_ranks("alias", 1, mode="conflict", odd_rank=0)).startswith(
        "pass only comm_group; tp_group is a deprecated alias of comm_group"
    )


# ---- The native class (UPSTREAM.md 2, 3.2, 3.3) ----


def test_native_world_size_must_not_be_zero():
    assert_leads(
        raised(lambda: Native.create("x", 4096, 0, 0)),
        RuntimeError,
        "InvalidArgument: Shared segment world_size must not be zero",
    )


def test_native_rank_and_owner_below_world_size():
    assert_leads(
        raised(lambda: Native.create("x", 4096, 1, 1)),
        RuntimeError,
        "InvalidArgument: Shared segment rank_id and owner_rank must be below world_size",
    )


def test_native_host_register_requires_mmap():
    exc = raised(lambda: Native.create("x", 4096, 1, 0, 0, 0, False, True))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment host_register requires mmap=true")


@pytest.mark.parametrize("size", [0, 2**46 + 1])
def test_native_size_bounds(size):
    exc = raised(lambda: Native.create("x", size, 1, 0))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment size must be in (0, 70368744177664]")


def test_native_no_vmm_backend(monkeypatch):
    monkeypatch.setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "/nonexistent/libascendcl.so")
    exc = raised(lambda: Native.create("x", 4096, 1, 0, 0, 0, False, False))
    assert_leads(exc, RuntimeError, "NotImplemented: This build has no VMM backend for shared segments")


@pytest.fixture
def pair():
    """Owner (rank 0) and peer (rank 1) of one declaration, and their blobs; closed afterwards."""
    owner, owner_blob = Native.create("x", 4096, 2, 0)
    peer, peer_blob = Native.create("x", 4096, 2, 1)
    yield owner, peer, owner_blob, peer_blob
    owner.close()
    peer.close()


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def forged(blob, **fields):
    """@blob with fields (doc/wire-format.md offsets) rewritten and its checksum made valid again."""
    layout = {"backend": (6, "<H"), "flags": (20, "<I"), "alloc": (40, "<Q"), "handle_len": (80, "<H")}
    data = bytearray(blob)
    for name, value in fields.items():
        offset, fmt = layout[name]
        struct.pack_into(fmt, data, offset, value)
    if fields.get("handle_len") == 0:
        data[88:216] = bytes(128)
    struct.pack_into("<Q", data, 248, fnv1a64(bytes(data[:248])))
    return bytes(data)


def test_native_one_blob_per_rank(pair):
    owner, _, owner_blob, _ = pair
    assert_leads(
        raised(lambda: owner.complete([owner_blob])),
        RuntimeError,
        "InvalidArgument: Shared segment expects one blob per rank, got 1",
    )


def test_native_blob_length(pair):
    owner, _, owner_blob, peer_blob = pair
    exc = raised(lambda: owner.complete([owner_blob, peer_blob[:160]]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment blob has an unexpected length")


def test_native_blob_magic(pair):
    owner, _, owner_blob, peer_blob = pair
    bad = bytes([peer_blob[0] ^ 1]) + peer_blob[1:]
    exc = raised(lambda: owner.complete([owner_blob, bad]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment blob magic mismatch")


def test_native_blob_version(pair):
    owner, _, owner_blob, peer_blob = pair
    # A rank of the release before (blob version 1) is told to run the same library.
    bad = peer_blob[:4] + struct.pack("<H", 1) + peer_blob[6:]
    exc = raised(lambda: owner.complete([owner_blob, bad]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment blob version mismatch, peers run different builds")
    assert "format version 1, this build speaks 2" in str(exc), exc
    assert "all ranks must run the same libmooncake-segment" in str(exc), exc


def test_native_blob_oversized_handle(pair):
    _, peer, owner_blob, peer_blob = pair
    exc = raised(lambda: peer.complete([forged(owner_blob, handle_len=129), peer_blob]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment blob declares an oversized handle")


def test_native_blob_rank_id(pair):
    owner, _, owner_blob, peer_blob = pair
    exc = raised(lambda: owner.complete([peer_blob, owner_blob]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment blob of rank 0 carries a different rank id")


def test_native_backend_differs(pair):
    _, peer, owner_blob, peer_blob = pair
    exc = raised(lambda: peer.complete([forged(owner_blob, backend=2), peer_blob]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment backend of rank 0 differs")


def test_native_declaration_differs(pair):
    _, _, owner_blob, _ = pair
    other, other_blob = Native.create("y", 4096, 2, 1)
    try:
        exc = raised(lambda: other.complete([owner_blob, other_blob]))
    finally:
        other.close()
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment declaration of rank 0 differs from the local one")


def test_native_allocation_size_differs(pair):
    _, peer, owner_blob, peer_blob = pair
    alloc = struct.unpack_from("<Q", owner_blob, 40)[0]
    exc = raised(lambda: peer.complete([forged(owner_blob, alloc=2 * alloc), peer_blob]))
    assert_leads(
        exc, RuntimeError, "InvalidArgument: Shared segment allocation size of rank 0 differs from the local one"
    )


def test_native_owner_exported_no_handle(pair):
    _, peer, owner_blob, peer_blob = pair
    flags = struct.unpack_from("<I", owner_blob, 20)[0] & ~8
    exc = raised(lambda: peer.complete([forged(owner_blob, flags=flags, handle_len=0), peer_blob]))
    assert_leads(exc, RuntimeError, "InvalidArgument: Shared segment owner rank did not export a handle")


def test_native_complete_twice():
    seg, blob = Native.create("x", 4096, 1, 0)
    seg.complete([blob])
    try:
        exc = raised(lambda: seg.complete([blob]))
    finally:
        seg.close()
    assert_leads(exc, RuntimeError, "InvalidArgument: SharedSegment::Complete has already been called")


# ---- Ascend host registration and VMM, against the fake runtime (UPSTREAM.md 4.4, 4.5) ----


@needs_fake_ascend
def test_host_register_on_another_device(tmp_path):
    report = run_python(
        REPORT
        + """
        from mooncake._segment import SharedSegment
        report(lambda: SharedSegment.create("x", 4096, 1, 0, 0, 1, True, True))
        """,
        **ascend_env(tmp_path, current_device="0"),
    )
    assert_reported(
        report, RuntimeError, "InvalidArgument: Shared segment mmap must run on device 1, but the current device is 0"
    )


@needs_fake_ascend
def test_vmm_owner_on_another_device(tmp_path):
    report = run_python(
        REPORT
        + """
        from mooncake._segment import SharedSegment
        report(lambda: SharedSegment.create("x", 4096, 1, 0, 0, 1, False, False))
        """,
        **ascend_env(tmp_path, current_device="0"),
    )
    assert_reported(
        report, RuntimeError, "InvalidArgument: Shared segment owner must run on device 1, but the current device is 0"
    )


@needs_fake_ascend
def test_host_register_failure(tmp_path):
    env = dict(ascend_env(tmp_path), FAKE_ACL_FAIL_REGISTER_AT="1")
    report = run_python(
        REPORT
        + """
        from mooncake._segment import SharedSegment
        report(lambda: SharedSegment.create("x", 4096, 1, 0, 0, 0, True, True))
        """,
        **env,
    )
    assert_reported(report, RuntimeError, "Memory: aclrtHostRegister failed for shared segment mmap, ret ")


# ---- Upstream texts with no counterpart here, or changed on purpose ----

DIFFERENCES = {
    # The torch requirement moved from create to tensors(), and the fix names our packages.
    "PyTorch is required to create shared-segment tensor views; install mooncake-transfer-engine[hardware]",
    # Host registration works with CUDA too, so a build without Ascend is not the reason.
    "Shared segment mmap needs Ascend for HostRegister",
    # The POSIX shm backend (upstream before #3952) does not exist here.
    "shm_open failed",
    "owner handle is not a POSIX shm name",
    # Peers open the owner's memfd through pidfd_getfd or /proc, validated by the blob's fields.
    "Shared segment owner handle is not a memfd /proc/<pid>/fd path",
    "open memfd handle failed",
    "Shared segment import needs a reserved address window",
    "import size does not match the reservation",
    "owner handle has an unexpected length",
    # No backend's handle can outgrow the blob.
    "Shared segment handle of N bytes does not fit in a blob",
    "SharedSegment::Complete needs a segment returned by Create",
    # The Ascend VMM backend uses AscendCL's VMM API, not HiXL/adxl, and no fixed-address reserve.
    "AdxlEngine::MallocMem failed",
    "AdxlEngine::ExportToShareableHandle failed",
    "Shared segments need an adxl runtime that supports ExportToShareableHandle",
    "aclrtReserveMemAddressNoUCMemory failed",
    "aclrtReserveMemAddress failed",
}


@pytest.mark.parametrize("text", sorted(DIFFERENCES))
def test_each_difference_is_documented(text):
    doc = " ".join(DIFFERENCES_DOC.read_text().split())  # as rendered: line breaks are spaces
    assert text in doc, f"{text!r} is not in {DIFFERENCES_DOC}"
