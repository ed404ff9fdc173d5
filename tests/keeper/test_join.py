# SPDX-License-Identifier: Apache-2.0
"""A rank that cannot reach its owner joins a kept segment through the keeper.

The owner (this process) keeps a segment with the real mooncake-segmentd;
rank 1 runs under `unshare --pid --net --fork`, so that no route reaches
the owner: its pid is in another PID namespace and its abstract socket in
another network namespace.  The owner's handle offers the keeper's JOIN;
the rank gets the same pages and the group's control area from the keeper,
checked against the owner's handle.  Needs root (unshare); skipped
otherwise."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import namespace_probe  # noqa: E402
from test_keeper import BUILDDIR, Keeper  # noqa: E402

from mooncake._segment import SharedSegment  # noqa: E402

SIZE = 8 << 20
TOOL = BUILDDIR / "tools" / "mooncake-segment"
OWNER_MARK = b"owner-wrote-this"
PEER_MARK = b"peer-wrote-this!"


@pytest.fixture
def keeper():
    namespace_probe.require("--pid", "--net", "--fork", why="the rank runs in new PID and network namespaces")
    k = Keeper()
    yield k
    k.stop()


class NamespacedRank:
    """join_rank.py in new PID and network namespaces, a line at a time."""

    def __init__(self, name, keeper_path):
        env = dict(os.environ, MOONCAKE_SEGMENT_KEEPER=str(keeper_path))
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--net", "--fork", sys.executable, str(HERE / "join_rank.py"), name, str(SIZE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )

    def line(self):
        got = self.proc.stdout.readline()
        assert got, "rank 1 ended early: " + self.proc.stderr.read()
        return got.strip()

    def say(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def end(self):
        self.say("done")
        assert self.proc.wait(30) == 0, self.proc.stderr.read()


def form_group(keeper, name, monkeypatch, rank_keeper_path=None):
    """Rank 0 here, rank 1 namespaced; both created, blobs exchanged, rank 0 completed."""
    monkeypatch.setenv("MOONCAKE_SEGMENT_KEEPER", str(keeper.path))
    owner, owner_blob = SharedSegment.create(name, SIZE, 2, 0, keep_name=name, slot_count=2)
    rank = NamespacedRank(name, rank_keeper_path or keeper.path)
    peer_blob = bytes.fromhex(rank.line())
    owner.complete([owner_blob, peer_blob])
    view = memoryview(owner)
    view[: len(OWNER_MARK)] = OWNER_MARK
    view[SIZE - len(OWNER_MARK) :] = OWNER_MARK
    rank.say(owner_blob.hex())
    return owner, view, rank, json.loads(rank.line())


def test_a_rank_in_other_pid_and_network_namespaces_joins_through_the_keeper(keeper, monkeypatch):
    owner, view, rank, report = form_group(keeper, "ns-join", monkeypatch)
    try:
        assert "error" not in report, report["error"]
        assert report["pid_ns"] != os.readlink("/proc/self/ns/pid")
        assert report["net_ns"] != os.readlink("/proc/self/ns/net")
        assert report["pid"] == 1
        # The same pages, both ways, at both ends.
        assert report["read_first"] == OWNER_MARK.decode()
        assert report["read_last"] == OWNER_MARK.decode()
        assert bytes(view[4096 : 4096 + len(PEER_MARK)]) == PEER_MARK
        # The owner's control area: its front says every page is committed.
        assert report["ready_bytes"] == SIZE
        assert report["warm"] is False
        assert "for a rank that cannot reach its owner" in keeper.text(), keeper.text()
        # list finds the group's front in the keeper's area, beside the kept pages.
        listed = subprocess.run([str(TOOL), "list", "--json"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        kept = [s for s in json.loads(listed.stdout)["segments"] if s["label"] == "keep:ns-join"]
        assert len(kept) == 1 and kept[0]["kept"], listed.stdout
        assert kept[0]["front"] and kept[0]["front"]["state"] == "committed", kept[0]
        assert kept[0]["slots"] == 2, kept[0]
    finally:
        rank.end()
        view.release()
        owner.finish()
        owner.close()


def test_when_the_keeper_cannot_help_either_the_error_names_both_causes(keeper, monkeypatch):
    owner, view, rank, report = form_group(keeper, "ns-no-keeper", monkeypatch, "/nonexistent/keeper.sock")
    try:
        error = report.get("error", "")
        assert "another PID namespace" in error and "another network namespace" in error, error
        assert "the node keeper could not hand them either" in error, error
        assert "/nonexistent/keeper.sock" in error, error
    finally:
        rank.proc.stdin.close()
        rank.proc.wait(30)
        view.release()
        owner.finish()
        owner.close()
