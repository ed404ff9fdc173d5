# SPDX-License-Identifier: Apache-2.0
"""One rank of a gloo group whose ranks see different hosts, run by test_hosts.py.

Each rank's MOONCAKE_SEGMENT_HOST_ROOT (set by the test) gives it its "host's"
boot id.  Usage: hosts_worker.py SCENARIO RANK WORLD PARAMS_JSON; prints one
JSON line.
"""


import torch
import torch.distributed as dist

from mooncake import _segment
from mooncake.shared_segment import SharedSegmentError, create_shared_segment, shared_segment_room
from smaps import mapping_pss  # beside this script: the kernel's figures, read independently
from gloo_scenarios import run  # beside this script: the group, the scenario, the result line

BLOCKS = {
    "k": {"count": 4, "shape": (512, 64), "dtype": torch.float32},
    "v": {"count": 4, "shape": (256, 32), "dtype": torch.float16},
}


def share(rank, world, group, params):
    seg = create_shared_segment("kv", BLOCKS, world, rank, owner_rank=params["owner"], comm_group=group)
    info = seg.info()
    k, v = seg.tensors("k"), seg.tensors("v")
    # Each host's owner writes its own rank at the same place: one copy per host, or a race.
    if rank == info["local_owner"]:
        k[0].fill_(1000 + rank)
    dist.barrier(group)
    saw_owner = float(k[0][0][0])
    # Every rank writes its own entry; a rank sees exactly its host's writes.
    v[rank].fill_(100 + rank)
    dist.barrier(group)
    seen = [float(v[r][0][0]) for r in range(world)]
    for view in k + v:  # map every page before PSS is read
        view.sum()
    del view
    dist.barrier(group)
    pss = mapping_pss(seg.base_addr())
    dist.barrier(group)
    del k, v
    seg.close()
    return {
        "local_ranks": info["local_ranks"],
        "local_owner": info["local_owner"],
        "host_count": info["host_count"],
        "owner_flag": bool(info["owner"]),
        "saw_owner": saw_owner,
        "seen": seen,
        "pss": pss,
        "alloc_size": info["alloc_size"],
    }


def expect_error(rank, world, group, blocks=BLOCKS, owner_rank=0, name="kv", slots=0):
    try:
        seg = create_shared_segment(name, blocks, world, rank, owner_rank=owner_rank, comm_group=group, slots=slots)
    except SharedSegmentError as exc:
        return {"error": str(exc), "errno": exc.errno}
    seg.close()
    return {"error": None}


def mismatch(rank, world, group, params):
    blocks = {name: dict(spec) for name, spec in BLOCKS.items()}
    owner_rank = slots = 0
    if rank == params["odd_rank"]:
        if params["field"] == "shape":
            blocks["k"]["shape"] = (512, 65)
        elif params["field"] == "slots":
            slots = 2
        else:
            owner_rank = 1
    return expect_error(rank, world, group, blocks=blocks, owner_rank=owner_rank, slots=slots)


def room(rank, world, group, params):
    """The group's room is the least host's; a segment of it fits, one page more fails on every rank."""
    local = _segment.room()
    group_room = shared_segment_room(comm_group=group)
    seg = create_shared_segment(
        "room", {"all": {"count": 1, "shape": (group_room,), "dtype": torch.uint8}}, world, rank, comm_group=group
    )
    page = seg.info()["page_size"]
    seg.close()
    over = expect_error(
        rank, world, group, name="room", blocks={"all": {"count": 1, "shape": (group_room + page,), "dtype": "uint8"}}
    )
    return {"local": local, "group_room": group_room, "page": page, "over": over["error"], "errno": over["errno"]}


SCENARIOS = {"share": share, "mismatch": mismatch, "room": room}


def main():
    run(SCENARIOS)


if __name__ == "__main__":
    main()
