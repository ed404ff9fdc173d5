# SPDX-License-Identifier: Apache-2.0
"""The ranks of one collective call, and the hosts they span (private).

The collective over comm_group (a torch ProcessGroup, vLLM's GroupCoordinator
or an mpi4py communicator), the error consensus that makes every local
failure every rank's, and the plan of a group that spans hosts: which ranks
share which host's copy.  It never calls the native module; the segments it
releases on failure are handed to it.  mooncake.shared_segment is the public
module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import _segment
from ._shared_segment_base import _TORCH_PACKAGE_HINT, SharedSegmentError, _an_int, dist
from ._shared_segment_layout import _Declaration, _declaration_failures


def _select_comm_group(comm_group: Any, tp_group: Any) -> Tuple[Any, Optional[str]]:
    """The group to use, and the alias error if both were given and differ."""
    if tp_group is None:
        return comm_group, None
    if comm_group is None or comm_group is tp_group:
        return tp_group, None
    return comm_group, "pass only comm_group; tp_group is a deprecated alias of comm_group"


class _Collective:
    """All-gather over a torch ProcessGroup, a vLLM GroupCoordinator or an mpi4py communicator."""

    def __init__(self, group: Any) -> None:
        cpu_group = getattr(group, "cpu_group", None)
        self.group = cpu_group if cpu_group is not None else group
        self.is_mpi = hasattr(self.group, "Get_size") and hasattr(self.group, "allgather")
        if not self.is_mpi and dist is None:
            raise SharedSegmentError(
                "comm_group is not an mpi4py communicator and torch is not installed; "
                f"pass an mpi4py communicator or {_TORCH_PACKAGE_HINT}"
            )

    def size(self) -> int:
        if self.is_mpi:
            return int(self.group.Get_size())
        return int(dist.get_world_size(self.group))

    def rank(self) -> int:
        if self.is_mpi:
            return int(self.group.Get_rank())
        return int(dist.get_rank(self.group))

    def allgather(self, obj: Any) -> List[Any]:
        if self.is_mpi:
            return list(self.group.allgather(obj))
        out: List[Any] = [None] * self.size()
        dist.all_gather_object(out, obj, group=self.group)
        return out


def _describe(exc: BaseException) -> str:
    """A failure as the consensus carries it: RuntimeErrors by message, others with their type."""
    if isinstance(exc, RuntimeError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _errno_of(exc: Optional[BaseException]) -> Optional[int]:
    value = getattr(exc, "errno", None)
    return value if isinstance(value, int) else None


def _release(native: Any) -> None:
    """Free a native segment now rather than at garbage collection."""
    close = getattr(native, "close", None)
    if native is not None and close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - a failing release must not hide the real error
            pass


def _check_group(collective: _Collective, world_size: int, rank_id: int) -> None:
    """Before any collective: the group is the one world_size and rank_id describe."""
    size, rank = collective.size(), collective.rank()
    if size != world_size:
        raise SharedSegmentError(
            f"world_size is {world_size} but comm_group has {size} ranks; pass world_size=group size"
        )
    if rank != rank_id:
        raise SharedSegmentError(
            f"rank_id is {rank_id} but this process is rank {rank} of comm_group; "
            "pass rank_id=the rank inside comm_group (blobs are exchanged in group order)"
        )


class _Group:
    """The ranks of one create_shared_segment call: local errors become everyone's."""

    def __init__(self, world_size: int, rank_id: int, collective: Optional[_Collective]) -> None:
        self.world_size = world_size
        self.rank_id = rank_id
        self.collective = collective

    def consensus(
        self,
        phase: str,
        error: Optional[BaseException],
        native: Any,
        declaration: Optional[_Declaration] = None,
    ) -> None:
        """Raise on every rank if any rank failed @phase or declared differently; releases @native first.

        Every rank computes the message from the same gathered entries, so
        every rank raises the same text.  Ranks are named by their place in
        comm_group, which is rank_id once the group check passed.
        """
        if self.collective is None:
            if error is not None:
                _release(native)
                raise SharedSegmentError(_describe(error), _errno_of(error)) from error
            return
        failed = None if error is None else (_describe(error), _errno_of(error))
        entries = self.exchange(phase, (failed, declaration), native)
        failures = [(rank, entry[0][0], entry[0][1]) for rank, entry in enumerate(entries) if entry[0]]
        if not failures:
            failures = _declaration_failures([entry[1] for entry in entries])
        if failures:
            _release(native)
            if self.world_size == 1 and len(entries) == 1:
                # As upstream, which ignores the group when world_size == 1: the error verbatim.
                raise SharedSegmentError(failures[0][1], failures[0][2]) from error
            message = "; ".join(f"rank {rank}: {text}" for rank, text, _ in failures)
            raise SharedSegmentError(f"Shared segment {phase} failed: {message}", failures[0][2]) from error

    def exchange(self, phase: str, obj: Any, native: Any) -> List[Any]:
        if self.collective is None:
            return [obj]
        try:
            return self.collective.allgather(obj)
        except Exception as exc:
            _release(native)
            raise SharedSegmentError(
                f"Shared segment {phase} failed: the collective over comm_group failed "
                f"({_describe(exc)}); a rank may have died or timed out"
            ) from exc


# --- Groups that span hosts ---------------------------------------------------
#
# Segments never span hosts; groups may.  Every rank asks the C library for
# its host's id (mooncake_segment_host_id: the boot id, as complete() tells
# hosts apart), one all-gather over the whole group tells the hosts apart, and
# each host's ranks form a group of the C API of their own: local world size,
# rank and owner, and only that host's blobs at complete.  Declarations and
# every failure still go through the consensus over the whole group.


def _host_id() -> str:
    """This host's id as the C library tells hosts apart; "" when unreadable (one unknown host)."""
    ident = _segment.host_id()
    return ident.hex() if ident is not None else ""


@dataclass(frozen=True)
class _HostGroup:
    """The ranks of comm_group on this rank's host, in group order."""

    ranks: Tuple[int, ...]  # group ranks on this host, ascending
    owner: int  # the group rank that owns this host's copy
    host_count: int  # hosts the whole group spans

    def local(self, rank: int) -> int:
        return self.ranks.index(rank)

    def info(self) -> Dict[str, Any]:
        return {"local_ranks": list(self.ranks), "local_owner": self.owner, "host_count": self.host_count}


# What ranks on different hosts must agree on besides the declaration (within
# a host the C library's fingerprint compares them).
_SETTING_NAMES = ("owner_rank", "mmap", "host_register", "hugetlb", "slots")


def _host_group(host_ids: List[str], rank_id: int, owner_rank: int) -> _HostGroup:
    """This rank's host group, from every rank's host id in group order."""
    mine = host_ids[rank_id]
    ranks = tuple(r for r, host in enumerate(host_ids) if host == mine)
    owner = owner_rank if host_ids[owner_rank] == mine else ranks[0]
    return _HostGroup(ranks, owner, len(set(host_ids)))


def _settings_error(settings: List[Any], rank_id: int) -> Optional[str]:
    """How this rank's settings differ from rank 0's, when the group spans hosts."""
    ours, reference = settings[rank_id], settings[0]
    found = [
        f"{name} {a!r} on rank {rank_id}, {b!r} on rank 0"
        for name, a, b in zip(_SETTING_NAMES, ours, reference)
        if a != b
    ]
    if not found:
        return None
    return f"Shared segment settings of rank {rank_id} differ across hosts: " + ", ".join(found)


def _plan_hosts(
    group: "_Group", error: Optional[BaseException], owner_rank: Any, settings: Tuple[Any, ...]
) -> Tuple[Optional[_HostGroup], Optional[str]]:
    """One all-gather over the whole group (every rank joins, failed or not): this rank's host group.

    Returns (host group, error text); the host group is None when this rank
    already failed, the error text when the group's hosts cannot be planned.
    """
    # A group without a collective is one rank on one host: no id to ask for (and
    # upstream's test harness gives a native module with SharedSegment alone).
    entries = [("", settings)]
    if group.collective is not None:
        entries = group.exchange("create", (_host_id(), settings), None)
    if error is not None:
        return None, None
    host_ids = [entry[0] for entry in entries]
    if len(set(host_ids)) == 1:
        return _HostGroup(tuple(range(len(entries))), owner_rank, 1), None  # one host: the C library checks
    if _an_int(owner_rank) is None or not 0 <= owner_rank < len(entries):
        return None, (
            f"owner_rank must be an int below world_size {len(entries)} (a rank of comm_group), got {owner_rank!r}"
        )
    return _host_group(host_ids, group.rank_id, owner_rank), _settings_error([e[1] for e in entries], group.rank_id)
