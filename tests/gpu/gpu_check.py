#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GPU check of tests/gpu/run.sh: N ranks share one registered segment.

Each rank (a process, with a gloo group) registers the shared pages with its
GPU (rank % GPUs), the owner writes a pattern, every rank's GPU reads it back
and checks it, and the ranks measure copy bandwidth of the shared registered
pages against cudaMallocHost (torch pinned memory) and pageable memory in the
same process.  Prints one JSON document.
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mooncake.shared_segment import create_shared_segment

GIB = 1 << 30


def bandwidth(src, dst, repeat=5):
    """GB/s of dst.copy_(src) (the best of `repeat`), timed with CUDA events."""
    best = 0.0
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        stop.record()
        stop.synchronize()
        best = max(best, src.numel() * src.element_size() / (start.elapsed_time(stop) / 1e3) / 1e9)
    return best


def rank_main(rank, world, port, size_gib, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    t0 = time.perf_counter()
    seg = create_shared_segment(
        "gpu",
        {"slab": {"count": 1, "shape": (size_gib * GIB,), "dtype": torch.uint8}},
        world,
        rank,
        device_id=device,
        comm_group=dist.group.WORLD,
        host_register=True,
    )
    create_s = time.perf_counter() - t0
    info = seg.info()
    host = seg.tensors("slab")[0]
    # A 256-byte ramp repeated over the whole slab: cheap to write and to check.
    ramp = torch.arange(256, dtype=torch.uint8)
    if rank == 0:
        host.view(-1, 256).copy_(ramp)
    dist.barrier()
    on_gpu = host.to(f"cuda:{device}", non_blocking=True)
    torch.cuda.synchronize()
    correct = bool((on_gpu.view(-1, 256) == ramp.to(device)).all())

    # Bandwidth over 1 GiB of each kind of host memory, in this process.
    n = GIB
    shared = host[:n]
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.uint8)
    gpu = torch.empty(n, dtype=torch.uint8, device=device)
    figures = {
        "rank": rank,
        "device": device,
        "correct": correct,
        "shared_is_pinned": bool(shared.is_pinned()),
        "create_seconds": create_s,
        "register_seconds_per_gib": info["register_seconds"] / (info["alloc_size"] / GIB),
        "h2d_gbps": {
            "shared": bandwidth(shared, gpu),
            "cudaMallocHost": bandwidth(pinned, gpu),
            "pageable": bandwidth(pageable, gpu),
        },
        "d2h_gbps": {
            "shared": bandwidth(gpu, shared),
            "cudaMallocHost": bandwidth(gpu, pinned),
            "pageable": bandwidth(gpu, pageable),
        },
    }
    for kind in ("h2d_gbps", "d2h_gbps"):
        figures[kind]["shared_over_cudaMallocHost"] = figures[kind]["shared"] / figures[kind]["cudaMallocHost"]
    results[rank] = figures
    del shared, pinned, pageable, gpu, on_gpu, host
    dist.barrier()
    seg.close()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size-gib", type=int, default=4)
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(json.dumps({"error": "torch sees no CUDA device (torch.cuda.is_available() is False)"}))
        raise SystemExit(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(rank_main, args=(args.ranks, port, args.size_gib, results), nprocs=args.ranks, join=True)
        ranks = [results[r] for r in range(args.ranks)]
    summary = {
        "ranks": ranks,
        "all_correct": all(r["correct"] for r in ranks),
        "target_shared_over_cudaMallocHost": 0.95,
        "min_h2d_ratio": min(r["h2d_gbps"]["shared_over_cudaMallocHost"] for r in ranks),
        "min_d2h_ratio": min(r["d2h_gbps"]["shared_over_cudaMallocHost"] for r in ranks),
    }
    print(json.dumps(summary, indent=1))
    raise SystemExit(0 if summary["all_correct"] else 1)


if __name__ == "__main__":
    main()
