# SPDX-License-Identifier: Apache-2.0
"""mooncake-segmentd's per-uid limits against one user acting as many uids
(issue 38, doc/keeper.md "Tenants"): the uids of its subordinate range (an
/etc/subuid line, as newuidmap grants rootless containers) and the uids of a
user namespace it made count with that user, in --uid-max-segments,
--uid-budget and --max-connections-per-uid, so that 16 such uids get one
share, not 16.  Every client here is a real process of its own, running as
the uid it claims; the namespace is a real one, its maps written from
outside by root as newuidmap writes them.  The subordinate ranges are a
fixture file the keeper reads through --subuid-file: a test never changes the
host's /etc/subuid."""

import ctypes
import errno
import json
import os
import pwd
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_keeper import MIB, Client, create_request, hello_request  # noqa: E402
from test_hostile_clients import make_keeper  # noqa: E402,F401 - a fixture

SUBORDINATE_START = 200000  # the fixture's range of the user of uid 65534
NAMESPACE_OWNER = 40000  # a user with no subordinate range that makes a user namespace
NAMESPACE_START = 300000  # what that namespace maps its uids 1..100 onto
OUTSIDER = 500000  # another user, in no range
ROOTS_RANGE = 900000  # root's range in the fixture: left out, as LXD's root:1000000:1000000000
LIMITS = (
    "--uid-max-segments",
    "2",
    "--max-connections-per-uid",
    "4",
    "--max-connections",
    "64",
    # Held connections send nothing more: they stay however slow the build.
    "--silent-timeout-ms",
    "600000",
)
CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
COUNTED_WITH = "(counted with uid %d, whose subordinate range or user namespace it belongs to)"

# The processes forked in this one that hold something open (see Held).
HELD_HERE = []


class Held:
    """A forked process that becomes another user (@become), runs @work()
    and keeps what it opened (its connections to the keeper) until end().
    work()'s result comes back as JSON in .result; a failure raises here."""

    def __init__(self, work, become=None):
        result_r, result_w = os.pipe()
        hold_r, hold_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            # The holds of its elder siblings are the parent's to close.
            for sibling in HELD_HERE:
                os.close(sibling.hold)
            HELD_HERE.clear()
            os.close(result_r)
            os.close(hold_w)
            try:
                if become:
                    become()
                out = {"result": work()}
            except BaseException as e:  # noqa: B036 - the parent raises it
                out = {"error": "%s: %s" % (type(e).__name__, e)}
            try:
                # One line: a process forked by work() may hold this pipe too, so no EOF.
                os.write(result_w, json.dumps(out).encode() + b"\n")
                os.close(result_w)
                os.read(hold_r, 1)  # until end(): EOF
                end_all(HELD_HERE)
            finally:
                os._exit(0)
        os.close(result_w)
        os.close(hold_r)
        self.pid, self.hold = pid, hold_w
        HELD_HERE.append(self)
        with os.fdopen(result_r) as f:
            out = json.loads(f.readline() or '{"error": "the process died"}')
        if "error" in out:
            raise RuntimeError(out["error"])
        self.result = out["result"]


def end_all(held):
    """Close every hold first, then wait: a process may hold another's pipe."""
    for h in held:
        os.close(h.hold)
    for h in held:
        os.waitpid(h.pid, 0)
    held.clear()


@pytest.fixture
def held():
    yield
    end_all(HELD_HERE)


OPEN = []  # a held process's connections: open until it exits


def asks(path, request):
    """work(): @request on a connection of its own, kept open; [status, text, owner uid]."""

    def work():
        c = Client(path)
        OPEN.append(c)
        try:
            c.send(request)
        except BrokenPipeError:
            pass  # refused and closed before the request went: the refusal is there to read
        try:
            reply = c.receive()
        except ConnectionResetError:
            return [-1, "the keeper closed the connection with no reply", None]
        reply.close_fds()
        return [reply.status, reply.text, getattr(reply, "uid", None)]

    return work


def user(uid, groups=True):
    """become(): @uid and gid @uid (no supplementary groups unless
    @groups is False, where setgroups() is denied)."""

    def become():
        if groups:
            os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    return become


def needs_root():
    """Skip unless this process may become every uid the tests use: root,
    in a user namespace (a container's) that maps them."""
    if os.getuid() != 0:
        pytest.skip("needs root to run clients as other uids (setresuid)")
    with open("/proc/self/uid_map") as f:
        ranges = [tuple(int(field) for field in line.split()) for line in f if line.strip()]
    needed = (
        65534,
        NAMESPACE_OWNER,
        SUBORDINATE_START,
        SUBORDINATE_START + 65536,
        NAMESPACE_START + 99,
        OUTSIDER,
        ROOTS_RANGE + 1,
    )
    unmapped = [uid for uid in needed if not any(inside <= uid < inside + count for inside, _, count in ranges)]
    if unmapped:
        pytest.skip("this user namespace (a container's) does not map uids %s, which the tests run as" % unmapped)


def subordinate_file(path, owner_name):
    path.write_text(
        "# a fixture, never the host's /etc/subuid\n"
        "%s:%d:65536\n"
        "no-such-user-here:700000:65536\n"
        "%d:800000:1000\n"
        "root:%d:1000\n" % (owner_name, SUBORDINATE_START, NAMESPACE_OWNER + 1, ROOTS_RANGE)
    )
    return path


def nobody_name():
    try:
        return pwd.getpwuid(65534).pw_name
    except KeyError:
        return "65534"  # the numeric form, which the keeper reads too


def test_subordinate_uids_share_their_users_limits(make_keeper, held, tmp_path):  # noqa: F811 - the fixture
    """Processes of four uids of one /etc/subuid range, no namespace: they
    keep two segments and hold four connections together, the most one user
    may; the fifth uid is refused naming whose share it used, and so is the
    user itself.  Another user is served as before."""
    needs_root()
    k = make_keeper(*LIMITS, "--subuid-file", str(subordinate_file(tmp_path / "subuid", nobody_name())))
    assert "counting 2 subordinate uid range(s) of %s with their users" % (tmp_path / "subuid") in k.text()
    made = [
        Held(asks(k.path, create_request("s%d" % i, size=MIB)), user(SUBORDINATE_START + i)).result for i in (1, 2, 3)
    ]
    assert [m[0] for m in made[:2]] == [0, 0], made
    # Ownership stays the real uid's: the limits alone are shared.
    assert [m[2] for m in made[:2]] == [SUBORDINATE_START + 1, SUBORDINATE_START + 2], made
    status, text, _ = made[2]
    assert status == errno.EMFILE, made
    assert (
        "uid %d %s holds 2 segments" % (SUBORDINATE_START + 3, COUNTED_WITH % 65534) in text
        and "the per-uid limit is 2 (--uid-max-segments)" in text
    ), text
    # Three connections held; one more of the range's uids is the fourth.
    assert Held(asks(k.path, hello_request()), user(SUBORDINATE_START + 65535)).result[0] == 0
    status, text, _ = Held(asks(k.path, hello_request()), user(SUBORDINATE_START + 10)).result
    assert status == errno.EUSERS, text
    assert "uid %d %s has 4 connections to the keeper" % (SUBORDINATE_START + 10, COUNTED_WITH % 65534) in text
    status, text, _ = Held(asks(k.path, hello_request()), user(65534)).result
    assert status == errno.EUSERS and text.startswith("uid 65534 has 4 connections to the keeper"), text
    # Past the range, another user, and a uid of root's range (a root
    # runtime's container, as LXD's; the keeper read two ranges, not three):
    # shares of their own.
    for uid in (SUBORDINATE_START + 65536, OUTSIDER, ROOTS_RANGE + 1):
        status, text, _ = Held(asks(k.path, create_request("o", size=MIB)), user(uid)).result
        assert status == 0, (uid, text)
    mine = k.ask(create_request("mine", size=MIB))
    assert mine.status == 0, mine.text
    mine.close_fds()
    assert "refused a connection of uid %d %s" % (SUBORDINATE_START + 10, COUNTED_WITH % 65534) in k.text()


def test_the_subordinate_file_is_read_again_when_it_changes(make_keeper, held, tmp_path):  # noqa: F811
    """A range added while the keeper runs counts from the next connection
    (what was kept before stays counted where it was)."""
    needs_root()
    subuid = tmp_path / "subuid"
    subuid.write_text("")
    k = make_keeper(*LIMITS, "--subuid-file", str(subuid))
    for i in (1, 2, 3):
        status, text, _ = Held(asks(k.path, create_request("a%d" % i, size=MIB)), user(SUBORDINATE_START + i)).result
        assert status == 0, text  # each a user of its own
    subordinate_file(subuid, nobody_name())
    made = [
        Held(asks(k.path, create_request("b%d" % i, size=MIB)), user(SUBORDINATE_START + i)).result for i in (4, 5, 6)
    ]
    assert [m[0] for m in made] == [0, 0, errno.EMFILE], made
    assert "uid %d %s holds 2 segments" % (SUBORDINATE_START + 6, COUNTED_WITH % 65534) in made[2][1], made


def user_namespace_of(owner, maps, groups=True):
    """become(): as @owner, unshare a user namespace, whose uid and gid maps
    (@maps, "INSIDE OUTSIDE COUNT" lines) a helper still root writes from
    outside, as newuidmap does; then be root in it.  @groups: as user()."""

    def become():
        unshared_r, unshared_w = os.pipe()
        mapped_r, mapped_w = os.pipe()
        me = os.getpid()
        helper = os.fork()
        if helper == 0:
            ok = False
            try:
                if os.read(unshared_r, 1) == b"u":
                    with open("/proc/%d/setgroups" % me, "w") as f:
                        f.write("deny")
                    for kind in ("uid_map", "gid_map"):
                        with open("/proc/%d/%s" % (me, kind), "w") as f:
                            f.write(maps)
                    ok = True
            finally:
                os.write(mapped_w, b"m" if ok else b"x")
                os._exit(0)
        user(owner, groups)()
        libc = ctypes.CDLL(None, use_errno=True)
        # Dumpable again after setresuid(), so that /proc/PID is its own and
        # a helper that is root in a namespace (not the host's) may write there.
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        unshared = libc.unshare(CLONE_NEWUSER) == 0
        failed = None if unshared else os.strerror(ctypes.get_errno())
        os.write(unshared_w, b"u" if unshared else b"x")
        wrote = os.read(mapped_r, 1) == b"m"
        os.waitpid(helper, 0)
        if failed:
            raise RuntimeError("cannot unshare a user namespace as uid %d: %s" % (owner, failed))
        if not wrote:
            raise RuntimeError("cannot write the namespace's maps")
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)

    return become


def test_the_uids_of_a_user_namespace_share_its_owners_limits(make_keeper, held):  # noqa: F811 - the fixture
    """A user that made a user namespace mapping 100 more uids (a rootless
    container): processes of five of them, each running as its uid inside,
    one of them from a namespace nested in it, count with the user who made
    the namespace, though no subordinate file names it; the user itself,
    outside, then finds its share taken.  Another user is served as before."""
    needs_root()
    k = make_keeper(*LIMITS, "--subuid-file", "/nonexistent/subuid")
    maps = "0 %d 1\n1 %d 100\n" % (NAMESPACE_OWNER, NAMESPACE_START)

    def inside():
        """In the namespace, as its root: a process per uid, each asking once;
        uid 4 from a namespace of its own (its uid 0 is uid 4 here)."""
        steps = [(user(1, False), create_request("n1", size=MIB)), (user(2, False), create_request("n2", size=MIB))]
        steps += [(user(3, False), create_request("n3", size=MIB))]
        steps += [(user_namespace_of(4, "0 4 1\n", groups=False), hello_request())]
        steps += [(user(5, False), hello_request())]
        return [Held(asks(k.path, request), become).result for become, request in steps]

    try:
        results = Held(inside, user_namespace_of(NAMESPACE_OWNER, maps)).result
    except RuntimeError as e:
        # The outer namespace only: inside it, any failure is the test's.
        if str(e).startswith("RuntimeError: cannot unshare"):
            pytest.skip("a user namespace made by an unprivileged user is refused here (%s)" % e)
        raise
    # Inside uid N is NAMESPACE_START + N - 1 to the keeper.
    assert [r[0] for r in results] == [0, 0, errno.EMFILE, 0, errno.EUSERS], results
    assert [r[2] for r in results[:2]] == [NAMESPACE_START, NAMESPACE_START + 1], results
    assert "uid %d %s holds 2 segments" % (NAMESPACE_START + 2, COUNTED_WITH % NAMESPACE_OWNER) in results[2][1]
    assert "uid %d %s has 4 connections" % (NAMESPACE_START + 4, COUNTED_WITH % NAMESPACE_OWNER) in results[4][1]
    status, text, _ = Held(asks(k.path, hello_request()), user(NAMESPACE_OWNER)).result
    assert status == errno.EUSERS and text.startswith("uid %d has 4 connections" % NAMESPACE_OWNER), text
    status, text, _ = Held(asks(k.path, create_request("o", size=MIB)), user(OUTSIDER)).result
    assert status == 0, text
