#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to build the tensor views of a segment: ours against upstream's method.

A 61-layer declaration with two blocks (k and v, like an MLA KV cache), so
tensors() builds 122 views.  Upstream builds each view as a ctypes array over
the absolute address, then torch.frombuffer(...).view(shape); ours slices a
memoryview of the native object (which holds a buffer export, so the view
keeps the mapping alive) and calls torch.frombuffer on it.  Both run in the
same process on the same segment; the best of --repeat runs is reported.

    PYTHONPATH=bindings/python /usr/bin/python3 tools/bench-views.py
"""

import argparse
import ctypes
import json
import time

import torch

from mooncake.shared_segment import create_shared_segment

LAYERS = 61


def upstream_views(seg, block):
    """Upstream's host path (Mooncake shared_segment.py): ctypes over the address."""
    spec, base = seg._specs[block], seg.base_addr() + seg._offsets[block]
    views = []
    for i in range(spec.count):
        array = (ctypes.c_int8 * spec.nbytes).from_address(base + i * seg.stride)
        tensor = torch.frombuffer(array, dtype=spec.dtype).view(spec.shape)
        tensor._mooncake_segment = seg
        views.append(tensor)
    return views


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        views = fn()
        times.append(time.perf_counter() - start)
        del views
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    blocks = {
        "k": {"count": LAYERS, "shape": (1024, 512), "dtype": torch.bfloat16},
        "v": {"count": LAYERS, "shape": (1024, 64), "dtype": torch.bfloat16},
    }
    seg = create_shared_segment("views", blocks, 1, 0)
    ours = best(lambda: seg.tensors("k") + seg.tensors("v"), args.repeat)
    upstream = best(lambda: upstream_views(seg, "k") + upstream_views(seg, "v"), args.repeat)
    print(
        json.dumps(
            {
                "views": 2 * LAYERS,
                "ours_ms": round(ours * 1e3, 3),
                "upstream_ms": round(upstream * 1e3, 3),
                "upstream_over_ours": round(upstream / ours, 3),
            }
        )
    )
    seg.close()


if __name__ == "__main__":
    main()
