# SPDX-License-Identifier: Apache-2.0
"""One rank of a real torch.distributed (gloo) group for test_slots.py: the publish slots.

Usage: slots_worker.py SCENARIO RANK WORLD PARAMS_JSON; prints one JSON line.
Scenarios where a rank dies exit without any further collective, so that no
rank can hang in gloo on a dead peer.
"""

import json
import os
import signal
import time

import numpy
import torch.distributed as dist

from mooncake.shared_segment import SharedSegmentError, SlotClaim, create_shared_segment
from gloo_scenarios import run  # beside this script: the group, the scenario, the result line

WORDS = 8192  # a block of 64 KiB
DATA = 0  # the writer publishes here; reader r acknowledges on slot r
WAIT = 30.0  # seconds: a wait that long is a failure, never a slow pass


def blocks():
    return {"block": {"count": 1, "shape": (WORDS,), "dtype": "int64"}}


def base():
    """Every word different, so that a copy mixing two rounds cannot look like one."""
    return numpy.arange(WORDS, dtype=numpy.int64) * 1000003


def publish(rank, world, group, params):
    """Rank 0 writes block after block and publishes; every reader waits, checks every word, acknowledges.

    Then the seqlock: rank 0 rewrites the block in place under writing()
    without waiting for anyone while the readers copy between read_begin and
    read_retry; no accepted copy may mix two rewrites.
    """
    rounds, rewrites = params["rounds"], params["rewrites"]
    done = world  # the writer's "no more rewrites" slot
    seg = create_shared_segment("slots", blocks(), world, rank, comm_group=group, slots=world + 1)
    slots = seg.slots
    block = numpy.frombuffer(seg.buffers("block")[0], dtype=numpy.int64)
    pattern = base()
    torn = timeouts = wrong_sequence = 0
    start = time.monotonic()
    seen = 0
    for r in range(1, rounds + 1):
        try:
            if rank == 0:
                numpy.add(pattern, r, out=block)
                if slots.publish(DATA) != 2 * r:
                    wrong_sequence += 1
                for k in range(1, world):
                    if slots.wait(k, 2 * r - 2, timeout=WAIT) != 2 * r:
                        wrong_sequence += 1
            else:
                seen = slots.wait(DATA, seen, timeout=WAIT)
                if seen != 2 * r:
                    wrong_sequence += 1
                if not numpy.array_equal(block, pattern + seen // 2):
                    torn += 1
                slots.publish(rank)
        except TimeoutError:
            timeouts += 1
            break
    publish_s = time.monotonic() - start

    dist.barrier(group)
    accepted = seqlock_torn = 0
    seqlock_done = rank == 0
    start = time.monotonic()
    if rank == 0:
        for r in range(1, rewrites + 1):
            with slots.writing(DATA):
                numpy.add(pattern, r, out=block)
        slots.publish(done)
    else:
        sequences = slots.sequences(tensor=False)  # a live view: the loop polls it without a call
        copy = numpy.empty_like(block)
        while sequences[done] == 0 and time.monotonic() - start < WAIT:
            seq = slots.read_begin(DATA, timeout=WAIT)
            numpy.copyto(copy, block)
            if slots.read_retry(DATA, seq):
                continue
            accepted += 1
            offset = copy - pattern
            if not (offset == offset[0]).all():
                seqlock_torn += 1
        seqlock_done = sequences[done] != 0
        sequences.release()
    seqlock_s = time.monotonic() - start
    del block
    dist.barrier(group)
    seg.close()
    return {
        "rounds": rounds,
        "torn": torn,
        "timeouts": timeouts,
        "wrong_sequence": wrong_sequence,
        "publish_s": publish_s,
        "accepted": accepted,
        "seqlock_torn": seqlock_torn,
        "seqlock_done": seqlock_done,
        "seqlock_s": seqlock_s,
    }


def dead(pid):
    """True once @pid has exited (a zombie until the test reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def claims(rank, world, group, params):
    """Rank 1 claims slot 0, fills half its block and is SIGKILLed; rank 2 takes the block over.

    Rank 3 claims slot 1 and closes its segment: rank 2 takes that over too.
    Rank 0 waits for slot 0's publish and checks that the block is rank 2's,
    whole.  After the second barrier no rank joins a collective.  With
    params["mid_write"] rank 1 fills inside write_begin() and dies before
    write_end(): rank 2 cannot publish over that write (EBUSY), writes the
    block with write_begin()/write_end() instead, and rank 0's wait sees
    only that.
    """
    pids = [None] * world
    dist.all_gather_object(pids, os.getpid(), group=group)
    seg = create_shared_segment("claims", blocks(), world, rank, comm_group=group, slots=2)
    slots = seg.slots
    result = {}
    if rank == 1:
        result["first"] = int(slots.try_claim(0))
        result["again"] = int(slots.try_claim(0))
    if rank == 3:
        result["first"] = int(slots.try_claim(1))
    dist.barrier(group)
    if rank == 2:
        result["while_alive"] = [int(slots.try_claim(0)), int(slots.try_claim(1))]
        try:
            slots.release_claim(0)
            result["release_not_held"] = "returned"
        except SharedSegmentError as exc:
            result["release_not_held"] = f"errno={exc.errno}: {exc}"
    dist.barrier(group)
    if rank == 1:
        if params.get("mid_write"):
            result["write_begin"] = slots.write_begin(0)
        block = numpy.frombuffer(seg.buffers("block")[0], dtype=numpy.int64)
        block[: WORDS // 2] = -1  # half way through filling it
        print(json.dumps(result), flush=True)  # its last words: it never returns
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 3:
        seg.close()
        return {"closed": True, **result}
    if rank == 2:
        deadline = time.monotonic() + 20
        while not dead(pids[1]) and time.monotonic() < deadline:
            time.sleep(0.001)
        died = time.monotonic()
        result["victim_dead"] = dead(pids[1])
        # The claim is free once every thread of the dead process has exited,
        # a few milliseconds after its leader shows as dead: retry up to 2 s.
        claim = SlotClaim.BUSY
        while claim == SlotClaim.BUSY and time.monotonic() - died < 2.0:
            claim = slots.try_claim(0)
            if claim == SlotClaim.BUSY:
                time.sleep(0.001)
        result["takeover"] = int(claim)
        result["takeover_s"] = time.monotonic() - died
        if params.get("mid_write"):
            try:
                result["publish_mid_write"] = f"returned {slots.publish(0)}"
            except SharedSegmentError as exc:
                result["publish_mid_write"] = f"errno={exc.errno}: {exc}"
            result["write_begin"] = slots.write_begin(0)
        block = numpy.frombuffer(seg.buffers("block")[0], dtype=numpy.int64)
        numpy.add(base(), 2, out=block)
        del block
        result["published"] = slots.write_end(0) if params.get("mid_write") else slots.publish(0)
        claim = SlotClaim.BUSY
        deadline = time.monotonic() + 20  # until rank 3 has closed its segment
        while claim == SlotClaim.BUSY and time.monotonic() < deadline:
            claim = slots.try_claim(1)
            time.sleep(0.001)
        result["closed_takeover"] = int(claim)
        if claim != SlotClaim.BUSY:
            slots.release_claim(1)
            result["reclaim"] = int(slots.try_claim(1))
    if rank == 0:
        try:
            result["seen"] = slots.wait(0, 0, timeout=WAIT)
            block = numpy.frombuffer(seg.buffers("block")[0], dtype=numpy.int64)
            result["block_ok"] = bool(numpy.array_equal(block, base() + 2))
            del block
        except TimeoutError as exc:
            result["seen"] = f"TimeoutError: {exc}"
    seg.close()
    return result


def mismatch(rank, world, group, params):
    """Rank 1 declares other slots (or a bad value): every rank must raise."""
    slots = params["odd"] if rank == 1 else params["slots"]
    try:
        seg = create_shared_segment("slots", blocks(), world, rank, comm_group=group, slots=slots)
    except SharedSegmentError as exc:
        return {"error": str(exc), "errno": exc.errno}
    seg.close()
    return {"error": None}


def stream(rank, world, group, params):
    """Publish in stream order (on the fake CUDA driver; tests/gpu/ does it on a GPU).

    Rank 0 writes the block and publishes on a stream; rank 1 waits on the
    CPU (the stream's host function wakes it); rank 2 queues its wait on a
    stream (the fake's stream waits in the call, as the device would); each
    reader checks every word and acknowledges on its own slot.
    """
    rounds = params["rounds"]
    seg = create_shared_segment(
        "stream-slots", blocks(), world, rank, comm_group=group, slots=world, host_register=True, device_id=rank % 2
    )
    slots = seg.slots
    block = numpy.frombuffer(seg.buffers("block")[0], dtype=numpy.int64)
    pattern = base()
    torn = wrong_sequence = 0
    for r in range(1, rounds + 1):
        if rank == 0:
            numpy.add(pattern, r, out=block)
            wrong_sequence += slots.publish(DATA, stream=0x77) != 2 * r
            for k in range(1, world):
                wrong_sequence += slots.wait(k, 2 * r - 2, timeout=WAIT) != 2 * r
            continue
        if rank == 1:
            seq = slots.wait(DATA, 2 * r - 2, timeout=WAIT)
        else:
            seq = slots.wait(DATA, 2 * r - 2, stream=0x88)
        wrong_sequence += seq != 2 * r
        torn += not numpy.array_equal(block, pattern + r)
        slots.publish(rank)
    errors = {}
    for name, call in (
        ("timeout", lambda: slots.wait(DATA, 0, timeout=1, stream=0)),
        ("stream", lambda: slots.publish(DATA, stream="default")),
        ("device", slots.device_sequences),
    ):
        try:
            call()
        except SharedSegmentError as exc:
            errors[name] = str(exc)
    address = seg._native.slot_device_words()[0]
    del block
    dist.barrier(group)
    seg.close()
    return {"torn": torn, "wrong_sequence": wrong_sequence, "errors": errors, "device_words": address}


SCENARIOS = {f.__name__: f for f in (publish, claims, mismatch, stream)}
# Scenarios after which some rank is dead: no closing barrier.
NO_BARRIER = {"claims"}


def main():
    run(SCENARIOS, NO_BARRIER)


if __name__ == "__main__":
    main()
