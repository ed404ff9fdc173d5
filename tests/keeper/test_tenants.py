# SPDX-License-Identifier: Apache-2.0
"""mooncake-segmentd between tenants of one node (issue 38, doc/keeper.md
"Tenants"): what one uid does cannot stall another's requests.  The real
built daemon runs on a temporary socket (test_keeper.py's Keeper); the
hostile user is uid 65534 for real, with real processes of many mappings."""

import errno
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_keeper import (  # noqa: E402
    as_other_uid,
    F_REPLACE,
    LIST,
    SHARE_ANY,
    STAT,
    MIB,
    Client,
    create_request,
    hello_request,
    mapping,
    named_request,
)
from test_hostile_clients import make_keeper  # noqa: E402,F401 - a fixture

HOSTILE_UID = 65534

# Processes of many mappings each: reading their /proc/PID/maps is what a
# mapper scan costs.  Shared anonymous pages are a file each, so no two
# mappings merge; none is touched, so they cost page tables only.
MAPPINGS_SOURCE = """
import mmap, sys, time
held = [mmap.mmap(-1, 4096) for _ in range(int(sys.argv[1]))]
print("ready", flush=True)
time.sleep(600)
"""


def drop_to(uid):
    def run():
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    return run


def start_mappers(processes, mappings):
    started = [
        subprocess.Popen(
            [sys.executable, "-c", MAPPINGS_SOURCE, str(mappings)],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=drop_to(HOSTILE_UID),
        )
        for _ in range(processes)
    ]
    for p in started:
        assert p.stdout.readline().strip() == "ready", "a mappings process did not start"
    return started


def start_replace_flood(path, connections, seconds):
    """As the hostile uid, in a forked child: keep 'h' mapped and ask to
    replace it from @connections connections at once, each asking again as
    soon as it is answered, for @seconds.  Its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        drop_to(HOSTILE_UID)()
        made = Client(path).ask(create_request("h", size=MIB))
        assert made.status == 0, made.text
        held = mapping(made)  # noqa: F841 - mapped, so every replace is refused after a scan
        clients = [Client(path) for _ in range(connections)]
        replace = create_request("h", size=MIB, fingerprint=0x99, flags=F_REPLACE)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for c in clients:
                c.send(replace)
            for c in clients:
                reply = c.receive()
                assert reply.status == errno.EBUSY, reply.text
        code = 0
    except BaseException as e:  # noqa: B036 - the parent sees the exit code, the log says why
        sys.stderr.write("the flood failed: %r\n" % e)
    finally:
        os._exit(code)


def timed(path, request):
    with Client(path) as c:
        start = time.monotonic()
        reply = c.ask(request)
        took = time.monotonic() - start
        reply.close_fds()
        assert reply.status == 0, reply.text
        return took


def test_another_uids_scan_flood_does_not_stall_a_users_requests(make_keeper):  # noqa: F811 - the fixture
    if os.getuid() != 0:
        pytest.skip("needs root to run the hostile user as uid 65534")
    k = make_keeper()
    made = k.ask(create_request("mine", size=MIB))
    assert made.status == 0, made.text
    made.close_fds()
    mappers = start_mappers(8, 30000)
    try:
        # What one scan of this node costs now, alone.
        start = time.monotonic()
        assert k.ask(named_request(LIST, "")).status == 0
        scan_alone = time.monotonic() - start
        flood = start_replace_flood(k.path, 32, 8.0)
        time.sleep(1.0)  # the flood is under way
        hello, attach, listing = [], [], []
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            hello.append(timed(k.path, hello_request()))
            attach.append(timed(k.path, create_request("mine", size=MIB)))
            listing.append(timed(k.path, named_request(LIST, "")))
        _, status = os.waitpid(flood, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the flood itself failed: " + k.text()
    finally:
        for p in mappers:
            p.kill()
            p.wait()
    figures = "scan alone %.3f s; during the flood, median and max: " % scan_alone + ", ".join(
        "%s %.4f s %.3f s" % (what, statistics.median(took), max(took))
        for what, took in (("HELLO", hello), ("warm CREATE", attach), ("LIST", listing))
    )
    print(figures)
    # Generous: with the scans on the loop's thread, each of these waited
    # behind 32 scans, seconds each time.
    assert max(hello) < 1.0 and max(attach) < 1.0, figures
    # A LIST needs the counts: it waits for at most the scan under way and the next.
    assert max(listing) < 2.0 + 4 * scan_alone, figures
    k.alive()


def needs_root():
    if os.getuid() != 0:
        pytest.skip("needs root to run the other tenant as uid 65534")


def test_by_default_one_uid_cannot_take_every_segment(make_keeper):  # noqa: F811 - the fixture
    """The keeper as the unit starts it, with no options: one user making
    segments as fast as it can is stopped at its share (a quarter of
    --max-segments' 1024), and another user still creates."""
    needs_root()
    k = make_keeper()
    results = as_other_uid(k, [create_request("s%d" % i, size=4096) for i in range(257)])
    assert [status for status, _ in results[:256]] == [0] * 256, results[:3]
    status, text = results[256]
    assert status == errno.EMFILE, text
    assert "uid 65534 holds 256 segments" in text and "the per-uid limit is 256 (--uid-max-segments)" in text, text
    mine = k.ask(create_request("mine", size=4096))
    assert mine.status == 0, mine.text
    mine.close_fds()


def test_by_default_one_uid_cannot_take_every_byte_and_a_full_keeper_names_the_holder(make_keeper):  # noqa: F811
    """With --budget and no --uid-budget, one user keeps three quarters of
    the budget at most; when another fills the rest, its refusal names the
    largest holder and what it holds."""
    needs_root()
    k = make_keeper("--budget", "64M")
    results = as_other_uid(k, [create_request("b%d" % i, size=16 * MIB) for i in range(4)])
    assert [status for status, _ in results[:3]] == [0, 0, 0], results
    status, text = results[3]
    assert status == errno.ENOSPC, text
    assert "per-uid limit of 50331648 bytes (--uid-budget): uid 65534 holds 50331648 bytes" in text, text
    mine = k.ask(create_request("mine", size=8 * MIB))
    assert mine.status == 0, mine.text
    mine.close_fds()
    full = k.ask(create_request("more", size=16 * MIB))
    assert full.status == errno.ENOSPC, full.text
    assert "--budget of 67108864 bytes" in full.text, full.text
    assert "uid 65534 holds the most (50331648 bytes), uid 0 8388608 bytes" in full.text, full.text


def test_without_a_budget_the_share_is_sized_from_the_node(make_keeper):  # noqa: F811 - the fixture
    """No --budget: one uid's share is three quarters of the node's memory,
    refused before any page is committed; --uid-budget 0 lifts it."""
    node = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
    share = node // 4 * 3
    k = make_keeper()
    over = k.ask(create_request("big", size=share + MIB))
    assert over.status == errno.ENOSPC, over.text
    assert "per-uid limit of %d bytes (--uid-budget)" % share in over.text, over.text
    assert "each uid: budget %d bytes, at most 256 segments, 64 connections" % share in k.text(), k.text()
    # Without the share, only the node's room refuses (before committing).
    unlimited = make_keeper("--uid-budget", "0")
    past = unlimited.ask(create_request("big", size=1 << 50))
    assert past.status == errno.ENOMEM and "--uid-budget" not in past.text, past.text


def test_a_missing_name_points_at_another_owners_only_where_the_caller_may_see_it(make_keeper):  # noqa: F811
    """Root's `keep release kv` means uid 1002's kv more often than its own:
    the refusal names that owner and the option.  Another user's private
    segment is never revealed that way."""
    needs_root()
    k = make_keeper()
    for name, sharing in (("private", 0), ("public", SHARE_ANY)):
        made = k.ask(create_request(name, size=4096, sharing=sharing))
        assert made.status == 0, made.text
        made.close_fds()
    root_asks = k.ask(named_request(STAT, "private", owner=1002))
    assert root_asks.status == errno.ENOENT, root_asks.text
    assert "uid 1002 keeps no segment 'private', uid 0 does: name its owner (--owner 0)" in root_asks.text
    (private, public) = as_other_uid(k, [named_request(STAT, "private"), named_request(STAT, "public")])
    assert private[0] == errno.ENOENT and "uid 0" not in private[1], private
    assert public[0] == errno.ENOENT and "uid 0 does: name its owner (--owner 0)" in public[1], public
