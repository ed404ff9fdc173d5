# SPDX-License-Identifier: Apache-2.0
"""The mooncake-segment command line, run as a user runs it: arguments it must
refuse, the figures demo and bench print, doctor under a tight open-file limit
and on a fixture host (its facts come from the library), info's JSON types, and
that the command links the library's public and private symbols only."""

import errno
import json
import os
import re
import resource
import signal
import subprocess
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", Path(__file__).resolve().parents[2]))
WRAPPER = BUILDDIR / "tools/mooncake-segment"
# The libtool wrapper is a shell script that needs descriptors of its own: run
# the real binary where there is one (make check sets LD_LIBRARY_PATH for it).
BINARY = BUILDDIR / "tools/.libs/mooncake-segment"
TOOL = BINARY if BINARY.exists() else WRAPPER

if not TOOL.exists():
    pytest.skip(f"{TOOL} is not built (run make first)", allow_module_level=True)


def run(*args, limit_files=None, timeout=120, env=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, limit_files))

    return subprocess.run(
        [str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit if limit_files else None,
        env=env,
    )


@pytest.mark.parametrize(
    "args, named, hint",
    [
        (["bench", "256M"], "'256M'", "--sizes 256M"),
        (["bench", "--json", "1G"], "'1G'", "--sizes 1G"),
        (["bench", "fast"], "'fast'", "bench --help"),
        (["doctor", "now"], "'now'", "doctor [--json]"),
        (["info", "--json", "all"], "'all'", "info [--json]"),
    ],
)
def test_extra_arguments_are_refused_naming_the_fix(args, named, hint):
    result = run(*args, timeout=20)
    assert result.returncode == 2, result
    assert result.stdout == "", "nothing may run: " + result.stdout[:200]
    assert "unexpected argument " + named in result.stderr, result.stderr
    assert hint in result.stderr, result.stderr


def test_info_json_gives_sizes_as_numbers():
    result = run("info", "--json", timeout=20)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert isinstance(info["page_size"], int)
    pmd = Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
    if pmd.exists():
        assert info["thp_pmd_size"] == int(pmd.read_text())
    else:
        assert info["thp_pmd_size"] is None
    assert isinstance(info["hugetlb_default_size"], int)


def test_demo_ratio_is_against_the_allocated_size():
    # 4097 bytes take two 4 KiB pages: one copy is 1.00 x those, not 2.00 x the request.
    page = os.sysconf("SC_PAGESIZE")
    result = run("demo", "--ranks", "2", "--size", str(page + 1))
    assert result.returncode == 0, result.stderr
    match = re.search(r"total PSS .* = ([0-9.]+) x the segment's ([0-9.]+ \w+);", result.stdout)
    assert match, result.stdout
    assert abs(float(match.group(1)) - 1.0) < 0.05, result.stdout
    if page == 4096:
        assert match.group(2) == "8.0 KiB", result.stdout
    assert f"{page + 1} bytes rounded up" in result.stdout, result.stdout


@pytest.mark.parametrize("files", [4, 5])
def test_doctor_names_the_open_file_limit(files):
    result = run("doctor", limit_files=files, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    peer = [line for line in result.stdout.splitlines() if "peer access" in line]
    assert peer and "could not test" in peer[0], result.stdout
    assert "EMFILE" in peer[0] and f"may open {files} files" in peer[0], peer
    assert "ulimit -n" in result.stdout and "LimitNOFILE" in result.stdout, result.stdout
    assert "could not start a test child" not in result.stdout


@pytest.mark.parametrize("files", [5, 6, 7, 9, 12])
def test_demo_out_of_descriptors_names_the_limit(files):
    """With too few descriptors the demo says so and names ulimit -n, wherever it runs out:
    starting the ranks' sockets, or inside a rank's create/complete (the library's message)."""
    result = run("demo", "--size", "4M", limit_files=files, timeout=120)
    if result.returncode == 0:
        return  # enough for this many: nothing to name
    assert "did not finish in time" not in result.stderr, result.stderr
    assert "ulimit -n" in result.stdout + result.stderr, result.stdout + result.stderr


def test_doctor_passes_peer_access_with_enough_files():
    result = run("doctor", limit_files=64, timeout=60)
    peer = [line for line in result.stdout.splitlines() if "peer access" in line]
    assert peer and "could not test" not in peer[0], result.stdout
    assert "Unix socket passes it" in peer[0] and "net:[" in peer[0], peer


def test_bench_interleaves_the_memset_limit_and_reports_the_spread():
    rounds = 4
    result = run("bench", "--sizes", "1M", "--repeat", str(rounds), "--threads", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    size = report["sizes"][0]
    results = {r["method"]: r for r in size["results"]}
    for method in ("memset", "anon", "raw-memfd", "ours", "import", "baseline-devshm"):
        r = results[method]
        runs = [x["seconds"] for x in r["runs"]]
        assert len(runs) == rounds, (method, r)
        assert r["seconds"] == pytest.approx(min(runs), abs=2e-9)
        assert r["worst"] == pytest.approx(max(runs), abs=2e-9)
        assert min(runs) - 2e-9 <= r["median"] <= max(runs) + 2e-9
        assert r["spread_percent"] == pytest.approx((max(runs) - min(runs)) / min(runs) * 100, rel=1e-3, abs=0.2)
    # Round k's memset and ours: the memset runs both before and after ours
    # across the rounds, never at one fixed moment of the run.
    memset_starts = [x["start"] for x in results["memset"]["runs"]]
    ours_starts = [x["start"] for x in results["ours"]["runs"]]
    before = [m < o for m, o in zip(memset_starts, ours_starts)]
    assert any(before) and not all(before), (memset_starts, ours_starts)
    assert memset_starts == sorted(memset_starts) and len(set(memset_starts)) == rounds
    for line in size["ratios"]:
        if "memset limit" in line["name"]:
            assert line["limit_disturbed"] == (line["value"] > 1.05), line


def test_bench_text_shows_the_spread_of_each_method():
    result = run("bench", "--sizes", "1M", "--repeat", "2", "--threads", "1")
    assert result.returncode == 0, result.stderr
    assert "2 interleaved rounds" in result.stdout, result.stdout
    for method in ("memset", "ours"):
        assert re.search(rf"^{method} +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +\d+% +2$", result.stdout, re.M), result.stdout


def fixture_host(root, files):
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def doctor_findings(env):
    result = run("doctor", "--json", env=env, timeout=60)
    return {f["check"]: f for f in json.loads(result.stdout)["findings"]}


def test_doctor_reads_the_cgroup_room_and_hugetlb_pools_as_create_does(tmp_path):
    """The library's readings under a fixture host root: the room create checks, free minus reserved pages."""
    root = fixture_host(
        tmp_path,
        {
            "proc/meminfo": "MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\nHugepagesize: 2048 kB\n",
            "proc/self/cgroup": "0::/job\n",
            "sys/fs/cgroup/job/memory.max": "33554432\n",
            "sys/fs/cgroup/job/memory.current": "12582912\n",
            "sys/fs/cgroup/job/memory.stat": "active_file 1048576\ninactive_file 3145728\nfile_dirty 0\n",
            "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "16\n",
            "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "9\n",
            "sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages": "4\n",
            "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
            "sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages": "0\n",
        },
    )
    found = doctor_findings(dict(os.environ, MOONCAKE_SEGMENT_HOST_ROOT=str(root)))
    cgroup = found["memory cgroup"]["value"]
    # 32 MiB limit - (12 MiB usage - 4 MiB clean cache) = 24 MiB of room.
    assert "limit 32.0 MiB, usage 12.0 MiB of which 4.0 MiB clean page cache" in cgroup, cgroup
    assert "room 24.0 MiB" in cgroup and "job" in cgroup, cgroup
    # What create accepts, stated again (doc/guarantees.md): the largest page multiple S with
    # S + S/240 + 1 MiB within the room less the charge batching, 64 pages for each CPU we may run on.
    page = os.sysconf("SC_PAGESIZE")
    room = max(0, (24 << 20) - 64 * page * len(os.sched_getaffinity(0)))
    largest = max(0, (room - (1 << 20)) * 240 // 241 // page * page)
    while largest and largest + largest // 240 + (1 << 20) > room:
        largest -= page
    while largest + page + (largest + page) // 240 + (1 << 20) <= room:
        largest += page
    shown = (
        f"{largest / 2**20:.1f} MiB"
        if largest >= 1 << 20
        else f"{largest / 1024:.1f} KiB"
        if largest >= 1024
        else f"{largest} B"
    )
    assert f"so the largest segment create accepts is {shown};" in cgroup, (shown, cgroup)
    pools = found["HugeTLB"]
    assert pools["value"] == "2048kB: 16 pages, 5 free; 1048576kB: 0 pages, 0 free", pools
    assert pools["status"] == "ok", pools


def test_doctor_names_each_gpu_and_its_numa_node_through_the_library(tmp_path):
    """The fake driver spells bus ids in capitals, as the real one does; sysfs in small letters."""
    fake = os.environ.get("FAKE_CUDA_LIBRARY", "")
    if not fake or not Path(fake).exists():
        pytest.skip("no fake CUDA driver: this build has no CUDA headers (configure --with-cuda)")
    root = fixture_host(tmp_path, {"sys/bus/pci/devices/0000:3c:00.0/numa_node": "1\n"})
    env = dict(os.environ, MOONCAKE_SEGMENT_HOST_ROOT=str(root), MOONCAKE_SEGMENT_CUDA_LIBRARY=fake)
    cuda = doctor_findings(dict(env, FAKE_CUDA_DEVICES="2"))["CUDA driver"]
    assert cuda["status"] == "ok", cuda
    assert cuda["value"] == "2 device(s): 0: 0000:3B:00.0 node ?, 1: 0000:3C:00.0 node 1", cuda
    none = doctor_findings(dict(env, FAKE_CUDA_DEVICES="0"))["CUDA driver"]
    assert none["status"] == "warn" and "no usable device" in none["value"], none
    assert "CUDA_VISIBLE_DEVICES" in none["fix"], none
    missing = doctor_findings(dict(env, MOONCAKE_SEGMENT_CUDA_LIBRARY=str(tmp_path / "absent.so")))["CUDA driver"]
    assert missing["status"] == "ok" and missing["value"].startswith("not loaded: "), missing


def test_doctor_says_which_vmm_backend_serves_mmap_false_as_create_does(tmp_path):
    """The answer is create's own: the backend a one-rank probe got, or create's reason."""
    fake = os.environ.get("FAKE_CUDA_LIBRARY", "")
    if not fake or not Path(fake).exists():
        pytest.skip("no fake CUDA driver: this build has no CUDA headers (configure --with-cuda)")
    log = tmp_path / "cuda.log"
    env = dict(os.environ, MOONCAKE_SEGMENT_CUDA_LIBRARY=fake, FAKE_CUDA_LOG=str(log))
    vmm = doctor_findings(env)["mmap=false"]
    if "cuda-vmm" not in vmm["value"] and "no host NUMA virtual memory API" in vmm["value"]:
        pytest.skip("this build's cuda.h has no host NUMA VMM API (CUDA 12.4 or later)")
    assert vmm["status"] == "ok" and vmm["value"] == "cuda-vmm on device 0 (cuMemCreate, 2048 KiB granules)", vmm
    # The probe gave back what it took: the fake driver flags leaks and misuse as ERROR lines.
    assert "create " in log.read_text() and "ERROR" not in log.read_text(), log.read_text()
    refused = doctor_findings(dict(env, FAKE_CUDA_VMM="0"))["mmap=false"]
    assert refused["status"] == "ok" and refused["value"].startswith("unavailable on device 0: "), refused
    assert "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED" in refused["value"], refused


def symbols(args, path):
    out = subprocess.run(["nm", "-D", *args, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_the_command_links_the_librarys_public_and_private_nodes_only():
    """No library source is compiled into the command: it reaches the library through its exports,
    and those are exactly the version script's, the private ones in MOONCAKE_SEGMENT_PRIVATE."""
    library = BUILDDIR / "lib/.libs/libmooncake-segment.so"
    script = (
        Path(os.environ.get("MOONCAKE_SEGMENT_SRCDIR", Path(__file__).resolve().parents[2]))
        / "lib/libmooncake-segment.sym"
    ).read_text()
    if not library.exists() or not BINARY.exists():
        pytest.skip("needs the shared library build (lib/.libs, tools/.libs): configure without --disable-shared")
    nodes = dict(re.findall(r"(MOONCAKE_SEGMENT_[\w.]+) \{\s*global:([^}]*?)(?:local:|\})", script, re.S))
    listed = {f"{name.strip()}@@{node}" for node, names in nodes.items() for name in names.split(";") if name.strip()}
    exported = {s for s in symbols(["--defined-only"], library) if "@@MOONCAKE_SEGMENT_" in s}
    assert exported == listed
    private = {s.split("@")[0] for s in exported if s.endswith("@@MOONCAKE_SEGMENT_PRIVATE")}
    assert private and not any(s.startswith("mooncake_segment_") for s in private), private
    used = {s for s in symbols(["--undefined-only"], BINARY) if "@MOONCAKE_SEGMENT_" in s}
    assert {s.split("@")[0] for s in used} >= {"mc_accel_report", "mc_self_cgroup_room"}, used
    # Nothing the library exports is defined again in the command (a compiled-in copy).
    defined = {s.split("@")[0] for s in symbols(["--defined-only"], BINARY)}
    copies = {s.split("@")[0] for s in exported} & defined
    assert not copies, copies
    assert not {s for s in symbols(["--defined-only", "--extern-only"], BINARY) if s.startswith("mc_")}


def read_front_csv(path):
    lines = path.read_text().splitlines()
    assert lines[0] == "t_ms,bytes", lines[:2]
    return [(float(t), int(b)) for t, b in (line.split(",") for line in lines[1:])]


def test_bench_background_writes_the_front_as_csv_and_svg(tmp_path):
    """bench --background: the first byte, fully ready against blocking, and the front sampled
    while it commits, written per thread count as CSV (time ascending, bytes never going back,
    ending at the whole size) and plotted per size in an SVG that holds one curve per thread count."""
    out = tmp_path / "curves"
    size = 64 << 20
    args = ["--sizes", "64M", "--threads", "2", "--repeat", "2", "--out", str(out), "--json"]
    result = run("bench", "--background", *args)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["sizes"][0]
    methods = {(r["method"], r["threads"]): r for r in report["results"]}
    for threads in (1, 2):
        for method in ("memset", "ours", "background-first-byte", "background-ready"):
            assert methods[(method, threads)]["seconds"] > 0, (method, threads, methods.get((method, threads)))
    assert ("raw-memfd", 1) not in methods and ("baseline-devshm", 1) not in methods, sorted(methods)
    names = {line["name"] for line in report["ratios"]}
    assert "background-ready / ours (blocking, same threads)" in names, names
    figures = {b["threads"]: b for b in report["background"]}
    assert sorted(figures) == [1, 2], figures
    for threads, b in figures.items():
        assert 0 < b["first_byte_ms"] < b["ready_seconds"] * 1e3, b
        assert b["blocking_seconds"] == methods[("ours", threads)]["seconds"], b
        assert b["ready_ratio"] == pytest.approx(b["blocking_seconds"] / b["ready_seconds"], rel=2e-3, abs=2e-3), b
        csv = Path(b["csv"])
        assert csv == out / f"front-64M-{threads}t.csv", b
        points = read_front_csv(csv)
        assert len(points) == b["samples"] >= 2, points
        times = [t for t, _ in points]
        front = [v for _, v in points]
        assert times == sorted(times) and times[0] == 0, times
        assert front == sorted(front) and front[0] == 0 and front[-1] == size, front
        assert Path(b["svg"]) == out / "front-64M.svg", b
    svg = (out / "front-64M.svg").read_text()
    root = ElementTree.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2, svg[:500]
    assert "blocking create" in svg and "1 thread" in svg and "2 threads" in svg, svg[:500]


def test_bench_background_text_names_the_goals():
    result = run("bench", "--background", "--sizes", "16M", "--threads", "1", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    line = re.search(
        r"^background commit, 1 thread: first usable byte ([0-9.]+) ms \(goal < 10 ms: (met|MISSED)\); "
        r"fully ready ([0-9.]+) s, blocking ([0-9.]+) s: ratio ([0-9.]+) \(goal >= 0.95: (met|MISSED)\)$",
        result.stdout,
        re.M,
    )
    assert line, result.stdout
    assert "--out DIR writes them" in result.stdout, result.stdout


def test_bench_out_needs_background(tmp_path):
    result = run("bench", "--out", str(tmp_path), "--sizes", "1M", timeout=20)
    assert result.returncode == 2 and "add --background" in result.stderr, result
    assert not list(tmp_path.iterdir())


def test_bench_slots_reports_latency_rate_and_the_seqlock_ratio_of_each_run():
    """bench --slots between two processes: both latency modes over every round of every run
    (percentiles in order), publish rates with no waiter and one, and the seqlock read's cost
    against memcpy as a ratio per run and their median.  Figures only: no goal is asserted."""
    rounds, repeat = 300, 2
    result = run("bench", "--slots", "--rounds", str(rounds), "--repeat", str(repeat), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["mode"] == "slots" and report["processes"] == 2 and report["slot_count"] > 0, report
    assert report["rounds"] == rounds and report["repeat"] == repeat, report
    latency = {lat["mode"]: lat for lat in report["latency"]}
    assert sorted(latency) == ["asleep", "spin-then-sleep"], latency
    for mode, lat in latency.items():
        assert lat["rounds"] == rounds * repeat, lat
        assert 0 < lat["min_us"] <= lat["median_us"] <= lat["p99_us"] <= lat["max_us"], lat
        assert 0 <= lat["published_before_wait"] <= lat["rounds"], lat
        assert 0 <= lat["seen_while_polling"] <= lat["rounds"], lat
    assert latency["asleep"]["spin_ns"] == 0 and latency["asleep"]["seen_while_polling"] == 0, latency
    polled = latency["spin-then-sleep"]
    assert polled["spin_ns"] > 0, polled
    if polled["seen_while_polling"]:
        assert polled["seen_while_polling_median_us"] > 0, polled
    rates = {r["waiters"]: r for r in report["publish_rate"]}
    assert sorted(rates) == [0, 1], rates
    for rate in rates.values():
        assert len(rate["runs"]) == repeat and all(r > 0 for r in rate["runs"]), rate
        assert rate["best_per_second"] == pytest.approx(max(rate["runs"]), abs=0.1), rate
        assert min(rate["runs"]) - 0.1 <= rate["median_per_second"] <= rate["best_per_second"], rate
    # The waiter saw the last sequence: it woke at least once, at most once per publish.
    assert all(0 < w <= rates[1]["publishes_per_run"] for w in rates[1]["wakes"]), rates[1]
    seqlock = report["seqlock"]
    assert seqlock["block_bytes"] == 64 * 1024 and len(seqlock["runs"]) == repeat, seqlock
    for r in seqlock["runs"]:
        assert r["seqlock_ns"] > 0 and r["memcpy_ns"] > 0, r
        assert r["ratio"] == pytest.approx(r["seqlock_ns"] / r["memcpy_ns"], rel=1e-3, abs=1e-3), r
    ratios = sorted(r["ratio"] for r in seqlock["runs"])
    assert seqlock["ratio"] > 0 and seqlock["ratio"] == pytest.approx(sum(ratios) / 2, rel=1e-3, abs=1e-3), seqlock


def test_bench_slots_text_names_each_figure_and_its_goal():
    result = run("bench", "--slots", "--rounds", "200", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    number = r"([0-9.]+)"
    asleep = re.search(
        rf"^  reader asleep in wait_slot +median +{number} us +p99 +{number} us +\(200 rounds", out, re.M
    )
    polled = re.search(rf"^  reader polls 50 us, then wait_slot +median +{number} us +p99 +{number} us", out, re.M)
    for line in (asleep, polled):
        assert line and 0 < float(line[1]) <= float(line[2]), out
    assert re.search(r"^  polling reader: goal a few microseconds \(median < 5 us\): (met|MISSED)$", out, re.M), out
    for name in ("no waiter", "one waiter in wait_slot"):
        rate = re.search(rf"^  {name} +{number} M/s +median +{number} M/s$", out, re.M)
        assert rate and float(rate[1]) > 0, out
    ratio = re.search(rf"per copy: ratio {number} \(median of 1 run; goal <= 1.05: (met|MISSED)\)$", out, re.M)
    assert ratio and float(ratio[1]) > 0, out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--slots", "--sizes", "1G"], "--sizes measures the segment's sizes, not --slots"),
        (["--slots", "--background"], "--background measures the segment's sizes, not --slots"),
        (["--rounds", "10"], "add --slots"),
        (["--slots", "--rounds", "0"], "--rounds must be 1.."),
    ],
)
def test_bench_slots_refuses_the_options_of_the_size_runs(args, message):
    result = run("bench", *args, timeout=20)
    assert result.returncode == 2 and message in result.stderr, result


LIBRARY = BUILDDIR / "lib/.libs/libmooncake-segment.so"
HOLDER = Path(__file__).resolve().parent / "front_holder.py"


def wait_stopped(pid, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in "Tt":
            return
        time.sleep(0.005)
    raise AssertionError(f"{pid} did not stop")


def list_front(label):
    result = run("list", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    found = [s for s in json.loads(result.stdout)["segments"] if s["label"] == label]
    assert len(found) == 1, result.stdout
    return found[0]


@pytest.fixture
def held_front(request):
    """A background owner stopped while it commits (front_holder.py), and its forked child:
    yields (label, owner pid, child pid, the owner's Popen).  A commit that finished before the
    owner stopped is retried at twice the size, from 1 GiB up to 4 GiB."""
    if not LIBRARY.exists():
        pytest.skip("needs the shared library build (lib/.libs)")
    label = f"front-{os.getpid()}-{request.node.name[:20]}"
    held = []
    try:
        for size in (1 << 30, 2 << 30, 4 << 30):
            proc = subprocess.Popen(
                ["/usr/bin/python3", str(HOLDER), str(LIBRARY), label, str(size)],
                stdout=subprocess.PIPE,
                text=True,
            )
            line = proc.stdout.readline().split()
            assert len(line) == 2, line
            owner, child = int(line[0]), int(line[1])
            held.append((proc, owner, child))
            wait_stopped(owner)
            if list_front(label)["front"]["state"] == "committing":
                yield label, owner, child, proc
                return
            for pid in (owner, child):
                os.kill(pid, signal.SIGKILL)
            proc.wait()
        pytest.fail("every commit finished before its owner stopped, up to 4 GiB")
    finally:
        for proc, owner, child in held:
            for pid in (owner, child):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()


def test_list_shows_a_committing_segment_with_its_percentage(held_front):
    label, owner, child, proc = held_front
    seg = list_front(label)
    front = seg["front"]
    assert seg["owner_pid"] == owner and seg["mapped_processes"] == 2, seg
    assert front["state"] == "committing" and front["error"] is None, front
    assert 0 < front["committed_bytes"] < front["alloc_size_bytes"] == seg["size_bytes"], front
    assert 0 < front["percent"] < 100, front
    assert front["percent"] == pytest.approx(front["committed_bytes"] * 100 / front["alloc_size_bytes"], abs=1e-3)
    table = run("list", timeout=60).stdout
    row = [line for line in table.splitlines() if line.startswith(label)]
    assert row and re.search(r" (\d+\.\d)%$", row[0]), table
    assert 0 <= float(row[0].split()[-1].rstrip("%")) < 100, row
    percent = re.escape(row[0].split()[-1])
    assert re.search(rf"^  committing: .* of .* ready \({percent}\)$", table, re.M), table
    # Continued, the owner commits the rest: list then says committed, 100%.
    os.kill(owner, signal.SIGCONT)
    assert proc.stdout.readline().strip() == "ready"
    front = list_front(label)["front"]
    assert front["state"] == "committed" and front["percent"] == 100, front
    assert front["committed_bytes"] == front["alloc_size_bytes"] and front["commit_seconds"] > 0, front
    row = [line for line in run("list", timeout=60).stdout.splitlines() if line.startswith(label)]
    assert row and row[0].endswith(" 100%"), row


def test_list_shows_a_failed_commit_with_its_errno(held_front):
    """The owner killed while committing: its child still maps the segment and its control area,
    and list says failed with ESRCH, as every rank's wait_ready will."""
    if os.geteuid() != 0:
        pytest.skip("the child's mapping of the control area is read through /proc/PID/map_files: root")
    label, owner, child, proc = held_front
    os.kill(owner, signal.SIGKILL)
    proc.wait()
    seg = list_front(label)
    front = seg["front"]
    assert seg["mapped_processes"] == 1 and seg["owner_pid"] is None, seg
    assert front["state"] == "failed", front
    assert front["error"]["errno"] == errno.ESRCH and "died while committing" in front["error"]["message"], front
    assert 0 < front["committed_bytes"] < front["alloc_size_bytes"], front
    table = run("list", timeout=60).stdout
    row = [line for line in table.splitlines() if line.startswith(label)]
    assert row and row[0].endswith(" failed"), table
    failed = rf"^  failed: errno {errno.ESRCH} \(No such process\), .* committed: the owner"
    assert re.search(failed, table, re.M), table


SLOTS_HOLDER = Path(__file__).resolve().parent / "slots_holder.py"


def test_list_shows_the_slots_each_live_segment_declares():
    """Two live segments, one declaring 7 publish slots and one none: the JSON's "slots" and the
    table's per-segment line give what each declared (read from its control area)."""
    if not LIBRARY.exists():
        pytest.skip("needs the shared library build (lib/.libs)")
    holders = {}
    try:
        for slots in (7, 0):
            label = f"slots-{os.getpid()}-{slots}"
            proc = subprocess.Popen(
                ["/usr/bin/python3", str(SLOTS_HOLDER), str(LIBRARY), label, str(slots)],
                stdout=subprocess.PIPE,
                text=True,
            )
            holders[slots] = (label, proc)
            line = proc.stdout.readline().split()
            assert len(line) == 1 and int(line[0]) == proc.pid, line
        for slots, (label, proc) in holders.items():
            seg = list_front(label)
            assert seg["front"] is not None and seg["owner_pid"] == proc.pid, seg
            assert seg["slots"] == slots, seg
        table = run("list", timeout=60).stdout
        titles = {
            slots: [line for line in table.splitlines() if line.startswith(f"{label} (")]
            for slots, (label, proc) in holders.items()
        }
        assert len(titles[7]) == 1 and titles[7][0].endswith("; 7 publish slots"), table
        assert len(titles[0]) == 1 and "publish slot" not in titles[0][0], table
    finally:
        for label, proc in holders.values():
            proc.kill()
            proc.wait()


def test_list_shows_the_alignment_a_segment_declares():
    """One segment declaring a 64 KiB alignment, one the default: the JSON's "alignment" and the
    table's per-segment line give what each declared (the control area's word)."""
    if not LIBRARY.exists():
        pytest.skip("needs the shared library build (lib/.libs)")
    holders = {}
    try:
        for alignment in (64 << 10, 0):
            label = f"aligned-{os.getpid()}-{alignment}"
            proc = subprocess.Popen(
                ["/usr/bin/python3", str(SLOTS_HOLDER), str(LIBRARY), label, "0", str(alignment)],
                stdout=subprocess.PIPE,
                text=True,
            )
            holders[alignment] = (label, proc)
            line = proc.stdout.readline().split()
            assert len(line) == 1 and int(line[0]) == proc.pid, line
        for alignment, (label, proc) in holders.items():
            assert list_front(label)["alignment"] == alignment
        table = run("list", timeout=60).stdout
        titles = {
            alignment: [line for line in table.splitlines() if line.startswith(f"{label} (")]
            for alignment, (label, proc) in holders.items()
        }
        assert len(titles[64 << 10]) == 1 and titles[64 << 10][0].endswith("; aligned to 64.0 KiB"), table
        assert len(titles[0]) == 1 and "aligned to" not in titles[0][0], table
    finally:
        for label, proc in holders.values():
            proc.kill()
            proc.wait()


def test_demo_background_uses_the_first_chunk_at_once_then_checks_every_byte():
    result = run("demo", "--background", "--ranks", "4", "--size", "256M", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every rank saw the same bytes: one physical copy" in result.stdout, result.stdout
    rows = re.findall(r"^(\d+) +([0-9.]+) +([0-9.]+)  (.*)$", result.stdout, re.M)
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3], result.stdout
    for rank, first, ready, verdict in rows:
        assert verdict == "ready at once, read back", result.stdout
        assert 0 < float(first) <= float(ready), result.stdout
    checks = [line for line in result.stdout.splitlines() if re.match(r"^\d +\d+ +0x", line)]
    assert len(checks) == 4 and all(" ok (" in line and "every" in line for line in checks), result.stdout


def test_demo_background_kill_owner_at_half_fails_every_peer_wait_within_2_s():
    """The owner SIGKILLs itself once half is committed; each peer's wait fails with ESRCH and the
    library's sentence, within 2 s.  A commit that outran the owner's look is retried larger."""
    for size in ("2G", "4G"):
        result = run("demo", "--background", "--kill-owner-at-half", "--ranks", "4", "--size", size, timeout=300)
        if "before it could be killed half way" not in result.stderr:
            break
    assert result.returncode == 0, result.stdout + result.stderr
    assert "owner rank 0 SIGKILLed once half was committed" in result.stdout, result.stdout
    peers = re.findall(
        r"^rank (\d+): wait_ready failed ([0-9.]+) ms after the kill with error (\d+) \(([^)]*)\): (.*)$",
        result.stdout,
        re.M,
    )
    assert [int(p[0]) for p in peers] == [1, 2, 3], result.stdout
    for rank, after, err, text, message in peers:
        assert 0 <= float(after) < 2000 and int(err) == errno.ESRCH, result.stdout
        assert "died while committing" in message and "FAILED" not in message, result.stdout
    assert "none hung, none succeeded" in result.stdout, result.stdout


def test_demo_background_stop_owner_at_half_ends_every_peer_wait_in_time():
    """The owner SIGSTOPs itself once half is committed; each peer's 2 s wait ends with ETIMEDOUT
    within 3 s, the front still; continued, the owner commits the rest for every rank."""
    for size in ("2G", "4G"):
        result = run("demo", "--background", "--stop-owner-at-half", "--ranks", "3", "--size", size, timeout=300)
        if "before it could be stopped half way" not in result.stderr:
            break
    assert result.returncode == 0, result.stdout + result.stderr
    assert "owner rank 0 SIGSTOPped once half was committed, then continued" in result.stdout, result.stdout
    peers = re.findall(
        r"^rank (\d+): wait_ready\(timeout 2000 ms\) returned (-?\d+) \([^)]*\) after ([0-9.]+) ms, "
        r"the front at (\d+) then (\d+) bytes; once continued: (.*)$",
        result.stdout,
        re.M,
    )
    assert [int(p[0]) for p in peers] == [1, 2], result.stdout
    for rank, err, after, before, later, resumed in peers:
        assert int(err) == -errno.ETIMEDOUT and 1900 <= float(after) < 3000, result.stdout
        assert before == later and 0 < int(before), result.stdout
        assert resumed == "all ready", result.stdout
    assert "ended in time (ETIMEDOUT, the front still)" in result.stdout, result.stdout


def test_demo_stop_owner_needs_background():
    result = run("demo", "--stop-owner-at-half", timeout=20)
    assert result.returncode == 2 and "needs --background" in result.stderr, result


def test_demo_kill_owner_needs_background():
    result = run("demo", "--kill-owner-at-half", timeout=20)
    assert result.returncode == 2 and "needs --background" in result.stderr, result


def test_demo_alignment_shows_the_padding_and_aligned_bases():
    result = run("demo", "--alignment", "64M", "--ranks", "2", "--size", "250M", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    # 125 MiB a rank, padded to 128 MiB: 6 MiB of padding in a 256 MiB segment.
    assert (
        "alignment 64.0 MiB: 2 blocks of 125.0 MiB padded to 128.0 MiB each; padding 6.0 MiB, 2.34% of the "
        "segment's 256.0 MiB" in result.stdout
    ), result.stdout
    assert "every rank's base and every block are aligned to it" in result.stdout, result.stdout
    bases = re.findall(r"^\d+ +\d+ +0x([0-9a-f]{16}) ", result.stdout, re.M)
    assert len(bases) == 2 and all(int(b, 16) % (64 << 20) == 0 for b in bases), result.stdout


@pytest.mark.parametrize("value", ["3M", "2K", "2G", "x"])
def test_demo_refuses_a_bad_alignment(value):
    result = run("demo", "--alignment", value)
    assert result.returncode == 2 and "--alignment must be a power of two of 4K..1G (e.g. 2M)" in result.stderr


def test_bench_reports_what_an_aligned_base_costs():
    result = run("bench", "--sizes", "1M", "--repeat", "2", "--threads", "1", "--json")
    assert result.returncode == 0, result.stderr
    size = json.loads(result.stdout)["sizes"][0]
    methods = {r["method"]: r for r in size["results"]}
    assert methods["ours-aligned"]["seconds"] > 0 and len(methods["ours-aligned"]["runs"]) == 2
    lines = [line for line in size["ratios"] if line["name"].startswith("ours-aligned 1G / ours")]
    assert len(lines) == 1 and lines[0]["value"] > 0, size["ratios"]
