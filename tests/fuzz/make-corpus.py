#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write the fuzzer's seed corpus: real blob sets of groups of 1-4 ranks.

Each seed is byte 0 (world size - 1, and the rank in bits 2-3; bit 6: point
rank 0 at the fuzzer's live owner socket; bit 5: a raw socket request instead)
followed by the group's blobs (or the request), as tests/fuzz/fuzz-complete.c
reads them.  The owner that made
them is gone by the time the fuzzer runs, so a seed that passes every check
ends in the "owner is gone" path; the mutations explore the rest.

    make fuzz-corpus    (in a build tree; tests/fuzz/run.sh does it)
"""

import sys
from pathlib import Path

from mooncake import _segment


def group_blobs(world: int, owner: int, size: int, hugetlb: bool = False) -> bytes:
    segments, blobs = [], []
    for rank in range(world):
        seg, blob = _segment.SharedSegment.create("fuzz", size, world, rank, owner, hugetlb=hugetlb)
        segments.append(seg)
        blobs.append(blob)
    for seg in segments:
        seg.close()
    return b"".join(blobs)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for world in range(1, 5):
        for rank in range(world):
            data = bytes([(world - 1) | rank << 2]) + group_blobs(world, 0, 1 << 16)
            (out / f"world{world}-rank{rank}").write_bytes(data)
    (out / "world2-owner1").write_bytes(bytes([1 | 1 << 2]) + group_blobs(2, 1, 1 << 16))
    (out / "world3-short").write_bytes(bytes([2]) + group_blobs(3, 0, 3 << 20)[:300])
    for world in (2, 3):
        data = bytes([(world - 1) | 1 << 2 | 1 << 6]) + group_blobs(world, 0, 1 << 16)
        (out / f"world{world}-rank1-live-socket").write_bytes(data)
    request = b"MCFD" + bytes(16)
    (out / "raw-request-wrong-token").write_bytes(bytes([1 << 5]) + request)
    (out / "raw-request-junk").write_bytes(bytes([1 << 5]) + b"hello")


if __name__ == "__main__":
    main()
