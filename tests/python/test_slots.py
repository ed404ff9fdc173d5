# SPDX-License-Identifier: Apache-2.0
"""The publish slots from Python: create_shared_segment(slots=N) and seg.slots.

Real processes (slots_worker.py, ranks of a torch.distributed gloo group): a
writer publishes 10,000 64 KiB blocks that three readers wait for, check
word by word and acknowledge (no torn block, no timeout), then rewrites the
block in place under the seqlock while they copy (no torn copy accepted); a
claimer SIGKILLed half way through filling its block, and one that closed its
segment, are taken over by another rank; ranks that declare different slots
fail together.  In one process: the waits release the GIL, a publish from
another thread wakes a wait, close() ends a wait promptly, the sequences
view, and every bad argument.  Times are printed, never asserted, except the
bounds the documentation promises (a dead claimer's claim within 2 s,
close() within a slice).
"""

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import launch_gloo_ranks, leak_check, report
from mooncake import _segment, _shared_segment_slots
from mooncake.shared_segment import SegmentSlots, SharedSegmentError, SlotClaim, create_shared_segment

HERE = Path(__file__).resolve().parent
ROUNDS = int(os.environ.get("MOONCAKE_SEGMENT_LITMUS_ROUNDS", "10000"))


def launch(scenario, world, timeout=180, **params):
    """Run @world ranks of slots_worker.py SCENARIO (conftest.launch_gloo_ranks)."""
    return launch_gloo_ranks(HERE / "slots_worker.py", scenario, world, timeout, **params)


# --- 4 ranks of a gloo group -------------------------------------------------------


def test_four_ranks_never_see_a_torn_block(capsys):
    results = launch("publish", 4, rounds=ROUNDS, rewrites=2 * ROUNDS)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, r["stderr"]
        assert r["timeouts"] == 0, f"rank {rank} timed out waiting"
        assert r["wrong_sequence"] == 0, f"rank {rank} saw {r['wrong_sequence']} unexpected sequences"
        assert r["torn"] == 0, f"rank {rank} read {r['torn']} torn blocks of {r['rounds']}"
        assert r["seqlock_done"], f"rank {rank} never saw the end of the rewrites"
        assert r["seqlock_torn"] == 0, f"rank {rank} accepted {r['seqlock_torn']} torn copies of {r['accepted']}"
        if rank:
            assert r["accepted"] > 0, f"rank {rank} never accepted a copy under the seqlock"
    report(
        capsys,
        f"publish/wait: {ROUNDS} blocks of 64 KiB to 3 readers, acknowledged; then {2 * ROUNDS} seqlock rewrites:",
        [
            f"rank {rank}: {r['publish_s'] / ROUNDS * 1e6:.0f} us a round; seqlock {r['seqlock_s']:.2f} s, "
            f"{r['accepted']} copies accepted"
            for rank, r in enumerate(results)
        ],
    )


def test_publish_in_stream_order_reaches_cpu_and_stream_waiters(fake_cuda_ranks):
    pytest.importorskip("torch", reason="python3-torch is not installed; the gloo ranks need it")
    log = fake_cuda_ranks
    rounds = 200
    results = launch("stream", 3, rounds=rounds)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, r["stderr"]
        assert (r["torn"], r["wrong_sequence"]) == (0, 0), f"rank {rank}: {r}"
        assert r["device_words"] > 0
        assert "takes no timeout" in r["errors"]["timeout"]
        assert "takes a torch.cuda.Stream" in r["errors"]["stream"]
        assert "needs a torch built with CUDA" in r["errors"]["device"]
    text = log.read_text()
    # Every publish of the writer went through its stream, then woke the CPU waiters.
    assert text.count("stream-write stream 0x77") == rounds
    assert text.count("host-func stream 0x77") == rounds
    assert text.count("stream-waited stream 0x88") == rounds
    assert "ERROR" not in text


def test_stream_order_without_host_register_says_so():
    seg = create_shared_segment("no-stream", {"b": {"count": 1, "shape": (64,), "dtype": "uint8"}}, 1, 0, slots=2)
    with pytest.raises(SharedSegmentError, match="need host_register=true") as raised:
        seg.slots.publish(0, stream=0)
    assert raised.value.errno == errno.ENOTSUP
    with pytest.raises(SharedSegmentError, match="need host_register=true"):
        seg.slots.wait(0, 0, stream=0)
    assert seg.slots.publish(0) == 2  # the CPU's publish is unaffected
    seg.close()


@pytest.mark.parametrize("mid_write", [False, True])
def test_a_claimer_killed_half_way_is_taken_over(capsys, mid_write):
    results = launch("claims", 4, timeout=120, mid_write=mid_write)
    owner, victim, heir, closer = results
    assert victim["returncode"] == -9, victim["stderr"]
    assert victim["first"] == SlotClaim.CLAIMED and victim["again"] == SlotClaim.CLAIMED
    if mid_write:  # killed between write_begin and write_end
        assert victim["write_begin"] == 1
        assert heir["publish_mid_write"].startswith(f"errno={errno.EBUSY}: "), heir["publish_mid_write"]
        assert "slot 0: cannot publish while a write is in progress" in heir["publish_mid_write"]
        assert heir["write_begin"] == 3  # the heir's write: still odd, no reader accepts the half block
    for r in (owner, heir, closer):
        assert r["returncode"] == 0, r["stderr"]
    assert closer["first"] == SlotClaim.CLAIMED and closer["closed"]
    assert heir["while_alive"] == [SlotClaim.BUSY, SlotClaim.BUSY]  # live holders keep their claims
    assert heir["release_not_held"].startswith(f"errno={errno.EPERM}: "), heir["release_not_held"]
    assert "does not hold its claim" in heir["release_not_held"]
    assert heir["victim_dead"]
    # The documented bound: free once the kernel has ended the dead process's threads (retried up to 2 s).
    assert heir["takeover"] == SlotClaim.TAKEN_OVER, heir
    assert heir["takeover_s"] < 2.0
    assert heir["published"] == (4 if mid_write else 2)
    assert heir["closed_takeover"] == SlotClaim.TAKEN_OVER  # a claimer that closed its segment
    assert heir["reclaim"] == SlotClaim.CLAIMED
    assert owner["seen"] == heir["published"], owner["seen"]  # never the half-written block
    assert owner["block_ok"], "the block is not the heir's, whole"
    report(capsys, "claims:", [f"a SIGKILLed claimer's claim taken over {heir['takeover_s'] * 1000:.1f} ms after"])


@pytest.mark.parametrize(
    "slots, odd, message, code",
    [
        (2, 3, "rank 1: InvalidArgument: ", errno.EINVAL),  # the C library's declaration check at complete
        (2, -1, "rank 1: slots must be an int in [0, 65536]", None),  # Python's check at create
    ],
)
def test_ranks_that_declare_different_slots_fail_together(slots, odd, message, code):
    results = launch("mismatch", 2, timeout=90, slots=slots, odd=odd, group_timeout=20)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, r["stderr"]
        assert r["error"] is not None and message in r["error"], (rank, r["error"])
        assert r["errno"] == code
    if code == errno.EINVAL:
        assert all("declaration" in r["error"] for r in results)


# --- One process ---------------------------------------------------------------------

BLOCKS = {"block": {"count": 2, "shape": (4096,), "dtype": "uint8"}}


def slotted(count=4):
    return create_shared_segment("slots", BLOCKS, 1, 0, slots=count)


def test_publish_wait_and_the_seqlock_in_one_rank():
    with leak_check():
        seg = slotted()
        slots = seg.slots
        assert isinstance(slots, SegmentSlots) and len(slots) == 4
        assert slots.publish(1) == 2 and slots.publish(1) == 4
        assert slots.wait(1, 0, timeout=0) == 4 and slots.wait(1, 2) == 4
        with slots.writing(2) as odd:
            assert odd == 1
            with pytest.raises(SharedSegmentError) as raised:
                slots.write_begin(2)
            assert raised.value.errno == errno.EBUSY and str(raised.value).startswith("Busy: ")
            assert "another write is in progress" in str(raised.value)
            with pytest.raises(TimeoutError) as timed_out:
                slots.read_begin(2, timeout=0.02)
            assert timed_out.value.errno == errno.ETIMEDOUT
            assert "write in progress did not end within 0.02 s (sequence 1)" in str(timed_out.value)
        seq = slots.read_begin(2)
        assert seq == 2 and slots.read_retry(2, seq) is False
        slots.publish(2)
        assert slots.read_retry(2, seq) is True
        with pytest.raises(SharedSegmentError) as raised:
            slots.write_end(2)
        assert raised.value.errno == errno.EINVAL and "write_end without write_begin" in str(raised.value)
        with pytest.raises(TimeoutError) as timed_out:
            slots.wait(0, 0, timeout=0)
        assert "slot 0: no publish after sequence 0 within 0 s" in str(timed_out.value)
        seg.close()


def test_writing_ends_the_write_when_its_body_raises():
    with slotted() as seg:
        with pytest.raises(KeyError):
            with seg.slots.writing(0):
                raise KeyError("half written")
        assert seg.slots.read_begin(0, timeout=0) == 2  # even again: readers and writers go on
        with seg.slots.writing(0) as odd:
            assert odd == 3


def test_claims_in_one_rank():
    with slotted() as seg:
        assert seg.slots.try_claim(3) is SlotClaim.CLAIMED
        assert seg.slots.try_claim(3) == 1 and seg.slots.try_claim(3)  # an int, true when held
        seg.slots.release_claim(3)
        with pytest.raises(SharedSegmentError) as raised:
            seg.slots.release_claim(3)
        assert raised.value.errno == errno.EPERM and str(raised.value).startswith("PermissionDenied: ")
        assert "does not hold its claim" in str(raised.value)
        assert not SlotClaim.BUSY


def ticking(action):
    """Run @action while another thread ticks every ms; (action's outcome, ticks during it, longest gap)."""
    ticks, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    start = time.monotonic()
    try:
        outcome = action()
    except BaseException as exc:  # noqa: BLE001 - reported
        outcome = exc
    end = time.monotonic()
    stop.set()
    thread.join()
    during = [t for t in ticks if start <= t <= end]
    gaps = [b - a for a, b in zip([start] + during, during + [end])]
    return outcome, len(during), max(gaps), end - start


@pytest.mark.parametrize("call", ["wait", "read_begin"])
def test_the_waits_release_the_gil(call):
    with slotted() as seg:
        if call == "wait":
            outcome, ticks, gap, waited = ticking(lambda: seg.slots.wait(0, 0, timeout=1.0))
        else:
            seg.slots.write_begin(0)
            outcome, ticks, gap, waited = ticking(lambda: seg.slots.read_begin(0, timeout=1.0))
            seg.slots.write_end(0)
        assert isinstance(outcome, TimeoutError) and outcome.errno == errno.ETIMEDOUT, outcome
        assert waited >= 0.9
        # Another thread ran while this one waited: no stretch anywhere near the whole second.
        assert ticks > 10 and gap < 0.5, (ticks, gap)


def test_a_publish_from_another_thread_wakes_a_wait():
    with slotted() as seg:
        timer = threading.Timer(0.2, seg.slots.publish, args=(1,))
        start = time.monotonic()
        timer.start()
        assert seg.slots.wait(1, 0, timeout=10) == 2
        assert time.monotonic() - start < 5
        timer.join()


@pytest.mark.parametrize("call", ["wait", "read_begin"])
def test_close_ends_a_waiting_thread_promptly(call):
    with leak_check():
        seg = slotted()
        native = seg._native
        outcome = []
        if call == "read_begin":
            seg.slots.write_begin(0)

        def waiter():
            try:
                # A bound, so that a close() that cannot end the wait fails the test instead of hanging it.
                if call == "wait":
                    outcome.append(seg.slots.wait(0, 0, timeout=10))
                else:
                    outcome.append(seg.slots.read_begin(0, timeout=10))
            except BaseException as exc:  # noqa: BLE001 - reported
                outcome.append(exc)

        thread = threading.Thread(target=waiter)
        thread.start()
        deadline = time.monotonic() + 5
        while native.busy != "wait_slot" and time.monotonic() < deadline:
            time.sleep(0.001)
        assert native.busy == "wait_slot"
        with pytest.raises(RuntimeError, match="another thread is inside a slot wait"):
            native.finish()
        assert seg.slots.publish(1) == 2  # the other slot calls run beside the wait
        start = time.monotonic()
        seg.close()
        closed_in = time.monotonic() - start
        thread.join(15)
        assert not thread.is_alive()
        assert closed_in < 2.0, f"close() took {closed_in:.2f} s with a thread waiting"
        assert isinstance(outcome[0], ValueError), outcome
        assert "closed while this thread waited" in str(outcome[0])
        with pytest.raises(ValueError, match="closed"):
            seg.slots.publish(0)


# --- Ctrl-C in a wait, in a real process -------------------------------------------

WAITER = """
import signal, sys, threading, time
from mooncake.shared_segment import create_shared_segment

class Custom(Exception):
    pass

def raise_custom(signum, frame):
    raise Custom("raised by the handler")

handled = []
call, handler, timeout = sys.argv[1], sys.argv[2], None if sys.argv[3] == "none" else float(sys.argv[3])
if handler == "default":  # what a terminal's Ctrl-C finds; a background job starts with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
elif handler == "custom":
    signal.signal(signal.SIGINT, raise_custom)
elif handler == "close":  # a handler that closes the segment waited on: the wait says so
    signal.signal(signal.SIGINT, lambda signum, frame: seg.close())
elif handler == "quiet":  # a handler that raises nothing: the wait goes on
    signal.signal(signal.SIGINT, lambda signum, frame: handled.append(time.monotonic()))
seg = create_shared_segment("slot-signals", {"block": {"count": 1, "shape": (64,), "dtype": "uint8"}}, 1, 0, slots=1)
if call == "read_begin":
    seg.slots.write_begin(0)  # a write that never ends
if handler == "quiet":  # the publish the wait is for, well after the signal
    threading.Timer(1.0, lambda: seg.slots.write_end(0) if call == "read_begin" else seg.slots.publish(0)).start()
print("waiting", flush=True)
start = time.monotonic()
try:
    result = seg.slots.wait(0, 0, timeout) if call == "wait" else seg.slots.read_begin(0, timeout)
    print("returned", result, [round(t - start, 3) for t in handled], flush=True)
except BaseException as exc:
    print(type(exc).__name__, time.monotonic(), flush=True)  # CLOCK_MONOTONIC: the test's clock too
"""


def interrupted(script, args, signum=signal.SIGINT, after=0.3, bound=2.0):
    """Start @script, wait for its "waiting" line, send @signum @after s later: its output and when it was sent."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "waiting", child.stderr.read()
        time.sleep(after)  # inside the native wait by now
        sent = time.monotonic()
        child.send_signal(signum)
        try:
            child.wait(bound)
        except subprocess.TimeoutExpired:
            pass
        assert child.returncode is not None, f"still waiting {bound} s after the signal"
        return child.stdout.read().strip(), sent
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("timeout", ["none", "60"])
@pytest.mark.parametrize(
    "handler, raised", [("default", "KeyboardInterrupt"), ("custom", "Custom"), ("close", "ValueError")]
)
@pytest.mark.parametrize("call", ["wait", "read_begin"])
def test_ctrl_c_ends_a_slot_wait_nobody_publishes(capsys, call, handler, raised, timeout):
    line, sent = interrupted(WAITER, [call, handler, timeout])
    name, caught = line.split()
    assert name == raised, line
    report(
        capsys,
        f"{call}(timeout={timeout}), {handler} SIGINT handler:",
        [f"{raised} {(float(caught) - sent) * 1000:.0f} ms after the signal"],
    )


@pytest.mark.parametrize("call", ["wait", "read_begin"])
def test_a_handler_that_raises_nothing_runs_at_once_and_the_wait_goes_on(call):
    line, _ = interrupted(WAITER, [call, "quiet", "none"], bound=5.0)
    words = line.split(maxsplit=2)
    assert words[:2] == ["returned", "2"], line  # the publish 1 s later, not lost
    handled = json.loads(words[2])
    assert len(handled) == 1 and handled[0] < 0.9, line  # the handler ran while the wait went on


def test_sequences_are_a_live_view_that_holds_the_segment():
    torch = pytest.importorskip("torch")
    with leak_check():
        seg = slotted(3)
        sequences = seg.slots.sequences()
        assert isinstance(sequences, torch.Tensor) and sequences.dtype == torch.int64
        assert sequences.tolist() == [0, 0, 0]
        seg.slots.publish(2)
        seg.slots.publish(2)
        seg.slots.write_begin(0)
        assert sequences.tolist() == [1, 0, 4]  # live: the shared words, no copy
        seg.slots.write_end(0)
        words = seg.slots.sequences(tensor=False)
        assert isinstance(words, memoryview) and words.readonly and words.format == "q"
        assert words.tolist() == [2, 0, 4]
        with pytest.raises(TypeError):
            words[0] = 5  # read-only
        with pytest.raises(BufferError):
            seg.close()  # the views hold the mapping
        del sequences, words
        seg.close()


def test_sequences_without_torch_are_a_memoryview(monkeypatch):
    monkeypatch.setattr(_shared_segment_slots, "torch", None)
    with slotted(2) as seg:
        seg.slots.publish(1)
        words = seg.slots.sequences()
        assert isinstance(words, memoryview) and words.tolist() == [0, 2]
        words.release()
        with pytest.raises(SharedSegmentError, match="needs torch"):
            seg.slots.sequences(tensor=True)


def test_a_segment_without_slots_says_how_to_get_them():
    with create_shared_segment("slots", BLOCKS, 1, 0) as seg:
        with pytest.raises(SharedSegmentError, match="pass slots=N to create_shared_segment"):
            seg.slots


@pytest.mark.parametrize(
    "slots, message",
    [
        (-1, "slots must be an int in [0, 65536]"),
        (65537, "slots must be an int in [0, 65536]"),
        ("4", "slots must be an int in [0, 65536]"),
        (4.0, "slots must be an int in [0, 65536]"),
        (True, "slots must be an int in [0, 65536]"),
        (None, "slots must be an int in [0, 65536]"),
    ],
)
def test_bad_slots_are_clear_errors(slots, message):
    with pytest.raises(SharedSegmentError) as raised:
        create_shared_segment("slots", BLOCKS, 1, 0, slots=slots)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "call, args, message",
    [
        ("publish", (4,), "publish: slot must be an int in [0, 3] (the segment has 4 slots), got 4"),
        ("publish", (-1,), "slot must be an int in [0, 3]"),
        ("publish", (True,), "slot must be an int in [0, 3]"),
        ("publish", ("0",), "slot must be an int in [0, 3]"),
        ("wait", (0, -1), "wait: seen must be a sequence, an int >= 0, got -1"),
        ("wait", (0, 1.5), "seen must be a sequence"),
        ("wait", (0, 0, -1), "wait: timeout must be None (no limit) or a finite number of seconds >= 0"),
        ("wait", (0, 0, float("nan")), "timeout must be None"),
        ("wait", (0, 0, float("inf")), "timeout must be None"),
        ("wait", (0, 0, "1"), "timeout must be None"),
        ("read_begin", (0, True), "read_begin: timeout must be None"),
        ("read_begin", (9,), "read_begin: slot must be an int in [0, 3]"),
        ("read_retry", (0, -2), "read_retry: sequence must be a sequence, an int >= 0"),
        ("write_begin", (None,), "write_begin: slot must be an int"),
        ("write_end", (5,), "write_end: slot must be an int"),
        ("try_claim", (4,), "try_claim: slot must be an int"),
        ("release_claim", (1 << 40,), "release_claim: slot must be an int"),
    ],
)
def test_bad_slot_arguments_are_clear_errors(call, args, message):
    with slotted() as seg:
        with pytest.raises(SharedSegmentError) as raised:
            getattr(seg.slots, call)(*args)
        assert message in str(raised.value)


def test_the_native_slots_check_their_arguments():
    with pytest.raises(TypeError, match="slot_count must be an int"):
        _segment.SharedSegment.create("native", 1 << 20, 1, 0, slot_count="2")
    with pytest.raises(ValueError, match="slot_count must be <= 65536"):
        _segment.SharedSegment.create("native", 1 << 20, 1, 0, slot_count=65537)
    assert _segment.MAX_SLOTS == 65536
    seg, blob = _segment.SharedSegment.create("native", 1 << 20, 1, 0)
    try:
        seg.complete([blob])
        with pytest.raises(_segment.SegmentError, match="declares no publish slots.*slots=N"):
            seg.publish(0)
        with pytest.raises(_segment.SegmentError, match="declares no publish slots"):
            seg.slot_words()
        with pytest.raises(ValueError, match="seen must be >= 0"):
            seg.wait_slot(0, -1)
        with pytest.raises(TypeError, match="timeout must be None or a number of seconds"):
            seg.read_begin(0, "soon")
    finally:
        seg.close()
    with pytest.raises(ValueError, match="closed"):
        seg.publish(0)
