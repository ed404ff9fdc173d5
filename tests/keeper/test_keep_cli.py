# SPDX-License-Identifier: Apache-2.0
"""`mooncake-segment keep list|stat|release` against the real mooncake-segmentd.

The keeper runs on a temporary socket (tests/keeper/test_keeper.py's
Keeper), segments are made with the protocol's CREATE, and the CLI must
show, describe and release them as the keeper says, in a table and in JSON
(doc/keep-json.md), and fail with the keeper's sentence or the client's
where it must."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_keeper import BUILDDIR, MIB, SHARE_ANY, Keeper, create_request, hello_request  # noqa: E402

TOOL = BUILDDIR / "tools" / "mooncake-segment"
if not TOOL.exists():
    pytest.skip(f"{TOOL} is not built (run make first)", allow_module_level=True)


def keep(*args, env=None):
    return subprocess.run([str(TOOL), "keep", *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def keeper():
    k = Keeper()
    yield k
    k.stop()


def make(keeper, name, **kw):
    reply = keeper.ask(create_request(name, **kw))
    assert reply.status == 0, reply.text
    reply.close_fds()
    return reply


def test_list_shows_what_the_keeper_keeps_as_a_table_and_as_json(keeper):
    kv = make(keeper, "kv-llama", size=8 * MIB, world=4, identity=b"\x01\xff", sharing=SHARE_ANY)
    make(keeper, "kv-other", size=2 * MIB)
    table = keep("list", "--socket", str(keeper.path))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"keeper pid {keeper.proc.pid} at {keeper.path};"), lines[0]
    assert lines[1].split() == ["SIZE", "PAGE", "GEN", "OWNER", "SHARE", "MAPPERS", "WARM", "AGE", "NAME"]
    assert [line.split()[-1] for line in lines[2:]] == ["kv-llama", "kv-other"]
    row = lines[2].split()
    assert row[0:2] == ["8.0", "MiB"] and row[4] == str(kv.generation) and row[6] == "any", row

    listed = keep("list", "--json", "--socket", str(keeper.path))
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["keeper"]["socket"] == str(keeper.path) and doc["keeper"]["pid"] == keeper.proc.pid
    assert doc["keeper"]["instance"] == f"{keeper.ask(hello_request()).instance:016x}"
    first = doc["segments"][0]
    assert first["name"] == "kv-llama" and first["size"] == 8 * MIB and first["world_size"] == 4
    assert first["generation"] == kv.generation and first["sharing"] == "any" and first["identity_hex"] == "01ff"
    assert first["owner_uid"] == os.geteuid() and first["warm_attaches"] == 0 and first["released"] is False
    assert [s["name"] for s in doc["segments"]] == ["kv-llama", "kv-other"]


def test_list_keeps_its_columns_in_place_whatever_the_names(keeper):
    long_name = "kv-" + "x" * 200
    make(keeper, long_name, size=MIB)
    make(keeper, "short", size=MIB)
    lines = keep("list", "--socket", str(keeper.path)).stdout.splitlines()
    name_column = lines[1].index("NAME")
    # Every row's fields end where the header's do, and its name starts under NAME.
    assert [line[name_column:] for line in lines[2:]] == [long_name, "short"], lines


def test_list_pages_through_more_segments_than_one_reply_holds(keeper):
    for i in range(40):
        make(keeper, f"s{i:02d}", size=MIB)
    doc = json.loads(keep("list", "--json", "--socket", str(keeper.path)).stdout)
    assert [s["name"] for s in doc["segments"]] == [f"s{i:02d}" for i in range(40)]


def test_stat_and_release(keeper):
    kv = make(keeper, "kv", size=4 * MIB)
    make(keeper, "kv", size=4 * MIB)  # a warm attach
    stat = keep("stat", "kv", "--json", "--socket", str(keeper.path))
    assert stat.returncode == 0, stat.stderr
    record = json.loads(stat.stdout)
    assert record["name"] == "kv" and record["warm_attaches"] == 1 and record["generation"] == kv.generation

    released = keep("release", "kv", "--socket", str(keeper.path))
    assert released.returncode == 0, released.stderr
    assert released.stdout == f"released uid {os.geteuid()}'s 'kv' (generation {kv.generation}): its pages are freed\n"
    gone = keep("stat", "kv", "--socket", str(keeper.path))
    assert gone.returncode == 1 and "the keeper refused (No such file or directory)" in gone.stderr, gone.stderr
    assert "kv" in gone.stderr


def test_owner_names_whose_segment(keeper):
    make(keeper, "kv", size=MIB)
    me = os.geteuid()
    stat = keep("stat", "kv", "--owner", str(me), "--json", "--socket", str(keeper.path))
    assert stat.returncode == 0 and json.loads(stat.stdout)["owner_uid"] == me, stat.stderr
    other = me + 4242
    absent = keep("release", "kv", "--owner", str(other), "--socket", str(keeper.path))
    assert absent.returncode == 1 and f"uid {other} keeps no segment 'kv'" in absent.stderr, absent.stderr
    bad = keep("stat", "kv", "--owner", "alice", "--socket", str(keeper.path))
    assert bad.returncode == 2 and "--owner 'alice' is not a uid" in bad.stderr, bad.stderr
    assert keep("list", "--owner", "0", "--socket", str(keeper.path)).returncode == 2


def test_bad_names_and_no_keeper_are_clear_errors(keeper, tmp_path):
    bad = keep("stat", "a/b", "--socket", str(keeper.path))
    assert bad.returncode == 2 and "segment name has '/' at byte 1" in bad.stderr, bad.stderr
    forged = keep("release", "kv|owner=1", "--socket", str(keeper.path))
    assert forged.returncode == 2 and "segment name has a '|' at byte 2" in forged.stderr, forged.stderr
    missing = keep("list", env=dict(os.environ, MOONCAKE_SEGMENT_KEEPER=str(tmp_path / "none.sock")))
    assert missing.returncode == 1
    assert f"No node keeper answers at {tmp_path / 'none.sock'}" in missing.stderr, missing.stderr
    assert "systemctl enable --now mooncake-segmentd.socket" in missing.stderr
    usage = keep("frobnicate")
    assert usage.returncode == 2 and "unknown command 'frobnicate'" in usage.stderr
    assert keep("release", "kv", "--json").returncode == 2


def test_health_says_whether_the_keeper_answers_for_a_probe(keeper, tmp_path):
    make(keeper, "kv-health", size=MIB)
    up = keep("health", "--socket", str(keeper.path))
    assert up.returncode == 0, up.stderr
    assert (
        up.stdout
        == f"keeper pid {keeper.proc.pid} at {keeper.path} answers: 1 kept segment; its own restart LOSES them\n"
    )
    doc = json.loads(keep("health", "--json", "--socket", str(keeper.path)).stdout)
    assert doc["pid"] == keeper.proc.pid and doc["kept"] == 1 and doc["survives_restart"] is False
    assert doc["instance"] == f"{keeper.ask(hello_request()).instance:016x}"
    # A keeper that is not there fails the probe, with the reason.
    down = keep("health", "--socket", str(tmp_path / "none.sock"))
    assert down.returncode == 1 and "No node keeper answers" in down.stderr, down.stderr
    assert keep("health", "--owner", "0", "--socket", str(keeper.path)).returncode == 2
