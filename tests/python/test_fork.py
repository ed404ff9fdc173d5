# SPDX-License-Identifier: Apache-2.0
"""os.fork() after create, for real: the child reads and writes what it inherited, and its close() or
del releases nothing of the parent's, even after it allocated memory of its own. Never a signal."""

import ctypes
import gc
import os
import traceback

import pytest

from mooncake.shared_segment import create_shared_segment

BLOCKS = {"raw": {"count": 4, "shape": (4096,), "dtype": "uint8"}}


def run_in_child(fn) -> None:
    """Run fn in an os.fork() child; fail with its traceback's exit status, or the signal that killed it."""
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001 - reported through the exit status, the parent asserts on it
            traceback.print_exc()
            status = 1
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert not os.WIFSIGNALED(status), f"the forked child died of signal {os.WTERMSIG(status)}"
    assert os.WEXITSTATUS(status) == 0, "the forked child failed (its traceback is above)"


def pattern(i: int) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(4096))


def filled_segment(name: str):
    seg = create_shared_segment(name, BLOCKS, 1, 0)
    for i, buf in enumerate(seg.buffers("raw")):
        buf[:] = pattern(i)
        buf.release()
    return seg


def test_child_reads_and_writes_an_inherited_buffer():
    seg = filled_segment("fork-buffer")

    def child():
        views = seg.buffers("raw")
        assert [bytes(v) for v in views[:3]] == [pattern(i) for i in range(3)]
        views[3][:5] = b"child"
        for v in views:
            v.release()

    run_in_child(child)
    views = seg.buffers("raw")
    assert bytes(views[3][:5]) == b"child"  # the child's write reached the parent's pages
    for v in views:
        v.release()
    seg.close()


def test_child_reads_an_inherited_tensor():
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    seg = create_shared_segment("fork-tensor", {"k": {"count": 2, "shape": (8, 4), "dtype": torch.float32}}, 1, 0)
    k = seg.tensors("k")
    k[0].copy_(torch.arange(32, dtype=torch.float32).reshape(8, 4))
    k[1].fill_(-1.5)

    def child():
        # Tensors made before the fork, read in the child.
        assert k[0].flatten().tolist() == [float(i) for i in range(32)]
        assert k[1].flatten().tolist() == [-1.5] * 32
        k[1][0, 0] = 42.0

    run_in_child(child)
    assert k[1][0, 0].item() == 42.0
    k.clear()  # the tensors hold exports: drop them before close()
    gc.collect()
    seg.close()


@pytest.mark.parametrize("drop", ["close", "del"])
def test_child_dropping_the_segment_after_its_own_allocations_unmaps_nothing(drop):
    np = pytest.importorskip("numpy", reason="python3-numpy is not installed")
    seg = filled_segment(f"fork-{drop}")
    first, last = (seg.base_addr() + seg.offset("raw", i) for i in (0, 3))

    def child():
        nonlocal seg
        arrays = [np.full(1 << 18, i, dtype=np.int64) for i in range(16)]  # 32 MiB of the child's own
        if drop == "close":
            seg.close()
        else:
            seg = None
            gc.collect()
        # The child's arrays are intact, and so is the mapping it inherited (close() did not unmap it).
        assert [int(a.sum()) for a in arrays] == [i * (1 << 18) for i in range(16)]
        assert ctypes.string_at(first, 4096) == pattern(0)
        assert ctypes.string_at(last, 4096) == pattern(3)
        more = [np.ones(1 << 18) for _ in range(8)]  # allocating after the drop is safe too
        assert sum(float(a.sum()) for a in more) == 8.0 * (1 << 18)

    run_in_child(child)
    views = seg.buffers("raw")
    assert [bytes(v) for v in views] == [pattern(i) for i in range(4)]  # the parent's pages are untouched
    for v in views:
        v.release()
    seg.close()
