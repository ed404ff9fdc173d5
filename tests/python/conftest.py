# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: resource counting and launching real rank processes."""

import contextlib
import gc
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class NewTorchDtype:
    """A torch.dtype of a torch newer than the installed one: a new name and an element size.

    Its type looks like torch.dtype (named dtype, of module torch), as a real
    dtype's does, but torch itself cannot make a tensor of it.
    """

    def __init__(self, name: str, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


NewTorchDtype.__name__ = NewTorchDtype.__qualname__ = "dtype"
NewTorchDtype.__module__ = "torch"


def count_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def count_mappings() -> int:
    """The library's own mappings: segment pages and address windows carry its name.

    Never the process's other mappings: malloc, the interpreter, ASan and
    valgrind map and unmap memory at any moment.
    """
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "mooncake-segment" in line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario: str, world: int, timeout: float = 90, **params):
    """Run `world` real processes of rank_worker.py SCENARIO; return each rank's JSON result.

    A hang is a test failure: every process is killed after `timeout` seconds.
    """
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = []
    for rank in range(world):
        args = [sys.executable, str(HERE / "rank_worker.py"), scenario, str(rank), str(world), json.dumps(params)]
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
        lines = [line for line in out.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {}
        result["returncode"] = proc.returncode
        result["stderr"] = err
        results.append(result)
    return results


@contextlib.contextmanager
def leak_check():
    """Assert that the block leaves this process's descriptors and mappings as it found them."""
    gc.collect()
    fds, maps = count_fds(), count_mappings()
    yield
    gc.collect()
    assert count_fds() == fds
    assert count_mappings() == maps


@pytest.fixture
def no_leaks():
    with leak_check():
        yield


def launch_gloo_ranks(worker, scenario, world, timeout, stopped_ranks=(), **params):
    """Run @world ranks of the gloo worker script @worker (its SCENARIO); each rank's JSON result.

    Ranks in @stopped_ranks stop themselves: they are SIGKILLed once every
    other rank has reported.  A hang is a failure: everything is killed
    after @timeout seconds.
    """
    if importlib.util.find_spec("torch") is None:
        pytest.skip("python3-torch is not installed: the ranks are a torch.distributed gloo group")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), scenario, str(rank), str(world), json.dumps(params)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    deadline = time.monotonic() + timeout
    outputs = {}
    try:
        for rank in [r for r in range(world) if r not in stopped_ranks] + list(stopped_ranks):
            if rank in stopped_ranks:
                procs[rank].kill()
            try:
                outputs[rank] = procs[rank].communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} of scenario {scenario!r} hung for {timeout}s")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for rank in range(world):
        out, err = outputs[rank]
        lines = [line for line in out.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {}
        result["returncode"] = procs[rank].returncode
        result["stderr"] = err[-3000:]
        results.append(result)
    return results


def report(capsys, title, rows):
    """Measured times into the test's log (make check keeps it), never asserted."""
    with capsys.disabled():
        print(f"\n{title}")
        for row in rows:
            print("  " + row)


@pytest.fixture
def fake_cuda_ranks(tmp_path, monkeypatch):
    """Rank processes started from here load the fake CUDA driver with 2 devices (no Ascend); its call log's path."""
    fake = os.environ.get("FAKE_CUDA_LIBRARY", "")
    if not fake or not os.path.exists(fake):
        pytest.skip("this build has no CUDA support (no cuda.h at configure time)")
    log = tmp_path / "cuda.log"
    monkeypatch.setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", fake)
    monkeypatch.setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "/nonexistent/libascendcl.so")
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    return log
