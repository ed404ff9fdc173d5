# SPDX-License-Identifier: Apache-2.0
"""A live segment shared by real rank processes, held until the test lets go.

As a program (one rank): segment_ranks.py RANK WORLD SIZE LABEL TOUCH_BYTES [NODE].  It
prints its blob (hex), reads every rank's blobs (hex, one line), completes,
reads TOUCH_BYTES of the segment (so that many bytes are mapped in this
process), prints "ready PID", finishes (the owner drops its descriptor, as
create_shared_segment does) and waits for its standard input to close.

As a module: held_segment(), the context manager the tests use.
"""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()


def rank_main(rank: int, world: int, size: int, label: str, touch: int, node: int = -1) -> None:
    from mooncake import _segment as native

    placement = {"numa_node": node} if node >= 0 else {}
    seg, blob = native.SharedSegment.create(f"{label}|test", size, world, rank, 0, **placement)
    print(blob.hex(), flush=True)
    blobs = [bytes.fromhex(h) for h in sys.stdin.readline().split()]
    seg.complete(blobs)
    view = seg.view()
    total = 0
    for offset in range(0, touch, 4096):
        total += view[offset]
    del view
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()  # every rank is ready: the owner may drop its descriptor
    seg.finish()
    print("finished", flush=True)
    sys.stdin.read()
    seg.close()


@contextlib.contextmanager
def held_segment(label: str, size: int, touch: list, node: int = -1, finish: bool = True, timeout: float = 60):
    """len(touch) ranks share a segment of SIZE bytes; rank r reads touch[r] bytes of it.

    With finish=False it yields before finish(), while the owner still holds its descriptor.

    With NODE >= 0 the owner's pages are bound to that NUMA node.

    Yields the ranks' pids (rank 0, the owner, first) while every rank still maps it.
    """
    world = len(touch)
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE), str(rank), str(world), str(size), label, str(touch[rank]), str(node)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    try:
        blobs = [p.stdout.readline().strip() for p in procs]
        assert all(blobs), "a rank failed before create returned"
        for p in procs:
            p.stdin.write(" ".join(blobs) + "\n")
            p.stdin.flush()
        pids = []
        for p in procs:
            line = p.stdout.readline().split()
            assert line and line[0] == "ready", f"a rank failed to complete: {line}"
            pids.append(int(line[1]))
        if not finish:
            yield pids
            return
        for p in procs:
            p.stdin.write("finish\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout.readline().strip() == "finished"
        yield pids
    finally:
        for p in procs:
            with contextlib.suppress(BrokenPipeError):
                p.stdin.close()
        for p in procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    rank_main(*(int(a) if i != 3 else a for i, a in enumerate(sys.argv[1:])))
