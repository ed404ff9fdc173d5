# SPDX-License-Identifier: Apache-2.0
"""Threads on one segment, and what tensors() may cost.

segment.h forbids running anything on a segment while complete() or close()
runs on it; the native object enforces that with its busy guard, so another
thread gets a RuntimeError naming the call in progress instead of a race.
tensors() reads only what complete() cached; info() alone reads the
residency (a walk of /proc/self/smaps), without the GIL.

The registered cases use the fake CUDA driver (tests/fakes/cuda) in a
subprocess, as test_cuda.py does.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from mooncake._segment import SharedSegment

FAKE = os.environ.get("FAKE_CUDA_LIBRARY", "")
needs_fake = pytest.mark.skipif(
    not FAKE or not os.path.exists(FAKE), reason="this build has no CUDA support (no cuda.h at configure time)"
)


def run_with_fake_driver(body, **env_extra):
    env = dict(os.environ, MOONCAKE_SEGMENT_CUDA_LIBRARY=FAKE, FAKE_CUDA_DEVICES="2", **env_extra)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout + result.stderr
    return json.loads(lines[-1])


@needs_fake
def test_other_calls_during_complete_get_a_clear_error_not_a_race():
    # The peer's complete() registers its mapping; the fake driver takes 3 s to do it (a margin for slow runs).
    result = run_with_fake_driver(
        """
        import json, threading, time
        from mooncake._segment import SharedSegment

        owner, b0 = SharedSegment.create("t", 1 << 20, 2, 0, device_id=0, host_register=True)
        peer, b1 = SharedSegment.create("t", 1 << 20, 2, 1, device_id=1, host_register=True)
        owner.complete([b0, b1])
        worker = threading.Thread(target=peer.complete, args=([b0, b1],))
        worker.start()
        deadline = time.monotonic() + 10
        while peer.busy != "complete" and time.monotonic() < deadline:
            time.sleep(0.001)
        seen_busy = peer.busy
        calls = {
            "finish": peer.finish, "info": peer.info, "close": peer.close, "base_addr": peer.base_addr,
            "device_addr": peer.device_addr, "size": peer.size, "alloc_size": peer.alloc_size,
            "ready": peer.ready, "view": lambda: peer.view(0, 1), "memoryview": lambda: memoryview(peer),
            "complete": lambda: peer.complete([b0, b1]),
        }
        errors = {}
        for name, call in calls.items():
            try:
                call()
                errors[name] = None
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
        still_busy = peer.busy
        worker.join()
        info = peer.info()
        peer.finish()
        owner.finish()
        print(json.dumps({"seen_busy": seen_busy, "still_busy": still_busy, "errors": errors,
                          "ready": peer.ready(), "registered": info["registered"],
                          "facts": peer.facts()}))
        peer.close()
        owner.close()
        """,
        FAKE_CUDA_REGISTER_DELAY_MS="3000",
    )
    assert result["seen_busy"] == "complete" and result["still_busy"] == "complete", result
    for name, error in result["errors"].items():
        assert error is not None, f"{name}() ran while another thread was inside complete()"
        assert "another thread is inside complete() on this shared segment" in error, (name, error)
        expected = "BufferError" if name == "memoryview" else "RuntimeError"
        assert error.startswith(expected), (name, error)
    # The interrupted complete() finished normally.
    assert result["ready"] and result["registered"]
    assert result["facts"]["accelerator"] == "cuda" and result["facts"]["registered"]


def test_info_runs_without_the_gil_and_changing_calls_wait_for_it():
    seg, blob = SharedSegment.create("gil", 64 << 20, 1, 0)
    seg.complete([blob])
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            seg.info()

    worker = threading.Thread(target=reader)
    worker.start()
    refusal = None
    deadline = time.monotonic() + 20
    try:
        while refusal is None and time.monotonic() < deadline:
            if seg.busy == "info":  # seen from this thread: info() let go of the GIL
                try:
                    seg.finish()
                except RuntimeError as exc:
                    refusal = str(exc)
            time.sleep(0)
    finally:
        stop.set()
        worker.join()
    assert refusal is not None, "no moment seen when another thread was inside info() without the GIL"
    assert "finish: another thread is inside info() on this shared segment" in refusal
    seg.close()


def test_facts_are_cached_by_complete_and_agree_with_info():
    seg, blob = SharedSegment.create("facts", 1 << 20, 1, 0)
    with pytest.raises(ValueError, match="not complete yet"):
        seg.facts()
    seg.complete([blob])
    facts, info = seg.facts(), seg.info()
    for key in ("size", "alloc_size", "page_size", "backend", "accelerator", "owner", "hugetlb", "registered"):
        assert facts[key] == info[key], key
    assert facts["device_addr"] == seg.device_addr() == 0
    seg.close()


class CountingNative:
    """Forwards to the real native segment and counts the calls to info()."""

    def __init__(self, native):
        self._real = native
        self.info_calls = 0

    def info(self):
        self.info_calls += 1
        return self._real.info()

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_tensors_never_reads_the_residency():
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    from mooncake.shared_segment import create_shared_segment

    seg = create_shared_segment("kv", {"k": {"count": 4, "shape": (256,), "dtype": torch.float16}}, 1, 0)
    seg._native = counting = CountingNative(seg._native)
    views = [seg.tensors("k") for _ in range(5)] + [seg.tensors("k", device="cpu")]
    assert counting.info_calls == 0
    seg.info()
    assert counting.info_calls == 1  # the counter does see the calls
    del views
    seg._native = counting._real
    seg.close()


@needs_fake
def test_tensors_of_a_registered_segment_never_reads_the_residency():
    result = run_with_fake_driver(
        """
        import json
        import torch
        import mooncake.shared_segment as s

        class CountingNative:
            def __init__(self, native):
                self._real, self.info_calls = native, 0
            def info(self):
                self.info_calls += 1
                return self._real.info()
            def __getattr__(self, name):
                return getattr(self._real, name)

        seg = s.create_shared_segment("kv", {"k": {"count": 4, "shape": (256,), "dtype": torch.float16}}, 1, 0,
                                      device_id=1, host_register=True)
        seg._native = counting = CountingNative(seg._native)
        views = [seg.tensors("k") for _ in range(5)] + [seg.tensors("k", device="cpu")]
        try:
            seg.tensors("k", device="npu")
        except s.SharedSegmentError as exc:
            npu_error = str(exc)
        calls = counting.info_calls
        accelerator = seg.info()["accelerator"]
        print(json.dumps({"calls": calls, "after_info": counting.info_calls, "accelerator": accelerator,
                          "npu_error": npu_error, "device_base": seg.device_base == seg.base_addr()}))
        del views
        seg._native = counting._real
        seg.close()
        """
    )
    assert result["calls"] == 0, result
    assert result["after_info"] == 1 and result["accelerator"] == "cuda"
    assert "registered with Ascend" in result["npu_error"]
    assert result["device_base"]
