# SPDX-License-Identifier: Apache-2.0
"""A cold create commits on a committer thread of the keeper's, so that no
client waits for another's commit (doc/keeper.md, "Committer threads").

Each test starts a real commit of BIG bytes (seconds here: the keeper
commits every page), waits until the keeper holds that commit's memfd, and
then asks other things of it.  Nothing is timed: what is asserted is the
order of the replies (a reply "pending" is one the client can already read)
and what the keeper kept."""

import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_keeper import (  # noqa: E402
    LIST,
    MIB,
    SHARE_ANY,
    STAT,
    WARM,
    Client,
    Keeper,
    as_other_uid,
    create_request,
    hello_request,
    named_request,
)
from test_restart import ManagedKeeper  # noqa: E402

# Large enough that its commit outlasts a few requests by far (0.5 to 2.5 s
# here), small enough for the CI's machines.
BIG = 4096 * MIB


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


if available_bytes() < 3 * BIG:
    pytest.skip(f"needs {3 * BIG >> 30} GiB of available memory for its {BIG >> 30} GiB commits",
                allow_module_level=True)  # fmt: skip


def committing(pid, name):
    """Whether the keeper @pid holds the memfd of @name's commit."""
    mark = f"mooncake-segment:keep:{name}|"
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if mark in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return True
        except OSError:
            continue
    return False


def wait_until(predicate, what, log):
    """A guard against a hang only (60 s), never a measure."""
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, f"{what} never happened: {log()}"
        time.sleep(0.005)


def start_commit(pid, path, name, log, **declaration):
    """A client whose CREATE of @name is committing now; its reply unread."""
    client = Client(path)
    client.send(create_request(name, size=BIG, **declaration))
    wait_until(lambda: committing(pid, name), f"the commit of '{name}'", log)
    return client


def pending(client):
    """Whether a reply waits to be read on @client's connection (now: a
    socket with a timeout would wait for one in recv, MSG_DONTWAIT or not)."""
    return bool(select.select([client.sock], [], [], 0)[0])


@pytest.fixture
def keeper():
    k = Keeper("--silent-timeout-ms", "1500")
    yield k
    k.stop()


def test_others_are_served_while_a_cold_create_commits(keeper):
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another uid (setresuid)")
    kept = keeper.ask(create_request("kv-kept", size=MIB, sharing=SHARE_ANY))
    assert kept.status == 0, kept.text
    kept.close_fds()

    a = start_commit(keeper.proc.pid, keeper.path, "kv-big", keeper.text)
    # The same uid's next create waits: --uid-max-commits is 1 by default.
    queued = Client(keeper.path)
    queued.send(create_request("kv-queued", size=MIB))
    with keeper.client() as b:
        stat = b.ask(named_request(STAT, "kv-kept"))
        assert stat.status == 0 and stat.segments[0]["name"] == "kv-kept", stat.text
        assert not pending(a), "STAT was answered only after the big commit"
        listed = b.ask(named_request(LIST, ""))
        assert listed.status == 0, listed.text
        names = [s["name"] for s in listed.segments]
        assert "kv-kept" in names and "kv-big" not in names, "LIST hides a segment still committing"
        busy = b.ask(named_request(STAT, "kv-big"))
        assert busy.status == 16 and "being committed" in busy.text, busy.text  # EBUSY
        assert not pending(a), "LIST was answered only after the big commit"
    # Another uid's small create commits on the second thread meanwhile.
    assert as_other_uid(keeper, [create_request("kv-other", size=MIB)])[0][0] == 0
    assert not pending(a), "another uid's create was answered only after the big commit"
    assert not pending(queued), "the same uid's second create did not wait for its first"

    big = a.receive()
    assert big.status == 0 and big.size == BIG and not big.flags & WARM, big.text
    big.close_fds()
    second = queued.receive()
    assert second.status == 0 and second.generation > big.generation, second.text
    second.close_fds()
    a.close()
    queued.close()
    keeper.alive()


def test_a_create_of_the_same_name_waits_for_the_commit_and_attaches_cold():
    keeper = Keeper("--silent-timeout-ms", "1500")
    try:
        a = start_commit(keeper.proc.pid, keeper.path, "kv-twice", keeper.text)
        c = Client(keeper.path)
        c.send(create_request("kv-twice", size=BIG))
        with keeper.client() as b:
            # Connections are served in order of their slots: c's before b's.
            assert b.ask(hello_request()).status == 0
            assert b.ask(named_request(STAT, "kv-twice")).status == 16, "EBUSY while it commits"
        assert not pending(c), "a create of the name was answered while its pages were committed"
        first = a.receive()
        assert first.status == 0 and not first.flags & WARM, first.text
        second = c.receive()
        assert second.status == 0, second.text + keeper.text()
        assert second.generation == first.generation and not second.flags & WARM
        assert os.fstat(second.fds[0]).st_ino == os.fstat(first.fds[0]).st_ino
        stat = keeper.ask(named_request(STAT, "kv-twice"))
        assert stat.segments[0]["warm"] == 0, "nobody attached to pages written before"
        for reply in (first, second):
            reply.close_fds()
        a.close()
        c.close()
    finally:
        keeper.stop()


def test_a_creator_that_leaves_mid_commit_leaves_its_segment_kept(keeper):
    a = start_commit(keeper.proc.pid, keeper.path, "kv-left", keeper.text)
    a.close()
    wait_until(lambda: keeper.ask(named_request(STAT, "kv-left")).status == 0, "the commit's end", keeper.text)
    assert "kept 'kv-left'" in keeper.text()
    keeper.alive()


def test_a_stop_mid_commit_exits_and_the_restart_has_no_half_segment(tmp_path):
    managed = ManagedKeeper(tmp_path)
    try:
        pid = managed.manager.process.pid
        a = start_commit(pid, managed.path, "kv-half", managed.text)
        # `systemctl restart`: SIGTERM, the store kept; no hang, whatever the commit's length.
        managed.manager.kill(signal.SIGTERM, timeout=20)
        assert managed.manager.process.poll() == 0, managed.text()
        stored = managed.manager.stored_names()
        assert not [n for n in stored if n != "state"], f"the half-made segment was stored: {stored}"
        with pytest.raises(ConnectionResetError):
            a.receive()
        a.close()
        assert "stopping with 1 commit(s) under way" in managed.text()

        managed.start()
        hello = managed.ask(hello_request())
        assert hello.kept == 0, managed.text()
        assert managed.ask(named_request(STAT, "kv-half")).status == 2  # ENOENT
        again = managed.ask(create_request("kv-half", size=MIB))
        assert again.status == 0 and not again.flags & WARM, again.text
        again.close_fds()
    finally:
        managed.close()


def test_a_parked_creator_outlives_the_silence_timeout():
    # 100 ms of silence closes an idle connection; committing 4 GiB takes longer.
    keeper = Keeper("--silent-timeout-ms", "100")
    try:
        a = start_commit(keeper.proc.pid, keeper.path, "kv-slow", keeper.text)
        # Another client keeps the loop turning (and checking silences) meanwhile.
        with keeper.client() as b:
            while not pending(a):
                assert b.ask(hello_request()).status == 0
                time.sleep(0.02)
        made = a.receive()
        assert made.status == 0 and made.size == BIG, made.text
        made.close_fds()
        a.close()
    finally:
        keeper.stop()
