# SPDX-License-Identifier: Apache-2.0
"""mooncake-segmentd, the node keeper, run as the real built daemon on a
temporary socket and spoken to by a small client written here from
doc/keeper-protocol.md (struct and a SEQPACKET socket, descriptors by
SCM_RIGHTS): create and warm attach, each differing field, replace, list
paging, stat, release, sharing with another uid, the budget and the segment
limit, the idle timeout, hostile clients (garbage, truncated and over-long
packets, descriptors, 300 connections, silence, a client that never reads),
the pages outliving a SIGKILLed keeper, and the keeper's own memory and
descriptors with 100 kept segments (printed as figures)."""

import array
import errno
import mmap
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import namespace_probe

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", Path(__file__).resolve().parents[2]))
KEEPER = BUILDDIR / "keeper" / "mooncake-segmentd"
if not KEEPER.exists():
    pytest.skip(f"{KEEPER} is not built (run make first)", allow_module_level=True)

MAGIC = 0x504B434D
HELLO, CREATE, LIST, RELEASE, STAT, JOIN = 1, 2, 3, 4, 5, 6
REPLY = 0x8000
MESSAGE_MAX = 16384
F_HUGETLB, F_REPLACE, F_ATTACH_ONLY, F_CREATE_ONLY, F_GROUP_CONTROL = 1, 2, 4, 8, 16
WARM, ATTACH_HUGETLB, REPLACED = 1, 2, 4
FREED, DEFERRED = 1, 2
SHARE_UID, SHARE_GROUP, SHARE_ANY = 0, 1, 2
MAPPERS_UNKNOWN = 0xFFFFFFFF
MIB = 1 << 20

HEADER = struct.Struct("<IHHII")
CREATE_FIXED = struct.Struct("<QQQQIIBBHIHHI")  # ..., sharing, owner given, declaration length, gid, lengths, owner uid
NAMED_FIXED = struct.Struct("<HBxI")  # name length, owner given, owner uid
JOIN_FIXED = struct.Struct("<QQIH2x")  # generation, token, owner uid, name length
REPLY_FIXED = struct.Struct("<IHH")
HELLO_BODY = struct.Struct("<HHIQIIII")
CREATE_BODY = struct.Struct("<QQQQIIB3xIQ")  # JOIN's too
RELEASE_BODY = struct.Struct("<QII")
LIST_BODY = struct.Struct("<HHI")
RECORD = struct.Struct("<QQQQQQIIIBBHHHIIIIIQ")


def message(kind, body, sequence=7):
    return HEADER.pack(MAGIC, 1, kind, HEADER.size + len(body), sequence) + body


def hello_request(sequence=7):
    return message(HELLO, bytes(8), sequence)


def create_request(
    name,
    size=4 * MIB,
    fingerprint=0x1234,
    page_size=0,
    control=0,
    world=2,
    flags=0,
    sharing=SHARE_UID,
    gid=0,
    identity=b"",
    owner=None,
    declaration=b"",
):
    """owner: None for the caller's own segment, else that uid's; declaration: none when empty."""
    name = name.encode()
    body = CREATE_FIXED.pack(
        fingerprint,
        size,
        page_size,
        control,
        world,
        flags,
        sharing,
        owner is not None,
        len(declaration),
        gid,
        len(name),
        len(identity),
        owner or 0,
    )
    return message(CREATE, body + name + identity + declaration)


def named_request(kind, name, owner=None):
    """owner: None for the caller's own segment (LIST: every owner of the
    cursor's name is passed), else that uid's."""
    name = name.encode()
    return message(kind, NAMED_FIXED.pack(len(name), owner is not None, owner or 0) + name)


def join_request(name, owner, generation, token):
    name = name.encode()
    return message(JOIN, JOIN_FIXED.pack(generation, token, owner, len(name)) + name)


class Reply:
    def __init__(self, data, fds):
        magic, version, self.type, length, self.sequence = HEADER.unpack_from(data)
        assert magic == MAGIC and version == 1 and length == len(data), data[:16]
        self.status, self.field, text_len = REPLY_FIXED.unpack_from(data, 16)
        self.text = data[len(data) - text_len :].decode("ascii")
        self.fds = fds
        body = data[24 : len(data) - text_len]
        if self.status:
            assert not body and not fds, "a refusal carries no body and no descriptor"
            return
        kind = self.type & ~REPLY
        if kind == HELLO:
            (
                self.version,
                _,
                self.pid,
                self.instance,
                self.message_max,
                self.kept,
                self.flags,
                _,
            ) = HELLO_BODY.unpack_from(body)
        elif kind in (CREATE, JOIN):
            (
                self.generation,
                self.size,
                self.page_size,
                self.control,
                self.flags,
                self.uid,
                self.descriptors,
                self.caller_uid,
                self.token,
            ) = CREATE_BODY.unpack_from(body)
            assert len(fds) == self.descriptors
        elif kind == RELEASE:
            self.generation, self.flags, _ = RELEASE_BODY.unpack_from(body)
        elif kind == STAT:
            self.segments = parse_records(body, 1)
        elif kind == LIST:
            count, self.more, _ = LIST_BODY.unpack_from(body)
            self.segments = parse_records(body[LIST_BODY.size :], count)

    def close_fds(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def parse_records(body, count):
    records, offset = [], 0
    for _ in range(count):
        fields = RECORD.unpack_from(body, offset)
        fp, size, page, control, generation, created, world, uid, gid, sharing, _, nlen, ilen, flags = fields[:14]
        mappers, warm, _, dev_major, dev_minor, ino = fields[14:]
        offset += RECORD.size
        name = body[offset : offset + nlen].decode()
        offset += nlen + ilen
        records.append(
            dict(name=name, fingerprint=fp, size=size, page_size=page, control=control, generation=generation,
                 world=world, uid=uid, sharing=sharing, flags=flags, mappers=mappers, warm=warm,
                 dev=(dev_major, dev_minor), ino=ino)
        )  # fmt: skip
    return records


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Blocking: a full backlog makes a non-blocking connect fail with EAGAIN.
        self.sock.connect(str(path))
        self.sock.settimeout(30)

    def send(self, data, fds=()):
        if fds:
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            self.sock.send(data)

    def receive(self):
        data, ancillary, flags, _ = self.sock.recvmsg(MESSAGE_MAX + 1, socket.CMSG_SPACE(8 * 4))
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
        if not data:
            raise ConnectionResetError("the keeper closed the connection")
        return Reply(data, fds)

    def ask(self, data):
        self.send(data)
        return self.receive()

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def listening(path):
    """Whether a socket bound at @path listens (/proc/net/unix): the file
    appears at bind(), before listen(), and a connect() between the two is
    refused."""
    accepting = 0x10000  # __SO_ACCEPTCON in the Flags column
    with open("/proc/net/unix") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if len(fields) == 8 and fields[7] == str(path) and int(fields[3], 16) & accepting:
                return True
    return False


class Keeper:
    def __init__(self, *args, prefix=()):
        """prefix: what runs the keeper (unshare for another PID namespace)."""
        # A directory every uid can reach, so that another uid can connect.
        self.dir = Path(tempfile.mkdtemp(prefix="keeperd-"))
        os.chmod(self.dir, 0o755)
        self.path = self.dir / "run" / "keeper.sock"
        self.log = open(self.dir / "keeper.log", "w+")
        self.proc = subprocess.Popen(
            [*prefix, str(KEEPER), "--socket", str(self.path), *args], stderr=self.log, stdout=self.log
        )
        deadline = time.monotonic() + 20
        while not listening(self.path):
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, "the keeper did not bind its socket: " + self.text()
            time.sleep(0.02)

    def text(self):
        self.log.flush()
        return (self.dir / "keeper.log").read_text()

    def client(self):
        return Client(self.path)

    def ask(self, data):
        with self.client() as c:
            return c.ask(data)

    def alive(self):
        """The keeper still runs and answers HELLO on a new connection."""
        assert self.proc.poll() is None, "the keeper died: " + self.text()
        reply = self.ask(hello_request(99))
        assert reply.type == HELLO | REPLY and reply.status == 0 and reply.sequence == 99
        return reply

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def keeper():
    k = Keeper("--silent-timeout-ms", "1500")
    yield k
    k.stop()


@pytest.fixture
def make_keeper():
    made = []

    def make(*args, **kwargs):
        made.append(Keeper(*args, **kwargs))
        return made[-1]

    yield make
    for k in made:
        k.stop()


def mapping(reply, size=None):
    return mmap.mmap(reply.fds[0], size or reply.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


# --- the protocol's requests -------------------------------------------------


def test_hello_names_the_keeper_and_its_limits(keeper):
    reply = keeper.ask(hello_request(5))
    assert reply.type == HELLO | REPLY and reply.sequence == 5 and reply.status == 0
    assert reply.version == 1 and reply.pid == keeper.proc.pid
    assert reply.message_max == MESSAGE_MAX and reply.kept == 0
    assert reply.flags == 0, "the stub service manager has no descriptor store"
    # Said once, by the part that knows (service.c), not again by main().
    assert keeper.text().count("a restart of the keeper loses every kept segment") == 1, keeper.text()


def test_create_then_a_second_create_attaches_warm_and_sees_the_pattern(keeper):
    with keeper.client() as c:
        first = c.ask(create_request("kv-a", size=3 * MIB + 5, control=8192))
    assert first.status == 0, first.text
    assert first.flags & WARM == 0 and first.descriptors == 2 and len(first.fds) == 2
    assert first.size >= 3 * MIB + 5 and first.size % first.page_size == 0
    assert first.uid == os.getuid() and first.caller_uid == os.getuid() and first.control == 8192
    # The keeper seals both against a shrink under other mappers.
    for fd in first.fds:
        with pytest.raises(OSError):
            os.ftruncate(fd, 0)
    assert os.fstat(first.fds[1]).st_size == 8192
    view = mapping(first)
    view[0:8] = b"pattern!"
    view[first.size - 8 :] = b"!nrettap"
    assert "kept 'kv-a' (%d bytes, generation %d) for uid %d" % (first.size, first.generation, os.getuid()) in (
        keeper.text()
    )

    second = keeper.ask(create_request("kv-a", size=3 * MIB + 5, control=8192))
    assert second.status == 0, second.text
    assert second.flags & WARM and second.generation == first.generation
    other = mapping(second)
    assert other[0:8] == b"pattern!" and other[second.size - 8 :] == b"!nrettap"
    assert os.fstat(second.fds[0]).st_ino == os.fstat(first.fds[0]).st_ino
    stat = keeper.ask(named_request(STAT, "kv-a"))
    assert stat.segments[0]["warm"] == 1 and stat.segments[0]["mappers"] == 1, "the test process maps it"
    other.close()
    view.close()
    first.close_fds()
    second.close_fds()


def test_attach_only_and_create_only(keeper):
    absent = keeper.ask(create_request("kv-b", flags=F_ATTACH_ONLY))
    assert absent.status == errno.ENOENT and "kv-b" in absent.text
    made = keeper.ask(create_request("kv-b", flags=F_CREATE_ONLY))
    assert made.status == 0
    made.close_fds()
    again = keeper.ask(create_request("kv-b", flags=F_CREATE_ONLY))
    assert again.status == errno.EEXIST and again.field == 0 and "create only" in again.text


DIFFERENT = [
    (1, dict(fingerprint=0x9999), "fingerprint"),
    (2, dict(identity=b"llama-70b"), "identity"),
    (3, dict(size=8 * MIB), "bytes"),
    (4, dict(page_size=1 << 30), "pages of"),
    (6, dict(world=4), "world size"),
    (7, dict(control=4096), "control area"),
    (8, dict(sharing=SHARE_ANY), "sharing"),
]


@pytest.mark.parametrize("field, change, words", DIFFERENT, ids=[d[2].split()[0] for d in DIFFERENT])
def test_each_differing_field_is_refused_naming_it(keeper, field, change, words):
    made = keeper.ask(create_request("kv-c", identity=b"m"))
    assert made.status == 0
    made.close_fds()
    declared = dict(identity=b"m")
    declared.update(change)
    refused = keeper.ask(create_request("kv-c", **declared))
    assert refused.status == errno.EEXIST, refused.text
    assert refused.field == field, refused.text
    assert words in refused.text and "'kv-c'" in refused.text and "replace" in refused.text


KEPT_DECLARATION = b"kv|k:4:2x8:torch.float16:32;v:4:8:torch.uint8:8"
DECLARED = [
    # (declaration, field, what the sentence says after "'kv-d' is kept ")
    (
        b"kv|k:4:2x8:torch.int16:32;v:4:8:torch.uint8:8",
        10,
        "with block 'k' of dtype torch.float16 (2-byte "
        "elements), this create declares dtype torch.int16 (2-byte elements)",
    ),
    (
        b"kv|k:4:2x8:torch.float16:32;v:4:8:torch.uint8:16",
        10,
        "with block 'v' of entries of 8 bytes, this create " "declares entries of 16 bytes",
    ),
    (
        b"kv|k:4:2x8:torch.float16:32;v:5:8:torch.uint8:8",
        10,
        "with block 'v' of count 4, this create declares " "count 5",
    ),
    (
        b"kv|v:4:8:torch.uint8:8;k:4:2x8:torch.float16:32",
        9,
        "with declaration 'kv|k:4:2x8:torch.float16:32;v:4:8:"
        "torch.uint8:8', this create declares 'kv|v:4:8:torch.uint8:8;k:4:2x8:torch.float16:32'",
    ),
    (
        b"a C caller's name",
        9,
        "with name 'kv|k:4:2x8:torch.float16:32;v:4:8:torch.uint8:8', this create declares name 'a C caller's name'",
    ),
    (
        b"",
        1,
        "with fingerprint 0000000000001234, this create declares 0000000000009999 (the name, size or block "
        "layout differ)",
    ),
]


@pytest.mark.parametrize("declaration, field, says", DECLARED, ids=["dtype", "entry", "count", "order", "c", "none"])
def test_differing_declarations_are_refused_naming_their_first_difference(keeper, declaration, field, says):
    made = keeper.ask(create_request("kv-d", declaration=KEPT_DECLARATION))
    assert made.status == 0, made.text
    made.close_fds()
    refused = keeper.ask(create_request("kv-d", fingerprint=0x9999, declaration=declaration))
    assert refused.status == errno.EEXIST and refused.field == field, refused.text
    assert refused.text == f"'kv-d' is kept {says}; use the same declaration, another name, or replace it " + (
        "(only when nobody maps it)"
    ), refused.text


def test_the_fingerprint_decides_the_declaration_only_explains(keeper):
    made = keeper.ask(create_request("kv-e", declaration=b"kv|k:4:8:torch.uint8:8"))
    assert made.status == 0
    made.close_fds()
    same = keeper.ask(create_request("kv-e", declaration=b"kv|k:8:8:torch.uint8:8"))
    assert same.status == 0 and same.flags & WARM, same.text
    same.close_fds()
    # A declaration a decoder refuses: not printable.
    bad = keeper.ask(create_request("kv-e", declaration=b"kv|\n"))
    assert bad.type == REPLY and bad.status == errno.EPROTO and "declaration has byte 0x0a at 3" in bad.text


def test_a_different_hugetlb_flag_is_refused_naming_it(keeper):
    if not Path("/sys/kernel/mm/hugepages").exists():
        pytest.skip("this kernel has no HugeTLB")
    # Base pages declared at 2 MiB and HugeTLB pages of 2 MiB: hugetlb is the first difference.
    made = keeper.ask(create_request("kv-h", page_size=2 * MIB))
    assert made.status == 0 and made.page_size == 2 * MIB, made.text
    made.close_fds()
    refused = keeper.ask(create_request("kv-h", flags=F_HUGETLB, page_size=2 * MIB))
    if refused.status == errno.EINVAL:
        pytest.skip("no HugeTLB pages of 2 MiB on this host: " + refused.text)
    assert refused.status == errno.EEXIST and refused.field == 5, refused.text


def test_replace_refused_while_mapped_then_done_when_unmapped(keeper):
    made = keeper.ask(create_request("kv-r"))
    view = mapping(made)
    view[0:4] = b"old!"
    busy = keeper.ask(create_request("kv-r", fingerprint=0x77, flags=F_REPLACE))
    assert busy.status == errno.EBUSY and "1 process(es) map it" in busy.text, busy.text
    view.close()
    made.close_fds()
    replaced = keeper.ask(create_request("kv-r", fingerprint=0x77, flags=F_REPLACE))
    assert replaced.status == 0, replaced.text
    assert replaced.flags & REPLACED and not replaced.flags & WARM
    assert replaced.generation > made.generation
    fresh = mapping(replaced)
    assert fresh[0:4] == bytes(4), "a replaced segment starts zeroed"
    fresh.close()
    replaced.close_fds()


def test_list_pages_through_more_than_32_segments(keeper):
    names = ["seg-%03d" % i for i in range(70)]
    for name in reversed(names):
        r = keeper.ask(create_request(name, size=4096))
        assert r.status == 0, r.text
        r.close_fds()
    seen, cursor, pages = [], "", 0
    with keeper.client() as c:
        while True:
            page = c.ask(named_request(LIST, cursor))
            assert page.status == 0 and len(page.segments) <= 32
            pages += 1
            seen += [s["name"] for s in page.segments]
            if not page.more:
                break
            cursor = page.segments[-1]["name"]
    assert pages == 3 and seen == names
    assert keeper.alive().kept == 70


def test_stat_reports_the_record(keeper):
    made = keeper.ask(create_request("kv-s", size=5 * MIB, identity=b"id", world=8))
    stat = keeper.ask(named_request(STAT, "kv-s"))
    record = stat.segments[0]
    assert record["name"] == "kv-s" and record["size"] == made.size and record["world"] == 8
    assert record["generation"] == made.generation and record["uid"] == os.getuid()
    assert record["mappers"] in (0, MAPPERS_UNKNOWN) and record["fingerprint"] == 0x1234
    made.close_fds()
    assert keeper.ask(named_request(STAT, "nope")).status == errno.ENOENT


def test_release_while_mapped_is_deferred_and_the_mapping_stays(keeper):
    made = keeper.ask(create_request("kv-d"))
    view = mapping(made)
    made.close_fds()
    view[0:5] = b"alive"
    released = keeper.ask(named_request(RELEASE, "kv-d"))
    assert released.status == 0 and released.flags == DEFERRED and released.generation == made.generation
    assert view[0:5] == b"alive"
    view[5:10] = b"still"
    assert view[0:10] == b"alivestill"
    assert keeper.ask(named_request(STAT, "kv-d")).status == errno.ENOENT, "the name is free at once"
    view.close()
    again = keeper.ask(create_request("kv-d"))
    assert again.status == 0 and not again.flags & WARM and again.generation > made.generation
    again.close_fds()


def test_release_unmapped_frees(keeper):
    made = keeper.ask(create_request("kv-f"))
    made.close_fds()
    released = keeper.ask(named_request(RELEASE, "kv-f"))
    assert released.status == 0 and released.flags == FREED
    assert "released 'kv-f'" in keeper.text()
    assert keeper.ask(named_request(RELEASE, "kv-f")).status == errno.ENOENT


def as_other_uid(keeper, requests, groups=()):
    """Send @requests as uid/gid 65534 (with supplementary @groups) from a
    forked child; their statuses and sentences."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgroups(list(groups))
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            statuses = []
            with keeper.client() as c:
                for request in requests:
                    reply = c.ask(request)
                    statuses.append("%d:%s" % (reply.status, reply.text))
                    reply.close_fds()
            os.write(write_end, "\n".join(statuses).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return [(int(line.split(":", 1)[0]), line.split(":", 1)[1]) for line in out.split("\n")]


def test_another_uid_is_refused_unless_shared_with_any(keeper):
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another uid (setresuid)")
    private = keeper.ask(create_request("kv-mine"))
    shared = keeper.ask(create_request("kv-ours", sharing=SHARE_ANY))
    private.close_fds()
    shared.close_fds()
    results = as_other_uid(
        keeper,
        [
            create_request("kv-mine", owner=0),
            named_request(STAT, "kv-mine", owner=0),
            named_request(RELEASE, "kv-mine", owner=0),
            create_request("kv-ours", sharing=SHARE_ANY, owner=0),
            named_request(RELEASE, "kv-ours", owner=0),
            named_request(LIST, ""),
        ],
    )
    (attach, text), (stat, _), (release, _), (shared_attach, _), (shared_release, _), (listed, _) = results
    assert attach == errno.EACCES and "uid 65534" in text and "sharing uid" in text, text
    assert stat == errno.EACCES and release == errno.EACCES
    assert shared_attach == 0, "sharing any lets every uid attach"
    assert shared_release == errno.EACCES, "only the creator or root releases"
    assert listed == 0


def test_names_are_per_uid_so_nobody_squats_another_users_name(keeper):
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another uid (setresuid)")
    mine = keeper.ask(create_request("kv-name"))
    assert mine.status == 0 and mine.uid == 0, mine.text
    mine.close_fds()
    results = as_other_uid(
        keeper,
        [
            create_request("kv-name", fingerprint=0x99),  # its own, though root's exists
            create_request("kv-name", fingerprint=0x99, flags=F_ATTACH_ONLY),
            named_request(STAT, "kv-name"),
            create_request("kv-name", owner=0),  # root's, not shared with it
            named_request(STAT, "kv-name", owner=0),
            named_request(RELEASE, "kv-name", owner=0),
            create_request("kv-other", owner=0),  # never created for another uid
        ],
    )
    statuses = [status for status, _ in results]
    assert statuses == [0, 0, 0, errno.EACCES, errno.EACCES, errno.EACCES, errno.ENOENT], results
    assert "uid 0 keeps no segment 'kv-other'" in results[6][1], results[6][1]
    listed = keeper.ask(named_request(LIST, ""))
    records = [(r["name"], r["uid"], r["fingerprint"]) for r in listed.segments]
    assert records == [("kv-name", 0, 0x1234), ("kv-name", 65534, 0x99)], "root sees both, by (name, uid)"
    assert listed.segments[0]["generation"] != listed.segments[1]["generation"]
    # Root reaches another uid's segment by naming it, but never creates one for it.
    assert keeper.ask(named_request(STAT, "kv-name", owner=65534)).segments[0]["fingerprint"] == 0x99
    assert keeper.ask(create_request("kv-new", owner=65534)).status == errno.ENOENT
    # Root's replace of another uid's segment keeps it that uid's.
    replaced = keeper.ask(create_request("kv-name", fingerprint=0x77, flags=F_REPLACE, owner=65534))
    assert replaced.status == 0 and replaced.flags & REPLACED and replaced.uid == 65534, replaced.text
    replaced.close_fds()
    assert [(r["name"], r["uid"], r["fingerprint"]) for r in keeper.ask(named_request(LIST, "")).segments] == [
        ("kv-name", 0, 0x1234),
        ("kv-name", 65534, 0x77),
    ]
    assert keeper.ask(named_request(RELEASE, "kv-name", owner=65534)).status == 0
    assert [(r["name"], r["uid"]) for r in keeper.ask(named_request(LIST, "")).segments] == [("kv-name", 0)]


def test_the_list_cursor_names_an_owner_so_a_shared_name_is_not_skipped(keeper):
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another uid (setresuid)")
    for i in range(32):
        r = keeper.ask(create_request("page-%02d" % i, size=4096))
        assert r.status == 0, r.text
        r.close_fds()
    # The 33rd record shares the 32nd's name: the first page ends between them.
    assert as_other_uid(keeper, [create_request("page-31", size=4096)])[0][0] == 0
    first = keeper.ask(named_request(LIST, ""))
    assert first.more and first.segments[-1]["name"] == "page-31" and first.segments[-1]["uid"] == 0
    after = keeper.ask(named_request(LIST, "page-31", owner=0))
    assert [(r["name"], r["uid"]) for r in after.segments] == [("page-31", 65534)] and not after.more
    # Without an owner the cursor passes every owner of its name.
    assert keeper.ask(named_request(LIST, "page-31")).segments == []
    bad = keeper.ask(named_request(LIST, "", owner=0))
    assert bad.status == errno.EPROTO and "cursor owner uid without a cursor name" in bad.text, bad.text


def test_group_sharing_follows_the_peers_groups(keeper):
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another uid (setresuid)")
    for name, gid in (("kv-group", 65534), ("kv-group0", 4242)):
        made = keeper.ask(create_request(name, sharing=SHARE_GROUP, gid=gid))
        assert made.status == 0, made.text
        made.close_fds()
    asks = [
        create_request(name, sharing=SHARE_GROUP, gid=gid, owner=0)
        for name, gid in (("kv-group", 65534), ("kv-group0", 4242))
    ]
    primary_only = as_other_uid(keeper, asks)
    assert primary_only[0][0] == 0, "the primary gid is a member: " + primary_only[0][1]
    assert primary_only[1][0] == errno.EACCES and "group 4242" in primary_only[1][1]
    # Supplementary groups count too (SO_PEERGROUPS at accept).
    supplementary = as_other_uid(keeper, asks, groups=[4242])
    assert supplementary[1][0] == 0, supplementary[1][1]


def test_the_budget_refuses_with_enospc_naming_it(make_keeper):
    k = make_keeper("--budget", "8M", "--uid-budget", "0")
    first = k.ask(create_request("b1", size=6 * MIB))
    assert first.status == 0
    first.close_fds()
    over = k.ask(create_request("b2", size=4 * MIB))
    assert over.status == errno.ENOSPC and "--budget" in over.text, over.text
    k.alive()
    # The operator sees it too, with who asked: one line a refusal...
    said = [line for line in k.text().splitlines() if "refused a create" in line]
    assert len(said) == 1 and f"uid {os.getuid()} (pid {os.getpid()})" in said[0] and "'b2'" in said[0], said
    # ...and never a flood from a client that loops on it.
    for _ in range(30):
        assert k.ask(create_request("b2", size=4 * MIB)).status == errno.ENOSPC
    said = [line for line in k.text().splitlines() if "refused a create" in line]
    assert len(said) == 10, said


def test_sizes_past_the_hosts_room_are_refused_not_killed(make_keeper):
    keeper = make_keeper("--uid-budget", "0")
    huge = keeper.ask(create_request("huge", size=1 << 50))
    assert huge.status == errno.ENOMEM, huge.text
    control = keeper.ask(create_request("huge-control", control=1 << 40))
    assert control.status == errno.EINVAL and "control area" in control.text
    assert keeper.alive().kept == 0


def test_the_socket_mode_is_set(make_keeper):
    assert os.stat(make_keeper().path).st_mode & 0o777 == 0o666
    assert os.stat(make_keeper("--socket-mode", "0600").path).st_mode & 0o777 == 0o600


def test_the_segment_limit_refuses_with_emfile(make_keeper):
    k = make_keeper("--max-segments", "2", "--uid-max-segments", "3")
    for name in ("m1", "m2"):
        r = k.ask(create_request(name, size=4096))
        assert r.status == 0
        r.close_fds()
    over = k.ask(create_request("m3", size=4096))
    assert over.status == errno.EMFILE and "--max-segments" in over.text
    assert f"uid {os.getuid()} holds the most (2)" in over.text, over.text
    assert "refused a create of uid" in k.text() and "--max-segments" in k.text()


SEGMENT_RELEASED = 2


def listed(keeper):
    return [
        (r["name"], r["generation"], bool(r["flags"] & SEGMENT_RELEASED))
        for r in keeper.ask(named_request(LIST, "")).segments
    ]


def test_a_released_segment_still_mapped_counts_in_the_budget_until_unmapped(make_keeper):
    k = make_keeper("--budget", "12M", "--uid-budget", "0")
    made = k.ask(create_request("b1", size=6 * MIB))
    view = mapping(made)
    made.close_fds()
    assert k.ask(named_request(RELEASE, "b1")).flags == DEFERRED
    # The name is free: a new segment with a new generation, beside the released one.
    again = k.ask(create_request("b1", size=4 * MIB))
    assert again.status == 0 and not again.flags & WARM and again.generation > made.generation, again.text
    again.close_fds()
    assert listed(k) == [("b1", made.generation, True), ("b1", again.generation, False)]
    assert k.ask(named_request(STAT, "b1")).segments[0]["generation"] == again.generation
    # Its 6 MiB are still memory: 6 + 4 + 4 is over the budget.
    over = k.ask(create_request("b2", size=4 * MIB))
    assert over.status == errno.ENOSPC and "--budget" in over.text and "10485760 kept now" in over.text, over.text
    view.close()
    # Unmapped: the create's fresh scan gives the bytes back.
    fits = k.ask(create_request("b2", size=4 * MIB))
    assert fits.status == 0, fits.text
    fits.close_fds()
    assert listed(k) == [("b1", again.generation, False), ("b2", fits.generation, False)]


def test_the_keeper_frees_a_released_segment_after_its_last_mapper_goes(keeper):
    made = keeper.ask(create_request("gone-later", size=MIB))
    view = mapping(made)
    made.close_fds()
    assert keeper.ask(named_request(RELEASE, "gone-later")).flags == DEFERRED
    assert listed(keeper) == [("gone-later", made.generation, True)]
    view.close()
    deadline = time.monotonic() + 20
    while listed(keeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listed(keeper) == [], "the loop's scan frees it without a request: " + keeper.text()
    assert "freed released 'gone-later'" in keeper.text()


def test_a_list_page_never_splits_one_names_generations(keeper):
    for i in range(31):
        r = keeper.ask(create_request("p-%02d" % i, size=4096))
        assert r.status == 0, r.text
        r.close_fds()
    old = keeper.ask(create_request("p-31", size=4096))
    view = mapping(old)
    old.close_fds()
    assert keeper.ask(named_request(RELEASE, "p-31")).flags == DEFERRED
    new = keeper.ask(create_request("p-31", size=4096))
    new.close_fds()
    # 33 records: the page ends before p-31's two, which the cursor would pass whole.
    first = keeper.ask(named_request(LIST, ""))
    assert first.more and len(first.segments) == 31 and first.segments[-1]["name"] == "p-30"
    rest = keeper.ask(named_request(LIST, "p-30", owner=0 if os.getuid() == 0 else os.getuid()))
    assert [(r["name"], r["generation"]) for r in rest.segments] == [
        ("p-31", old.generation),
        ("p-31", new.generation),
    ] and not rest.more
    view.close()


def scans(keeper, why=None):
    """The keeper's mapper scans so far (MOONCAKE_SEGMENTD_DEBUG=1 lines), for @why only when given."""
    lines = [line for line in keeper.text().splitlines() if "mapper scan " in line]
    return [
        line
        for line in lines
        if why is None or line.endswith(" for %s: /proc read" % why) or (" for %s:" % why) in line
    ]


def test_mapper_scans_are_cached_for_reports_and_fresh_once_per_request_for_decisions(make_keeper, monkeypatch):
    monkeypatch.setenv("MOONCAKE_SEGMENTD_DEBUG", "1")
    # A cache longer than the test: the counts below never race the clock.
    k = make_keeper("--scan-cache-ms", "600000")
    s1 = k.ask(create_request("s1", size=MIB))
    view = mapping(s1)
    s1.close_fds()
    k.ask(create_request("s2", size=MIB)).close_fds()
    with k.client() as c:
        for _ in range(10):
            assert c.ask(named_request(STAT, "s1")).segments[0]["mappers"] == 1
        for _ in range(3):
            assert c.ask(named_request(LIST, "")).status == 0
    assert len(scans(k)) == 1, "ten STATs and three LISTs share one scan: " + k.text()
    # What frees pages looks afresh, though the cache is young.
    assert k.ask(named_request(RELEASE, "s2")).flags == FREED
    assert len(scans(k, "a release")) == 1 and len(scans(k)) == 2
    busy = k.ask(create_request("s1", size=MIB, fingerprint=0x55, flags=F_REPLACE))
    assert busy.status == errno.EBUSY, busy.text
    assert len(scans(k, "a replace")) == 1 and len(scans(k)) == 3
    # A replace that also sweeps released segments still reads /proc once.
    s3 = k.ask(create_request("s3", size=MIB))
    held = mapping(s3)
    s3.close_fds()
    assert k.ask(named_request(RELEASE, "s3")).flags == DEFERRED
    view.close()
    replaced = k.ask(create_request("s1", size=MIB, fingerprint=0x55, flags=F_REPLACE))
    assert replaced.status == 0 and replaced.flags & REPLACED, replaced.text
    replaced.close_fds()
    assert len(scans(k, "a replace")) == 2 and scans(k, "a create's room check") == [], k.text()
    held.close()


def test_a_segment_handed_to_a_peer_the_keeper_cannot_see_is_never_replaced_or_idle_freed(make_keeper):
    namespace_probe.require(
        "--pid", "--mount-proc", "--fork", why="the keeper runs in a PID namespace and /proc of its own"
    )
    unshare = shutil.which("unshare")
    # The keeper in a PID namespace (and /proc) of its own: this test's
    # process is pid 0 to it, and its maps are out of the keeper's sight.
    k = make_keeper("--idle-timeout", "1", prefix=(unshare, "--pid", "--mount-proc", "--kill-child"))
    try:
        made = k.ask(create_request("unseen", size=MIB))
        assert made.status == 0, made.text + k.text()
        view = mapping(made)
        made.close_fds()
        view[0:4] = b"live"
        assert "went to pid 0, whose maps the keeper cannot read" in k.text()
        # Several idle-timeout looks pass (every 250 ms): it is never freed.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            stat = k.ask(named_request(STAT, "unseen"))
            assert stat.status == 0, "freed under a mapping the keeper cannot see: " + k.text()
            time.sleep(0.2)
        assert stat.segments[0]["mappers"] == MAPPERS_UNKNOWN
        busy = k.ask(create_request("unseen", size=MIB, fingerprint=0x66, flags=F_REPLACE))
        assert busy.status == errno.EBUSY, busy.text
        # The owner's release drops the keeper's reference; the kernel keeps the pages.
        released = k.ask(named_request(RELEASE, "unseen"))
        assert released.status == 0 and released.flags == DEFERRED and "cannot see" in released.text, released.text
        assert k.ask(named_request(LIST, "")).segments == []
        assert view[0:4] == b"live"
        view.close()
    finally:
        # unshare does not pass SIGTERM on; --kill-child ends the keeper with it.
        k.proc.kill()
        k.proc.wait()


def test_per_uid_limits_refuse_naming_them(make_keeper):
    k = make_keeper("--uid-budget", "8M", "--uid-max-segments", "2")
    first = k.ask(create_request("u1", size=6 * MIB))
    assert first.status == 0, first.text
    first.close_fds()
    over = k.ask(create_request("u2", size=4 * MIB))
    assert over.status == errno.ENOSPC and "per-uid limit of 8388608 bytes (--uid-budget)" in over.text, over.text
    second = k.ask(create_request("u2", size=MIB))
    assert second.status == 0, second.text
    second.close_fds()
    third = k.ask(create_request("u3", size=MIB))
    assert third.status == errno.EMFILE and "--uid-max-segments" in third.text, third.text
    if os.getuid() == 0:
        # Another uid has limits of its own.
        assert as_other_uid(k, [create_request("u1", size=6 * MIB)])[0][0] == 0


def test_the_idle_timeout_frees_only_what_nobody_maps(make_keeper):
    k = make_keeper("--idle-timeout", "1")
    mapped = k.ask(create_request("idle-mapped"))
    view = mapping(mapped)
    mapped.close_fds()
    idle = k.ask(create_request("idle-free"))
    idle.close_fds()
    deadline = time.monotonic() + 10
    while "freed 'idle-free'" not in k.text():
        assert time.monotonic() < deadline, k.text()
        time.sleep(0.1)
    assert k.ask(named_request(STAT, "idle-free")).status == errno.ENOENT
    assert k.ask(named_request(STAT, "idle-mapped")).status == 0
    view.close()


# --- hostile clients ----------------------------------------------------------


@pytest.mark.parametrize(
    "packet",
    [
        b"garbage, not a keeper request at all",
        HEADER.pack(MAGIC, 1, HELLO, 24, 3)[:10],
        hello_request()[:20],
        message(CREATE, bytes(40)),
        HEADER.pack(MAGIC, 1, HELLO, MESSAGE_MAX + 8, 3) + bytes(MESSAGE_MAX - 8),
        HEADER.pack(MAGIC, 1, HELLO, 24, 3) + bytes(MESSAGE_MAX * 3),
        named_request(STAT, "bad\nname"),
        # list reads a kept memfd's "NAME|owner=PID": a '|' would forge the owner.
        create_request("forged|owner=1"),
    ],
    ids=[
        "garbage",
        "truncated-header",
        "truncated",
        "short-create",
        "over-long",
        "far-over-long",
        "bad-name",
        "forged-owner",
    ],
)
def test_an_undecodable_request_gets_eproto_and_a_closed_connection(keeper, packet):
    with keeper.client() as c:
        c.send(packet)
        reply = c.receive()
        assert reply.type == REPLY and reply.status == errno.EPROTO and reply.text.startswith("keeper request")
        with pytest.raises((ConnectionResetError, OSError)):
            c.receive()
    keeper.alive()


def test_a_request_with_descriptors_has_them_closed_and_gets_eproto(keeper):
    read_end, write_end = os.pipe()
    with keeper.client() as c:
        try:
            c.send(hello_request(11), [write_end, write_end, read_end])
        except PermissionError:
            pytest.skip("SO_PASSRIGHTS is off (Linux 6.16+): the sender's kernel refused the descriptors")
        os.close(write_end)
        reply = c.receive()
        assert reply.type == REPLY and reply.status == errno.EPROTO and reply.sequence == 11
        assert reply.text == "keeper requests carry no descriptors"
    # The keeper closed its copies: the pipe's only writer is gone.
    os.set_blocking(read_end, False)
    deadline = time.monotonic() + 5
    while True:
        try:
            assert os.read(read_end, 1) == b""
            break
        except BlockingIOError:
            assert time.monotonic() < deadline, "the keeper kept a descriptor it was sent"
            time.sleep(0.05)
    os.close(read_end)
    assert str(keeper.proc.pid) and len(os.listdir("/proc/%d/fd" % keeper.proc.pid)) < 16
    keeper.alive()


def test_many_descriptors_at_once_are_all_closed(keeper):
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(200)]
    with keeper.client() as c:
        try:
            c.send(hello_request(), fds[:250])
            reply = c.receive()
            assert reply.status == errno.EPROTO
        except OSError:
            pass  # the kernel may refuse this many in one message
    for fd in fds:
        os.close(fd)
    time.sleep(0.2)
    assert len(os.listdir("/proc/%d/fd" % keeper.proc.pid)) < 16
    keeper.alive()


def test_300_connections_at_once(keeper):
    clients = []
    for _ in range(300):
        clients.append(keeper.client())
    # Past --max-connections (256) the keeper closes at once.
    closed = 0
    for c in clients:
        try:
            c.send(hello_request())
            c.sock.settimeout(5)
            c.receive()
        except (ConnectionResetError, BrokenPipeError, OSError):
            closed += 1
    for c in clients:
        c.close()
    assert closed >= 300 - 256
    print("closed %d of 300 connections over --max-connections 256" % closed)
    keeper.alive()


def test_a_silent_client_is_closed_after_the_timeout(keeper):
    with keeper.client() as c:
        start = time.monotonic()
        c.sock.settimeout(10)
        data = c.sock.recv(64)
        waited = time.monotonic() - start
        assert data == b"" and 1.0 < waited < 8, waited
    keeper.alive()


def test_a_client_that_never_reads_cannot_stall_the_keeper(keeper):
    c = keeper.client()
    # Each send may wait for room while the keeper drains requests; once the
    # keeper's replies fill the socket, it must close the connection rather
    # than wait for this client (which would leave every other one waiting).
    c.sock.settimeout(3)
    sent, ending = 0, None
    try:
        for _ in range(20000):
            c.send(hello_request())
            sent += 1
    except OSError as e:
        ending = e
    assert not isinstance(ending, TimeoutError), "the keeper stopped reading: it blocked on this client"
    keeper.alive()
    c.close()
    print("a client that never read sent %d requests before the keeper closed it (%r)" % (sent, ending))


def test_a_second_keeper_on_a_live_socket_refuses_and_a_stale_one_is_replaced(keeper):
    second = subprocess.run([str(KEEPER), "--socket", str(keeper.path)], capture_output=True, text=True, timeout=20)
    assert second.returncode == 1 and "another keeper answers" in second.stderr
    keeper.alive()
    keeper.proc.kill()
    keeper.proc.wait()
    assert keeper.path.exists(), "SIGKILL leaves the socket behind"
    third = subprocess.Popen([str(KEEPER), "--socket", str(keeper.path)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                assert Client(keeper.path).ask(hello_request()).status == 0
                break
            except (ConnectionRefusedError, FileNotFoundError):
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        third.send_signal(signal.SIGTERM)
        _, err = third.communicate(timeout=20)
    assert third.returncode == 0 and "replacing the stale socket" in err
    assert not keeper.path.exists(), "a clean stop removes the socket it bound"


def test_bad_options_name_the_fix():
    for args, words in [
        (["--budget", "12X"], "--budget '12X'"),
        (["--max-segments", "0"], "--max-segments '0'"),
        (["--max-segments", "1048577"], "--max-segments '1048577' is not a number from 1 to 1048576"),
        (["--uid-budget", "lots"], "--uid-budget 'lots'"),
        (["--uid-max-segments", "0"], "--uid-max-segments '0'"),
        (["--socket-mode", "999"], "--socket-mode '999'"),
        (["--frobnicate"], "unknown option"),
    ]:
        result = subprocess.run([str(KEEPER), *args], capture_output=True, text=True, timeout=20)
        assert result.returncode == 2 and words in result.stderr and "--help" in result.stderr, result.stderr
    usage = subprocess.run([str(KEEPER), "--help"], capture_output=True, text=True).stdout
    assert "--idle-timeout" in usage and "--uid-budget" in usage and "--uid-max-segments" in usage


def test_more_segments_than_a_keeper_keeps_start_it_with_the_most_and_say_so(make_keeper):
    """A unit written when --max-segments took a million still starts."""
    k = make_keeper("--max-segments", "100000", "--uid-max-segments", "70000")
    text = k.text()
    assert "--max-segments 100000 is above 65536" in text and "--uid-max-segments 70000 is above" in text, text
    assert "at most 65536 segments; each uid: budget" in text and "at most 65536 segments," in text, text
    k.alive()


# --- lifetime and cost -----------------------------------------------------------


def test_mapped_pages_outlive_a_sigkilled_keeper(keeper):
    made = keeper.ask(create_request("kv-k"))
    view = mapping(made)
    made.close_fds()
    view[0:6] = b"before"
    keeper.proc.kill()
    keeper.proc.wait()
    assert view[0:6] == b"before"
    view[6:11] = b"after"
    assert view[0:11] == b"beforeafter"
    view.close()


def test_100_kept_segments_cost_the_keeper_descriptors_not_memory(keeper):
    def rss_kb():
        with open("/proc/%d/status" % keeper.proc.pid) as f:
            return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])

    def fds():
        """All the keeper's descriptors, and its memfds (connections come and go)."""
        where = "/proc/%d/fd" % keeper.proc.pid
        links = []
        for fd in os.listdir(where):
            try:
                links.append(os.readlink(os.path.join(where, fd)))
            except FileNotFoundError:
                pass  # a connection the keeper closed since the listing
        return len(links), sum(link.startswith("/memfd:") for link in links)

    before_rss, (before_fds, before_memfds) = rss_kb(), fds()
    total = 0
    for i in range(100):
        r = keeper.ask(create_request("mem-%03d" % i, size=MIB, control=4096))
        assert r.status == 0, r.text
        total += r.size
        view = mapping(r)
        view[:] = b"\x5a" * r.size  # every page touched, as a KV tier would be
        view.close()
        r.close_fds()
    after_rss, (after_fds, after_memfds) = rss_kb(), fds()
    print(
        "keeper with 100 kept segments (%d MiB of pages): VmRSS %d kB (%d kB before), %d open fds (%d before)"
        % (total >> 20, after_rss, before_rss, after_fds, before_fds)
    )
    assert after_memfds - before_memfds == 200, "one memfd and one control memfd each"
    assert after_rss < before_rss + 16 * 1024, "the keeper maps none of the pages"


def test_create_cold_then_attach_warm_figures(keeper):
    size = int(os.environ.get("KEEPER_TEST_BYTES", 1 << 30))
    start = time.monotonic()
    cold = keeper.ask(create_request("big", size=size))
    cold_s = time.monotonic() - start
    if cold.status == errno.ENOMEM:
        pytest.skip("no room for %d bytes here: %s" % (size, cold.text))
    assert cold.status == 0, cold.text
    cold.close_fds()
    start = time.monotonic()
    warm = keeper.ask(create_request("big", size=size))
    view = mapping(warm)
    view[0:1]
    warm_s = time.monotonic() - start
    assert warm.flags & WARM
    view.close()
    warm.close_fds()
    print("%d MiB: create (committed by the keeper) %.3f s, warm attach + mmap %.4f s" % (size >> 20, cold_s, warm_s))
