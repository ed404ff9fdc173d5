#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GPU check of the publish slots in stream order (tests/gpu/run.sh).

Three ranks (processes in a gloo group, on GPU rank % GPUs) share one
host_register segment of --blocks blocks of --block-mib MiB, one slot per
block:

- rank 1 first queues, on a stream of its own, for every block: a wait for
  the block's slot (cuStreamWaitValue64 on the registered slot word), then a
  copy of the block to its GPU; nothing runs yet, since nothing is published;
- then rank 0 (the writer), on its stream and without a host sync: fills a
  GPU buffer with the block's pattern, copies it to the block (device to
  host), publishes the slot (cuStreamWriteValue64, then the host function
  that wakes CPU waiters);
- rank 2 waits for each block on the CPU (woken by that host function) and
  checks its bytes from the host;
- rank 1 then synchronizes its stream and compares every block on its GPU.

A stream wait that did not hold would copy zeros; a publish ahead of its copy
would let rank 2 see a torn block.  Measured: the writer's time to queue
everything, and the time until rank 1's stream finished (the blocks' bytes
over it: the stream-ordered handoff's bandwidth), against the same copies
without slots in the same run (the physical limit).  Prints one JSON document.

--smoke runs the same steps without a GPU (CPU buffers, stream handle 0) so
that the script is exercised where there is none: against the fake driver of
tests/fakes/cuda when MOONCAKE_SEGMENT_CUDA_LIBRARY names it.
"""

import argparse
import contextlib
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mooncake.shared_segment import create_shared_segment

MIB = 1 << 20
WRITER, STREAM_READER, CPU_READER = 0, 1, 2


def pattern(i, n, device):
    """Block i's int64 words: different in every block and every word."""
    return torch.arange(n, dtype=torch.int64, device=device) * 1000003 + i


def rank_main(rank, world, store, blocks, block_bytes, smoke, results):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    device = "cpu" if smoke else f"cuda:{rank % torch.cuda.device_count()}"
    if not smoke:
        torch.cuda.set_device(device)
    words = block_bytes // 8
    seg = create_shared_segment(
        "gpu-slots",
        {"block": {"count": blocks, "shape": (words,), "dtype": torch.int64}},
        world,
        rank,
        device_id=0 if smoke else torch.cuda.current_device(),
        comm_group=dist.group.WORLD,
        host_register=True,
        slots=blocks,
    )
    slots = seg.slots
    host = seg.tensors("block", device="cpu")
    stream = None if smoke else torch.cuda.Stream()
    handle = 0 if smoke else stream
    figures = {"rank": rank, "device": device}
    if rank == STREAM_READER:
        landed = [torch.empty(words, dtype=torch.int64, device=device) for _ in range(blocks)]
        if smoke:
            dist.barrier()  # the fake's stream waits in the call: queue nothing before the writer runs
        with contextlib.nullcontext() if smoke else torch.cuda.stream(stream):
            for i in range(blocks):
                figures.setdefault("waited_for", []).append(slots.wait(i, 0, stream=handle))
                landed[i].copy_(host[i], non_blocking=True)
        if not smoke:
            dist.barrier()  # everything is queued: now the writer may go
        start = time.monotonic()
        if not smoke:
            stream.synchronize()
        figures["drained_s"] = time.monotonic() - start
        figures["wrong_blocks"] = sum(
            not bool(torch.equal(landed[i], pattern(i, words, device))) for i in range(blocks)
        )
        if not smoke:
            figures["device_sequences"] = slots.device_sequences().cpu().tolist()
    elif rank == WRITER:
        dist.barrier()
        source = torch.empty(words, dtype=torch.int64, device=device)
        start = time.monotonic()
        with contextlib.nullcontext() if smoke else torch.cuda.stream(stream):
            for i in range(blocks):
                source.copy_(pattern(i, words, device))
                host[i].copy_(source, non_blocking=True)
                figures.setdefault("published", []).append(slots.publish(i, stream=handle))
        figures["queued_s"] = time.monotonic() - start
        if not smoke:
            stream.synchronize()
        figures["written_s"] = time.monotonic() - start
    else:
        dist.barrier()
        wrong = 0
        for i in range(blocks):
            slots.wait(i, 0, timeout=60)
            wrong += not bool(torch.equal(host[i], pattern(i, words, "cpu")))
        figures["wrong_blocks"] = wrong
    dist.barrier()
    if not smoke and rank == STREAM_READER:
        figures["plain_copy_gbps"] = plain_copy_gbps(host, words, device)
    figures["sequences"] = [int(s) for s in slots.sequences(tensor=True).tolist()]
    results[rank] = figures
    del host
    dist.barrier()
    seg.close()
    dist.destroy_process_group()


def plain_copy_gbps(host, words, device):
    """The same host-to-device copies without slots: what the link gives (best of 3)."""
    landed = torch.empty(words, dtype=torch.int64, device=device)
    best = 0.0
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.monotonic()
        for block in host:
            landed.copy_(block, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, len(host) * words * 8 / (time.monotonic() - start) / 1e9)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=256)
    parser.add_argument("--block-mib", type=float, default=4)
    parser.add_argument("--smoke", action="store_true", help="no GPU: CPU buffers (see the docstring)")
    args = parser.parse_args()
    if not args.smoke and (not torch.cuda.is_available() or torch.cuda.device_count() == 0):
        print(json.dumps({"error": "torch sees no CUDA device (torch.cuda.is_available() is False)"}))
        raise SystemExit(2)
    block_bytes = int(args.block_mib * MIB) // 8 * 8
    world = 3
    with tempfile.TemporaryDirectory(prefix="gpu-slots-") as tmp, mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(
            rank_main,
            args=(world, os.path.join(tmp, "store"), args.blocks, block_bytes, args.smoke, results),
            nprocs=world,
            join=True,
        )
        ranks = [dict(results[r]) for r in range(world)]
    expected = [2] * args.blocks
    writer, reader, cpu_reader = ranks
    report = {
        "blocks": args.blocks,
        "block_bytes": block_bytes,
        "ranks": ranks,
        "published_as_expected": writer["published"] == expected,
        "stream_waits_as_expected": reader["waited_for"] == expected,
        "sequences_as_expected": all(r["sequences"] == expected for r in ranks),
        "stream_reader_wrong_blocks": reader["wrong_blocks"],
        "cpu_reader_wrong_blocks": cpu_reader["wrong_blocks"],
    }
    if not args.smoke:
        report["device_sequences_as_expected"] = reader["device_sequences"] == expected
        moved = args.blocks * block_bytes
        report["handoff_gbps"] = moved / max(writer["written_s"], reader["drained_s"]) / 1e9
        report["plain_copy_gbps"] = reader["plain_copy_gbps"]
    for figures in ranks:  # the lists are checked above: keep the report short
        for name in ("published", "waited_for", "sequences", "device_sequences"):
            figures.pop(name, None)
    report["all_correct"] = (
        report["published_as_expected"]
        and report["stream_waits_as_expected"]
        and report["sequences_as_expected"]
        and report.get("device_sequences_as_expected", True)
        and report["stream_reader_wrong_blocks"] == 0
        and report["cpu_reader_wrong_blocks"] == 0
    )
    print(json.dumps(report, indent=1))
    raise SystemExit(0 if report["all_correct"] else 1)


if __name__ == "__main__":
    main()
