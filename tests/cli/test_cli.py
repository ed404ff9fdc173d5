# SPDX-License-Identifier: Apache-2.0
"""The mooncake-segment command line, run as a user runs it: arguments it must
refuse, the figures demo and bench print, doctor under a tight open-file limit,
and info's JSON types."""

import json
import os
import re
import resource
import subprocess
from pathlib import Path

import pytest

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", Path(__file__).resolve().parents[2]))
WRAPPER = BUILDDIR / "tools/mooncake-segment"
# The libtool wrapper is a shell script that needs descriptors of its own: run
# the real binary where there is one (make check sets LD_LIBRARY_PATH for it).
BINARY = BUILDDIR / "tools/.libs/mooncake-segment"
TOOL = BINARY if BINARY.exists() else WRAPPER

if not TOOL.exists():
    pytest.skip(f"{TOOL} is not built (run make first)", allow_module_level=True)


def run(*args, limit_files=None, timeout=120):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, limit_files))

    return subprocess.run(
        [str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit if limit_files else None,
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
