# SPDX-License-Identifier: Apache-2.0
"""A comm_group over two "hosts": 4 real processes as 2 hosts x 2, and the room over hosts.

Each rank's MOONCAKE_SEGMENT_HOST_ROOT is a fixture host root: its own boot id
file, and links to the real /proc/meminfo, /proc/self and /sys, so everything
but the host identity is this machine's truth.  Ranks 0 and 2 are host A,
ranks 1 and 3 host B (interleaved, so that local ranks are not a prefix).
"""

import errno
import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed; the gloo tests need it")

from conftest import HERE, free_port  # noqa: E402

WORLD = 4
HOST_OF_RANK = ["a", "b", "a", "b"]
BOOT_IDS = {"a": "aaaaaaaa-0000-4000-8000-00000000000a", "b": "bbbbbbbb-0000-4000-8000-00000000000b"}


def host_root(base, host, meminfo=None):
    """A fixture root for @host: its boot id, and this machine's /proc and /sys for the rest."""
    root = base / f"host-{host}"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(BOOT_IDS[host] + "\n")
    if os.path.isdir("/proc/sys/kernel/yama"):
        (root / "proc/sys/kernel/yama").symlink_to("/proc/sys/kernel/yama")
    if meminfo is None:
        (root / "proc/meminfo").symlink_to("/proc/meminfo")
    else:
        (root / "proc/meminfo").write_text(meminfo)
    (root / "proc/self").symlink_to("/proc/self")  # resolved by the reader: each rank's own
    (root / "sys").symlink_to("/sys")
    return root


def run_hosts(scenario, roots, timeout=90, **params):
    """Run WORLD ranks of hosts_worker.py, rank r under roots[HOST_OF_RANK[r]]; each rank's JSON result."""
    port = free_port()
    procs = []
    for rank in range(WORLD):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            MOONCAKE_SEGMENT_HOST_ROOT=str(roots[HOST_OF_RANK[rank]]),
        )
        args = [sys.executable, str(HERE / "hosts_worker.py"), scenario, str(rank), str(WORLD), json.dumps(params)]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    results = []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"rank {rank} of scenario {scenario!r} hung for {timeout}s")
        assert proc.returncode == 0, f"rank {rank} failed: {err[-2000:]}"
        results.append(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))
    return results


@pytest.fixture
def roots(tmp_path):
    return {host: host_root(tmp_path, host) for host in BOOT_IDS}


def test_each_host_shares_one_copy_of_its_own(roots):
    results = run_hosts("share", roots, owner=2)
    local = {"a": [0, 2], "b": [1, 3]}
    # owner_rank on its host (A), the lowest local rank elsewhere (B).
    local_owner = {"a": 2, "b": 1}
    for rank, r in enumerate(results):
        host = HOST_OF_RANK[rank]
        assert r["host_count"] == 2
        assert r["local_ranks"] == local[host], (rank, r)
        assert r["local_owner"] == local_owner[host], (rank, r)
        assert r["owner_flag"] == (rank == local_owner[host])
        # The host owner's write is seen by its peer, and the other host's owner did not overwrite it.
        assert r["saw_owner"] == 1000 + local_owner[host], (rank, r["saw_owner"])
        for other in range(WORLD):
            expected = 100 + other if HOST_OF_RANK[other] == host else 0
            assert r["seen"][other] == expected, (rank, other, r["seen"])
    size = results[0]["alloc_size"]
    for host, ranks in local.items():
        pss = sum(results[rank]["pss"] for rank in ranks)
        # One copy per host: two private copies would be 2x.
        assert 0.95 * size <= pss <= 1.05 * size, (host, pss, size)
    assert 1.9 * size <= sum(r["pss"] for r in results) <= 2.1 * size


def assert_same_error(results, *needles):
    errors = [r["error"] for r in results]
    assert all(errors), f"some rank did not raise: {errors}"
    assert len(set(errors)) == 1, f"ranks raised different errors: {errors}"
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_a_declaration_differing_between_hosts_raises_on_every_rank(roots):
    results = run_hosts("mismatch", roots, odd_rank=3, field="shape")
    assert_same_error(
        results,
        "Shared segment create failed: rank 3: "
        "InvalidArgument: Shared segment declaration of rank 3 differs from the local one: ",
        "block 'k' shape (512, 65) on rank 3, (512, 64) on rank 0",
    )


def test_an_owner_rank_differing_between_hosts_raises_on_every_rank(roots):
    results = run_hosts("mismatch", roots, odd_rank=3, field="owner")
    message = assert_same_error(
        results, "rank 3: Shared segment settings of rank 3 differ across hosts: owner_rank 1 on rank 3, 0 on rank 0"
    )
    assert "rank 0:" not in message and "rank 1:" not in message


def test_slots_differing_between_hosts_raise_on_every_rank(roots):
    # Hosts share no fingerprint: the settings' all-gather compares the publish slots.
    results = run_hosts("mismatch", roots, odd_rank=3, field="slots")
    assert_same_error(
        results, "rank 3: Shared segment settings of rank 3 differ across hosts: slots 2 on rank 3, 0 on rank 0"
    )


def test_the_group_room_is_the_least_hosts_and_a_page_more_fails_on_every_rank(tmp_path):
    with open("/proc/meminfo") as f:
        real = f.read()
    small = "".join(
        "MemAvailable:      49152 kB\n"
        if line.startswith("MemAvailable:")
        else "SwapFree:              0 kB\n"
        if line.startswith("SwapFree:")
        else line + "\n"
        for line in real.splitlines()
    )
    roots = {"a": host_root(tmp_path, "a"), "b": host_root(tmp_path, "b", meminfo=small)}
    results = run_hosts("room", roots)
    rooms = {r["group_room"] for r in results}
    assert len(rooms) == 1, rooms
    group_room = rooms.pop()
    assert group_room == min(r["local"] for r in results)
    # Host B (48 MiB available) binds; host A alone would allow more.
    assert results[1]["local"] == results[3]["local"] == group_room
    assert results[0]["local"] > group_room and results[2]["local"] > group_room
    assert group_room <= 48 << 20
    # A segment of the room was created on every rank (the scenario would have raised); a page more fails
    # on host B's owner (rank 1, its lowest rank), and every rank says so.
    message = assert_same_error(
        [{"error": r["over"]} for r in results], "rank 1: ", "the host has 50331648 available (MemAvailable 50331648 + "
    )
    assert "rank 0:" not in message
    assert all(r["errno"] == errno.ENOMEM for r in results)


def test_the_room_without_a_group_is_the_c_librarys_and_checks_its_flags():
    from mooncake import _segment
    from mooncake.shared_segment import SharedSegmentError, shared_segment_room

    assert shared_segment_room() == _segment.room() > 0
    with pytest.raises(SharedSegmentError, match="hugetlb must be True or False, got 'yes'"):
        shared_segment_room(hugetlb="yes")


ROOM_SCRIPT = """
import json
from mooncake.shared_segment import shared_segment_room
print(json.dumps([shared_segment_room(), shared_segment_room(hugetlb=True)]))
"""


def test_the_room_is_read_under_the_host_root_cgroup_and_hugetlb_pool(tmp_path):
    """The native room() through Python on a fixture: a cgroup v2 limit with clean cache, a HugeTLB pool."""
    root = tmp_path / "host"
    files = {
        "proc/sys/kernel/random/boot_id": "cccccccc-0000-4000-8000-00000000000c\n",
        "proc/meminfo": "MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\nSwapFree: 0 kB\nHugepagesize: 2048 kB\n",
        "proc/self/cgroup": "0::/job\n",
        "sys/fs/cgroup/job/memory.max": "33554432\n",
        "sys/fs/cgroup/job/memory.current": "12582912\n",
        "sys/fs/cgroup/job/memory.stat": "active_file 1048576\ninactive_file 3145728\nfile_dirty 0\nfile_writeback 0\n",
        "sys/kernel/mm/transparent_hugepage/shmem_enabled": "always within_size advise [never] deny force\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "16\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "9\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages": "4\n",
        "sys/devices/system/node/online": "0\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    env = dict(os.environ, MOONCAKE_SEGMENT_HOST_ROOT=str(root))
    done = subprocess.run([sys.executable, "-c", ROOM_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "HugeTLB" in done.stderr and "no hugetlbfs" in done.stderr:
        pytest.skip("this kernel has no MFD_HUGETLB")
    assert done.returncode == 0, done.stderr
    plain, huge = json.loads(done.stdout.splitlines()[-1])
    page = os.sysconf("SC_PAGESIZE")
    # limit - usage + clean cache, less the charge batching: 64 pages per CPU we may run on.
    cgroup_room = ((32 - 12 + 4) << 20) - 64 * page * len(os.sched_getaffinity(0))
    # The largest page multiple that fits with the kernel's overhead: S + S/240 + 1 MiB (doc/guarantees.md).
    assert plain % page == 0
    assert plain + plain // 240 + (1 << 20) <= cgroup_room < plain + page + (plain + page) // 240 + (1 << 20)
    assert huge == (9 - 4) * (2 << 20)  # free - reserved pages
