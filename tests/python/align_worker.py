# SPDX-License-Identifier: Apache-2.0
"""One rank of a real torch.distributed (gloo) group for test_alignment.py: aligned blocks.

Usage: align_worker.py SCENARIO RANK WORLD PARAMS_JSON; prints one JSON line.
"""

import torch
import torch.distributed as dist

from mooncake.shared_segment import SharedSegmentError, create_shared_segment
from gloo_scenarios import run  # beside this script: the group, the scenario, the result line

# Sizes that no alignment divides: every block is padded.
BLOCKS = {
    "k": {"count": 6, "shape": (1000, 3), "dtype": torch.bfloat16},
    "v": {"count": 6, "shape": (777,), "dtype": torch.float32},
}


def aligned(rank, world, group, params):
    """Every rank creates with the same alignment, writes its own entries and reads every rank's."""
    alignment = params["alignment"]
    seg = create_shared_segment("aligned", BLOCKS, world, rank, comm_group=group, alignment=alignment)
    k, v = seg.tensors("k"), seg.tensors("v")
    k[rank].fill_(rank + 1)
    v[rank].fill_(-(rank + 1))
    dist.barrier(group)
    saw_all = all(bool((k[r] == r + 1).all()) and bool((v[r] == -(r + 1)).all()) for r in range(world))
    info = seg.info()
    base = seg.base_addr()
    result = {
        "base_mod": base % alignment,
        "tensor_mods": [t.data_ptr() % alignment for t in k + v],
        "offsets": {b: [seg.offset(b, i) for i in range(6)] for b in seg.blocks},
        "stride": seg.stride,
        "size": seg.total_size(),
        "info_alignment": info["alignment"],
        "block_alignment": info["block_alignment"],
        "ranges": [(address - base, length) for address, length in seg.register_ranges(3 * seg.stride, "layer")],
        "saw_all": saw_all,
    }
    del k, v
    dist.barrier(group)
    seg.close()
    return result


def mismatch(rank, world, group, params):
    """Rank odd_rank declares another alignment: every rank must raise, naming it."""
    alignment = params["odd"] if rank == params["odd_rank"] else params["alignment"]
    try:
        seg = create_shared_segment("aligned", BLOCKS, world, rank, comm_group=group, alignment=alignment)
    except SharedSegmentError as exc:
        return {"error": str(exc)}
    seg.close()
    return {"error": None}


SCENARIOS = {"aligned": aligned, "mismatch": mismatch}


def main():
    run(SCENARIOS)


if __name__ == "__main__":
    main()
