# SPDX-License-Identifier: Apache-2.0
"""Real torch tensors over the shared pages, in one process."""

import gc

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

from mooncake import _segment  # noqa: E402
from mooncake.shared_segment import (  # noqa: E402
    SharedSegment,
    SharedSegmentError,
    _build_layout,
    create_shared_segment,
)

BLOCKS = {
    "k": {"count": 4, "shape": (16, 8), "dtype": torch.bfloat16},
    "v": {"count": 2, "shape": (16, 4), "dtype": torch.float32},
}


def two_rank_views():
    """Owner and peer of one segment, in this process, as SharedSegment handles."""
    specs, offsets, stride, total, tag = _build_layout(BLOCKS)
    owner, owner_blob = _segment.SharedSegment.create(f"kv|{tag}", total, 2, 0)
    peer, peer_blob = _segment.SharedSegment.create(f"kv|{tag}", total, 2, 1)
    owner.complete([owner_blob, peer_blob])
    peer.complete([owner_blob, peer_blob])
    return SharedSegment(owner, specs, offsets, stride, 0), SharedSegment(peer, specs, offsets, stride, 0)


def test_tensors_have_the_declared_layout():
    seg = create_shared_segment("kv", BLOCKS, 1, 0)
    k = seg.tensors("k")
    assert len(k) == 4
    assert all(t.shape == (16, 8) and t.dtype == torch.bfloat16 and t.is_contiguous() for t in k)
    assert all(t.device.type == "cpu" for t in k)
    addresses = [t.data_ptr() - seg.base_addr() for t in k]
    assert addresses == [seg.offset("k", i) for i in range(4)]
    assert seg.offset("k", 1) - seg.offset("k", 0) == seg.stride
    assert all(a % 4096 == 0 for a in addresses)
    assert k[0]._mooncake_segment is seg
    del k
    seg.close()


def test_tensors_and_buffers_of_two_ranks_see_each_others_writes():
    owner, peer = two_rank_views()
    owner.tensors("k")[2].fill_(1.5)
    assert bool((peer.tensors("k")[2] == 1.5).all())
    peer.tensors("v")[1][3, 2] = 42.0
    assert owner.tensors("v")[1][3, 2].item() == 42.0
    peer.buffers("k")[0][:2] = b"\x80\x3f"  # bfloat16 1.0
    assert owner.tensors("k")[0][0, 0].item() == 1.0
    owner.close()
    peer.close()


def test_close_with_live_tensors_raises_buffer_error():
    seg = create_shared_segment("kv", BLOCKS, 1, 0)
    t = seg.tensors("v")[0]
    with pytest.raises(BufferError):
        seg.close()
    del t
    gc.collect()
    seg.close()


def test_derived_tensors_keep_the_memory_alive_after_the_segment_is_dropped():
    seg = create_shared_segment("kv", BLOCKS, 1, 0)
    native = seg._native
    base = seg.tensors("k")[1]
    derived = base[2:10].reshape(-1).narrow(0, 8, 16)
    del base, seg
    gc.collect()
    assert not native.closed and native.exports >= 1
    derived.fill_(3.0)
    assert bool((derived == 3.0).all())
    del derived
    gc.collect()
    assert native.exports == 0


def test_tensors_without_torch_dtype_objects():
    seg = create_shared_segment("kv", {"raw": {"count": 2, "shape": (64,), "dtype": "uint8"}}, 1, 0)
    t = seg.tensors("raw")
    assert t[0].dtype == torch.uint8 and t[0].numel() == 64
    del t
    seg.close()


def test_info_reports_what_was_obtained():
    with create_shared_segment("kv", BLOCKS, 1, 0) as seg:
        info, size = seg.info(), seg.total_size()
    assert info["backend"] == "memfd"
    assert info["size"] == size
    assert info["alloc_size"] % info["page_size"] == 0
    assert info["resident_bytes"] == info["alloc_size"]  # committed at create


def test_unknown_block_error_before_torch_is_needed():
    seg = create_shared_segment("kv", BLOCKS, 1, 0)
    with pytest.raises(SharedSegmentError, match="Unknown shared segment block"):
        seg.tensors("nope")
    seg.close()


def test_the_two_documented_ways_around_the_lifetime_rules_behave_as_documented():
    # README, doc/guarantees.md, SharedSegment's docstring: tensors() is the path to use, because
    seg = create_shared_segment("kv", BLOCKS, 1, 0)
    # share_memory_() moves the tensor to new storage: its writes no longer reach the segment;
    moved = seg.tensors("v")[1]
    moved.share_memory_()
    moved.fill_(5.0)
    assert seg.tensors("v")[1][0, 0].item() == 0.0
    # a tensor on a released memoryview holds nothing: close() would unmap under it;
    buffer = seg.buffers("v")[0]
    on_buffer = torch.frombuffer(buffer, dtype=torch.float32)
    buffer.release()
    assert seg._native.exports == 0
    # while a tensors() view always holds the mapping.
    view = seg.tensors("v")[0]
    assert seg._native.exports == 1
    with pytest.raises(BufferError):
        seg.close()
    del view, on_buffer, moved
    gc.collect()
    seg.close()


def _child_writes(tensor):
    tensor.fill_(9.0)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_segment_tensor_handed_to_a_spawned_child_is_refused_not_copied(method):
    """torch would move the tensor out of the segment into a private copy: a clear error instead,
    before any child starts; the tensor still views the segment; other tensors still travel."""
    import multiprocessing
    import pickle
    from multiprocessing.reduction import ForkingPickler

    seg = create_shared_segment("kv", BLOCKS, 1, 0)
    tensor = seg.tensors("v")[1]
    part = tensor[1:]  # a view derived from it is the segment's too
    address = tensor.data_ptr()
    for sent in (tensor, part):
        child = multiprocessing.get_context(method).Process(target=_child_writes, args=(sent,))
        with pytest.raises(pickle.PicklingError, match="cannot be sent to another process by pickling"):
            child.start()
        assert child.pid is None
    with pytest.raises(pickle.PicklingError, match="create_shared_segment"):
        ForkingPickler.dumps(tensor)
    assert tensor.data_ptr() == address
    tensor.fill_(3.0)
    assert seg.tensors("v")[1][0, 0].item() == 3.0
    ordinary = torch.zeros(4)
    assert ForkingPickler.loads(ForkingPickler.dumps(ordinary)).shape == (4,)
    del tensor, part, sent, child
    gc.collect()
    seg.close()
