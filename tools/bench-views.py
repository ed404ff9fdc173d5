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

With --sizes, it reports instead what tensors() costs on segments of those
sizes (a 61-layer k/v declaration, each layer padded by a byte pool), next
to info(), which reads the residency from /proc/self/smaps and which
tensors() must not call: tensors() stays flat, info() grows with the size.
--host-register registers them; without a GPU, through the fake driver:

    MOONCAKE_SEGMENT_CUDA_LIBRARY=BUILD/tests/fakes/cuda/.libs/libfake-cuda.so \\
        /usr/bin/python3 tools/bench-views.py --sizes 1G,4G,16G --host-register

Each size is committed in full (the owner populates it): it needs that much
free memory.
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


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def size_scaling(sizes, host_register, repeat):
    """tensors() and info() at each size: one JSON line per size."""
    for size in sizes:
        # Entry i of every block shares one stride: the pool pads each layer's group to size / LAYERS.
        blocks = dict(BLOCKS)
        per_layer = sum(2 * b["shape"][0] * b["shape"][1] for b in BLOCKS.values())  # bfloat16
        pool = max(4096, size // LAYERS - per_layer)
        blocks["pool"] = {"count": LAYERS, "shape": (pool,), "dtype": torch.uint8}
        seg = create_shared_segment("views", blocks, 1, 0, device_id=0, host_register=host_register)
        tensors = best(lambda: seg.tensors("k") + seg.tensors("v"), repeat)
        info = best(seg.info, max(3, repeat // 10))
        facts = seg.info()
        print(
            json.dumps(
                {
                    "size_gib": round(facts["alloc_size"] / (1 << 30), 3),
                    "registered": facts["registered"],
                    "accelerator": facts["accelerator"],
                    "resident_gib": round(facts["resident_bytes"] / (1 << 30), 3),
                    "views": 2 * LAYERS,
                    "tensors_ms": round(tensors * 1e3, 3),
                    "info_ms": round(info * 1e3, 3),
                }
            ),
            flush=True,
        )
        seg.close()


BLOCKS = {
    "k": {"count": LAYERS, "shape": (1024, 512), "dtype": torch.bfloat16},
    "v": {"count": LAYERS, "shape": (1024, 64), "dtype": torch.bfloat16},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--sizes", help="comma-separated segment sizes (1G,4G,16G): tensors() cost per size")
    parser.add_argument("--host-register", action="store_true", help="with --sizes: register the segments")
    args = parser.parse_args()
    if args.sizes:
        size_scaling([parse_size(s) for s in args.sizes.split(",")], args.host_register, args.repeat)
        return
    seg = create_shared_segment("views", BLOCKS, 1, 0)
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
