# SPDX-License-Identifier: Apache-2.0
"""list --prometheus through a real node_exporter's textfile collector, scraped over HTTP."""

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from segment_ranks import held_segment

BUILDDIR = Path(os.environ.get("MOONCAKE_SEGMENT_BUILDDIR", "."))
TOOL = str(BUILDDIR / "tools" / "mooncake-segment")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
MiB = 1 << 20
SIZE = 8 * MiB
TOUCH = [0, 2 * MiB, 4 * MiB, 6 * MiB]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    parser = pytest.importorskip(
        "prometheus_client.parser", reason="needs python3-prometheus-client to parse the exposition format"
    )
    return {family.name: family for family in parser.text_string_to_metric_families(text)}


def samples(families, name, **labels):
    return [s for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]


def scrape(port: int, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                return response.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_our_output_parses_with_the_reference_parser():
    with held_segment("prom-parse", SIZE, TOUCH) as pids:
        text = subprocess.run([TOOL, "list", "--prometheus"], capture_output=True, text=True, check=True).stdout
    families = parse(text)
    for name, family in families.items():
        assert name.startswith("mooncake_segment_")
        assert family.type == "gauge" and family.documentation
    assert {
        s.labels["pid"] for s in samples(families, "mooncake_segment_process_resident_bytes", segment="prom-parse")
    } == {str(pid) for pid in pids}


def test_node_exporter_serves_a_live_four_rank_segment(tmp_path):
    if not NODE_EXPORTER:
        pytest.skip("needs prometheus-node-exporter (Debian package) to serve the textfile collector")
    parse("")  # skip early without the parser
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    port = free_port()
    exporter = subprocess.Popen(
        [
            NODE_EXPORTER,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfiles}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with held_segment("prom-live", SIZE, TOUCH) as pids:
            out = textfiles / "mooncake-segment.prom"
            subprocess.run([TOOL, "list", "--prometheus", "--output", str(out)], check=True, timeout=60)
            text = scrape(port, time.monotonic() + 30)
    finally:
        exporter.terminate()
        _, err = exporter.communicate(timeout=10)
    families = parse(text)
    # The collector read our file without complaint.
    assert samples(families, "node_textfile_scrape_error")[0].value == 0, err
    seg = {"segment": "prom-live"}
    (size,) = samples(families, "mooncake_segment_size_bytes", **seg)
    assert size.value == SIZE
    (mappers,) = samples(families, "mooncake_segment_mapped_processes", **seg)
    assert mappers.value == 4
    resident = samples(families, "mooncake_segment_resident_bytes", **seg)
    assert resident and all("node" in s.labels for s in resident)
    assert sum(s.value for s in resident) == SIZE
    (info,) = samples(families, "mooncake_segment_info", **seg)
    assert info.labels["owner_pid"] == str(pids[0]) and info.labels["backend"] == "memfd"
    (private,) = samples(families, "mooncake_segment_private_copies_bytes", **seg)
    assert private.value == 4 * SIZE
    per_process = {
        int(s.labels["pid"]): s.value for s in samples(families, "mooncake_segment_process_resident_bytes", **seg)
    }
    assert per_process == {pids[0]: SIZE, pids[1]: TOUCH[1], pids[2]: TOUCH[2], pids[3]: TOUCH[3]}
