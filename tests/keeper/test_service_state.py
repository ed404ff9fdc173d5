# SPDX-License-Identifier: Apache-2.0
"""keeper/service.c and keeper/state.c under a fake systemd: the descriptor
store and socket activation across kill -9, the saved state's two slots, and
generations that never repeat.  tests/keeper/service-probe is the keeper's
service layer without the rest of the daemon; fake_service_manager.py speaks
systemd's protocols (doc/keeper-state.md)."""

import json
import os
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_service_manager import FakeServiceManager  # noqa: E402

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", Path(__file__).resolve().parents[2]))
PROBE = BUILDDIR / "tests/keeper/service-probe"


def built_with_libsystemd():
    config = BUILDDIR / "config.h"
    return config.exists() and re.search(r"^#define HAVE_LIBSYSTEMD 1$", config.read_text(), re.M)


pytestmark = [
    pytest.mark.skipif(not PROBE.exists(), reason=f"{PROBE} is not built (make check builds it)"),
    pytest.mark.skipif(
        not built_with_libsystemd(),
        reason="this build has no libsystemd (configure --with-systemd): no socket activation, no descriptor store",
    ),
]

HEADER = struct.Struct("<IHHQQQQ16xQ")  # magic, version, header bytes, sequence, offset, length, checksum, own


class Keeper:
    """The probe, driven one command at a time, under the fake manager."""

    def __init__(self, manager, log):
        self.manager = manager
        self.log = log
        self.proc = manager.start([str(PROBE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)

    def __call__(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the probe died on {command!r}"
        self.manager.process_notifications()
        return json.loads(line)

    def boot(self, status="ready"):
        started = self("start")
        loaded = self("load")
        self(f"ready {status}")
        self.manager.process_notifications(0.2)
        return started, loaded

    def exit(self):
        self.proc.stdin.write("exit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(10) == 0
        self.proc.close_pipes()

    def crash(self):
        self.manager.kill()
        self.proc.close_pipes()


@pytest.fixture
def manager(tmp_path):
    with FakeServiceManager(tmp_path, socket_path=tmp_path / "run" / "keeper.sock") as m:
        yield m


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "keeper.log"
    with open(path, "w") as f:
        yield f


def log_text(log):
    log.flush()
    return Path(log.name).read_text()


def fnv1a(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def header(sequence, offset, length, checksum=0):
    """One slot header as state.c writes it (doc/keeper-state.md), its own checksum right."""
    head = struct.pack("<IHHQQQQ16x", 0x534B434D, 1, 64, sequence, offset, length, checksum)
    return head + struct.pack("<Q", fnv1a(head))


def slots(manager):
    """Both slot headers of the stored state: [(sequence, offset, length) or None]."""
    fd = manager.stored_fd("state")
    headers = os.pread(fd, 128, 0)
    out = []
    for i in (0, 1):
        magic, _, _, sequence, offset, length, _, _ = HEADER.unpack(headers[64 * i : 64 * i + 64])
        out.append((sequence, offset, length) if magic == 0x534B434D else None)
    return out


def corrupt_payload(manager, which):
    """Flip a byte of the newest (which='newest') or oldest slot's payload."""
    valid = [s for s in slots(manager) if s]
    sequence, offset, length = (max if which == "newest" else min)(valid)
    fd = manager.stored_fd("state")
    byte = os.pread(fd, 1, offset + length - 1)
    os.pwrite(fd, bytes([byte[0] ^ 0x40]), offset + length - 1)


def test_segments_survive_kill_9_through_the_store(manager, log):
    keeper = Keeper(manager, log)
    started, loaded = keeper.boot()
    assert started == {"rc": 0, "listen_fd": 3, "seqpacket": True, "can_store": True}
    assert loaded["segments"] == []
    a = keeper("create kv-a 1048576 8192")
    b = keeper("create kv.b 65536 0")
    assert a["rc"] == 0 and b["rc"] == 0 and b["generation"] == a["generation"] + 1
    assert sorted(manager.stored_names()) == sorted(
        ["state", f"pages-{a['generation']}", f"control-{a['generation']}", f"pages-{b['generation']}"]
    )
    assert manager.ready and manager.status == "ready"
    keeper.crash()

    keeper = Keeper(manager, log)
    started, loaded = keeper.boot("again")
    assert started["listen_fd"] == 3 and started["seqpacket"] and started["can_store"]
    segments = {s["name"]: s for s in loaded["segments"]}
    assert set(segments) == {"kv-a", "kv.b"}
    assert segments["kv-a"]["generation"] == a["generation"]
    assert segments["kv-a"]["control_fd"] and not segments["kv.b"]["control_fd"]
    assert all(s["intact"] and s["identity_ok"] and s["mappers_unknown"] for s in segments.values())
    assert loaded["next_generation"] > b["generation"]
    # Everything passed back was taken: nothing closed, nothing removed.
    assert "orphan" not in log_text(log)
    assert len(manager.stored_names()) == 4
    keeper.exit()


def test_a_segment_handed_to_an_unseen_peer_stays_marked_across_a_restart(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    keeper("create seen 65536 0")
    keeper("create unseen 65536 0")
    assert keeper("unseen unseen")["rc"] == 0
    keeper.crash()
    keeper = Keeper(manager, log)
    _, loaded = keeper.boot("again")
    marks = {s["name"]: s["handed_unseen"] for s in loaded["segments"]}
    assert marks == {"seen": False, "unseen": True}, loaded
    keeper.exit()


def test_release_leaves_the_store_and_the_state(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    a = keeper("create a 65536 4096")
    keeper("create b 65536 0")
    assert keeper("release a")["rc"] == 0
    assert f"pages-{a['generation']}" not in manager.stored_names()
    assert f"control-{a['generation']}" not in manager.stored_names()
    keeper.crash()
    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert [s["name"] for s in loaded["segments"]] == ["b"]


def test_generations_never_repeat_across_restarts(manager, log):
    seen = []
    keeper = Keeper(manager, log)
    keeper.boot()
    for round in range(3):
        made = keeper(f"create seg{round} 8192 0")
        assert made["rc"] == 0
        seen.append(made["generation"])
        keeper(f"release seg{round}")  # the newest generation is in no record any more
        keeper.crash()
        keeper = Keeper(manager, log)
        _, loaded = keeper.boot()
        assert loaded["next_generation"] > max(seen)
    # The state itself lost: a fresh start still gives no generation seen before.
    keeper.crash()
    manager.stored = [(n, fd) for n, fd in manager.stored if n != "state" or os.close(fd)]
    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert loaded["next_generation"] > max(seen)
    assert len(seen) == len(set(seen)) and seen == sorted(seen)


def test_a_corrupt_newest_slot_falls_back_to_the_other(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    first = keeper("create first 65536 0")
    second = keeper("create second 65536 4096")
    assert sorted(s[0] for s in slots(manager) if s) == [1, 2]  # one save per create
    keeper.crash()
    corrupt_payload(manager, "newest")

    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert [s["name"] for s in loaded["segments"]] == ["first"]
    assert loaded["segments"][0]["intact"]
    text = log_text(log)
    assert "payload checksum mismatch" in text
    # The segment only the lost slot named: its descriptors are orphans, closed and removed.
    assert f'orphan descriptor "pages-{second["generation"]}"' in text
    assert f"pages-{second['generation']}" not in manager.stored_names()
    assert f"control-{second['generation']}" not in manager.stored_names()
    assert loaded["next_generation"] > second["generation"]
    assert first["generation"] < second["generation"]


def test_both_slots_corrupt_frees_the_orphans_without_a_crash(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    made = [keeper(f"create s{i} 65536 4096")["generation"] for i in range(3)]
    keeper.crash()
    corrupt_payload(manager, "newest")
    corrupt_payload(manager, "oldest")

    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert loaded["segments"] == []
    assert loaded["next_generation"] > max(made)
    assert "no valid slot" in log_text(log)
    assert manager.stored_names() == ["state"]
    # The keeper goes on: the state is rewritten in place and works again.
    again = keeper("create s9 65536 0")
    assert again["generation"] > max(made)
    keeper.crash()
    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert [s["name"] for s in loaded["segments"]] == ["s9"]


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xff" * 4096,
        # Well-formed headers (their checksums right) whose payloads lie past the file's end.
        header(sequence=5, offset=128, length=(1 << 64) - 129) + header(sequence=6, offset=1 << 40, length=8),
        os.urandom(70000),
    ],
    ids=["empty", "ones", "huge-length", "random"],
)
def test_garbage_state_is_input_not_a_crash(manager, log, garbage):
    keeper = Keeper(manager, log)
    keeper.boot()
    gen = keeper("create victim 65536 0")["generation"]
    keeper.crash()
    fd = manager.stored_fd("state")
    os.ftruncate(fd, 0)
    os.pwrite(fd, garbage, 0)

    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert loaded["segments"] == []
    assert loaded["next_generation"] > gen
    assert f"pages-{gen}" not in manager.stored_names()
    assert keeper.proc.poll() is None


def test_descriptors_are_checked_before_they_are_accepted(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    good = keeper("create good 65536 0")["generation"]
    bad = keeper("create bad 65536 0")["generation"]
    keeper.crash()
    # Swap the bad segment's pages for a memfd of another size, and one for an unsealed memfd.
    index = manager.stored_names().index(f"pages-{bad}")
    os.close(manager.stored[index][1])
    wrong = os.memfd_create("wrong", os.MFD_CLOEXEC)
    os.ftruncate(wrong, 4096)
    manager.stored[index] = (f"pages-{bad}", wrong)

    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert [s["name"] for s in loaded["segments"]] == ["good"]
    assert "holds 4096 bytes, the state says 65536" in log_text(log)
    assert f"pages-{bad}" not in manager.stored_names() and f"pages-{good}" in manager.stored_names()


def test_unsealed_or_foreign_descriptors_are_refused(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    gens = [keeper(f"create x{i} 65536 0")["generation"] for i in range(2)]
    keeper.crash()
    unsealed = os.memfd_create("unsealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(unsealed, 65536)
    r, w = os.pipe()
    os.close(w)
    for gen, replacement in zip(gens, (unsealed, r)):
        index = manager.stored_names().index(f"pages-{gen}")
        os.close(manager.stored[index][1])
        manager.stored[index] = (f"pages-{gen}", replacement)
    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert loaded["segments"] == []
    text = log_text(log)
    assert "is not sealed against shrinking" in text and "is not a memfd" in text


def test_without_a_store_nothing_survives_and_the_keeper_says_so_when_debugging(tmp_path, log, monkeypatch):
    # FileDescriptorStoreMax=0: systemd drops FDSTORE=1 without a word to the
    # service (and before 254 exports no $FDSTORE), so the keeper cannot
    # know.  It trusts its unit on every start (no hedged line an operator
    # reads each time) and says what it cannot know only when debugging.
    with FakeServiceManager(tmp_path, fd_store_max=0) as manager:
        keeper = Keeper(manager, log)
        started, _ = keeper.boot()
        assert started["can_store"] is True and started["listen_fd"] == -1
        assert keeper("create lost 8192 0")["rc"] == 0
        assert manager.stored_names() == [] and manager.refused
        keeper.crash()
        assert "FileDescriptorStoreMax" not in log_text(log)
        monkeypatch.setenv("MOONCAKE_SEGMENTD_DEBUG", "1")
        keeper = Keeper(manager, log)
        _, loaded = keeper.boot()
        assert loaded["segments"] == []
        assert "survive a restart of the keeper if its unit sets FileDescriptorStoreMax=" in log_text(log)


def test_systemd_254_exports_the_store_size(tmp_path, log):
    with FakeServiceManager(tmp_path, fd_store_max=4096, export_fdstore=True) as manager:
        keeper = Keeper(manager, log)
        started, _ = keeper.boot()
        assert started["can_store"] is True
        assert "the descriptor store holds 4096 descriptors" in log_text(log)


def test_not_under_a_service_manager(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID")}
    done = subprocess.run([str(PROBE)], input="start\nexit\n", capture_output=True, text=True, env=env, timeout=30)
    assert json.loads(done.stdout.splitlines()[0])["can_store"] is False
    assert "no NOTIFY_SOCKET" in done.stderr and "mooncake-segmentd.service" in done.stderr


def test_a_socket_unit_without_the_name_still_passes_its_socket(tmp_path, log):
    with FakeServiceManager(tmp_path, socket_path=tmp_path / "k.sock", socket_name="mooncake-segmentd.socket") as m:
        keeper = Keeper(m, log)
        started, _ = keeper.boot()
        assert started["listen_fd"] == 3 and started["seqpacket"]
        assert "orphan" not in log_text(log)


def test_a_state_the_loader_would_refuse_is_never_written(manager, log):
    keeper = Keeper(manager, log)
    keeper.boot()
    # Others around it, so that the twins are neither first nor side by side.
    for name in ("twin", "alpha", "zulu", "mid"):
        assert keeper(f"create {name} 8192 0")["rc"] == 0
    assert keeper("create twin 8192 0")["rc"] == -22  # the probe does not check names; state.c does
    assert "would refuse" in log_text(log) and '"twin"' in log_text(log)
    keeper.crash()
    keeper = Keeper(manager, log)
    _, loaded = keeper.boot()
    assert sorted(s["name"] for s in loaded["segments"]) == ["alpha", "mid", "twin", "zulu"]


def test_the_socket_named_keeper_wins_over_an_earlier_one(tmp_path, log):
    with FakeServiceManager(tmp_path, socket_path=tmp_path / "other.sock", socket_name="other") as m:
        keeper_socket = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        keeper_socket.bind(str(tmp_path / "keeper.sock"))
        keeper_socket.listen(8)
        m.stored.append(("keeper", keeper_socket.detach()))  # passed after "other", at 4
        keeper = Keeper(m, log)
        started, _ = keeper.boot()
        assert started["listen_fd"] == 4 and started["seqpacket"]
        assert 'orphan descriptor "other"' in log_text(log)


def test_status_is_one_line(manager, log):
    keeper = Keeper(manager, log)
    keeper("start")
    keeper("load")
    keeper("ready 2 kept\rREADY=0")
    manager.process_notifications(0.2)
    assert manager.ready and manager.status == "2 kept READY=0"
    assert not manager.refused
