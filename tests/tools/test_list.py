# SPDX-License-Identifier: Apache-2.0
"""mooncake-segment list against live segments of real rank processes."""

import fcntl
import json
import os
import select
import signal
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from segment_ranks import held_segment

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", "."))
TOOL = str(BUILDDIR / "tools" / "mooncake-segment")
MiB = 1 << 20
SIZE = 16 * MiB
# Rank 0 (the owner) committed every page; each peer reads a different share.
TOUCH = [0, 4 * MiB, 8 * MiB, 12 * MiB]


def last_node() -> int:
    nodes = [int(n[4:]) for n in os.listdir("/sys/devices/system/node") if n[4:].isdigit()]
    return max(nodes) if nodes else 0


def run_list(*args, user=None, check=True):
    cmd = [TOOL, "list", *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def list_json(*args, user=None):
    return json.loads(run_list("--json", *args, user=user).stdout)


def only_segment(doc, label):
    found = [s for s in doc["segments"] if s["label"] == label]
    assert len(found) == 1, doc["segments"]
    return found[0]


def numa_maps_bytes(pid: int, start: int) -> dict:
    """Bytes per node of the mapping at START, read from numa_maps here, independently of the tool."""
    with open(f"/proc/{pid}/numa_maps") as f:
        for line in f:
            fields = line.split()
            if int(fields[0], 16) != start:
                continue
            page = next(int(f.split("=")[1]) for f in fields if f.startswith("kernelpagesize_kB=")) * 1024
            return {f[1:].split("=")[0]: int(f.split("=")[1]) * page for f in fields if f[0] == "N" and "=" in f}
    raise AssertionError(f"no mapping at {start:#x} in {pid}")


def segment_start(pid: int, label: str) -> int:
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            if f"mooncake-segment:{label}|" in line:
                return int(line.split("-")[0], 16)
    raise AssertionError(f"{pid} maps no segment {label}")


def test_json_reports_a_live_four_rank_segment():
    node = last_node()
    with held_segment("list-json", SIZE, TOUCH, node=node) as pids:
        doc = list_json()
        seg = only_segment(doc, "list-json")
        owner_nodes = numa_maps_bytes(pids[0], segment_start(pids[0], "list-json"))
        cgroups = {pid: Path(f"/proc/{pid}/cgroup").read_text() for pid in pids}
    assert doc["schema_version"] == 1
    assert seg["size_bytes"] == SIZE
    assert seg["backend"] == "memfd" and seg["hugetlb"] is False
    assert seg["page_size_bytes"] == os.sysconf("SC_PAGE_SIZE")
    assert seg["owner_pid"] == pids[0]
    assert seg["owner_pid_in_namespace"] == pids[0]
    assert seg["mapped_processes"] == 4
    procs = {p["pid"]: p for p in seg["processes"]}
    assert sorted(procs) == sorted(pids)
    assert [procs[pid]["owner"] for pid in pids] == [True, False, False, False]
    # The owner's descriptor is gone after finish(); the name still names it.
    assert not any(p["holds_descriptor"] for p in procs.values())
    # One copy, every page on the node the owner bound it to.
    assert seg["resident_bytes"] == SIZE
    assert seg["resident_bytes_by_node"] == {str(node): SIZE}
    assert seg["resident_bytes_by_node"] == owner_nodes
    assert seg["private_copies_bytes"] == 4 * SIZE
    for rank, pid in enumerate(pids):
        p = procs[pid]
        assert p["command"] == "python3"
        assert p["maps"] and p["mapped_bytes"] == SIZE
        expected = SIZE if rank == 0 else TOUCH[rank]
        assert p["resident_bytes"] == expected
        assert p["resident_bytes_by_node"] == {str(node): expected}
        assert p["cgroup"] and p["cgroup"] in cgroups[pid]


def test_table_lists_the_segment_and_every_mapper():
    with held_segment("list-table", SIZE, TOUCH) as pids:
        out = run_list().stdout
    rows = [line.split() for line in out.splitlines()]
    summary = next(r for r in rows if r and r[0] == "list-table")
    assert summary[2:4] == ["16.0", "MiB"]
    assert summary[4] == "memfd"
    assert int(summary[7]) == pids[0] and int(summary[8]) == 4
    listed = {int(r[0]): r[2] for r in rows if r and r[0].isdigit() and int(r[0]) in pids}
    assert listed == {pids[0]: "owner", pids[1]: "peer", pids[2]: "peer", pids[3]: "peer"}


def test_descriptors_are_found_too():
    """Before finish() the owner holds the memfd; a process may hold it without mapping it."""
    with held_segment("list-fd", SIZE, [0, 0, 0], finish=False) as pids:
        fds = Path(f"/proc/{pids[0]}/fd")
        link = next(fd for fd in fds.iterdir() if "mooncake-segment:list-fd|" in os.readlink(fd))
        held = os.open(link, os.O_RDONLY | os.O_CLOEXEC)  # this test now holds it, unmapped
        try:
            seg = only_segment(list_json(), "list-fd")
        finally:
            os.close(held)
    procs = {p["pid"]: p for p in seg["processes"]}
    assert procs[pids[0]]["holds_descriptor"] and procs[pids[0]]["maps"] and procs[pids[0]]["owner"]
    assert not procs[pids[1]]["holds_descriptor"] and procs[pids[1]]["maps"]
    me = procs[os.getpid()]
    assert me["holds_descriptor"] and not me["maps"] and not me["owner"]
    assert me["mapped_bytes"] == 0 and me["resident_bytes"] == 0
    # Holding is not mapping: three mappers, three private copies.
    assert seg["mapped_processes"] == 3
    assert seg["private_copies_bytes"] == 3 * SIZE
    assert seg["size_bytes"] == SIZE


def test_segments_disappear_with_their_processes():
    with held_segment("list-gone", SIZE, [0, 0]):
        assert any(s["label"] == "list-gone" for s in list_json()["segments"])
    assert not any(s["label"] == "list-gone" for s in list_json()["segments"])


def test_another_user_sees_nothing_and_says_so():
    if os.geteuid() != 0:
        pytest.skip("needs root to run the ranks as one user and list as another (setpriv)")
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux) to run list as another user")
    probe = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", TOOL, "--version"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"user 65534 cannot run {TOOL} (a build directory it cannot enter?): {probe.stderr.strip()}")
    with held_segment("list-hidden", SIZE, [0, 0, 0, 0]):
        as_root = list_json()
        doc = list_json(user=65534)
        table = run_list(user=65534).stdout
    assert any(s["label"] == "list-hidden" for s in as_root["segments"])
    assert not any(s["label"] == "list-hidden" for s in doc["segments"])
    # At least the four ranks could not be read, and the table says how to see them.
    assert doc["processes_unreadable"] >= as_root["processes_unreadable"] + 4
    assert doc["root"] is False
    assert "run as root to see every process" in table


def test_watch_scans_again():
    proc = subprocess.Popen([TOOL, "list", "--json", "--watch", "1"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3.5)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    docs = [json.loads(d) for d in out.replace("]}\n{", "]}\x00{").split("\x00") if d.strip()]
    assert len(docs) >= 2
    assert all(d["schema_version"] == 1 for d in docs)


F_SETPIPE_SZ = 1031


def read_until_closed(reader, timeout):
    """What @reader gives until its writer closes it, or fail after @timeout s."""
    deadline, chunks = time.monotonic() + timeout, []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "the writer did not close the pipe within %d s" % timeout
        if select.select([reader], [], [], left)[0]:
            chunk = os.read(reader.fileno(), 65536)
            if not chunk:
                return b"".join(chunks).decode()
            chunks.append(chunk)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_watch_stops_between_documents_never_in_one(tmp_path, stop):
    """A stop signal while --watch is blocked half way through a document
    (its reader is slow: a pipe of one page, a document of many) ends it
    after that document: the reader gets whole documents only."""
    for pid in range(10, 40):
        label = f"/memfd:mooncake-segment:watched-{pid}|owner={pid} (deleted)"
        fake_process(
            tmp_path,
            pid,
            str(pid),
            [f"7f0000000000-7f0000100000 rw-s 00000000 00:01 {pid} {label}"],
            [f"7f0000000000 default file=x N0={pid} kernelpagesize_kB=4"],
        )
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    # A shell starts background jobs with SIGINT ignored (make check under
    # CI's `&`), which the tool then rightly keeps ignoring: not here.
    proc = subprocess.Popen(
        [TOOL, "list", "--json", "--watch", "1", "--proc", str(tmp_path)],
        stdout=write_end,
        preexec_fn=lambda: signal.signal(stop, signal.SIG_DFL),
    )
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as reader:
            first = reader.read(4096)  # the pipe was full: it is mid-document now
            time.sleep(0.3)
            proc.send_signal(stop)
            out = first.decode() + read_until_closed(reader, 30)
        assert proc.wait(timeout=30) == -stop  # ended by it, as a shell expects, but between documents
    finally:
        proc.kill()
        proc.wait()
    docs = [json.loads(d) for d in out.replace("]}\n{", "]}\x00{").split("\x00") if d.strip()]
    assert len(out) > 2 * 4096 and docs and all(len(d["segments"]) == 30 for d in docs), out[-200:]


def test_watch_keeps_ignoring_what_it_was_started_ignoring():
    """Under nohup (SIGHUP ignored) --watch goes on."""
    proc = subprocess.Popen(
        ["nohup", TOOL, "list", "--json", "--watch", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # nohup's doing, not the shell's
    )
    try:
        proc.stdout.readline()  # a report came: it runs
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.5)
        assert proc.poll() is None, "SIGHUP ended a --watch that nohup started"
    finally:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.parametrize(
    "args, status, message",
    [
        (["--watch", "0"], 2, "give whole seconds from 1 to 86400"),
        (["--json", "--prometheus"], 2, "choose one"),
        (["--proc", "/nonexistent"], 1, "mount procfs there"),
        (["--output", "/nonexistent/dir/x.prom"], 1, "create the directory"),
        (["extra"], 2, "unexpected argument 'extra'"),
    ],
)
def test_bad_input_names_the_problem_and_the_fix(args, status, message):
    proc = run_list(*args, check=False)
    assert proc.returncode == status
    assert message in proc.stderr


def test_output_replaces_the_file_atomically(tmp_path):
    target = tmp_path / "mooncake-segment.prom"
    target.write_text("old\n")
    os.chmod(target, 0o600)
    with held_segment("list-output", SIZE, [0, 0]):
        run_list("--prometheus", "--output", str(target))
    text = target.read_text()
    assert 'mooncake_segment_size_bytes{segment="list-output"' in text
    assert os.stat(target).st_mode & 0o777 == 0o644  # node_exporter runs as another user
    assert os.listdir(tmp_path) == ["mooncake-segment.prom"]  # no temporary file left


def fake_process(proc: Path, pid: int, nspid: str, maps: list, numa_maps: list, smaps: str = "") -> None:
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "maps").write_text("".join(line + "\n" for line in maps))
    (d / "numa_maps").write_text("".join(line + "\n" for line in numa_maps))
    (d / "smaps").write_text(smaps)
    (d / "status").write_text(f"Name:\tfake-{pid}\nUmask:\t0022\nNSpid:\t{nspid}\n")
    (d / "cgroup").write_text(f"0::/fixture.slice/rank-{pid}.scope\n")


def test_nodes_huge_pages_and_owners_from_a_fixture_proc(tmp_path):
    """--proc reads another /proc: here a fixture with two NUMA nodes, THP and HugeTLB."""
    kv = "/memfd:mooncake-segment:kv|owner=100 (deleted)"
    big = "/memfd:mooncake-segment:big|owner=5 (deleted)"
    # The owner of kv (pid 100) is gone; two peers touched different pages on two nodes.
    fake_process(
        tmp_path,
        200,
        "200",
        [f"7f0000000000-7f0000400000 rw-s 00000000 00:01 4242                       {kv}"],
        ["7f0000000000 default file=x dirty=1 N0=100 N1=300 kernelpagesize_kB=4"],
        "7f0000000000-7f0000400000 rw-s 00000000 00:01 4242 x\nRss: 1600 kB\nShmemPmdMapped: 1024 kB\n",
    )
    fake_process(
        tmp_path,
        300,
        "300",
        [
            "55d000000000-55d000001000 r-xp 00000000 08:01 99 /usr/bin/fake",
            f"7e0000000000-7e0000400000 rw-s 00000000 00:01 4242                       {kv}",
        ],
        ["7e0000000000 default file=x N0=200 N1=50 kernelpagesize_kB=4"],
    )
    # big: HugeTLB (2 MiB pages) on node 1; its owner is pid 5 in a container, 400 here.
    fake_process(
        tmp_path,
        400,
        "400\t5",
        [f"7d0000000000-7d0000800000 rw-s 00000000 00:10 77                       {big}"],
        ["7d0000000000 default file=x huge dirty=2 N1=2 kernelpagesize_kB=2048"],
    )
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "maps").write_text("")  # a kernel thread: no memory, skipped
    doc = list_json("--proc", str(tmp_path))
    assert doc["processes_scanned"] == 4 and doc["processes_unreadable"] == 0
    assert doc["keeper_answered"] is None, "--proc without --keeper asks no keeper"
    kv_seg = only_segment(doc, "kv")
    assert kv_seg["id"] == "0:1:4242" and kv_seg["size_bytes"] == 4 * MiB
    assert kv_seg["owner_pid"] is None and kv_seg["owner_pid_in_namespace"] == 100
    assert kv_seg["mapped_processes"] == 2
    # Per node, the most any mapping has there: 200 pages on node 0, 300 on node 1.
    assert kv_seg["resident_bytes_by_node"] == {"0": 200 * 4096, "1": 300 * 4096}
    assert kv_seg["resident_bytes"] == 500 * 4096
    # THP: the PMD-mapped bytes of the mapping with the most pages (pid 200).
    assert kv_seg["huge_page_bytes"] == 1024 * 1024
    assert kv_seg["hugetlb"] is False and kv_seg["page_size_bytes"] == 4096
    procs = {p["pid"]: p for p in kv_seg["processes"]}
    assert procs[200]["resident_bytes_by_node"] == {"0": 100 * 4096, "1": 300 * 4096}
    assert procs[300]["resident_bytes"] == 250 * 4096
    assert procs[300]["cgroup"] == "/fixture.slice/rank-300.scope"
    assert procs[300]["command"] == "fake-300"
    big_seg = only_segment(doc, "big")
    assert big_seg["hugetlb"] is True and big_seg["page_size_bytes"] == 2 * MiB
    assert big_seg["owner_pid"] == 400 and big_seg["owner_pid_in_namespace"] == 5
    assert big_seg["resident_bytes_by_node"] == {"1": 4 * MiB}
    assert big_seg["huge_page_bytes"] == 4 * MiB
    assert big_seg["private_copies_bytes"] == 8 * MiB


def test_a_scan_shared_by_threads_joins_every_process(tmp_path):
    """600 processes: several threads scan them, and one segment's mappers from all of them are joined."""
    wide = "/memfd:mooncake-segment:wide|owner=7 (deleted)"
    mappers = list(range(10, 601, 50))
    for pid in range(1, 601):
        if pid in mappers:
            fake_process(
                tmp_path,
                pid,
                str(pid),
                [f"7f0000000000-7f0000100000 rw-s 00000000 00:01 31337 {wide}"],
                [f"7f0000000000 default file=x N0={pid} kernelpagesize_kB=4"],
            )
        else:
            fake_process(tmp_path, pid, str(pid), ["55d000000000-55d000001000 r-xp 00000000 08:01 99 /usr/bin/x"], [])
    doc = list_json("--proc", str(tmp_path))
    assert doc["processes_scanned"] == 600
    seg = only_segment(doc, "wide")
    assert [p["pid"] for p in seg["processes"]] == mappers
    assert seg["mapped_processes"] == len(mappers)
    assert seg["resident_bytes_by_node"] == {"0": max(mappers) * 4096}
    assert all(p["resident_bytes"] == p["pid"] * 4096 for p in seg["processes"])


def test_labels_and_names_that_are_not_utf8_still_give_valid_json_and_prometheus_text(tmp_path):
    """A label cut inside a character (older builds), a hostile name, a comm the kernel cut at 15 bytes."""
    fake_process(tmp_path, 500, "500", [], [])
    label = b"k\xc3\xa9v-\xc3"  # "kév-", then half of an "é"
    maps = b"7f0000000000-7f0000400000 rw-s 00000000 00:01 5151 /memfd:mooncake-segment:" + label
    (tmp_path / "500" / "maps").write_bytes(maps + b"|owner=500 (deleted)\n")
    (tmp_path / "500" / "status").write_bytes(b"Name:\tengine-\xe5\x8d\nUmask:\t0022\nNSpid:\t500\n")
    for fmt in ("--json", "--prometheus"):
        raw = run_list_bytes(fmt, "--proc", str(tmp_path))
        text = raw.decode("utf-8")  # strict: one byte that is not UTF-8 fails here
        assert "k\u00e9v-\ufffd" in text and "engine-\ufffd\ufffd" in text, text
    doc = json.loads(run_list_bytes("--json", "--proc", str(tmp_path)))
    seg = only_segment(doc, "k\u00e9v-\ufffd")
    assert seg["processes"][0]["command"] == "engine-\ufffd\ufffd"


def test_control_characters_are_shown_never_obeyed(tmp_path):
    """A label or command name with ESC sequences, CR, BEL or a C1 control cannot clear the
    operator's terminal, draw fake rows or break the Prometheus text."""
    fake_process(tmp_path, 600, "600", [], [])
    label = b"kv\x1b[2J\rFAKE ROW\x07\xc2\x9b"
    maps = b"7f0000000000-7f0000400000 rw-s 00000000 00:01 6161 /memfd:mooncake-segment:" + label
    (tmp_path / "600" / "maps").write_bytes(maps + b"|owner=600 (deleted)\n")
    (tmp_path / "600" / "status").write_bytes(b"Name:\tev\x1b]0;pwn\x07il\rx\nUmask:\t0022\nNSpid:\t600\n")
    (tmp_path / "600" / "cgroup").write_bytes(b"0::/a\x1b[31mred.scope\n")
    controls = set(range(0x20)) | {0x7F}
    table = run_list_bytes("--proc", str(tmp_path))
    assert not (set(table) & (controls - {0x0A})), table
    assert not set(table.decode("utf-8")) & {chr(c) for c in range(0x80, 0xA0)}, table
    text = table.decode("utf-8")
    assert "kv\\x1b[2J\\x0dFAKE ROW\\x07\\xc2\\x9b" in text, text
    assert "ev\\x1b]0;pwn\\x07il\\x0dx" in text and "/a\\x1b[31mred.scope" in text, text
    prom = run_list_bytes("--prometheus", "--proc", str(tmp_path)).decode("utf-8")
    assert not (set(prom) & ({chr(c) for c in controls - {0x0A}} | {chr(c) for c in range(0x80, 0xA0)})), prom
    assert 'segment="kv\ufffd[2J\ufffdFAKE ROW\ufffd\ufffd"' in prom, prom
    doc = json.loads(run_list_bytes("--json", "--proc", str(tmp_path)))
    assert only_segment(doc, "kv\x1b[2J\rFAKE ROW\x07\u009b")["processes"][0]["command"] == "ev\x1b]0;pwn\x07il\rx"


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--prometheus"]])
def test_output_that_cannot_be_written_is_an_error(tmp_path, fmt):
    """Into a full disk (/dev/full): an error naming the cause, never exit 0 with half a file."""
    fake_process(tmp_path, 700, "700", [], [])
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [TOOL, "list", *fmt, "--proc", str(tmp_path)], stdout=full, stderr=subprocess.PIPE, timeout=60
        )
    assert proc.returncode == 1
    assert b"writing the list to standard output failed: No space left on device" in proc.stderr, proc.stderr


def run_list_bytes(*args):
    proc = subprocess.run([TOOL, "list", *args], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_host_without_segments_lists_none(tmp_path):
    """An empty /proc: no segment, no process, exit 0 (and nothing a sanitizer build objects to)."""
    doc = list_json("--proc", str(tmp_path))
    assert doc["segments"] == []
