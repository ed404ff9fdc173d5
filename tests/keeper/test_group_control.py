# SPDX-License-Identifier: Apache-2.0
"""The keeper's group control areas and JOIN, spoken over the real socket.

A CREATE with the group control area flag gets, besides the pages, a fresh
control area for its group and a token; a JOIN with the name, the owner,
the generation and that token gets the same two files (for a rank that
cannot reach its owner: test_join.py).  What is refused, and what a
segment forgets: its 9th group drops its 1st, and a release closes them."""

import errno
import fcntl
import mmap
import os
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_keeper import (  # noqa: E402
    F_GROUP_CONTROL,
    RELEASE,
    REPLY,
    SHARE_ANY,
    STAT,
    as_other_uid,
    create_request,
    join_request,
    keeper,
    named_request,
)
from test_hostile_clients import make_keeper  # noqa: E402,F401 - a fixture

F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE = 1, 2, 4, 8
F_GET_SEALS = 1034
AREA = 8192

__all__ = ["keeper"]  # the fixture, imported for the tests below


def group_create(keeper_, name, **kwargs):
    return keeper_.ask(create_request(name, control=AREA, flags=F_GROUP_CONTROL, **kwargs))


def inode(fd):
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def test_a_group_create_gets_a_fresh_sealed_area_and_a_token(keeper):
    first = group_create(keeper, "kv-group")
    assert first.status == 0, first.text
    assert first.descriptors == 2 and first.control == AREA and first.token != 0
    pages, area = first.fds
    assert os.fstat(area).st_size == AREA
    assert os.pread(area, AREA, 0) == bytes(AREA), "a group's area starts all zero"
    seals = fcntl.fcntl(area, F_GET_SEALS)
    assert seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
    assert not seals & F_SEAL_WRITE, "the group writes its words there"
    os.pwrite(area, b"words of group one", 0)
    second = group_create(keeper, "kv-group")
    assert second.status == 0 and second.generation == first.generation, second.text
    assert second.token not in (0, first.token)
    assert inode(second.fds[1]) != inode(area) and inode(second.fds[0]) == inode(pages)
    assert os.pread(second.fds[1], AREA, 0) == bytes(AREA), "each group gets a fresh one"
    # The segment keeps no control area of its own: what it holds is its groups'.
    stat = keeper.ask(named_request(STAT, "kv-group"))
    assert stat.status == 0 and stat.segments[0]["control"] == 2 * AREA
    first.close_fds()
    second.close_fds()


def test_join_hands_the_same_pages_and_the_same_area(keeper):
    created = group_create(keeper, "kv-join")
    joined = keeper.ask(join_request("kv-join", os.getuid(), created.generation, created.token))
    assert joined.status == 0, joined.text
    assert joined.type == REPLY | 6 and joined.descriptors == 2 and joined.token == created.token
    assert joined.generation == created.generation and joined.uid == os.getuid()
    assert joined.caller_uid == os.getuid() and joined.flags == 0, "a JOIN is never warm or replaced"
    for mine, theirs in zip(created.fds, joined.fds):
        assert inode(mine) == inode(theirs)
    with mmap.mmap(created.fds[0], 4096) as a, mmap.mmap(joined.fds[0], 4096) as b:
        a[:5] = b"hello"
        assert b[:5] == b"hello"
    assert "for a rank that cannot reach its owner" in keeper.text()
    created.close_fds()
    joined.close_fds()


def test_join_refuses_what_it_cannot_find_or_may_not_hand(keeper):
    created = group_create(keeper, "kv-refused")
    uid, generation, token = os.getuid(), created.generation, created.token
    created.close_fds()
    wrong_token = keeper.ask(join_request("kv-refused", uid, generation, token ^ 1))
    assert wrong_token.status == errno.ESTALE and "no group control area with token" in wrong_token.text
    wrong_generation = keeper.ask(join_request("kv-refused", uid, generation + 7, token))
    assert wrong_generation.status == errno.ESTALE
    assert f"is at generation {generation} now, the group's owner took {generation + 7}" in wrong_generation.text
    unknown = keeper.ask(join_request("kv-nobody", uid, generation, token))
    assert unknown.status == errno.ENOENT and "keeps no segment 'kv-nobody'" in unknown.text
    if os.getuid() != 0:
        pytest.skip("needs root to JOIN as another uid (setresuid)")
    shared = group_create(keeper, "kv-shared", sharing=SHARE_ANY)
    shared.close_fds()
    (private, text), (anyone, _) = as_other_uid(
        keeper,
        [
            join_request("kv-refused", uid, generation, token),
            join_request("kv-shared", uid, shared.generation, shared.token),
        ],
    )
    assert private == errno.EACCES and "sharing uid" in text, text
    assert anyone == 0, "sharing any lets every uid join"


def test_a_ninth_group_forgets_the_first(keeper):
    groups = []
    for _ in range(9):
        reply = group_create(keeper, "kv-nine")
        reply.close_fds()
        groups.append(reply)
    uid, generation = os.getuid(), groups[0].generation
    first = keeper.ask(join_request("kv-nine", uid, generation, groups[0].token))
    assert first.status == errno.ESTALE and "more than 8 groups" in first.text
    for group in groups[1:]:
        reply = keeper.ask(join_request("kv-nine", uid, generation, group.token))
        assert reply.status == 0, reply.text
        reply.close_fds()


def keeper_group_areas(keeper_, name):
    """The keeper's descriptors of the group areas of @name."""
    fd_dir = Path(f"/proc/{keeper_.proc.pid}/fd")
    links = [os.readlink(fd) for fd in fd_dir.iterdir()]
    return [link for link in links if link.startswith(f"/memfd:mooncake-segment-control:keep:{name}|")]


def test_a_release_closes_the_groups_areas(keeper):
    for _ in range(3):
        group_create(keeper, "kv-gone").close_fds()
    assert len(keeper_group_areas(keeper, "kv-gone")) == 3
    released = keeper.ask(named_request(RELEASE, "kv-gone"))
    assert released.status == 0, released.text
    assert keeper_group_areas(keeper, "kv-gone") == []
    gone = keeper.ask(join_request("kv-gone", os.getuid(), released.generation, 1))
    assert gone.status == errno.ENOENT


@pytest.mark.parametrize("size", [0, 4097, (16 << 20) + 4096])
def test_a_group_area_of_a_bad_size_is_refused(keeper, size):
    reply = keeper.ask(create_request("kv-bad", control=size, flags=F_GROUP_CONTROL))
    assert reply.type == REPLY and reply.status == errno.EPROTO
    assert "CREATE with a group control area of" in reply.text, reply.text


def test_group_areas_count_in_the_budget_and_go_when_nobody_maps_them(make_keeper):  # noqa: F811
    """Each group's control area is memory the keeper holds: counted by the
    budget and in STAT's control bytes, and closed once no process maps it
    (after the 10 s a group takes to form), so groups that exited give it
    back.  With them uncounted, eight groups of a 4 KiB segment held 128 MiB
    that nothing saw."""
    k = make_keeper("--budget", "40M", "--uid-budget", "0", "--scan-cache-ms", "0")
    area = 8 * 1024 * 1024
    made = [k.ask(create_request("kv-areas", size=4096, control=area, flags=F_GROUP_CONTROL)) for _ in range(4)]
    assert [r.status for r in made] == [0, 0, 0, 0], [r.text for r in made]
    assert k.ask(named_request(STAT, "kv-areas")).segments[0]["control"] == 4 * area
    over = k.ask(create_request("kv-areas", size=4096, control=area, flags=F_GROUP_CONTROL))
    assert over.status == errno.ENOSPC and "--budget of 41943040 bytes" in over.text, over.text
    # One group still runs (its area mapped); the other three exited.
    alive = mmap.mmap(made[0].fds[1], area)
    for r in made:
        r.close_fds()
    time.sleep(10.5)
    stat = k.ask(named_request(STAT, "kv-areas")).segments[0]  # a fresh scan
    assert stat["control"] == area, stat
    assert k.text().count("freed a group control area of 'kv-areas' (8388608 bytes)") == 3, k.text()
    again = k.ask(create_request("kv-areas", size=4096, control=area, flags=F_GROUP_CONTROL))
    assert again.status == 0, again.text
    again.close_fds()
    # The running group's area stays: its JOIN still works.
    joined = k.ask(join_request("kv-areas", os.getuid(), made[0].generation, made[0].token))
    assert joined.status == 0, joined.text
    joined.close_fds()
    alive.close()
