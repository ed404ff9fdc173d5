# SPDX-License-Identifier: Apache-2.0
"""Rank 1 of a two-rank kept segment, run in other PID and network namespaces (test_join.py).

Usage: join_rank.py NAME SIZE.  Speaks over stdin/stdout, a line each: it
writes its blob (hex), reads the owner's blob (hex), completes, and writes
one JSON line: what it read at the owner's offsets, its namespaces, or the
error complete() raised.  Then it writes its own mark and waits for a line
on stdin before it exits, so that the owner can look while it still maps.
"""

import json
import os
import sys

from mooncake._segment import SegmentError, SharedSegment

OWNER_MARK = b"owner-wrote-this"
PEER_MARK = b"peer-wrote-this!"


def main():
    name, size = sys.argv[1], int(sys.argv[2])
    seg, blob = SharedSegment.create(name, size, 2, 1, keep_name=name, slot_count=2)
    print(blob.hex(), flush=True)
    owner_blob = bytes.fromhex(sys.stdin.readline().strip())
    report = {
        "pid": os.getpid(),
        "pid_ns": os.readlink("/proc/self/ns/pid"),
        "net_ns": os.readlink("/proc/self/ns/net"),
    }
    try:
        seg.complete([owner_blob, blob])
    except SegmentError as e:
        report["error"] = str(e)
        print(json.dumps(report), flush=True)
        return
    view = memoryview(seg)
    report["read_first"] = bytes(view[: len(OWNER_MARK)]).decode(errors="replace")
    report["read_last"] = bytes(view[size - len(OWNER_MARK) : size]).decode(errors="replace")
    report["ready_bytes"] = seg.ready_bytes()
    report["warm"] = seg.info()["warm"]
    view[4096 : 4096 + len(PEER_MARK)] = PEER_MARK
    print(json.dumps(report), flush=True)
    sys.stdin.readline()
    view.release()
    seg.close()


if __name__ == "__main__":
    main()
