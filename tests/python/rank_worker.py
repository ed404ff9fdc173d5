# SPDX-License-Identifier: Apache-2.0
"""One rank of a real torch.distributed (gloo) group, run by conftest.run_ranks.

Usage: rank_worker.py SCENARIO RANK WORLD PARAMS_JSON; prints one JSON line.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from mooncake.shared_segment import SharedSegmentError, create_shared_segment
from conftest import NewTorchDtype  # beside this script: a dtype of a newer torch
from smaps import mapping_pss  # beside this script: the kernel's figures, read independently

BLOCKS = {
    "k": {"count": 8, "shape": (256, 64), "dtype": torch.bfloat16},
    "v": {"count": 8, "shape": (256, 32), "dtype": torch.float16},
}


def share(rank, world, group, params):
    owner = params["owner"]
    seg = create_shared_segment("kv", BLOCKS, world, rank, owner_rank=owner, comm_group=group)
    k = seg.tensors("k")
    if rank == owner:
        for i, entry in enumerate(k):
            entry.fill_(i + 1)
        del entry
    dist.barrier(group)
    saw_owner = all(bool((t == i + 1).all()) for i, t in enumerate(k))
    dist.barrier(group)
    # Every rank writes its own entry of v; every rank reads all of them.
    v = seg.tensors("v")
    v[rank].fill_(100 + rank)
    dist.barrier(group)
    saw_all = all(bool((v[r] == 100 + r).all()) for r in range(world))
    # Touch every page so each rank maps all of them before PSS is read.
    for view in seg.tensors("k") + v:
        view.sum()
    del view
    dist.barrier(group)
    pss = mapping_pss(seg.base_addr())
    dist.barrier(group)
    total = seg.info()["alloc_size"]
    del k, v
    seg.close()
    return {"saw_owner": saw_owner, "saw_all": saw_all, "pss": pss, "total": total}


def expect_error(rank, world, group, **kwargs):
    start = time.monotonic()
    try:
        seg = create_shared_segment(
            kwargs.pop("name", "kv"),
            kwargs.pop("blocks", BLOCKS),
            kwargs.pop("world_size", world),
            kwargs.pop("rank_id", rank),
            comm_group=group,
            **kwargs,
        )
    except SharedSegmentError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start, "errno": exc.errno}
    seg.close()
    return {"error": None}


def mismatch(rank, world, group, params):
    blocks = dict(BLOCKS)
    if rank == params["odd_rank"]:
        blocks["k"] = {"count": 8, "shape": (256, 65), "dtype": torch.bfloat16}
    return expect_error(rank, world, group, blocks=blocks)


def declaration(rank, world, group, params):
    """Rank params["odd_rank"] declares one field differently: params["field"]."""
    blocks, name = {k: dict(v) for k, v in BLOCKS.items()}, "kv"
    if rank == params["odd_rank"]:
        field = params["field"]
        if field == "count":
            blocks["v"]["count"] = 7
        elif field == "shape":
            blocks["k"]["shape"] = (256, 65)
        elif field == "dtype":
            blocks["v"]["dtype"] = torch.bfloat16
        elif field == "missing":
            del blocks["v"]
        elif field == "extra":
            blocks["a"] = {"count": 1, "shape": (8,), "dtype": torch.uint8}
        elif field == "name":
            name = "kv2"
    return expect_error(rank, world, group, blocks=blocks, name=name)


def same_size_dtypes(rank, world, group, params):
    """Rank params["odd_rank"] declares block v with a dtype of v's element size under another name.

    params["dtype"]: a torch dtype's name, or a name and size of a torch newer than this one.
    """
    blocks = {k: dict(v) for k, v in BLOCKS.items()}
    blocks["v"]["dtype"] = torch.uint8
    if rank == params["odd_rank"]:
        name, size = params["dtype"]
        blocks["v"]["dtype"] = getattr(torch, name) if size is None else NewTorchDtype(name, size)
    return expect_error(rank, world, group, blocks=blocks)


def engine_native(rank, world, group, params):
    """Upstream's native two-phase API, imported as upstream's code does, blobs gathered by the caller."""
    import ctypes

    from mooncake.engine import SharedSegment

    size = 1 << 20
    seg, blob = SharedSegment.create("engine", size, world, rank, params["owner"])
    blobs = [None] * world
    dist.all_gather_object(blobs, blob, group=group)
    seg.complete(blobs)
    pages = (ctypes.c_uint8 * size).from_address(seg.base_addr())  # as upstream's callers reach the pages
    pages[rank * 4096] = 100 + rank
    dist.barrier(group)
    seen = [pages[r * 4096] for r in range(world)]
    dist.barrier(group)
    result = {"error": None, "ready": seg.ready(), "size": seg.size(), "seen": seen, "module": SharedSegment.__module__}
    del pages
    seg.close()
    return result


def world_size_one(rank, world, group, params):
    """The ranks in params["ranks"] pass world_size=params["value"] (default 1) with the whole group."""
    world_size = params.get("value", 1) if rank in params["ranks"] else world
    return expect_error(rank, world, group, world_size=world_size)


def local_raise(rank, world, group, params):
    blocks = dict(BLOCKS)
    if rank == params["odd_rank"]:
        blocks["k"] = {"count": 0, "shape": (256, 64), "dtype": torch.bfloat16}
    return expect_error(rank, world, group, blocks=blocks)


def bad_int(rank, world, group, params):
    owner = -1 if rank == params["odd_rank"] else 0
    return expect_error(rank, world, group, owner_rank=owner)


def wrong_rank_id(rank, world, group, params):
    rank_id = (rank + 1) % world if rank == params["odd_rank"] else rank
    return expect_error(rank, world, group, rank_id=rank_id)


def alias(rank, world, group, params):
    if params["mode"] == "tp_group":
        seg = create_shared_segment("kv", BLOCKS, world, rank, tp_group=group)
        seg.tensors("k")[0].fill_(1)
        ok = bool(seg.tensors("k")[0][0, 0] == 1)
        seg.close()
        return {"error": None, "ok": ok}
    other = dist.new_group(list(range(world)), backend="gloo")
    if rank == params["odd_rank"]:
        return expect_error(rank, world, group, tp_group=other)
    return expect_error(rank, world, group)


def killed(rank, world, group, params):
    if rank == params["odd_rank"]:
        # Let the others leave the start-up barrier first, so that they meet
        # the death inside create_shared_segment, not in torch's own set-up.
        time.sleep(0.5)
        os._exit(17)  # dies before the segment's first collective
    return expect_error(rank, world, group)


def vmm(rank, world, group, params):
    """mmap=False through the fake AscendCL runtime: each rank on its own NPU."""
    os.environ["FAKE_ACL_CURRENT_DEVICE"] = str(rank)  # torch.npu.set_device(rank)
    seg = create_shared_segment("kv", BLOCKS, world, rank, device_id=rank, mmap=False, comm_group=group)
    try:
        seg.tensors("k")
        npu_error = None
    except SharedSegmentError as exc:
        npu_error = str(exc)
    k = seg.tensors("k", device="cpu")
    if rank == params["owner"]:
        for i, entry in enumerate(k):
            entry.fill_(i + 1)
        del entry
    dist.barrier(group)
    saw_owner = all(bool((t == i + 1).all()) for i, t in enumerate(k))
    info = seg.info()
    same_address = seg.device_base == seg.base_addr()
    del k
    dist.barrier(group)
    seg.close()
    return {"saw_owner": saw_owner, "npu_error": npu_error, "backend": info["backend"], "same_address": same_address}


def cuda_vmm(rank, world, group, params):
    """mmap=False on the fake CUDA driver: host views of the pinned pages every rank maps."""
    seg = create_shared_segment(
        "kv", BLOCKS, world, rank, owner_rank=params["owner"], device_id=rank % 2, comm_group=group, mmap=False
    )
    v = seg.tensors("v", device="cpu")
    v[rank].fill_(100 + rank)
    dist.barrier(group)
    saw_all = all(bool((v[r] == 100 + r).all()) for r in range(world))
    for view in seg.tensors("k", device="cpu") + v:
        view.sum()  # touch every page before PSS is read
    del view
    dist.barrier(group)
    pss = mapping_pss(seg.base_addr())
    dist.barrier(group)
    # Without CUDA in torch, the default (CUDA) views are refused, saying how to get host views.
    default_error = None
    try:
        seg.tensors("k")
    except SharedSegmentError as exc:
        default_error = str(exc)
    info = seg.info()
    same_address = seg.device_base == seg.base_addr()
    del v
    dist.barrier(group)
    seg.close()
    return {
        "saw_all": saw_all,
        "pss": pss,
        "total": info["alloc_size"],
        "backend": info["backend"],
        "accelerator": info["accelerator"],
        "same_address": same_address,
        "default_error": default_error,
    }


SCENARIOS = {
    f.__name__: f
    for f in (
        share,
        mismatch,
        declaration,
        same_size_dtypes,
        engine_native,
        world_size_one,
        local_raise,
        bad_int,
        wrong_rank_id,
        alias,
        killed,
        vmm,
        cuda_vmm,
    )
}


def main():
    scenario, rank, world, params = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    timeout = datetime.timedelta(seconds=params.get("group_timeout", 60))
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=rank,
        world_size=world,
        timeout=timeout,
    )
    dist.barrier()  # every rank is up before the scenario starts
    result = SCENARIOS[scenario](rank, world, dist.group.WORLD, params)
    print(json.dumps(result), flush=True)
    if scenario != "killed":
        dist.barrier()
    # Exit without the process group's teardown, which may wait on a dead peer.
    os._exit(0)


if __name__ == "__main__":
    main()
