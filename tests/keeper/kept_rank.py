# SPDX-License-Identifier: Apache-2.0
"""One rank of a torch.distributed gloo group using a kept segment (test_kept_segments.py).

Usage: kept_rank.py SCENARIO RANK WORLD PARAMS_JSON.  The rank writes its
JSON result to PARAMS["out"]/RANK.json (a rank that waits to be killed
cannot end its stdout first).

  write   keep PARAMS["name"], fill this rank's entry with its pattern, wait
          for the group, report, then sleep until SIGKILLed;
  read    keep it again, time create() to usable, check every rank's pattern;
  refuse  keep it with PARAMS["change"] applied; report the error.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from mooncake.shared_segment import SharedSegmentError, create_shared_segment

MIB = 1 << 20


def blocks(world, params):
    per_rank = params["bytes"] // world
    return {"kv": {"count": world, "shape": (per_rank,), "dtype": torch.uint8}}


def marker_values(count, rank):
    return (torch.arange(count, dtype=torch.int64) * 7 + 11 * rank) % 200 + 50


def write_pattern(entry, rank):
    """The rank's byte everywhere, and a marker at every MiB that differs by position."""
    entry.fill_(rank + 1)
    markers = entry[::MIB]
    markers.copy_(marker_values(markers.numel(), rank).to(torch.uint8))


def pattern_holds(entry, rank, every_byte):
    """Its markers, and with @every_byte every byte, a chunk at a time (no temporary as large as the entry)."""
    markers = entry[::MIB]
    if not torch.equal(markers, marker_values(markers.numel(), rank).to(torch.uint8)):
        return False
    if not every_byte:
        return True
    chunk = 64 * MIB
    wrong = sum(
        int(torch.count_nonzero(entry[off : off + chunk] != rank + 1)) for off in range(0, entry.numel(), chunk)
    )
    return wrong == markers.numel()


def keep_args(params, change=None):
    args = {"keep": params["name"], "keep_identity": params.get("identity", "model-a/fp8")}
    if change == "identity":
        args["keep_identity"] = "model-b/bf16"
    return args


def report(params, rank, result):
    path = os.path.join(params["out"], f"{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(path + ".tmp", path)


def write(rank, world, group, params):
    seg = create_shared_segment("kv", blocks(world, params), world, rank, comm_group=group, **keep_args(params))
    write_pattern(seg.tensors("kv")[rank], rank)
    dist.barrier(group)
    report(params, rank, {"warm": seg.warm, "generation": seg.keep_generation, "info": seg.info()})
    time.sleep(3600)  # the test SIGKILLs every rank here, mapping and all


def read(rank, world, group, params):
    dist.barrier(group)  # every rank starts create together: the time is the group's
    start = time.monotonic()
    seg = create_shared_segment("kv", blocks(world, params), world, rank, comm_group=group, **keep_args(params))
    usable = time.monotonic() - start
    kv = seg.tensors("kv")
    # Every rank checks every rank's markers, and its own entry byte by byte: the group reads it all once.
    intact = [pattern_holds(kv[r], r, every_byte=r == rank) for r in range(world)]
    info = seg.info()
    del kv
    seg.close()
    report(
        params,
        rank,
        {
            "warm": seg.warm,
            "generation": seg.keep_generation,
            "seconds": usable,
            "intact": intact,
            "commit_method": info["commit_method"],
            "kept": info["kept"],
        },
    )


def refuse(rank, world, group, params):
    change = params["change"]
    layout = blocks(world, params)
    if change == "blocks":
        layout["kv"]["shape"] = (layout["kv"]["shape"][0] // 2,)
    try:
        create_shared_segment("kv", layout, world, rank, comm_group=group, **keep_args(params, change))
        result = {"error": None}
    except SharedSegmentError as e:
        result = {"error": str(e), "errno": e.errno}
    report(params, rank, result)


def main():
    scenario, rank, world, params = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    group = dist.group.WORLD
    {"write": write, "read": read, "refuse": refuse}[scenario](rank, world, group, params)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
