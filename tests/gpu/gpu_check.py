#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GPU check of tests/gpu/run.sh: N ranks share one segment, two ways.

For each mode, N ranks (processes with a gloo group, rank r on GPU r % GPUs)
create one segment of --size-gib GiB:

- ``register``: mmap=True, host_register=True: one memfd, and every rank
  registers (pins) the same pages again with its GPU;
- ``vmm``: mmap=False: the owner allocates pinned host memory once with the
  CUDA VMM API and every rank imports and maps it (no per-rank registration);
- ``background``: as ``register`` with background=True: create returns after
  the first chunk and every rank registers behind the owner's commit front
  (seconds_until_all_created against seconds_until_all_ready).

Each rank then proves it can use the whole segment from its GPU and its CPU:
the owner writes a ramp through the CPU, every GPU reads all of it back; each
rank writes its own slice through its GPU, every CPU reads all slices back.
Measured in the same run: time until every rank can use the segment on its
GPU (the figure users ask for), and H2D/D2H bandwidth of the shared pages
against cudaMallocHost (torch pinned memory) and pageable memory in the same
process (target: >= 0.95 x cudaMallocHost).  Prints one JSON document.

--smoke runs the same steps without a GPU (CPU views only, small sizes) so
that the script itself is exercised where there is none: against the fake
driver of tests/fakes/cuda when MOONCAKE_SEGMENT_CUDA_LIBRARY names it.
"""

import argparse
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mooncake.shared_segment import create_shared_segment

GIB = 1 << 30
MODES = {
    "register": {"mmap": True, "host_register": True},
    "vmm": {"mmap": False},
    # create returns after the first chunk; each rank registers behind the commit front.
    "background": {"mmap": True, "host_register": True, "background": True},
}


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


def views(seg, smoke, device):
    """(CPU view, GPU view or None) of the whole slab, whichever way the mode exposes them."""
    cpu = seg.tensors("slab", device="cpu")[0]
    gpu = None if smoke else seg.tensors("slab", device=f"cuda:{device}")[0]
    return cpu, gpu


def check_sharing(rank, world, cpu, gpu, smoke):
    """Owner's CPU -> every GPU, then every GPU -> every CPU, over the whole slab."""
    ramp = torch.arange(256, dtype=torch.uint8)
    if rank == 0:
        cpu.view(-1, 256).copy_(ramp)
    dist.barrier()
    if smoke:
        read_ok = bool((cpu.view(-1, 256) == ramp).all())
    else:
        read_ok = bool((gpu.view(-1, 256) == ramp.to(gpu.device)).all())
    dist.barrier()
    # Rank r stamps slice r with r + 1 through its GPU (its CPU in a smoke run).
    slices = (cpu if smoke else gpu).chunk(world)
    slices[rank].fill_(rank + 1)
    if not smoke:
        torch.cuda.synchronize()
    dist.barrier()
    written_ok = all(bool((part == r + 1).all()) for r, part in enumerate(cpu.chunk(world)))
    return read_ok and written_ok


def rank_main(rank, world, store, mode, size_bytes, smoke, results):
    # A file store: the ranks of one host need no TCP rendezvous (whose
    # connection retries throw C++ exceptions inside torch).
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    device = 0 if smoke else rank % torch.cuda.device_count()
    if not smoke:
        torch.cuda.set_device(device)
        torch.cuda.init()  # the CUDA context is not part of the time to ready
    dist.barrier()
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the host
    seg = create_shared_segment(
        "gpu-" + mode,
        {"slab": {"count": 1, "shape": (size_bytes,), "dtype": torch.uint8}},
        world,
        rank,
        device_id=device,
        comm_group=dist.group.WORLD,
        **MODES[mode],
    )
    created = time.monotonic()  # background: the first bytes are usable from here
    seg.wait_ready()  # every byte committed and registered by this rank (at once without background)
    cpu, gpu = views(seg, smoke, device)
    if not smoke:
        gpu[:1].clone()  # a first read by this rank's GPU: now it can use the segment
        torch.cuda.synchronize()
    ready = time.monotonic()
    info = seg.info()
    figures = {
        "rank": rank,
        "device": device,
        "start": start,
        "created": created,
        "ready": ready,
        "backend": info.get("backend"),
        "register_seconds": info.get("register_seconds", 0.0),
        "correct": check_sharing(rank, world, cpu, gpu, smoke),
    }
    if not smoke:
        n = min(GIB, size_bytes)
        shared = cpu[:n]
        pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        pageable = torch.empty(n, dtype=torch.uint8)
        on_gpu = torch.empty(n, dtype=torch.uint8, device=device)
        figures["shared_is_pinned"] = bool(shared.is_pinned())
        figures["h2d_gbps"] = {
            "shared": bandwidth(shared, on_gpu),
            "cudaMallocHost": bandwidth(pinned, on_gpu),
            "pageable": bandwidth(pageable, on_gpu),
        }
        figures["d2h_gbps"] = {
            "shared": bandwidth(on_gpu, shared),
            "cudaMallocHost": bandwidth(on_gpu, pinned),
            "pageable": bandwidth(on_gpu, pageable),
        }
        for kind in ("h2d_gbps", "d2h_gbps"):
            figures[kind]["shared_over_cudaMallocHost"] = figures[kind]["shared"] / figures[kind]["cudaMallocHost"]
        del shared, pinned, pageable, on_gpu
    results[rank] = figures
    del cpu, gpu
    dist.barrier()
    seg.close()
    dist.destroy_process_group()


def run_mode(mode, ranks, size_bytes, smoke):
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp, mp.Manager() as manager:
        results = manager.dict()
        store = os.path.join(tmp, "store")
        mp.spawn(rank_main, args=(ranks, store, mode, size_bytes, smoke, results), nprocs=ranks, join=True)
        per_rank = [dict(results[r]) for r in range(ranks)]
    summary = {
        "ranks": per_rank,
        "all_correct": all(r["correct"] for r in per_rank),
        # From the first rank entering create to the last rank able to use it on its GPU.
        "seconds_until_all_ready": max(r["ready"] for r in per_rank) - min(r["start"] for r in per_rank),
        # ... and to the last rank's create returning (background: its first bytes usable).
        "seconds_until_all_created": max(r["created"] for r in per_rank) - min(r["start"] for r in per_rank),
    }
    if not smoke:
        summary["min_h2d_ratio"] = min(r["h2d_gbps"]["shared_over_cudaMallocHost"] for r in per_rank)
        summary["min_d2h_ratio"] = min(r["d2h_gbps"]["shared_over_cudaMallocHost"] for r in per_rank)
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size-gib", type=float, default=4)
    parser.add_argument("--modes", default="register,vmm,background", help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--smoke", action="store_true", help="no GPU: CPU views only (see the docstring)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    if not args.smoke and (not torch.cuda.is_available() or torch.cuda.device_count() == 0):
        print(json.dumps({"error": "torch sees no CUDA device (torch.cuda.is_available() is False)"}))
        raise SystemExit(2)
    size_bytes = int(args.size_gib * GIB) // 256 * 256
    report = {"target_shared_over_cudaMallocHost": 0.95, "size_bytes": size_bytes, "modes": {}}
    for mode in modes:
        report["modes"][mode] = run_mode(mode, args.ranks, size_bytes, args.smoke)
    if {"register", "vmm"} <= set(modes):
        report["ready_vmm_over_register"] = (
            report["modes"]["vmm"]["seconds_until_all_ready"] / report["modes"]["register"]["seconds_until_all_ready"]
        )
    report["all_correct"] = all(m["all_correct"] for m in report["modes"].values())
    print(json.dumps(report, indent=1))
    raise SystemExit(0 if report["all_correct"] else 1)


if __name__ == "__main__":
    main()
