# SPDX-License-Identifier: Apache-2.0
"""One physical copy of host memory, shared by every rank of a process group.

Drop-in compatible with Mooncake's ``mooncake.shared_segment``::

    from mooncake.shared_segment import create_shared_segment

    seg = create_shared_segment(
        "kv", {"k": {"count": 61, "shape": (1024, 576), "dtype": torch.bfloat16}},
        world_size=tp, rank_id=rank, comm_group=group)
    k_views = seg.tensors("k")          # 61 CPU tensors over the shared pages

The owner rank allocates the pages once; every rank maps them at an address
of its own, so ranks agree on the byte layout, not on addresses.  The layout
is computed here from the block declarations and folded into the segment's
name, so ranks that disagree on any block fail together.

Torch is optional: importing, :func:`shared_segment_supported`,
:func:`create_shared_segment` and :meth:`SharedSegment.buffers` work without
it; :meth:`SharedSegment.tensors` needs it.

Every failure, on any rank, reaches every rank: each phase ends with an error
consensus over ``comm_group``, so no rank is left blocked in a collective
because another one raised.

A ``comm_group`` may span hosts: each host's ranks then share one copy of
their own (owner_rank on its host, the lowest rank elsewhere), with the same
layout everywhere; :func:`shared_segment_room` sizes that layout from what
every host can really take.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

try:
    import torch
    import torch.distributed as dist
except ModuleNotFoundError as _exc:  # torch is optional; other import errors are real
    if _exc.name != "torch":
        raise
    torch = None  # type: ignore[assignment]  # the optional module is absent
    dist = None  # type: ignore[assignment]

from . import _segment as _native  # relative: mooncake_segment may load this file under its own name

__all__ = [
    "SharedSegment",
    "SharedSegmentError",
    "create_shared_segment",
    "shared_segment_supported",
]

#: Every block starts on this boundary (relative to the segment's base).
alignment = 4096

_TORCH_PACKAGE_HINT = (
    "install python3-torch (Debian/Ubuntu: apt install python3-torch; "
    "Fedora: dnf install python3-torch; pip: pip install torch)"
)

# Element sizes by torch's dtype name, so that layouts need no torch.
_DTYPE_SIZES: Dict[str, int] = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "complex32": 4,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
}
_DTYPE_ALIASES: Dict[str, str] = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "short": "int16",
    "int": "int32",
    "long": "int64",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
    "bool_": "bool",
}
_NAME_SEPARATORS = (":", ";", "|")
# The C library's largest segment (64 TiB), read once: the layout checks against it.
_MAX_SIZE: int = _native.MAX_SIZE


class SharedSegmentError(RuntimeError):
    """Raised for every failure the helper detects or relays.

    ``errno`` holds the C library's errno when one is known, else None.
    """

    def __init__(self, message: str, errno: Optional[int] = None) -> None:
        super().__init__(message)
        self.errno = errno


@dataclass(frozen=True)
class _BlockSpec:
    count: int
    shape: Tuple[int, ...]
    dtype: Any
    nbytes: int
    dtype_name: str = ""
    torch_dtype: Any = None  # the installed torch's dtype, None without torch


def _accepted_dtypes() -> str:
    return ", ".join(sorted(_DTYPE_SIZES))


def _dtype_name(name: str, dtype: Any) -> str:
    """Torch's name of @dtype: a torch dtype, a native-endian numpy dtype or a name."""
    if dtype is None:
        raise SharedSegmentError(
            f"Block {name!r} has dtype None: name one (a torch dtype, a numpy dtype or one of " f"{_accepted_dtypes()})"
        )
    if torch is not None and isinstance(dtype, torch.dtype):
        return str(dtype)[len("torch.") :]
    if isinstance(dtype, str):
        return dtype[len("torch.") :] if dtype.startswith("torch.") else dtype
    try:
        import numpy
    except ModuleNotFoundError:
        return str(dtype)  # numpy dtypes are optional too
    try:
        described = numpy.dtype(dtype)
    except TypeError:
        return str(dtype)
    if not described.isnative:
        raise SharedSegmentError(
            f"Block {name!r} has the byte-swapped numpy dtype {described.str!r}: the pages are read in "
            f"this machine's byte order, so declare {described.newbyteorder('=').name} and swap the bytes "
            "where they are produced"
        )
    return described.name


def _resolve_dtype(name: str, dtype: Any) -> Tuple[str, int, Any]:
    """@dtype's name in the layout table, its element size and the installed torch's dtype."""
    text = _dtype_name(name, dtype)
    text = _DTYPE_ALIASES.get(text, text)
    if text not in _DTYPE_SIZES:
        why = ""
        if text.startswith("qu") or text.startswith("qint"):
            why = " (a quantized tensor needs a quantizer that a view of raw pages cannot carry)"
        raise SharedSegmentError(
            f"Block {name!r} has an unsupported dtype {dtype!r}{why}: use a torch dtype, a numpy dtype "
            f"or a name, one of {_accepted_dtypes()}"
        )
    torch_dtype = None
    if torch is not None:
        torch_dtype = getattr(torch, text, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise SharedSegmentError(
                f"Block {name!r} has dtype {text}, which the installed torch {torch.__version__} does not "
                f"have, so tensors() could not view it: upgrade torch, or declare the block as uint8"
                + (f" with a last dimension {_DTYPE_SIZES[text]} times longer" if _DTYPE_SIZES[text] > 1 else "")
                + " and reinterpret the bytes"
            )
    return text, _DTYPE_SIZES[text], torch_dtype


def _an_int(value: Any) -> Optional[int]:
    """@value as an int if it is one (an int, a numpy or torch integer), else None; never a bool."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _parse_block(name: Any, spec: Mapping[str, Any]) -> _BlockSpec:
    if not isinstance(name, str) or not name or any(s in name for s in _NAME_SEPARATORS):
        raise SharedSegmentError(
            f"Block name {name!r} must be a non-empty str without ':', ';' or '|' "
            "(they separate the fields of the layout tag)"
        )
    try:
        count_value, shape_value, dtype = spec["count"], spec["shape"], spec["dtype"]
        dims = list(shape_value)
    except (KeyError, TypeError):
        raise SharedSegmentError(f"Block {name!r} needs count, shape and dtype") from None
    # Refuse what int() would silently coerce: 1.5 -> 1, "12" -> (1, 2), (2.7, 3) -> (2, 3).
    count = _an_int(count_value)
    if count is None:
        raise SharedSegmentError(f"Block {name!r} needs integer count and shape: count is {count_value!r}")
    shape_ints = [_an_int(d) for d in dims]
    if isinstance(shape_value, (str, bytes)) or any(d is None for d in shape_ints):
        raise SharedSegmentError(
            f"Block {name!r} needs integer count and shape: shape is {shape_value!r}, "
            "pass a tuple of ints such as (1024, 576)"
        )
    shape = tuple(int(d) for d in shape_ints)  # type: ignore[arg-type]  # checked above
    if count <= 0:
        raise SharedSegmentError(f"Block {name!r} needs a positive count")
    if not shape or any(d <= 0 for d in shape):
        raise SharedSegmentError(f"Block {name!r} needs a positive shape")
    dtype_name, element_size, torch_dtype = _resolve_dtype(name, dtype)
    nbytes = element_size * math.prod(shape)
    if nbytes > _MAX_SIZE:
        raise SharedSegmentError(
            f"Block {name!r} entries are {nbytes} bytes each, above the largest segment "
            f"({_MAX_SIZE} bytes): lower its shape"
        )
    return _BlockSpec(count, shape, dtype, nbytes, dtype_name, torch_dtype)


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def _build_layout(
    blocks: Mapping[str, Mapping[str, Any]],
) -> Tuple[Dict[str, _BlockSpec], Dict[str, int], int, int, str]:
    """Specs, offsets, stride, total and the layout tag, in sorted-name order."""
    if not isinstance(blocks, Mapping):
        raise SharedSegmentError("blocks must be a mapping of block name to {count, shape, dtype}")
    specs = {}
    for name in sorted(blocks, key=str):
        specs[name] = _parse_block(name, blocks[name])
    if not specs:
        raise SharedSegmentError("Shared segment needs at least one block")
    offsets, offset = {}, 0
    for name, spec in specs.items():
        offsets[name] = offset
        offset += _align_up(spec.nbytes, alignment)
    stride = offset
    largest = max(specs, key=lambda name: specs[name].count)
    total = stride * specs[largest].count
    if total > _MAX_SIZE:
        raise SharedSegmentError(
            f"Block {largest!r} has count {specs[largest].count}, which makes the segment {total} bytes "
            f"({stride} bytes per entry), above the largest segment ({_MAX_SIZE} bytes): lower its count"
        )
    tag = ";".join(
        f"{name}:{spec.count}:{'x'.join(str(d) for d in spec.shape)}:torch.{spec.dtype_name}:{spec.nbytes}"
        for name, spec in specs.items()
    )
    return specs, offsets, stride, total, tag


def _select_comm_group(comm_group: Any, tp_group: Any) -> Tuple[Any, Optional[str]]:
    """The group to use, and the alias error if both were given and differ."""
    if tp_group is None:
        return comm_group, None
    if comm_group is None or comm_group is tp_group:
        return tp_group, None
    return comm_group, "pass only comm_group; tp_group is a deprecated alias of comm_group"


def _default_device_id() -> int:
    if torch is None:
        return 0
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        try:
            return int(accelerator.current_device_index())
        except (RuntimeError, AttributeError):
            pass
    npu = getattr(torch, "npu", None)
    if npu is not None:
        try:
            if npu.is_available():
                return int(npu.current_device())
        except (RuntimeError, AttributeError):
            pass
    # Not in upstream (whose registration is Ascend-only): without
    # torch.accelerator (torch < 2.6), a CUDA rank's device is its current one.
    cuda = getattr(torch, "cuda", None)
    if cuda is not None:
        try:
            if cuda.is_available():
                return int(cuda.current_device())
        except (RuntimeError, AttributeError):
            pass
    return 0


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


# A declaration as ranks compare it: the name and, per block, (count, shape, dtype name).
_Declaration = Tuple[str, Tuple[Tuple[str, int, Tuple[int, ...], str], ...]]
_MAX_LISTED_DIFFERENCES = 10


def _declaration(name: str, specs: Mapping[str, _BlockSpec]) -> _Declaration:
    return name, tuple((block, s.count, s.shape, s.dtype_name) for block, s in specs.items())


def _differences(mine: _Declaration, rank: int, theirs: _Declaration, their_rank: int) -> List[str]:
    """What rank @rank declares differently from rank @their_rank, field by field."""
    found = []
    if mine[0] != theirs[0]:
        found.append(f"name {mine[0]!r} on rank {rank}, {theirs[0]!r} on rank {their_rank}")
    my_blocks = {block: fields for block, *fields in mine[1]}
    their_blocks = {block: fields for block, *fields in theirs[1]}
    for block in sorted(set(my_blocks) | set(their_blocks)):
        if block not in their_blocks:
            found.append(f"block {block!r} is declared on rank {rank}, not on rank {their_rank}")
        elif block not in my_blocks:
            found.append(f"block {block!r} is declared on rank {their_rank}, not on rank {rank}")
        else:
            for field, a, b in zip(("count", "shape", "dtype"), my_blocks[block], their_blocks[block]):
                if a != b:
                    found.append(f"block {block!r} {field} {a} on rank {rank}, {b} on rank {their_rank}")
    if not found:  # same fields; only the layout order can differ
        order = [[b for b, *_ in d[1]] for d in (mine, theirs)]
        found.append(f"block order {order[0]} on rank {rank}, {order[1]} on rank {their_rank}")
    if len(found) > _MAX_LISTED_DIFFERENCES:
        found[_MAX_LISTED_DIFFERENCES:] = [f"and {len(found) - _MAX_LISTED_DIFFERENCES} more"]
    return found


def _declaration_failures(declarations: List[Optional[_Declaration]]) -> List[Tuple[int, str, Optional[int]]]:
    """Every rank whose declaration differs from the most common one (the lowest rank's on a tie)."""
    known = [d for d in declarations if d is not None]
    if not known:
        return []
    reference = max(known, key=lambda d: (known.count(d), -declarations.index(d)))
    reference_rank = declarations.index(reference)
    failures: List[Tuple[int, str, Optional[int]]] = []
    for rank, declaration in enumerate(declarations):
        if declaration is not None and declaration != reference:
            detail = ", ".join(_differences(declaration, rank, reference, reference_rank))
            failures.append(
                (
                    rank,
                    # Upstream's native text, code included, so that its callers' matches still hold.
                    f"InvalidArgument: Shared segment declaration of rank {rank} differs from the local one: {detail}",
                    None,
                )
            )
    return failures


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
# Segments never span hosts; groups may.  Every rank reads its host's boot id
# where the C library does (under $MOONCAKE_SEGMENT_HOST_ROOT), one all-gather
# over the whole group tells the hosts apart, and each host's ranks form a
# group of the C API of their own: local world size, rank and owner, and only
# that host's blobs at complete.  Declarations and every failure still go
# through the consensus over the whole group.

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _host_id() -> str:
    """This host's boot id, read as the C library reads it; "" when unreadable (one unknown host)."""
    root = os.environ.get("MOONCAKE_SEGMENT_HOST_ROOT", "")
    try:
        with open((root if root != "/" else "") + _BOOT_ID, encoding="ascii") as f:
            return f.read().strip().lower()
    except (OSError, UnicodeDecodeError):
        return ""


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
_SETTING_NAMES = ("owner_rank", "mmap", "host_register", "hugetlb")


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
    entries = [(_host_id(), settings)]
    if group.collective is not None:
        entries = group.exchange("create", entries[0], None)
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


def shared_segment_room(comm_group: Any = None, mmap: bool = True, hugetlb: bool = False) -> int:
    """Bytes a shared segment of this kind can take: on this host, or on every host of ``comm_group``.

    The figures are those the owner's room check in create reads (the C
    library's ``mooncake_segment_room()``): the memory cgroup's room, clean
    page cache counting, and MemAvailable + SwapFree; with ``hugetlb`` the
    free, unreserved HugeTLB pool.  A segment of this many bytes passes the
    check; one page more is refused.  With ``comm_group`` (collective, like
    :func:`create_shared_segment`) every rank gets the minimum over all ranks,
    hence over all hosts: size one layout from it and it fits everywhere.
    Memory other programs take before create is not there then.
    """
    collective = _Collective(comm_group) if comm_group is not None else None
    room: Optional[int] = None
    error: Optional[BaseException] = None
    try:
        for flag, value in (("mmap", mmap), ("hugetlb", hugetlb)):
            if not isinstance(value, bool):
                raise SharedSegmentError(f"{flag} must be True or False, got {value!r}")
        room = int(_native.room(mmap=mmap, hugetlb=hugetlb))
    except Exception as exc:  # every local failure joins the consensus
        error = exc
    if collective is None:
        if error is not None:
            raise SharedSegmentError(_describe(error), _errno_of(error)) from error
        return int(room)  # type: ignore[arg-type]  # set when no error
    failed = None if error is None else (_describe(error), _errno_of(error))
    try:
        entries = collective.allgather((failed, room))
    except Exception as exc:
        raise SharedSegmentError(
            f"Shared segment room failed: the collective over comm_group failed ({_describe(exc)}); "
            "a rank may have died or timed out"
        ) from exc
    failures = [(rank, entry[0]) for rank, entry in enumerate(entries) if entry[0]]
    if failures:
        message = "; ".join(f"rank {rank}: {text}" for rank, (text, _) in failures)
        raise SharedSegmentError(f"Shared segment room failed: {message}", failures[0][1][1]) from error
    return min(int(entry[1]) for entry in entries)


def _check_world_size(world_size: Any) -> None:
    if _an_int(world_size) is None:
        raise SharedSegmentError(f"world_size must be an int (the number of ranks), got {world_size!r}")
    if world_size < 1:
        raise SharedSegmentError(
            f"world_size must be at least 1 (the number of ranks sharing the segment, comm_group's size), "
            f"got {world_size}"
        )


def _check_arguments(name: Any, rank_id: Any, flags: Mapping[str, Any]) -> None:
    """Refuse what the native call would silently coerce: None names, 'no' as a flag."""
    if not isinstance(name, str):
        raise SharedSegmentError(f"name must be a str (it names the segment in its fingerprint), got {name!r}")
    if _an_int(rank_id) is None:
        raise SharedSegmentError(f"rank_id must be an int (this rank's place in comm_group), got {rank_id!r}")
    for flag, value in flags.items():
        if not isinstance(value, bool) and type(value).__name__ != "bool_":  # numpy.bool_ is a bool too
            raise SharedSegmentError(f"{flag} must be True or False, got {value!r}")


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


def _capability_error(mmap: bool, host_register: bool, hugetlb: bool, device_id: Optional[int]) -> Optional[str]:
    """Upstream's message when this kind of segment is unsupported, then the C library's reason and fix."""
    if shared_segment_supported(mmap=mmap, host_register=host_register, hugetlb=hugetlb):
        return None
    if not mmap:
        message = "This mooncake build has no VMM backend for shared segments"
    elif host_register:
        message = "This mooncake build cannot HostRegister shared-segment pages"
    elif hugetlb:
        message = "This host cannot back shared segments with HugeTLB pages (no hugetlbfs memfd support)"
    else:
        message = "This mooncake build has no mmap shared-segment backend"
    why_unsupported = getattr(_native.SharedSegment, "why_unsupported", None)
    if why_unsupported is not None:
        device = _default_device_id() if device_id is None else device_id
        reason = why_unsupported(mmap, host_register, hugetlb, device if _an_int(device) is not None else 0)
        if reason:
            message = f"{message}: {reason}"
    return message


def shared_segment_supported(mmap: bool = True, host_register: bool = False, hugetlb: bool = False) -> bool:
    """Whether this build and this host can create such a segment (no torch needed)."""
    return bool(_native.SharedSegment.supported(mmap, host_register, hugetlb))


class _CudaArray:
    """A byte range of registered pages at their device address (__cuda_array_interface__ v3)."""

    def __init__(self, holder: memoryview, device_ptr: int, nbytes: int) -> None:
        self._holder = holder
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (device_ptr, False),
            "strides": None,
            "version": 3,
        }


class SharedSegment:
    """One rank's view of a shared segment, made by :func:`create_shared_segment`.

    Views (:meth:`tensors`, :meth:`buffers`) and everything derived from them
    keep the mapping alive; :meth:`close` releases it deterministically once
    no view remains (BufferError otherwise).  Use :meth:`tensors`; two ways
    around it lose that protection:

    - ``t.share_memory_()`` (torch.multiprocessing queues call it) moves ``t``
      to new storage: its writes no longer reach the segment.  Send workers
      (block, index) and call :meth:`tensors` there.
    - ``torch.frombuffer(seg.buffers(block)[i])`` then ``release()`` of that
      memoryview: nothing holds the mapping any more, so :meth:`close` unmaps
      it under the tensor.  Never release a memoryview a tensor is built on.

    One segment is not for concurrent use: while a thread is inside a call
    that releases the GIL (the native complete() during creation, :meth:`info`), calls from other threads
    that would race with it raise RuntimeError naming that call.
    """

    def __init__(
        self,
        native: Any,
        specs: Mapping[str, _BlockSpec],
        offsets: Mapping[str, int],
        stride: int,
        device_id: int,
        host_group: Optional[_HostGroup] = None,
    ) -> None:
        self._native = native
        self._host_group = host_group
        self._specs = dict(specs)
        self._offsets = dict(offsets)
        self._stride = stride
        self._device_id = device_id
        # What the segment got at create, read once: tensors() must not ask info(), which reads
        # the residency from /proc/self/smaps in time proportional to the segment.
        facts = native.facts()
        self.device_base = int(facts["device_addr"]) or None
        self._accelerator = str(facts["accelerator"]) if self.device_base is not None else ""
        self._backend = str(facts["backend"])

    def _spec(self, block: str) -> _BlockSpec:
        spec = self._specs.get(block)
        if spec is None:
            raise SharedSegmentError(f"Unknown shared segment block {block!r}")
        return spec

    def _entry_offsets(self, block: str) -> List[int]:
        spec, base = self._spec(block), self._offsets[block]
        return [base + i * self._stride for i in range(spec.count)]

    def buffers(self, block: str) -> List[memoryview]:
        """The block's entries as writable memoryviews of ``nbytes`` each (no torch needed).

        Each holds the mapping until it is dropped or released; a tensor built
        on one with ``torch.frombuffer`` does not survive its ``release()``:
        prefer :meth:`tensors`.
        """
        spec = self._spec(block)
        return [self._native.view(offset, spec.nbytes) for offset in self._entry_offsets(block)]

    def tensors(self, block: str, device: Optional[str] = None) -> List["torch.Tensor"]:
        """The block's entries as zero-copy tensors of the declared shape and dtype.

        By default CPU tensors over the shared pages; when the segment was
        created with ``host_register=True`` on CUDA, torch sees them as pinned,
        so ``non_blocking=True`` copies are asynchronous.  ``device="cuda"``
        gives CUDA tensors over the registered pages' device address instead.
        A CUDA ``mmap=False`` segment (pinned host memory the GPU maps) gives
        CUDA tensors by default, as an Ascend one gives NPU tensors, and CPU
        tensors over the same pages with ``device="cpu"``.
        New views on every call; each keeps the segment mapped for as long as
        it, or any tensor derived from it, is alive (not a copy made by
        ``share_memory_()``, which no longer writes to the segment).  The cost
        does not depend on the segment's size: nothing is read from the kernel.
        """
        spec = self._spec(block)
        if torch is None:
            raise SharedSegmentError(
                f"PyTorch is required to create shared-segment tensor views; {_TORCH_PACKAGE_HINT}"
            )
        dtype = spec.torch_dtype if spec.torch_dtype is not None else getattr(torch, spec.dtype_name)
        # As upstream: the views of a segment registered with Ascend are NPU tensors.
        if (device is None and self._accelerator == "ascend") or (device is not None and str(device).startswith("npu")):
            return self._npu_tensors(spec, dtype, self._entry_offsets(block))
        if (device is None and self._backend == "cuda-vmm") or (device is not None and str(device).startswith("cuda")):
            return self._cuda_tensors(spec, dtype, str(device or "cuda"), self._entry_offsets(block))
        if device is not None and str(device) != "cpu":
            raise SharedSegmentError(f"tensors(device={device!r}): only 'cpu', 'cuda' and 'npu' views are available")
        views = []
        for offset in self._entry_offsets(block):
            # frombuffer over a memoryview: the tensor's storage holds the
            # memoryview, which holds an export of the native segment.
            tensor = torch.frombuffer(self._native.view(offset, spec.nbytes), dtype=dtype).view(spec.shape)
            setattr(tensor, "_mooncake_segment", self)  # upstream's attribute, kept for its callers
            views.append(tensor)
        return views

    def _npu_tensors(self, spec: _BlockSpec, dtype: Any, offsets: List[int]) -> List["torch.Tensor"]:
        if self.device_base is None or self._accelerator != "ascend":
            raise SharedSegmentError(
                "NPU tensor views need a segment registered with Ascend: create it with host_register=True"
            )
        try:
            import torch_npu
        except ModuleNotFoundError:
            raise SharedSegmentError("torch_npu is required to expose device-mapped shared-segment tensors") from None
        device = torch.device(f"npu:{self._device_id}")
        element = torch.empty(0, dtype=dtype).element_size()
        strides: List[int] = []
        step = 1
        for dim in reversed(spec.shape):
            strides.insert(0, step)
            step *= dim
        views = []
        for offset in offsets:
            storage = torch_npu._C._construct_storage_from_data_pointer(self.device_base + offset, device, spec.nbytes)
            tensor = torch.empty(0, dtype=dtype, device=device).set_(storage, 0, spec.shape, tuple(strides))
            assert tensor.numel() * element == spec.nbytes
            # As upstream: the view keeps the segment; tensors derived from it do not (keep the segment).
            setattr(tensor, "_mooncake_segment", self)
            views.append(tensor)
        return views

    def _cuda_tensors(self, spec: _BlockSpec, dtype: Any, device: str, offsets: List[int]) -> List["torch.Tensor"]:
        if self.device_base is None or self._accelerator != "cuda":
            raise SharedSegmentError(
                "CUDA tensor views need a segment registered with CUDA: create it with host_register=True"
                " (or mmap=False for pinned memory every GPU maps)"
            )
        if not torch.cuda.is_available():
            raise SharedSegmentError(
                "CUDA tensor views need a torch built with CUDA and a visible GPU"
                + (
                    "; tensors(block, device='cpu') gives host views of the same pages"
                    if self._backend == "cuda-vmm"
                    else ""
                )
            )
        if device == "cuda":
            device = f"cuda:{self._device_id}"
        views = []
        for offset in offsets:
            # The interface object holds a memoryview (an export of the native
            # segment); torch keeps the object for as long as the tensor lives.
            array = _CudaArray(self._native.view(offset, spec.nbytes), self.device_base + offset, spec.nbytes)
            tensor = torch.as_tensor(array, device=device).view(dtype).view(spec.shape)
            setattr(tensor, "_mooncake_segment", self)
            views.append(tensor)
        return views

    @property
    def blocks(self) -> Tuple[str, ...]:
        """The block names, in layout order."""
        return tuple(self._specs)

    @property
    def stride(self) -> int:
        """Bytes between entry i and entry i+1 of a block."""
        return self._stride

    def offset(self, block: str, index: int = 0) -> int:
        """Byte offset of entry @index of @block from the base (the same on every rank)."""
        spec = self._spec(block)
        if _an_int(index) is None:
            raise SharedSegmentError(f"offset({block!r}, {index!r}): the index must be an int")
        if not 0 <= index < spec.count:
            raise SharedSegmentError(f"Block {block!r} has {spec.count} entries, no index {index}")
        return self._offsets[block] + index * self._stride

    def base_addr(self) -> int:
        """This rank's host address of the segment (rank-local)."""
        return int(self._native.base_addr())

    def total_size(self) -> int:
        """The requested size of the segment (not rounded to pages)."""
        return int(self._native.size())

    def info(self) -> Dict[str, Any]:
        """What the segment actually got: page size, residency, huge pages, NUMA, commit.

        The residency is read from /proc/self/smaps, in time proportional to
        the segment (tens of ms per GiB), without holding the GIL.  The host
        group: ``local_ranks`` (the comm_group ranks sharing this host's
        copy), ``local_owner`` (the one that owns it) and ``host_count``.
        """
        info = dict(self._native.info())
        if self._host_group is not None:
            info.update(self._host_group.info())
        return info

    def close(self) -> None:
        """Unmap this rank's view now; BufferError while tensors or buffers are alive."""
        self._native.close()

    def __enter__(self) -> "SharedSegment":
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        if exc is None:
            self.close()
            return
        # Leaving on an exception: that exception is the one to see, even if views are still alive.
        try:
            self.close()
        except (BufferError, RuntimeError) as not_closed:
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(f"The shared segment stayed open: {not_closed}")


def create_shared_segment(
    name: str,
    blocks: Mapping[str, Mapping[str, Any]],
    world_size: int,
    rank_id: int,
    owner_rank: int = 0,
    device_id: Optional[int] = None,
    comm_group: Any = None,
    mmap: bool = True,
    host_register: bool = False,
    *,
    tp_group: Any = None,
    hugetlb: bool = False,
    numa_node: int = -1,
) -> SharedSegment:
    """Create one segment shared by ``world_size`` ranks; collective over ``comm_group``.

    Every rank calls this with the same name and blocks.  ``blocks`` maps a
    block name to ``{"count": N, "shape": (...), "dtype": ...}``; entry i of
    every block lives at ``offset(block) + i * stride``.  ``comm_group`` is a
    torch ProcessGroup that carries CPU tensors (gloo), an object with a
    ``cpu_group`` (vLLM's GroupCoordinator) or an mpi4py communicator; it may
    be None only when ``world_size == 1``.  ``tp_group`` is a deprecated alias.

    ``mmap=True`` shares host memory (an unnamed memfd); ``host_register``
    then registers each rank's mapping with its CUDA GPU or Ascend NPU
    ``device_id``.  ``mmap=False`` shares pinned memory from the Ascend
    runtime's VMM API (every rank's current NPU must be its ``device_id``)
    or from the CUDA driver's (pinned once by the owner, mapped by every
    rank's GPU ``device_id`` and its CPU, with no per-rank registration).

    Raises SharedSegmentError on every rank when any rank fails.
    """
    group_obj, alias_error = _select_comm_group(comm_group, tp_group)
    if group_obj is None:
        # No group to share an error with: this rank raises alone.
        _check_world_size(world_size)
        if world_size != 1:
            raise SharedSegmentError("comm_group is required when world_size > 1")

    # With a group, even for world_size=1: its ranks must agree that they are one group.
    collective = _Collective(group_obj) if group_obj is not None else None
    group = _Group(world_size, rank_id, collective)

    native = blob = None
    declaration: Optional[_Declaration] = None
    specs: Dict[str, _BlockSpec] = {}
    offsets: Dict[str, int] = {}
    stride = 0
    device = 0
    error: Optional[BaseException] = None
    try:
        if alias_error:
            raise SharedSegmentError(alias_error)
        if collective is not None:
            # Local checks, before the first collective: every rank then joins the consensus.
            _check_world_size(world_size)
            _check_group(collective, world_size, rank_id)
        _check_arguments(name, rank_id, {"mmap": mmap, "host_register": host_register, "hugetlb": hugetlb})
        if host_register and not mmap:
            raise SharedSegmentError("host_register requires mmap=True")
        capability = _capability_error(mmap, host_register, hugetlb, device_id)
        if capability:
            raise SharedSegmentError(capability)
        specs, offsets, stride, total, tag = _build_layout(blocks)
        declaration = _declaration(name, specs)
        device = _default_device_id() if device_id is None else device_id
    except Exception as exc:  # every local failure joins the consensus
        error = exc
    # Every rank joins the hosts' all-gather, failed or not; each host gets its own copy.
    hosts, hosts_error = _plan_hosts(group, error, owner_rank, (owner_rank, mmap, host_register, hugetlb))
    try:
        if hosts_error:
            raise SharedSegmentError(hosts_error)
        if hosts is not None:
            local_owner = owner_rank if hosts.host_count == 1 else hosts.local(hosts.owner)
            native, blob = _native.SharedSegment.create(
                f"{name}|{tag}",
                total,
                len(hosts.ranks) if hosts.host_count > 1 else world_size,
                hosts.local(rank_id) if hosts.host_count > 1 else rank_id,
                local_owner,
                device,
                mmap,
                host_register,
                hugetlb,
                numa_node=numa_node,
            )
    except Exception as exc:
        error = exc
    group.consensus("create", error, native, declaration)
    if native is None or hosts is None:
        raise SharedSegmentError("Shared segment create returned no segment")

    error = None
    blobs = group.exchange("complete", blob, native)
    try:
        # The blobs of the whole group, but only this host's ranks form the C library's group.
        native.complete(blobs if hosts.host_count == 1 else [blobs[r] for r in hosts.ranks])
    except Exception as exc:
        error = exc
    # Also the barrier: no rank, the owner least of all, returns before every
    # rank has mapped the pages; only then may the owner drop its descriptor.
    group.consensus("complete", error, native)
    native.finish()
    return SharedSegment(native, specs, offsets, stride, device, hosts)
