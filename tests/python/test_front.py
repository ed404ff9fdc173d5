# SPDX-License-Identifier: Apache-2.0
"""The readiness front from Python: background=True, wait_ready(), ready_bytes, ready_future().

Real processes and real memory: ranks of a torch.distributed gloo group
(front_worker.py) create segments of up to 4 GiB in the background, use their
first block at once, wait for the rest and check every byte; an owner
SIGKILLed half way through its commit fails every peer's wait within the
library's liveness bound; an owner stopped (SIGSTOP) with its front frozen
gives waits that never end by themselves, for the GIL, close() and
garbage-collection cases.  In one process: timeouts, the future, and the
checks of every argument.  Times are printed, never asserted, except the
liveness bound of a dead owner's discovery (2 s: the library looks every
100 ms) and close()'s promptness (a wait it could not end would hang it).
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
from mooncake import _segment
from mooncake.shared_segment import SharedSegmentError, create_shared_segment

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
ENTRY = 512 << 10


def launch(scenario, world, timeout=120, stopped_ranks=(), **params):
    """Run @world ranks of front_worker.py SCENARIO (conftest.launch_gloo_ranks)."""
    return launch_gloo_ranks(HERE / "front_worker.py", scenario, world, timeout, stopped_ranks, **params)


# --- 4 ranks of a gloo group, 4 GiB ------------------------------------------


def test_four_ranks_use_the_first_block_at_once_and_see_every_byte(capsys):
    results = launch("acceptance", 4, timeout=300, size=4 * GIB)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, r["stderr"]
        assert r["first_ok"] is True  # wait_ready(offset, block, timeout=0): usable without waiting
        assert r["own_ok"], f"rank {rank} did not read back what it wrote"
        assert r["future_result"] == r["size"] == 4 * GIB
        assert r["ready_after_wait"] == 4 * GIB
        assert r["bad_bytes"] == 0, f"rank {rank}: {r['bad_bytes']} bytes differ from what the ranks wrote"
    report(
        capsys,
        "background create of 4 GiB, 4 ranks:",
        [
            f"rank {rank}: create {r['create_s'] * 1000:.1f} ms, ready then {r['ready_after_create'] >> 20} MiB, "
            f"first block wait {r['first_ms']:.3f} ms, rest {r['wait_s']:.2f} s, byte check {r['check_s']:.2f} s"
            for rank, r in enumerate(results)
        ],
    )


def test_an_owner_killed_half_way_fails_every_peers_wait_within_two_seconds(tmp_path, capsys):
    results = launch("owner_killed", 4, size=4 * GIB, kill_file=str(tmp_path / "kill.json"), wait_timeout=30)
    owner = results[0]
    assert not owner.get("too_fast"), "the commit ended before the owner could die half way"
    assert owner["returncode"] == -signal.SIGKILL, owner["stderr"]
    for rank, r in enumerate(results[1:], start=1):
        assert r["returncode"] == 0, r["stderr"]  # no hang in a collective, no crash
        assert r["error"] is not None, f"rank {rank}: wait_ready() returned although the owner died"
        assert "died while committing" in r["error"], r["error"]
        assert r["errno"] == errno.ESRCH
        assert r["owner_ready_at_kill"] >= r["size"] // 2
        assert r["size"] // 2 <= r["ready_at_error"] < r["size"]
        # The liveness bound (the library looks at the owner every 100 ms), not a speed.
        assert r["after_kill_s"] < 2.0, f"rank {rank} noticed the death {r['after_kill_s']:.2f} s after it"
        assert r["future_error_type"] == "SharedSegmentError", r["future_error"]
        assert "died while committing" in r["future_error"]
        assert r["future_errno"] == errno.ESRCH
    report(
        capsys,
        "owner SIGKILLed half way through a 4 GiB background commit:",
        [
            f"rank {rank}: raised {r['after_kill_s'] * 1000:.0f} ms after the kill, "
            f"front {r['ready_at_error'] >> 20} MiB of {r['size'] >> 20}"
            for rank, r in enumerate(results[1:], start=1)
        ],
    )


# --- An owner stopped with its front frozen -------------------------------------


def stopped_owner_peer(case):
    """The peer's result of a stopped_owner run whose owner stopped before its commit ended.

    The owner stops itself once create_shared_segment returns, after the group's
    exchanges; on a loaded machine (a sanitizer build, a parallel build) 1 GiB
    may be committed by then: the run is repeated at 4 GiB, where it cannot.
    """
    for size in (GIB, 4 * GIB):
        owner, peer = launch("stopped_owner", 2, stopped_ranks=(0,), size=size, case=case)
        assert peer["returncode"] == 0, peer["stderr"]
        assert peer["owner_stopped"], peer
        if peer["front"] < peer["size"]:
            return peer
    pytest.fail(f"the owner committed {peer['size']} bytes before it stopped, twice: the front never froze")


def test_wait_ready_releases_the_gil_and_close_ends_the_future_promptly(capsys):
    peer = stopped_owner_peer("close")
    assert not peer["front_moved"]
    assert peer["wait"].startswith(f"TimeoutError errno={errno.ETIMEDOUT}"), peer["wait"]
    assert peer["waited_s"] >= 0.9
    # Another thread ran while this one waited: no stretch anywhere near the whole second.
    assert peer["ticks_during_wait"] > 10 and peer["longest_gap_s"] < 0.5, peer
    assert peer["future_pending"] and peer["same_future"] and peer["watchers_before_close"] == 1
    assert peer["close_s"] < 2.0, f"close() took {peer['close_s']:.2f} s with a waiting future"
    assert peer["cancelled_at_close"]
    assert peer["watchers_after_close"] == 0
    assert peer["ready_future_after_close"].startswith("ValueError: operation on a closed shared segment")
    report(
        capsys,
        f"stopped owner, {peer['size'] >> 30} GiB:",
        [f"close() with a waiting future took {peer['close_s'] * 1000:.0f} ms"],
    )


def test_a_segment_dropped_while_its_future_waits_is_freed_and_the_future_cancelled():
    peer = stopped_owner_peer("drop")
    assert peer["future_pending"] and peer["watchers_before_drop"] == 1
    assert peer["dropped_cancelled"], peer
    assert peer["watchers_after_drop"] == 0
    assert peer["mappings_released"]  # the watcher kept no reference: the segment was unmapped


# --- Every rank fails together -------------------------------------------------


@pytest.mark.parametrize(
    "how, odd_rank, message",
    [
        ("file_size_limit", 0, "rank 0: Memory: "),  # the library's -EFBIG from the owner's create
        ("python_check", 2, "rank 2: register_offset and register_length"),
    ],
)
def test_a_background_create_that_fails_on_one_rank_fails_on_every_rank(how, odd_rank, message):
    results = launch("failed_create", 3, timeout=90, how=how, odd_rank=odd_rank, group_timeout=20)
    for rank, r in enumerate(results):
        assert r["returncode"] == 0, r["stderr"]
        assert r["error"] is not None and message in r["error"], (rank, r["error"])
        assert r["error"].startswith("Shared segment create failed: ")
    if how == "file_size_limit":
        assert all(r["errno"] == errno.EFBIG for r in results)


# --- One process ---------------------------------------------------------------


def background_segment(size=GIB, **kwargs):
    blocks = {"kv": {"count": size // ENTRY, "shape": (ENTRY,), "dtype": "uint8"}}
    return create_shared_segment("front", blocks, 1, 0, background=True, commit_threads=1, **kwargs)


def test_a_short_timeout_right_after_create_is_a_timeout_error():
    with leak_check():
        seg = background_segment()
        assert seg.ready_bytes < seg.total_size()
        with pytest.raises(TimeoutError) as raised:
            seg.wait_ready(timeout=0.01)
        assert raised.value.errno == errno.ETIMEDOUT
        assert f"bytes [0, {GIB}) not ready within 0.01 s" in str(raised.value)
        assert seg.wait_ready(0, ENTRY, timeout=0) is True  # the first chunk
        assert seg.wait_ready() is True
        assert seg.ready_bytes == seg.total_size() == GIB
        seg.close()


def test_ready_future_resolves_to_the_size_and_is_one_future():
    with leak_check():
        seg = background_segment()
        future = seg.ready_future()
        assert seg.ready_future() is future
        assert future.result(timeout=60) == GIB
        assert seg.ready_bytes == GIB
        assert seg.ready_future() is future
        seg.close()
        assert future.result() == GIB  # close() leaves a done future as it is
    deadline = time.monotonic() + 2
    while any(t.name == "mooncake-segment-ready" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "mooncake-segment-ready" for t in threading.enumerate())


def test_cancelling_the_future_stops_its_thread_and_the_next_call_makes_a_new_one():
    seg = background_segment(4 * GIB)
    future = seg.ready_future()
    assert future.cancel()
    deadline = time.monotonic() + 2
    while any(t.name == "mooncake-segment-ready" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "mooncake-segment-ready" for t in threading.enumerate())
    again = seg.ready_future()
    assert again is not future and again.result(timeout=60) == 4 * GIB
    seg.close()


def test_a_forked_child_waits_on_the_front_and_closes_without_the_parents_waiters():
    seg = background_segment()
    future = seg.ready_future()
    time.sleep(0.05)  # the watcher thread is inside the native wait when fork() copies the object
    pid = os.fork()
    if pid == 0:  # the child: no watcher thread of its own, the parent's count of waiters
        code = 3
        try:
            child_future = seg.ready_future()  # a new one: the parent's thread did not come along
            code = 2 if child_future is future else 1 if child_future.result(timeout=60) != GIB else 0
            seg.close()  # must not wait for the parent's waiter
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung (in close(), waiting for the parent's waiter?)")
    assert os.waitstatus_to_exitcode(status) == 0
    assert future.result(timeout=60) == GIB
    seg.close()


def test_without_background_everything_is_ready_when_create_returns():
    blocks = {"kv": {"count": 4, "shape": (ENTRY,), "dtype": "uint8"}}
    with create_shared_segment("front", blocks, 1, 0) as seg:
        assert seg.ready_bytes == seg.total_size()
        assert seg.wait_ready(timeout=0) is True
        future = seg.ready_future()
        assert future.done() and future.result() == seg.total_size()
        assert not any(t.name == "mooncake-segment-ready" for t in threading.enumerate())


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((-1,), {}, "offset must be an int in [0, 2097152]"),
        ((2097153,), {}, "offset must be an int in [0, 2097152]"),
        ((True,), {}, "offset must be an int"),
        ((1.5,), {}, "offset must be an int"),
        ((0, -1), {}, "length must be None (to the end) or an int in [0, 2097152]"),
        ((1, 2097152), {}, "length must be None (to the end) or an int in [0, 2097151]"),
        ((0, "1"), {}, "length must be None"),
        ((), {"timeout": -1}, "timeout must be None (no limit) or a finite number of seconds >= 0"),
        ((), {"timeout": float("nan")}, "timeout must be None"),
        ((), {"timeout": float("inf")}, "timeout must be None"),
        ((), {"timeout": "1"}, "timeout must be None"),
        ((), {"timeout": True}, "timeout must be None"),
    ],
)
def test_bad_wait_ready_arguments_are_clear_errors(args, kwargs, message):
    blocks = {"kv": {"count": 4, "shape": (ENTRY,), "dtype": "uint8"}}
    with create_shared_segment("front", blocks, 1, 0, background=True) as seg:
        with pytest.raises(SharedSegmentError) as raised:
            seg.wait_ready(*args, **kwargs)
        assert message in str(raised.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"background": "yes"}, "background must be True or False, got 'yes'"),
        ({"background": 1}, "background must be True or False, got 1"),
        ({"commit_threads": -1}, "commit_threads must be an int >= 0"),
        ({"commit_threads": 1.0}, "commit_threads must be an int >= 0"),
        ({"register_offset": 4096}, "they need host_register=True"),
        ({"register_length": 4096}, "they need host_register=True"),
        ({"register_pause_us": 10, "background": True}, "it needs background=True and host_register=True"),
    ],
)
def test_bad_front_options_are_clear_errors(kwargs, message):
    blocks = {"kv": {"count": 4, "shape": (ENTRY,), "dtype": "uint8"}}
    with pytest.raises(SharedSegmentError) as raised:
        create_shared_segment("front", blocks, 1, 0, **kwargs)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"register_offset": -1}, "register_offset must be an int in [0, 2097152]"),
        ({"register_offset": 2097153}, "register_offset must be an int in [0, 2097152]"),
        ({"register_length": 0}, "register_length must be None (to the end) or an int in [1, 2097152]"),
        ({"register_offset": 4096, "register_length": 2097152}, "an int in [1, 2093056]"),
        ({"register_pause_us": 0, "background": True}, "register_pause_us must be None (the library's 1000)"),
        ({"register_pause_us": 1 << 32, "background": True}, "register_pause_us must be None"),
    ],
)
def test_bad_registration_options_are_clear_errors(monkeypatch, kwargs, message):
    # Checked before any capability probe: pretend this build can register.
    from mooncake import shared_segment

    monkeypatch.setattr(shared_segment, "_capability_error", lambda *args: None)
    blocks = {"kv": {"count": 4, "shape": (ENTRY,), "dtype": "uint8"}}
    with pytest.raises(SharedSegmentError) as raised:
        create_shared_segment("front", blocks, 1, 0, host_register=True, **kwargs)
    assert message in str(raised.value)


# --- Registration behind the front, with the fake CUDA driver --------------------------

FAKE_CUDA = os.environ.get("FAKE_CUDA_LIBRARY", "")
needs_fake_cuda = pytest.mark.skipif(
    not FAKE_CUDA or not os.path.exists(FAKE_CUDA),
    reason="this build has no CUDA support (no cuda.h at configure time)",
)

REGISTERED = """
import errno, json
from mooncake.shared_segment import SharedSegmentError, create_shared_segment
seg = create_shared_segment(
    "front", {"kv": {"count": 512, "shape": (512 << 10,), "dtype": "uint8"}}, 1, 0, device_id=1,
    host_register=True, background=True, commit_threads=1,
    register_offset=4 << 20, register_length=8 << 20, register_pause_us=10)
future = seg.ready_future()
try:
    result = {"ready": seg.wait_ready(), "future": future.result(timeout=30)}
except SharedSegmentError as exc:
    result = {"error": str(exc), "errno": exc.errno, "future_error": repr(future.exception(timeout=30))}
result["registered"] = seg.info()["registered"]
result["ready_bytes"] = seg.ready_bytes
result["device_base"], result["base"] = seg.device_base, seg.base_addr()
seg.close()
print(json.dumps(result))
"""


def run_registered(tmp_path, **env_extra):
    log = tmp_path / "cuda.log"
    env = dict(
        os.environ, MOONCAKE_SEGMENT_CUDA_LIBRARY=FAKE_CUDA, FAKE_CUDA_LOG=str(log), FAKE_CUDA_DEVICES="2", **env_extra
    )
    done = subprocess.run([sys.executable, "-c", REGISTERED], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), log.read_text() if log.exists() else ""


@needs_fake_cuda
def test_each_rank_registers_its_part_behind_the_front(tmp_path):
    result, log = run_registered(tmp_path)
    assert result["ready"] is True and result["future"] == 256 << 20 and result["ready_bytes"] == 256 << 20
    assert result["registered"]
    # Known only once the first chunk registered (not at create): the base, with unified addressing.
    assert result["device_base"] == result["base"], result
    registrations = [line for line in log.splitlines() if line.startswith("register ")]
    assert len(registrations) == 1 and f" len {8 << 20} " in registrations[0], log  # only [4 MiB, 12 MiB)
    assert "ERROR" not in log, log


@needs_fake_cuda
def test_a_failed_background_registration_is_the_ranks_error(tmp_path):
    result, log = run_registered(tmp_path, FAKE_CUDA_FAIL_REGISTER_AT="1")
    assert "error" in result, result
    assert result["errno"] == errno.ENOMEM, result
    assert "SharedSegmentError" in result["future_error"], result
    assert result["ready_bytes"] < 256 << 20
    assert result["device_base"] is None, result
    assert "ERROR" not in log, log


# --- The native object, in one process with a stopped owner -------------------------

OWNER = """
import os, signal, sys
from mooncake._segment import SharedSegment
owner, blob = SharedSegment.create("native-front", 1 << 30, 2, 0, background_commit=True, commit_threads=1)
print(blob.hex(), flush=True)
sys.stdin.readline()  # the peer has mapped the pages (the owner's socket server answers until then)
if sys.argv[1:] == ["close"]:  # destroy the segment half way through its commit
    owner.close()
    print("closed", flush=True)
    sys.stdin.readline()
else:
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def let_owner_stop_itself(owner):
    """Tell the owner to go on, and wait until it has SIGSTOPped itself mid-commit."""
    owner.stdin.write("go\n")
    owner.stdin.flush()
    deadline = time.monotonic() + 10
    while not stopped(owner.pid) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert stopped(owner.pid)


@pytest.fixture
def frozen_front():
    """A peer (this process) of an owner stopped right after create, its front frozen."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        owner_blob = bytes.fromhex(owner.stdout.readline().strip())
        peer, peer_blob = _segment.SharedSegment.create("native-front", GIB, 2, 1, background_commit=True)
        peer.complete([owner_blob, peer_blob])
        let_owner_stop_itself(owner)
        assert peer.ready_bytes() < GIB
        yield peer
        peer.close()
    finally:
        owner.kill()
        owner.wait()


def owner_process(*args):
    """The owner of OWNER, with the blob it printed."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return owner, bytes.fromhex(owner.stdout.readline().strip())


# Issue 37 item 6: each of the owner's failures has its own code, not "Memory:".


def test_an_owner_killed_mid_commit_is_owner_gone():
    owner, owner_blob = owner_process()
    try:
        peer, peer_blob = _segment.SharedSegment.create("native-front", GIB, 2, 1, background_commit=True)
        peer.complete([owner_blob, peer_blob])
        let_owner_stop_itself(owner)
        assert peer.ready_bytes() < GIB
        owner.kill()
        owner.wait()
        with pytest.raises(_segment.SegmentError) as raised:
            peer.wait_ready(0, None, 10)
        assert str(raised.value).startswith("OwnerGone: Shared segment owner (rank 0, pid "), str(raised.value)
        assert "died while committing the pages" in str(raised.value)
        assert raised.value.errno == errno.ESRCH
        peer.close()
    finally:
        owner.kill()
        owner.wait()


def test_an_owner_that_destroys_mid_commit_is_cancelled():
    owner, owner_blob = owner_process("close")
    try:
        peer, peer_blob = _segment.SharedSegment.create("native-front", GIB, 2, 1, background_commit=True)
        peer.complete([owner_blob, peer_blob])
        owner.stdin.write("go\n")
        owner.stdin.flush()
        assert owner.stdout.readline().strip() == "closed"
        with pytest.raises(_segment.SegmentError) as raised:
            peer.wait_ready(0, None, 10)
        assert str(raised.value).startswith("Cancelled: Shared segment owner (rank 0) destroyed the segment"), str(
            raised.value
        )
        assert raised.value.errno == errno.ECANCELED
        peer.close()
    finally:
        owner.kill()
        owner.wait()


def test_a_blocking_peer_of_a_stopped_owner_is_a_timeout(monkeypatch, capsys):
    """Issue 37 item 1: complete() without background_commit gives up on a stopped owner.

    A watchdog continues the owner after 8 s, so that a complete() that waits
    for the whole front is seen returning late instead of hanging the test.
    """
    monkeypatch.setenv("MOONCAKE_SEGMENT_PEER_TIMEOUT_MS", "1000")
    owner, owner_blob = owner_process()
    watchdog = threading.Timer(8, os.kill, (owner.pid, signal.SIGCONT))
    try:
        peer, peer_blob = _segment.SharedSegment.create("native-front", GIB, 2, 1)  # a blocking peer
        let_owner_stop_itself(owner)  # before this peer completes: its socket and its front stand still
        watchdog.start()
        start = time.monotonic()
        with pytest.raises(_segment.SegmentError) as raised:
            peer.complete([owner_blob, peer_blob])
        took = time.monotonic() - start
        assert str(raised.value).startswith("Timeout: Shared segment rank 1: the owner (rank 0, pid "), str(
            raised.value
        )
        assert "committed nothing for 1000 ms" in str(raised.value)
        assert raised.value.errno == errno.ETIMEDOUT
        assert took < 3.0, f"complete() took {took:.1f} s on a 1 s peer timeout"
        report(capsys, "blocking peer, stopped owner, 1 s peer timeout:", [f"complete() raised after {took:.2f} s"])
        peer.close()
    finally:
        watchdog.cancel()
        owner.kill()
        owner.wait()


def test_close_ends_a_native_wait_promptly_and_other_changes_are_refused(frozen_front):
    peer = frozen_front
    outcome = []

    def waiter():
        try:
            outcome.append(peer.wait_ready())
        except BaseException as exc:  # noqa: BLE001 - reported
            outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 5
    while peer.busy != "wait_ready" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert peer.busy == "wait_ready"
    with pytest.raises(RuntimeError, match="another thread is inside wait_ready"):
        peer.finish()
    assert peer.ready_bytes() < GIB and peer.size() == GIB  # the getters run beside it
    start = time.monotonic()
    peer.close()
    closed_in = time.monotonic() - start
    thread.join(5)
    assert not thread.is_alive()
    assert closed_in < 2.0
    assert isinstance(outcome[0], ValueError) and "closed while this thread waited" in str(outcome[0])


def test_many_waiters_and_getters_together(frozen_front):
    peer = frozen_front
    errors = []

    def waiter():
        try:
            peer.wait_ready(0, None, 0.5)
        except TimeoutError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported
            errors.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for t in threads:
        t.start()
    for _ in range(100):
        peer.ready_bytes()
        peer.wait_ready(0, ENTRY, 0)
    for t in threads:
        t.join()
    assert errors == []
    assert peer.busy is None


PEER = """
import signal, sys, time
from mooncake._segment import SharedSegment

class Custom(Exception):
    pass

def raise_custom(signum, frame):
    raise Custom("raised by the handler")

if sys.argv[2] == "custom":
    signal.signal(signal.SIGINT, raise_custom)
else:  # what a terminal's Ctrl-C finds; a background job starts with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
peer, blob = SharedSegment.create("signal-front", 1 << 30, 2, 1, background_commit=True)
peer.complete([bytes.fromhex(sys.argv[1]), blob])
print("mapped", flush=True)
sys.stdin.readline()  # the owner is stopped
print("waiting", flush=True)
try:
    peer.wait_ready(0, None, None if sys.argv[3] == "none" else float(sys.argv[3]))
    print("returned", peer.ready_bytes(), flush=True)
except BaseException as exc:
    print(type(exc).__name__, time.monotonic(), flush=True)  # CLOCK_MONOTONIC: the test's clock too
"""


@pytest.mark.parametrize("timeout", ["none", "60"])
@pytest.mark.parametrize("handler, raised", [("default", "KeyboardInterrupt"), ("custom", "Custom")])
def test_ctrl_c_ends_a_wait_on_a_stopped_owner(capsys, handler, raised, timeout):
    """A peer process in wait_ready() on an owner stopped mid-commit: SIGINT ends it with the handler's exception."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.replace("native-front", "signal-front")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    peer = None
    try:
        owner_blob = owner.stdout.readline().strip()
        peer = subprocess.Popen(
            [sys.executable, "-c", PEER, owner_blob, handler, timeout],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert peer.stdout.readline().strip() == "mapped", peer.stderr.read()
        let_owner_stop_itself(owner)
        peer.stdin.write("go\n")
        peer.stdin.flush()
        assert peer.stdout.readline().strip() == "waiting"
        time.sleep(0.3)  # inside the native wait by now
        sent = time.monotonic()
        peer.send_signal(signal.SIGINT)
        try:
            peer.wait(2.0)
        except subprocess.TimeoutExpired:
            pass
        assert peer.returncode is not None, "the peer still waits 2 s after SIGINT"
        line = peer.stdout.read().strip()
        name, caught = line.split()
        assert name == raised, line
        report(
            capsys,
            f"wait_ready(timeout={timeout}), {handler} SIGINT handler:",
            [f"{raised} {(float(caught) - sent) * 1000:.0f} ms after the signal"],
        )
    finally:
        for proc in (peer, owner):
            if proc:
                proc.kill()
                proc.wait()


def test_native_wait_ready_checks_its_arguments():
    seg, blob = _segment.SharedSegment.create("native", 1 << 20, 1, 0, background_commit=True)
    try:
        seg.complete([blob])
        with pytest.raises(ValueError, match="offset must be <= 1048576"):
            seg.wait_ready(1048577)
        with pytest.raises(ValueError, match="length must be <= 1048575"):
            seg.wait_ready(1, 1 << 20)
        with pytest.raises(TypeError, match="timeout must be None or a number of seconds"):
            seg.wait_ready(0, None, "soon")
        with pytest.raises(ValueError, match="timeout must be None"):
            seg.wait_ready(0, None, -0.5)
        assert seg.wait_ready(1 << 20, 0, 0) is True  # empty: ready
        with pytest.raises(TypeError, match="background_commit must be True or False"):
            _segment.SharedSegment.create("native", 1 << 20, 1, 0, background_commit=1)
        with pytest.raises(_segment.SegmentError, match="needs host_register=true"):
            _segment.SharedSegment.create("native", 1 << 20, 1, 0, register_offset=4096)
    finally:
        seg.close()
    with pytest.raises(ValueError, match="closed"):
        seg.wait_ready()
    with pytest.raises(ValueError, match="closed"):
        seg.ready_bytes()
