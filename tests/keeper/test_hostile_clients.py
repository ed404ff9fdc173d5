# SPDX-License-Identifier: Apache-2.0
"""mooncake-segmentd against hostile clients, the connection layer (issue
25, doc/keeper.md "Who may do what"): descriptors sent to the keeper are
never installed in it, one uid's connections cannot take every slot, a
connect flood past the open file limit does not make the keeper spin, and
the socket gets its mode at bind, never by a chmod of its path.  The real
built daemon runs on a temporary socket (test_keeper.py's Keeper)."""

import errno
import os
import shutil
import signal
import subprocess
import tempfile
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import namespace_probe  # noqa: E402
from test_keeper import (  # noqa: E402
    KEEPER,
    LIST,
    MIB,
    SHARE_GROUP,
    Client,
    Keeper,
    create_request,
    hello_request,
    listening,
    named_request,
)


@pytest.fixture
def make_keeper():
    made = []

    def make(*args, **kwargs):
        made.append(Keeper(*args, **kwargs))
        return made[-1]

    yield make
    for k in made:
        k.stop()


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def holding(pid, target):
    """How many of @pid's descriptors are @target (a readlink of /proc/PID/fd/N)."""
    count = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            count += os.readlink("/proc/%d/fd/%s" % (pid, fd)) == target
        except FileNotFoundError:
            pass  # closed while listed
    return count


def as_uid(uid, work, groups=()):
    """Run @work() in a forked child as @uid (uid and gid, supplementary @groups); the text it returns."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = "child failed"
        try:
            os.close(read_end)
            os.setgroups(list(groups))
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            out = work()
        except BaseException as e:  # noqa: B036 - the parent reports it
            out = "child failed: %r" % e
        finally:
            os.write(write_end, out.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


# --- descriptors are never installed -----------------------------------------


def test_descriptors_sent_are_never_installed_in_the_keeper(make_keeper):
    k = make_keeper()
    pid = k.proc.pid
    k.alive()
    time.sleep(0.2)  # that connection's close is noticed
    base = fd_count(pid)
    read_end, write_end = os.pipe()
    pipe = os.readlink("/proc/self/fd/%d" % read_end)
    fds = [write_end] * 100 + [read_end] * 100
    # A forked sender floods while this process samples the keeper's table:
    # an installed descriptor shows there however soon the keeper closes it.
    sender = os.fork()
    if sender == 0:
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                try:
                    with Client(k.path) as c:
                        c.send(hello_request(), fds)
                        c.sock.settimeout(2)
                        c.sock.recv(64)
                except OSError:
                    pass  # EPERM where SO_PASSRIGHTS is off; a closed connection
        finally:
            os._exit(0)
    most, samples = 0, 0
    while os.waitpid(sender, os.WNOHANG) == (0, 0):
        most = max(most, holding(pid, pipe))
        samples += 1
    os.close(read_end)
    os.close(write_end)
    print("the keeper held at most %d of the pipe's descriptors in %d samples" % (most, samples))
    assert most == 0, "the keeper installed %d descriptors a client sent" % most
    k.alive()
    time.sleep(0.2)  # the sender's last connections, closed, are noticed
    assert fd_count(pid) <= base


# --- the socket's mode is set at bind ----------------------------------------


@pytest.mark.parametrize("mode", [0o660, 0o666])
def test_the_socket_gets_its_mode_at_bind_under_any_umask(mode):
    # umask 077 would leave 0600 if the mode came from the caller's umask.
    old = os.umask(0o077)
    try:
        k = Keeper("--socket-mode", "%04o" % mode)
    finally:
        os.umask(old)
    try:
        assert os.stat(k.path).st_mode & 0o777 == mode
        k.alive()
    finally:
        k.stop()


def test_the_socket_path_is_never_chmodded():
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("strace is not installed: cannot see whether the keeper chmods its path")
    folder = Path(tempfile.mkdtemp(prefix="keeperd-"))
    path, trace = folder / "keeper.sock", folder / "trace"
    proc = subprocess.Popen(
        [strace, "-f", "-qq", "-o", str(trace), "-e", "trace=chmod,fchmodat", str(KEEPER)]
        + ["--socket", str(path), "--socket-mode", "0660"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not listening(path):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the keeper did not bind its socket under strace"
            time.sleep(0.05)
        with Client(path) as c:
            hello = c.ask(hello_request())
            assert hello.status == 0
        assert os.stat(path).st_mode & 0o777 == 0o660
        os.kill(hello.pid, signal.SIGTERM)  # the keeper, not strace: strace would detach
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    calls = [line for line in trace.read_text().splitlines() if "chmod" in line]
    shutil.rmtree(folder, ignore_errors=True)
    assert not calls, "the keeper changed a mode by path after bind: %s" % calls


# --- out of descriptors -------------------------------------------------------


def cpu_seconds(pid):
    """utime + stime of @pid, in seconds (/proc/PID/stat, fields 14 and 15)."""
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_connect_flood_past_the_file_limit_does_not_spin(make_keeper):
    if not shutil.which("prlimit"):
        pytest.skip("prlimit is not installed: cannot lower the keeper's open file limit")
    k = make_keeper()
    k.alive()
    # Lowered after start: the keeper raises its soft limit to the hard one.
    subprocess.run(["prlimit", "--pid", str(k.proc.pid), "--nofile=24:24"], check=True)
    clients = [k.client() for _ in range(40)]  # past 24 descriptors: accept() fails with EMFILE
    time.sleep(0.3)
    before = cpu_seconds(k.proc.pid)
    time.sleep(2)
    spent = cpu_seconds(k.proc.pid) - before
    print("the keeper spent %.2f s of CPU in 2 s with its descriptors exhausted" % spent)
    assert spent < 0.3, "the keeper spins on a listener it cannot accept from (%.2f s of CPU in 2 s)" % spent
    for c in clients:
        c.close()
    time.sleep(0.3)
    k.alive()
    assert "cannot accept a connection" in k.text()


# --- connections per uid -------------------------------------------------------


def answered(client):
    """Whether @client's connection is served (a HELLO answered), not closed."""
    try:
        client.sock.settimeout(5)
        return client.ask(hello_request()).status == 0
    except OSError:
        return False


def test_one_uids_connections_cannot_lock_out_another(make_keeper):
    if os.getuid() != 0:
        pytest.skip("needs root to connect as a second uid")
    k = make_keeper("--max-connections", "8")  # a quarter each: 2 per uid
    flood = [k.client() for _ in range(20)]
    served = [c for c in flood if answered(c)]

    def other():
        with Client(k.path) as c:
            return "served" if answered(c) else "closed"

    assert as_uid(65534, other) == "served", "uid 0's flood locked uid 65534 out"
    assert len(served) == 2, "uid 0 holds %d connections, past --max-connections-per-uid 2" % len(served)
    assert "--max-connections-per-uid" in k.text()
    for c in flood:
        c.close()
    time.sleep(0.2)
    k.alive()


def test_max_connections_per_uid_is_an_option(make_keeper):
    k = make_keeper("--max-connections-per-uid", "3")
    flood = [k.client() for _ in range(6)]
    assert sum(answered(c) for c in flood) == 3
    for c in flood:
        c.close()
    bad = subprocess.run([str(KEEPER), "--max-connections-per-uid", "0"], capture_output=True, text=True, timeout=20)
    assert bad.returncode == 2 and "--max-connections-per-uid '0' is not a number from 1" in bad.stderr


def test_a_connection_past_the_limits_is_told_why_not_that_the_keeper_restarted(make_keeper):
    tool = Path(KEEPER).parents[1] / "tools" / "mooncake-segment"
    # The held connections stay open however slow the clients below start
    # (under ASan a Python start took past the 10 s after which the keeper
    # closes a silent connection, and the library's got in).
    k = make_keeper("--max-connections", "4", "--max-connections-per-uid", "2", "--silent-timeout-ms", "600000")
    held = [k.client() for _ in range(2)]
    assert all(answered(c) for c in held)
    uid = os.geteuid()
    first_refused = time.monotonic()
    # The CLI and the library name the limit, whose it is, and the fix.
    listed = subprocess.run(
        [str(tool), "keep", "list", "--socket", str(k.path)], capture_output=True, text=True, timeout=30
    )
    assert listed.returncode == 1, listed.stdout
    assert (
        f"refused the connection: uid {uid} has 2 connections to the keeper, the most its --max-connections-per-uid"
        in listed.stderr
    ), listed.stderr
    assert "stopped or restarted" not in listed.stderr
    # A health check sees a full keeper as alive (a probe must not restart it).
    health = subprocess.run(
        [str(tool), "keep", "health", "--socket", str(k.path)], capture_output=True, text=True, timeout=30
    )
    assert health.returncode == 0 and "the keeper answers, but is full" in health.stderr, health.stderr
    env = dict(os.environ, MOONCAKE_SEGMENT_KEEPER=str(k.path))
    code = (
        "from mooncake.shared_segment import SharedSegmentError, create_shared_segment\n"
        "try:\n"
        "    create_shared_segment('kv', {'kv': {'count': 1, 'shape': (4096,), 'dtype': 'uint8'}}, 1, 0, keep='full')\n"
        "except SharedSegmentError as e:\n"
        "    print(e)\n"
    )
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert made.stdout.startswith("Busy: ") and "--max-connections-per-uid" in made.stdout, made.stdout + made.stderr
    # The node's limit, when every connection is taken by others' share too.
    more = make_keeper("--max-connections", "2", "--max-connections-per-uid", "3")
    full = [more.client() for _ in range(2)]
    assert all(answered(c) for c in full)
    listed = subprocess.run(
        [str(tool), "keep", "list", "--socket", str(more.path)], capture_output=True, text=True, timeout=30
    )
    assert listed.returncode == 1 and "serves 2 connections, its --max-connections" in listed.stderr, listed.stderr
    # Logged, at most once in 10 s per kind, however many are refused (8
    # here; slow builds such as ASan spread them over more than one window).
    for _ in range(5):
        subprocess.run([str(tool), "keep", "list", "--socket", str(k.path)], capture_output=True, timeout=30)
    windows = 1 + int((time.monotonic() - first_refused) // 10)
    logged = k.text().count("refused a connection of uid")
    assert 1 <= logged <= min(windows, 7), k.text()
    for c in held + full:
        c.close()
    k.alive()


# --- a keeper in a user namespace ------------------------------------------------


def test_a_keeper_in_a_user_namespace_refuses_the_users_it_cannot_tell_apart(make_keeper):
    namespace_probe.require("--user", "--map-root-user", why="the keeper runs in a user namespace of its own")
    # As `unshare -U -r` (or PrivateUsers=yes) runs it: only root is mapped,
    # every other uid is the overflow uid 65534 to the keeper.
    k = make_keeper(prefix=(shutil.which("unshare"), "--user", "--map-root-user"))
    assert "running in a user namespace" in k.text()
    mine = k.ask(create_request("a-secret", size=MIB))
    assert mine.status == 0, mine.text
    mine.close_fds()

    def lists():
        with Client(k.path) as c:
            try:
                c.send(named_request(LIST, ""))
            except BrokenPipeError:
                pass  # refused and closed before the request went: the refusal is there to read
            reply = c.receive()
            return "%d %s" % (reply.status, reply.text)

    for uid in (1000, 1001):
        said = as_uid(uid, lists)
        assert said.startswith("%d " % errno.EACCES), said
        assert "does not map your uid or gid (it sees uid 65534, gid 65534" in said, said
    # The mapped user is served as before, and nobody else saw its segment.
    assert [s["name"] for s in k.ask(named_request(LIST, "")).segments] == ["a-secret"]
    assert k.text().count("its uid or gid is not mapped into the keeper's user namespace") == 1, k.text()


def ask_as(path, uid, groups, request):
    """@request sent as @uid (gid @uid) with supplementary @groups from a forked child: "status text"."""

    def ask():
        with Client(path) as c:
            reply = c.ask(request)
            reply.close_fds()
            return "%d %s" % (reply.status, reply.text)

    return as_uid(uid, ask, groups)


def test_a_group_the_keepers_user_namespace_does_not_map_admits_no_one(make_keeper):
    namespace_probe.require("--user", why="the keeper runs in a user namespace of its own")
    # Root and uids/gids 1000-1001 mapped; every other group is 65534 to the keeper.
    maps = "0 0 1;1000 1000 2"
    k = make_keeper(prefix=(sys.executable, str(Path(__file__).resolve().parent / "userns_exec.py"), maps, maps, "--"))
    shared = dict(size=MIB, sharing=SHARE_GROUP, gid=65534)
    made = ask_as(k.path, 1000, [], create_request("grp", **shared))
    assert made.startswith("0 "), made + k.text()
    # uid 1001's supplementary group 5000 is unmapped: SO_PEERGROUPS says 65534,
    # which stands for every unmapped group, so it makes no one a member.
    other = ask_as(k.path, 1001, [5000], create_request("grp", owner=1000, **shared))
    assert other.startswith("%d " % errno.EACCES), other
