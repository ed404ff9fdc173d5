# SPDX-License-Identifier: Apache-2.0
"""The native module mooncake._segment against the real library, in one process."""

import errno
import gc
import threading

import pytest

from conftest import count_fds, count_mappings
from mooncake import _segment
from mooncake._segment import SegmentError, SharedSegment

SIZE = 3 * 1024 * 1024 + 4096


def make_pair(size=SIZE, name="pair"):
    owner, owner_blob = SharedSegment.create(name, size, 2, 0)
    peer, peer_blob = SharedSegment.create(name, size, 2, 1)
    return owner, peer, [owner_blob, peer_blob]


def test_create_returns_a_segment_and_a_fixed_size_blob(no_leaks):
    seg, blob = SharedSegment.create("one", SIZE, 1, 0)
    assert isinstance(blob, bytes) and len(blob) == _segment.BLOB_SIZE == 256
    assert blob[:4] == b"MCSG"
    assert not seg.ready()
    seg.complete([blob])
    assert seg.ready()
    assert seg.size() == SIZE
    assert seg.alloc_size() >= SIZE
    assert seg.base_addr() != 0
    assert seg.device_addr() == 0
    info = seg.info()
    assert info["owner"] and info["resident_bytes"] == info["alloc_size"]
    seg.finish()
    seg.close()
    assert seg.closed
    seg.close()  # idempotent


def test_two_ranks_in_one_process_share_pages_both_ways(no_leaks):
    owner, peer, blobs = make_pair()
    owner.complete(blobs)
    peer.complete(blobs)
    assert owner.base_addr() != peer.base_addr()
    a, b = memoryview(owner), memoryview(peer)
    a[0] = 7
    a[SIZE - 1] = 9
    assert (b[0], b[SIZE - 1]) == (7, 9)
    b[4096:4100] = b"peer"
    assert bytes(a[4096:4100]) == b"peer"
    del a, b
    owner.close()
    peer.close()


def test_close_refuses_while_a_view_is_alive_and_memory_stays_valid():
    seg, blob = SharedSegment.create("views", SIZE, 1, 0)
    seg.complete([blob])
    view = seg.view(100, 10)
    assert len(view) == 10 and seg.exports == 1
    with pytest.raises(BufferError, match="1 exported buffer"):
        seg.close()
    view[:] = b"0123456789"
    assert bytes(memoryview(seg)[100:110]) == b"0123456789"
    del view
    gc.collect()
    assert seg.exports == 0
    seg.close()
    with pytest.raises(BufferError, match="closed"):
        memoryview(seg)
    with pytest.raises(ValueError, match="closed"):
        seg.base_addr()


def test_view_bounds_are_checked():
    seg, blob = SharedSegment.create("bounds", SIZE, 1, 0)
    seg.complete([blob])
    assert len(seg.view()) == SIZE
    assert len(seg.view(SIZE)) == 0
    with pytest.raises(ValueError, match="offset must be <="):
        seg.view(SIZE + 1)
    with pytest.raises(ValueError, match="nbytes must be <="):
        seg.view(SIZE - 10, 11)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        seg.view(-1)
    seg.close()


def test_buffers_need_a_complete_segment():
    owner, peer, blobs = make_pair()
    with pytest.raises(BufferError, match="not complete"):
        memoryview(peer)
    owner.close()
    peer.close()


def test_library_errors_carry_errno_and_message():
    with pytest.raises(SegmentError) as info:
        SharedSegment.create("x", 0, 1, 0)
    assert isinstance(info.value, RuntimeError)
    assert info.value.errno == errno.EINVAL
    assert "size must be in (0, 70368744177664]" in str(info.value)
    owner, peer, blobs = make_pair()
    peer.complete(blobs)
    with pytest.raises(SegmentError) as info:
        peer.complete(blobs)
    assert info.value.errno == errno.EALREADY
    owner.close()
    peer.close()


@pytest.mark.parametrize(
    "args, exc, message",
    [
        (("x", -1, 1, 0), ValueError, "size must be >= 0, got -1"),
        (("x", 2**64, 1, 0), ValueError, "size must be <= 18446744073709551615"),
        (("x", 4096, 2**32, 0), ValueError, "world_size must be <= 4294967295"),
        (("x", 4096, 1, -1), ValueError, "rank_id must be >= 0"),
        (("x", 4096, 1, 0, -5), ValueError, "owner_rank must be >= 0"),
        (("x", 4096, 1, 0, 0, -2), ValueError, "device_id must be >= -1"),
        (("x", 4096, 1, 0, 0, 2**31), ValueError, "device_id must be <= 2147483647"),
        (("x", 4.0, 1, 0), TypeError, "size must be an int, not float"),
        (("x", True, 1, 0), TypeError, "size must be an int, not bool"),
    ],
)
def test_bad_integers_are_clear_errors(args, exc, message):
    with pytest.raises(exc, match=message):
        SharedSegment.create(*args)


def test_blob_list_is_checked():
    owner, peer, blobs = make_pair()
    with pytest.raises(SegmentError, match="blob of rank 1 has 3 bytes"):
        peer.complete([blobs[0], b"abc"])
    with pytest.raises(TypeError, match="blob of rank 0 is not bytes-like"):
        peer.complete([1, blobs[1]])
    with pytest.raises(SegmentError, match="expects one blob per rank"):
        peer.complete(blobs[:1])
    peer.complete(blobs)
    owner.close()
    peer.close()


def test_context_manager_closes():
    with SharedSegment.create("ctx", SIZE, 1, 0)[0] as seg:
        assert not seg.closed
    assert seg.closed


def test_no_python_constructor():
    with pytest.raises(TypeError):
        SharedSegment()


def test_supported_is_a_bool():
    assert SharedSegment.supported() is True
    assert SharedSegment.supported(mmap=False) is False
    assert isinstance(SharedSegment.supported(True, False, True), bool)


def test_create_and_complete_release_the_gil():
    # Another thread keeps running while this one commits 256 MiB.
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    before = len(ticks)
    seg, blob = SharedSegment.create("gil", 256 << 20, 1, 0)
    during = len(ticks) - before
    stop.set()
    t.join()
    seg.close()
    assert during > 0


def test_two_hundred_cycles_leak_no_descriptor_mapping_or_memory():
    gc.collect()
    fds, maps = count_fds(), count_mappings()
    for i in range(200):
        owner, peer, blobs = make_pair(size=1 << 20, name=f"cycle{i}")
        owner.complete(blobs)
        peer.complete(blobs)
        owner.finish()
        memoryview(peer)[0] = i % 256
        assert memoryview(owner)[0] == i % 256
        owner.close()
        peer.close()
    gc.collect()
    assert count_fds() == fds
    assert count_mappings() == maps
