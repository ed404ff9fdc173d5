# SPDX-License-Identifier: Apache-2.0
"""One rank of a real torch.distributed (gloo) group for test_front.py: the readiness front.

Usage: front_worker.py SCENARIO RANK WORLD PARAMS_JSON; prints one JSON line.
Scenarios where a rank dies or stops exit without any further collective, so
that no rank can hang in gloo on a dead peer.
"""

import gc
import json
import os
import resource
import signal
import threading
import time

import numpy
import torch
import torch.distributed as dist

from mooncake.shared_segment import SharedSegmentError, create_shared_segment
from gloo_scenarios import run  # beside this script: the group, the scenario, the result line

ENTRY = 512 << 10  # one entry per rank fits in the first chunk (2 MiB) for 4 ranks


def blocks_of(size):
    return {"kv": {"count": size // ENTRY, "shape": (ENTRY,), "dtype": torch.uint8}}


def pattern(rank):
    """Rank @rank's bytes for its entry: never zero, different for every rank."""
    return ((numpy.arange(ENTRY, dtype=numpy.uint32) * (rank + 3) + 7 * rank) % 251 + 1).astype(numpy.uint8)


def watchers():
    return sum(1 for t in threading.enumerate() if t.name == "mooncake-segment-ready")


def segment_mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "mooncake-segment" in line)


def acceptance(rank, world, group, params):
    """Create in the background, use the first block at once, wait, check every byte."""
    size = params["size"]
    start = time.monotonic()
    seg = create_shared_segment("front", blocks_of(size), world, rank, comm_group=group, background=True)
    create_s = time.monotonic() - start
    ready_after_create = seg.ready_bytes
    offset = seg.offset("kv", rank)
    start = time.monotonic()
    first_ok = seg.wait_ready(offset, ENTRY, timeout=0)  # raises TimeoutError if it had to wait
    first_ms = (time.monotonic() - start) * 1000
    views = seg.buffers("kv")
    mine = numpy.frombuffer(views[rank], dtype=numpy.uint8)
    mine[:] = pattern(rank)
    own_ok = bool(numpy.array_equal(mine, pattern(rank)))
    future = seg.ready_future()
    start = time.monotonic()
    seg.wait_ready()
    wait_s = time.monotonic() - start
    future_result = future.result(timeout=30)
    ready_after_wait = seg.ready_bytes
    dist.barrier(group)  # every rank has written its entry
    start = time.monotonic()
    bad = 0
    for index, view in enumerate(views):
        entry = numpy.frombuffer(view, dtype=numpy.uint8)
        if index < world:
            bad += int(numpy.count_nonzero(entry != pattern(index)))
        else:
            bad += int(numpy.count_nonzero(entry.view(numpy.uint64)))
    check_s = time.monotonic() - start
    del mine, entry, view, views
    dist.barrier(group)
    seg.close()
    return {
        "create_s": create_s,
        "ready_after_create": ready_after_create,
        "first_ok": first_ok,
        "first_ms": first_ms,
        "own_ok": own_ok,
        "wait_s": wait_s,
        "future_result": future_result,
        "ready_after_wait": ready_after_wait,
        "size": size,
        "bad_bytes": bad,
        "check_s": check_s,
    }


def owner_killed(rank, world, group, params):
    """The owner SIGKILLs itself once half the segment is committed; every peer's wait must fail."""
    size = params["size"]
    seg = create_shared_segment(
        "front", blocks_of(size), world, rank, comm_group=group, background=True, commit_threads=1
    )
    if rank == 0:
        while True:
            ready = seg.ready_bytes
            if ready >= size:
                return {"too_fast": True}  # the commit ended before it could be cut: no test
            if ready >= size // 2:
                break
            time.sleep(0.001)
        with open(params["kill_file"], "w") as f:
            json.dump({"at": time.monotonic(), "ready": ready}, f)
        os.kill(os.getpid(), signal.SIGKILL)
    future = seg.ready_future()
    error = errno = None
    start = time.monotonic()
    try:
        seg.wait_ready(timeout=params["wait_timeout"])
    except SharedSegmentError as exc:
        error, errno = str(exc), exc.errno
    except TimeoutError as exc:
        error = f"TimeoutError: {exc}"
    failed_at = time.monotonic()
    ready = seg.ready_bytes
    try:
        future_error = future.exception(timeout=5)
    except BaseException as exc:  # noqa: BLE001 - reported, not raised
        future_error = exc
    try:
        with open(params["kill_file"]) as f:
            kill = json.load(f)
    except FileNotFoundError:
        kill = None
    return {
        "error": error,
        "errno": errno,
        "waited_s": failed_at - start,
        "after_kill_s": failed_at - kill["at"] if kill else None,
        "owner_ready_at_kill": kill["ready"] if kill else None,
        "ready_at_error": ready,
        "future_error_type": type(future_error).__name__,
        "future_error": str(future_error),
        "future_errno": getattr(future_error, "errno", None),
        "size": size,
    }


def wait_until_stopped(pid, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return True
        time.sleep(0.005)
    return False


def stopped_owner(rank, world, group, params):
    """The owner stops itself (SIGSTOP) right after create, its front frozen; the peer then
    waits (params["case"] "close": and closes meanwhile) or drops its segment ("drop").

    The test kills the owner once the peer has reported.
    """
    size = params["size"]
    pids = [None] * world
    dist.all_gather_object(pids, os.getpid(), group=group)
    seg = create_shared_segment(
        "front", blocks_of(size), world, rank, comm_group=group, background=True, commit_threads=1
    )
    if rank == 0:
        print(json.dumps({"stopping": os.getpid()}), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        return {"continued": True}  # the test kills it instead
    result = {"owner_stopped": wait_until_stopped(pids[0]), "front": seg.ready_bytes, "size": size}
    if params["case"] == "drop":
        holder = [seg]
        del seg  # the callee's reference is the last one
        return dropped_while_watched(holder, result)
    return waits_and_close(seg, result)


def waits_and_close(seg, result):
    # 1. wait_ready releases the GIL: another thread ticks while this one waits.
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    front = seg.ready_bytes
    thread = threading.Thread(target=ticker)
    thread.start()
    start = time.monotonic()
    try:
        seg.wait_ready(timeout=1.0)
        result["wait"] = "returned"
    except TimeoutError as exc:
        result["wait"] = f"TimeoutError errno={exc.errno}: {exc}"
    end = time.monotonic()
    stop.set()
    thread.join()
    during = [t for t in ticks if start <= t <= end]
    result["waited_s"] = end - start
    result["ticks_during_wait"] = len(during)
    gaps = [b - a for a, b in zip([start] + during, during + [end])]
    result["longest_gap_s"] = max(gaps)
    result["front_moved"] = seg.ready_bytes != front

    # 2. close() while ready_future's thread waits: prompt, and the future is cancelled.
    future = seg.ready_future()
    time.sleep(0.3)
    result["future_pending"] = not future.done()
    result["same_future"] = seg.ready_future() is future
    result["watchers_before_close"] = watchers()
    start = time.monotonic()
    seg.close()
    result["close_s"] = time.monotonic() - start
    result["cancelled_at_close"] = future.cancelled()
    deadline = time.monotonic() + 2
    while watchers() and time.monotonic() < deadline:
        time.sleep(0.01)
    result["watchers_after_close"] = watchers()
    try:
        seg.ready_future()
        result["ready_future_after_close"] = "returned"
    except ValueError as exc:
        result["ready_future_after_close"] = f"ValueError: {exc}"

    return result


def dropped_while_watched(holder, result):
    """The segment freed without close() while its future's thread waits: the thread lets it go."""
    seg = holder.pop()
    mappings = segment_mappings()
    future = seg.ready_future()
    time.sleep(0.3)
    result["future_pending"] = not future.done()
    result["watchers_before_drop"] = watchers()
    del seg
    gc.collect()
    deadline = time.monotonic() + 2
    while (watchers() or segment_mappings() == mappings) and time.monotonic() < deadline:
        time.sleep(0.01)
    result["dropped_cancelled"] = future.cancelled()
    result["watchers_after_drop"] = watchers()
    result["mappings_released"] = segment_mappings() < mappings
    return result


def failed_create(rank, world, group, params):
    """One rank fails its background create, natively or in Python; every rank must raise."""
    kwargs = dict(comm_group=group, background=True)
    if rank == params["odd_rank"]:
        if params["how"] == "file_size_limit":
            # The owner's create refuses a segment above RLIMIT_FSIZE (-EFBIG), before the kernel's SIGXFSZ.
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        else:
            kwargs["register_offset"] = ENTRY  # without host_register
    start = time.monotonic()
    try:
        seg = create_shared_segment("front", blocks_of(64 << 20), world, rank, **kwargs)
    except SharedSegmentError as exc:
        return {"error": str(exc), "errno": exc.errno, "seconds": time.monotonic() - start}
    seg.close()
    return {"error": None}


SCENARIOS = {f.__name__: f for f in (acceptance, owner_killed, stopped_owner, failed_create)}
# Scenarios after which some rank is dead or stopped: no closing barrier.
NO_BARRIER = {"owner_killed", "stopped_owner"}


def main():
    run(SCENARIOS, NO_BARRIER, group_timeout_s=30)


if __name__ == "__main__":
    main()
