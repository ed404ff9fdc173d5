# SPDX-License-Identifier: Apache-2.0
"""The main() of a rank worker script (align_worker.py, hosts_worker.py,
slots_worker.py, front_worker.py): argv is SCENARIO RANK WORLD PARAMS-JSON,
the rendezvous MASTER_ADDR/MASTER_PORT from the environment.  Joins a real
gloo group, runs the scenario, prints its result as one JSON line."""

import datetime
import json
import os
import sys

import torch.distributed as dist


def run(scenarios, no_barrier=(), group_timeout_s=60):
    """Run scenarios[argv[1]](rank, world, group, params) in a gloo group of
    its own; a scenario in @no_barrier leaves some rank dead or stopped, so
    no barrier closes it.  params["group_timeout"] overrides @group_timeout_s."""
    scenario, rank, world, params = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=params.get("group_timeout", group_timeout_s)),
    )
    dist.barrier()  # every rank is up before the scenario starts
    result = scenarios[scenario](rank, world, dist.group.WORLD, params)
    print(json.dumps(result), flush=True)
    if scenario not in no_barrier:
        dist.barrier()
    # Exit without the process group's teardown, which may wait on a dead peer.
    os._exit(0)
