# SPDX-License-Identifier: Apache-2.0
"""Two forked processes share one segment, with no torch and no MPI.

    python3 two_ranks.py [MODULE]     MODULE: mooncake.shared_segment (default) or mooncake_segment

The ranks all-gather through a pair of pipes (a duck-typed mpi4py communicator,
which create_shared_segment accepts).  Rank 0 writes after create; rank 1 must
read those bytes, then rank 1 writes and rank 0 must read them: the pages are
one physical copy, not two.  Prints the module's file and exits 0 on success.
"""

import importlib
import os
import pickle
import sys


class PipeGroup:
    """all-gather between two processes over two pipes."""

    def __init__(self, rank: int, read_fd: int, write_fd: int) -> None:
        self.rank, self.read_fd, self.write_fd = rank, read_fd, write_fd

    def Get_size(self) -> int:  # noqa: N802 - mpi4py's name
        return 2

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's name
        return self.rank

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = os.read(self.read_fd, n - len(data))
            if not chunk:
                raise EOFError("the other rank exited")
            data += chunk
        return data

    def allgather(self, obj: object) -> list:
        data = pickle.dumps(obj)
        os.write(self.write_fd, len(data).to_bytes(8, "little") + data)
        other = pickle.loads(self._read(int.from_bytes(self._read(8), "little")))
        return [obj, other] if self.rank == 0 else [other, obj]


def rank_main(module, group: PipeGroup) -> None:
    blocks = {"page": {"count": 2, "shape": (4096,), "dtype": "uint8"}}
    seg = module.create_shared_segment("two-ranks", blocks, 2, group.rank, comm_group=group)
    page = seg.buffers("page")[1]
    if group.rank == 0:
        page[:12] = b"from rank 0!"
    group.allgather("written by 0")
    if group.rank == 1:
        assert bytes(page[:12]) == b"from rank 0!", bytes(page[:12])
        page[12:24] = b"from rank 1!"
    group.allgather("written by 1")
    assert bytes(page[:24]) == b"from rank 0!from rank 1!", bytes(page[:24])
    del page
    seg.close()


def main() -> int:
    module = importlib.import_module(sys.argv[1] if len(sys.argv) > 1 else "mooncake.shared_segment")
    print(module.__file__)
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            rank_main(module, PipeGroup(1, to_child, from_child))
        except BaseException as exc:  # report, then exit non-zero: the parent's wait sees it
            print(f"rank 1: {type(exc).__name__}: {exc}", file=sys.stderr)
            os._exit(1)
        os._exit(0)
    os.close(to_child)
    os.close(from_child)
    try:
        rank_main(module, PipeGroup(0, to_parent, from_parent))
    finally:
        os.close(from_parent)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        print("rank 1 failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
