# SPDX-License-Identifier: Apache-2.0
"""SharedSegment.register_ranges(): ranges for an RDMA transfer engine.

The cutting itself on layouts (whole blocks, whole layers, byte counts, the
limit, the tail); on real segments the ranges cover the mapping at this
rank's addresses; behind a real readiness front (an owner process stopped
with SIGSTOP after its first chunk) a range is handed out only once the
front has passed it, and the rest follows once the owner goes on.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import leak_check
from mooncake import _segment
from mooncake._shared_segment_layout import _build_layout
from mooncake._shared_segment_ranges import plan_ranges
from mooncake.shared_segment import SharedSegment, SharedSegmentError, create_shared_segment

MIB = 1 << 20
GIB = 1 << 30
# Two blocks of different sizes, each padded to 4 KiB: k 12 KiB, v 4 KiB; stride 16 KiB.
BLOCKS = {
    "k": {"count": 4, "shape": (3000, 2), "dtype": "bfloat16"},
    "v": {"count": 4, "shape": (900,), "dtype": "float32"},
}


def plan(blocks, max_bytes, align, alloc_extra=0, block_alignment=4096):
    specs, offsets, stride, total, _ = _build_layout(blocks, block_alignment)
    return plan_ranges(offsets, stride, total, total + alloc_extra, max_bytes, align), offsets, stride, total


def boundaries(offsets, stride, total):
    return {i * stride + o for i in range(total // stride) for o in offsets.values()} | {total}


def assert_covering(ranges, end, max_bytes):
    position = 0
    for offset, length in ranges:
        assert offset == position and 0 < length <= max_bytes, (ranges, max_bytes)
        position += length
    assert position == end


@pytest.mark.parametrize("max_bytes", [12 << 10, 16 << 10, 28 << 10, 40 << 10, 1 << 30])
def test_block_ranges_are_whole_blocks_under_the_limit_and_as_few_as_possible(max_bytes):
    ranges, offsets, stride, total = plan(BLOCKS, max_bytes, "block")
    assert_covering(ranges, total, max_bytes)
    cuts = boundaries(offsets, stride, total)
    assert all(offset in cuts for offset, _ in ranges)
    # Greedy: no range could take the next block as well.
    pieces = sorted(cuts)
    for (offset, length), _ in zip(ranges, ranges[1:]):
        after = pieces[pieces.index(offset + length) + 1]
        assert after - offset > max_bytes


@pytest.mark.parametrize(
    "max_bytes, expected", [(16 << 10, 4), (31 << 10, 4), (32 << 10, 2), (63 << 10, 2), (64 << 10, 1)]
)
def test_layer_ranges_are_whole_strides(max_bytes, expected):
    ranges, _, stride, total = plan(BLOCKS, max_bytes, "layer")
    assert_covering(ranges, total, max_bytes)
    assert all(offset % stride == 0 and length % stride == 0 for offset, length in ranges)
    assert len(ranges) == expected


def test_byte_count_ranges_are_whole_units():
    ranges, _, _, total = plan(BLOCKS, 10 << 10, 8192)
    assert ranges == [(i * 8192, 8192) for i in range(total // 8192)]


def test_the_tail_past_the_blocks_joins_the_last_range_or_gets_its_own():
    ranges, _, _, total = plan(BLOCKS, 1 << 30, "layer", alloc_extra=MIB)
    assert ranges == [(0, total + MIB)]
    ranges, _, stride, total = plan(BLOCKS, stride_of(BLOCKS), "layer", alloc_extra=MIB - 4096)
    assert ranges[-1] == (total, MIB - 4096) and len(ranges) == total // stride + 1


def stride_of(blocks):
    return _build_layout(blocks)[2]


@pytest.mark.parametrize(
    "max_bytes, align, message",
    [
        (8 << 10, "block", "block 'k' entry 0 is 12288 bytes, above max_bytes 8192"),
        (8 << 10, "layer", "layer 0 is 16384 bytes, above max_bytes 8192"),
        (4096, 8192, "align 8192 is above max_bytes 4096"),
        (0, "block", "max_bytes must be a positive int"),
        ("64G", "block", "max_bytes must be a positive int"),
        (1 << 30, "blocks", "align must be 'block', 'layer' or a positive multiple of 4096 bytes, got 'blocks'"),
        (1 << 30, 1000, "got 1000"),
    ],
)
def test_bad_arguments_are_clear_errors(max_bytes, align, message):
    with pytest.raises(SharedSegmentError, match="register_ranges: ") as raised:
        plan(BLOCKS, max_bytes, align)
    assert message in str(raised.value)


def test_a_real_segment_gives_its_own_addresses_covering_its_mapping():
    with leak_check():
        seg = create_shared_segment("ranges", BLOCKS, 1, 0, alignment=64 << 10)
        base = seg.base_addr()
        ranges = list(seg.register_ranges(3 * (64 << 10)))
        assert ranges[0][0] == base
        assert_covering([(a - base, n) for a, n in ranges], seg.info()["alloc_size"], 3 * (64 << 10))
        assert all(a % (64 << 10) == 0 for a, _ in ranges)
        # Every range is memory of the segment: write its first and last byte through a buffer.
        whole = seg._native.view(0, seg.info()["alloc_size"])
        for address, length in ranges:
            whole[address - base] = 1
            whole[address - base + length - 1] = 2
        del whole
        seg.close()


OWNER = """
import os, signal, sys
from mooncake import _segment
owner, blob = _segment.SharedSegment.create(sys.argv[1], int(sys.argv[2]), 2, 0, background_commit=True,
                                            commit_threads=1)
print(blob.hex(), flush=True)
sys.stdin.readline()  # the peer has mapped the pages
os.kill(os.getpid(), signal.SIGSTOP)
sys.stdin.readline()
owner.wait_ready()
print("done", flush=True)
sys.stdin.readline()
"""


def stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_behind_the_front_a_range_comes_only_once_the_front_has_passed_it():
    blocks = {"kv": {"count": 512, "shape": (2 * MIB,), "dtype": "uint8"}}  # 1 GiB, 2 MiB layers
    specs, offsets, stride, total, tag = _build_layout(blocks)
    name = "front|" + tag
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, name, str(total)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        owner_blob = bytes.fromhex(owner.stdout.readline().strip())
        native, peer_blob = _segment.SharedSegment.create(name, total, 2, 1, background_commit=True)
        native.complete([owner_blob, peer_blob])
        seg = SharedSegment(native, specs, offsets, stride, 0)
        owner.stdin.write("go\n")
        owner.stdin.flush()
        deadline = time.monotonic() + 10
        while not stopped(owner.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert stopped(owner.pid), "the owner did not stop itself"
        front = seg.ready_bytes
        assert 0 < front < total, "the commit ended before the owner stopped: nothing to wait for"
        every = list(plan_ranges(offsets, stride, total, total, 16 * MIB, "layer"))
        # ready_only: the ranges the front has passed, and not one more.
        now = list(seg.register_ranges(16 * MIB, "layer", ready_only=True))
        assert [(a - seg.base_addr(), n) for a, n in now] == [r for r in every if r[0] + r[1] <= front]
        # The iterator hands out those at once, then waits for the frozen front.
        handed = []
        with pytest.raises(TimeoutError):
            for address, length in seg.register_ranges(16 * MIB, "layer", timeout=0.3):
                handed.append((address - seg.base_addr(), length))
        assert handed == [r for r in every if r[0] + r[1] <= front]
        # Once the owner goes on, the rest comes, each range once the front has passed it.
        waiting = seg.register_ranges(16 * MIB, "layer", timeout=60)
        os.kill(owner.pid, signal.SIGCONT)
        owner.stdin.write("go\n")
        owner.stdin.flush()
        seen = []
        for address, length in waiting:
            assert seg.ready_bytes >= address - seg.base_addr() + length
            seen.append((address - seg.base_addr(), length))
        assert seen == every
        assert owner.stdout.readline().strip() == "done"
        seg.close()
    finally:
        if owner.poll() is None:
            os.kill(owner.pid, signal.SIGCONT)
        owner.kill()
        owner.wait()
