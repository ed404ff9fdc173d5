# SPDX-License-Identifier: Apache-2.0
"""Upstream's focused tests (Mooncake #3625), re-expressed against our module.

A fake native class records the probe and create calls, as upstream's harness
does, so these pin the helper's own logic: the layout, the tag, the native
arguments, the capability errors and their order, and the release on a failed
completion.
"""

import gc
import inspect
import types

import pytest

import mooncake.shared_segment as shared_segment
from mooncake.shared_segment import SharedSegmentError, create_shared_segment

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


class FakeNative:
    """Stands in for mooncake._segment.SharedSegment."""

    supported_calls = []
    create_calls = []
    supported_result = True
    complete_error = None
    releases = 0

    def __init__(self):
        self.blobs = None
        self.released = False

    @classmethod
    def reset(cls):
        cls.supported_calls, cls.create_calls = [], []
        cls.supported_result, cls.complete_error, cls.releases = True, None, 0

    @staticmethod
    def supported(mmap=True, host_register=False, hugetlb=False):
        FakeNative.supported_calls.append((mmap, host_register, hugetlb))
        return FakeNative.supported_result

    @staticmethod
    def create(*args, **kwargs):
        FakeNative.create_calls.append((args, kwargs))
        return FakeNative(), b"\x00" * 256

    def complete(self, blobs):
        if FakeNative.complete_error:
            raise RuntimeError(FakeNative.complete_error)
        self.blobs = blobs

    def finish(self):
        pass

    def _release(self):
        if not self.released:
            self.released = True
            FakeNative.releases += 1

    def close(self):
        self._release()

    def __del__(self):
        self._release()

    def base_addr(self):
        return 0x1000

    def device_addr(self):
        return 0

    def size(self):
        return 24576

    def facts(self):
        return {"device_addr": 0, "accelerator": "", "backend": "memfd"}


@pytest.fixture
def fake(monkeypatch):
    FakeNative.reset()
    monkeypatch.setattr(shared_segment, "_native", types.SimpleNamespace(SharedSegment=FakeNative))
    return FakeNative


BLOCKS = {
    "z": {"count": 3, "shape": (4,), "dtype": torch.float16},
    "a": {"count": 2, "shape": (2, 3), "dtype": torch.float16},
}


def test_create_shared_segment_builds_sorted_layout_and_completes(fake):
    seg = create_shared_segment("cache", BLOCKS, world_size=1, rank_id=0, device_id=7)
    args, kwargs = fake.create_calls[0]
    # Upstream's eight arguments, exactly: hugetlb and numa_node only when asked for.
    assert args == ("cache|a:2:2x3:torch.float16:12;z:3:4:torch.float16:8", 24576, 1, 0, 0, 7, True, False)
    assert kwargs == {}
    assert seg._native.blobs == [b"\x00" * 256]
    assert seg._offsets == {"a": 0, "z": 4096}
    assert seg.stride == 8192
    assert seg.offset("z", 2) == 4096 + 2 * 8192
    assert seg.base_addr() == 0x1000
    assert seg.total_size() == 24576


def test_our_own_arguments_reach_the_native_only_when_asked_for(fake):
    create_shared_segment("cache", BLOCKS, world_size=1, rank_id=0, device_id=7, hugetlb=True, numa_node=0)
    args, kwargs = fake.create_calls[0]
    assert args[6:] == (True, False, True) and kwargs == {"numa_node": 0}
    assert fake.supported_calls == [(True, False, True)]


def test_hugetlb_is_the_tenth_argument_and_every_later_option_keyword_only(fake):
    # Upstream's #4152 adds hugetlb after host_register: both call styles reach the native create alike.
    create_shared_segment("cache", BLOCKS, 1, 0, 0, 7, None, True, False, True)
    create_shared_segment("cache", BLOCKS, 1, 0, 0, 7, None, True, False, hugetlb=True)
    assert fake.create_calls[0] == fake.create_calls[1]
    assert fake.create_calls[0][0][6:] == (True, False, True)
    assert fake.supported_calls == [(True, False, True)] * 2
    with pytest.raises(TypeError):
        create_shared_segment("cache", BLOCKS, 1, 0, 0, 7, None, True, False, False, None)
    parameters = list(inspect.signature(create_shared_segment).parameters.values())
    assert [p.name for p in parameters[:10]][-2:] == ["host_register", "hugetlb"]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters[:10])
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters[10:])


def test_tag_is_the_same_for_torch_numpy_and_string_dtypes(fake):
    numpy = pytest.importorskip("numpy", reason="python3-numpy is not installed")
    for dtype in (torch.float16, numpy.float16, "float16", "half", "torch.float16"):
        blocks = {"z": {"count": 3, "shape": (4,), "dtype": dtype}, "a": {"count": 2, "shape": (2, 3), "dtype": dtype}}
        create_shared_segment("cache", blocks, world_size=1, rank_id=0, device_id=7)
    tags = {call[0][0] for call in fake.create_calls}
    assert tags == {"cache|a:2:2x3:torch.float16:12;z:3:4:torch.float16:8"}


@pytest.mark.parametrize(
    "mmap, host_register, message",
    [
        (False, False, "This mooncake build has no VMM backend for shared segments"),
        (True, True, "This mooncake build cannot HostRegister shared-segment pages"),
        (True, False, "This mooncake build has no mmap shared-segment backend"),
    ],
)
def test_create_shared_segment_reports_missing_native_capabilities(fake, mmap, host_register, message):
    fake.supported_result = False
    with pytest.raises(SharedSegmentError, match=message):
        create_shared_segment("cache", BLOCKS, 1, 0, mmap=mmap, host_register=host_register)
    assert fake.supported_calls == [(mmap, host_register, False)]
    assert fake.create_calls == []


def test_host_registration_requires_mmap(fake):
    with pytest.raises(SharedSegmentError, match="requires mmap=True"):
        create_shared_segment("cache", BLOCKS, 1, 0, mmap=False, host_register=True)
    assert fake.supported_calls == []


def test_failed_completion_releases_native_segment(fake):
    fake.complete_error = "mapping failed"
    with pytest.raises(SharedSegmentError, match="mapping failed"):
        create_shared_segment("cache", BLOCKS, 1, 0)
    gc.collect()
    assert fake.releases == 1


@pytest.mark.parametrize(
    "blocks, message",
    [
        ({}, "Shared segment needs at least one block"),
        ({"a": {"count": 1, "shape": (2,)}}, "Block 'a' needs count, shape and dtype"),
        ({"a": {"count": 1, "shape": 5, "dtype": "int8"}}, "Block 'a' needs count, shape and dtype"),
        ({"a": {"count": 0, "shape": (2,), "dtype": "int8"}}, "Block 'a' needs a positive count"),
        ({"a": {"count": 1, "shape": (), "dtype": "int8"}}, "Block 'a' needs a positive shape"),
        ({"a": {"count": 1, "shape": (2, 0), "dtype": "int8"}}, "Block 'a' needs a positive shape"),
        ({"a": {"count": "x", "shape": (2,), "dtype": "int8"}}, "Block 'a' needs integer count"),
        ({"a": {"count": 1, "shape": (2,), "dtype": "float128"}}, "unsupported dtype 'float128'"),
        ({"a|b": {"count": 1, "shape": (2,), "dtype": "int8"}}, "must be a non-empty str without"),
    ],
)
def test_bad_declarations_are_shared_segment_errors_before_any_native_call(fake, blocks, message):
    with pytest.raises(SharedSegmentError, match=message):
        create_shared_segment("cache", blocks, 1, 0)
    assert fake.create_calls == []


def test_comm_group_is_required_when_world_size_above_one(fake):
    with pytest.raises(SharedSegmentError, match="comm_group is required when world_size > 1"):
        create_shared_segment("cache", BLOCKS, 2, 0)
    assert fake.create_calls == []


def test_unknown_block_is_an_error(fake):
    seg = create_shared_segment("cache", BLOCKS, 1, 0)
    with pytest.raises(SharedSegmentError, match="Unknown shared segment block 'x'"):
        seg.tensors("x")
    with pytest.raises(SharedSegmentError, match="Unknown shared segment block 'x'"):
        seg.buffers("x")


def test_public_surface_matches_upstream():
    assert shared_segment.__all__ == [
        "SharedSegment",
        "SharedSegmentError",
        "create_shared_segment",
        "shared_segment_supported",
    ]
    assert issubclass(SharedSegmentError, RuntimeError)
    assert shared_segment.alignment == 4096
    assert isinstance(shared_segment.shared_segment_supported(), bool)
