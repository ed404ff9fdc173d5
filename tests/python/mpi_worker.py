# SPDX-License-Identifier: Apache-2.0
"""One mpirun rank of test_mpi.py (run as `python3 -m mpi4py`, so an exception aborts the job).

The owner writes, every rank reads and writes back.
"""

from mpi4py import MPI

from mooncake.shared_segment import create_shared_segment

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
seg = create_shared_segment(
    "mpi", {"page": {"count": world, "shape": (4096,), "dtype": "uint8"}}, world, rank, owner_rank=1, comm_group=comm
)
pages = seg.buffers("page")
if rank == 1:
    for i in range(world):
        pages[i][:] = bytes([i + 1]) * 4096
comm.Barrier()
ok = all(bytes(page) == bytes([i + 1]) * 4096 for i, page in enumerate(pages))
comm.Barrier()  # everyone has read before anyone writes back
pages[rank][0] = 200 + rank
comm.Barrier()
ok = ok and all(pages[r][0] == 200 + r for r in range(world))
del pages
comm.Barrier()
seg.close()
print(f"rank {rank}: {'ok' if ok else 'FAILED'}", flush=True)
