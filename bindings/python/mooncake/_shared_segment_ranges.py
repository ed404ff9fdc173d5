# SPDX-License-Identifier: Apache-2.0
"""Registration ranges of a shared segment for an RDMA transfer engine (private).

Engines register the pool with a transfer engine (Mooncake Transfer Engine, NIXL) in
ranges that respect its limits: a memory region at most so large, starting
and ending on block or layer boundaries (vllm-ascend registers layer-aligned
ranges under 64 GiB).  This module cuts the segment into such ranges from
the block layout, which only the Python layer knows (the C library sees
bytes: doc/decisions.md), and hands each out once the readiness front has
passed it.  mooncake.shared_segment is the public module
(``SharedSegment.register_ranges``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, List, Mapping, Optional, Tuple

from ._shared_segment_base import SharedSegmentError, _an_int

#: align= values besides a byte count.
_ALIGN_NAMES = ("block", "layer")
_PAGE = 4096


def _pieces(
    offsets: Mapping[str, int], stride: int, total: int, align: str
) -> Tuple[List[int], Callable[[int, int], str]]:
    """The offsets a range may start or end at, in order, from 0 to total; and who names a piece."""
    if align == "layer":
        layers = total // stride
        return [i * stride for i in range(layers + 1)], lambda start, end: f"layer {start // stride}"
    if align == "block":
        order = sorted(offsets.items(), key=lambda item: item[1])
        cuts = [i * stride + offset for i in range(total // stride) for _, offset in order]
        starts = {offset: name for name, offset in order}

        def name(start: int, end: int) -> str:
            return f"block {starts[start % stride]!r} entry {start // stride}"

        return cuts + [total], name
    raise AssertionError(align)  # a byte count is cut arithmetically (plan_ranges)


def plan_ranges(
    offsets: Mapping[str, int],
    stride: int,
    total: int,
    alloc_size: int,
    max_bytes: Any,
    align: Any,
) -> List[Tuple[int, int]]:
    """(offset, length) pairs covering [0, alloc_size): whole pieces of @align, each at most @max_bytes.

    Ranges are packed greedily, so each is as large as the limit allows.  The
    tail past the layout (the last page's or huge page's rest) goes into the
    last range where it fits, else into a range of its own.
    """
    if _an_int(max_bytes) is None or max_bytes <= 0:
        raise SharedSegmentError(
            f"register_ranges: max_bytes must be a positive int (the transfer engine's largest region), "
            f"got {max_bytes!r}"
        )
    if align not in _ALIGN_NAMES and (_an_int(align) is None or align <= 0 or align % _PAGE):
        raise SharedSegmentError(
            f"register_ranges: align must be 'block', 'layer' or a positive multiple of {_PAGE} bytes, "
            f"got {align!r}"
        )
    ranges: List[Tuple[int, int]] = []
    if align in _ALIGN_NAMES:
        cuts, name = _pieces(offsets, stride, total, align)
        start = 0
        for previous, cut in zip(cuts, cuts[1:]):
            if cut - previous > max_bytes:
                raise SharedSegmentError(
                    f"register_ranges: {name(previous, cut)} is {cut - previous} bytes, above max_bytes "
                    f"{max_bytes}: raise max_bytes, or cut finer (align='block' or a byte count)"
                )
            if cut - start > max_bytes:
                ranges.append((start, previous - start))
                start = previous
        ranges.append((start, total - start))
    else:
        # Whole units of align bytes (a segment of a TiB has too many to list one by one).
        if align > max_bytes:
            raise SharedSegmentError(
                f"register_ranges: align {align} is above max_bytes {max_bytes}: a range holds at least one unit"
            )
        step = max_bytes // align * align
        ranges = [(offset, min(step, total - offset)) for offset in range(0, total, step)]
    tail = alloc_size - total
    if tail > 0:
        last_start, last_length = ranges[-1]
        if last_length + tail <= max_bytes:
            ranges[-1] = (last_start, last_length + tail)
        else:
            ranges.append((total, tail))
    return ranges


def hand_out(
    ranges: List[Tuple[int, int]],
    base: int,
    size: int,
    ready_bytes: Callable[[], int],
    wait_ready: Callable[[int, Optional[int], Optional[float]], bool],
    ready_only: bool,
    timeout: Optional[float],
) -> Iterator[Tuple[int, int]]:
    """(address, length) of each range once the front has passed it; with @ready_only those passed now."""
    for offset, length in ranges:
        end = min(offset + length, size)  # the tail is ready with the last byte of the segment
        if ready_only:
            if ready_bytes() < end:
                return
        elif offset + length > size:
            wait_ready(0, None, timeout)
        else:
            wait_ready(offset, length, timeout)
        yield base + offset, length
