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

With ``background=True`` (ours, not upstream's) create returns once the first
2 MiB are committed and the rest follows behind a readiness front that every
rank sees: :meth:`SharedSegment.wait_ready`, :attr:`SharedSegment.ready_bytes`
and :meth:`SharedSegment.ready_future` wait for it or report it, and a
failure of the commit (the owner killed, out of memory) reaches every rank
there.

With ``slots=N`` (ours too) the segment gets N publish slots beside it:
:attr:`SharedSegment.slots` lets one writer publish a block and many readers
wait for it without ever seeing it half written, rewrite in place under a
seqlock, and claim blocks (a dead claimer's claim is taken over).

A ``comm_group`` may span hosts: each host's ranks then share one copy of
their own (owner_rank on its host, the lowest rank elsewhere), with the same
layout everywhere; :func:`shared_segment_room` sizes that layout from what
every host can really take.
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

try:
    from . import _segment as _native  # relative: mooncake_segment may load this file under its own name
except ImportError as _exc:
    # The extension loads, but the C library it links cannot be found: say which package has it.
    if "libmooncake-segment.so" not in str(_exc):
        raise
    raise ImportError(
        f"mooncake.shared_segment needs the C library libmooncake-segment.so.0, which is not installed "
        f"or not on the library path ({_exc}). Install it: apt install libmooncake-segment0 "
        "(Debian, Ubuntu) or dnf install mooncake-segment (Fedora, RHEL); a pip-installed binding is "
        "built against that system library and does not carry it. Built from source: make install, "
        "then ldconfig, or LD_LIBRARY_PATH=PREFIX/lib"
    ) from _exc

# The parts live in private modules beside this one; what callers and tests
# reach through this module is imported here under its old name.
from ._shared_segment_base import _TORCH_PACKAGE_HINT, SharedSegmentError, _an_int, _CudaArray, torch
from ._shared_segment_base import dist  # noqa: F401  # upstream's module attribute
from ._shared_segment_front import _front_options, _public_error, _ready_future, _wait_arguments
from ._shared_segment_group import (
    _check_group,
    _Collective,
    _describe,
    _errno_of,
    _Group,
    _HostGroup,
    _plan_hosts,
    _select_comm_group,
)
from ._shared_segment_layout import _DTYPE_SIZES  # noqa: F401  # element sizes by torch's dtype name
from ._shared_segment_layout import _block_alignment, _BlockSpec, _build_layout, _Declaration, _declaration
from ._shared_segment_layout import alignment  # noqa: F401  # public, as upstream's module constant
from ._shared_segment_keep import keep_options as _keep_options
from ._shared_segment_ranges import hand_out as _hand_out
from ._shared_segment_ranges import plan_ranges as _plan_ranges
from ._shared_segment_slots import SegmentSlots, SlotClaim, _slot_count

SlotClaim.__module__ = SegmentSlots.__module__ = __name__  # ours, not upstream's: outside __all__

__all__ = [
    "SharedSegment",
    "SharedSegmentError",
    "create_shared_segment",
    "shared_segment_supported",
]

# Defined with the parts that raise it; public here, so tracebacks and pickles name this module.
SharedSegmentError.__module__ = __name__


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


def shared_segment_room(comm_group: Any = None, mmap: bool = True, hugetlb: bool = False) -> int:
    """Bytes a shared segment of this kind can take: on this host, or on every host of ``comm_group``.

    The figures are those the owner's room check in create reads (the C
    library's ``mooncake_segment_room()``): the memory cgroup's room, clean
    page cache counting, and MemAvailable + SwapFree; with ``hugetlb`` the
    free, unreserved HugeTLB pool.  A segment of this many bytes passes the
    check (under a memory cgroup, with 64 pages per CPU left for the
    kernel's charge batching).  With ``comm_group`` (collective, like
    :func:`create_shared_segment`) every rank gets the minimum over all ranks,
    hence over all hosts: size one layout from it and it fits everywhere.
    Memory other programs take before create is not there then.
    """
    collective = _Collective(comm_group) if comm_group is not None else None
    room: Optional[int] = None
    error: Optional[BaseException] = None
    try:
        _check_flags({"mmap": mmap, "hugetlb": hugetlb})
        room = int(_native.room(mmap=bool(mmap), hugetlb=bool(hugetlb)))
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


def _check_world_size(world_size: Any, group_given: bool) -> None:
    if _an_int(world_size) is None:
        raise SharedSegmentError(f"world_size must be an int (the number of ranks), got {world_size!r}")
    if world_size < 1:
        # Without a group, upstream's text for world_size 0 (its consensus finds no group) leads.
        lead = "" if group_given else "comm_group is required when world_size > 1; "
        raise SharedSegmentError(
            f"{lead}world_size must be at least 1 (the number of ranks sharing the segment, comm_group's size), "
            f"got {world_size}"
        )


def _check_arguments(name: Any, rank_id: Any, flags: Mapping[str, Any]) -> None:
    """Refuse what the native call would silently coerce: None names, 'no' as a flag."""
    if not isinstance(name, str):
        raise SharedSegmentError(f"name must be a str (it names the segment in its fingerprint), got {name!r}")
    if _an_int(rank_id) is None:
        raise SharedSegmentError(f"rank_id must be an int (this rank's place in comm_group), got {rank_id!r}")
    _check_flags(flags)


def _check_flags(flags: Mapping[str, Any]) -> None:
    """Flags are True or False (numpy.bool_ too): a truth test would take "no" for True."""
    for flag, value in flags.items():
        if not isinstance(value, bool) and type(value).__name__ != "bool_":
            raise SharedSegmentError(f"{flag} must be True or False, got {value!r}")


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
    _check_flags({"mmap": mmap, "host_register": host_register, "hugetlb": hugetlb})
    # Upstream's two arguments; hugetlb only when asked for.
    if hugetlb:
        return bool(_native.SharedSegment.supported(bool(mmap), bool(host_register), True))
    return bool(_native.SharedSegment.supported(bool(mmap), bool(host_register)))


# Every live segment, for the pickling guard below.
_LIVE_SEGMENTS: "weakref.WeakSet[SharedSegment]" = weakref.WeakSet()
_pickle_guard_installed = False


def _segment_holding(tensor: Any) -> Optional["SharedSegment"]:
    """The live segment whose mapping a CPU tensor's bytes are in, if any."""
    if getattr(getattr(tensor, "device", None), "type", None) != "cpu":
        return None
    address = int(tensor.data_ptr())
    for segment in list(_LIVE_SEGMENTS):
        base = segment._base_for_guard
        if base <= address < base + segment._size_for_guard:
            return segment
    return None


def _install_pickle_guard() -> None:
    """Refuse to pickle a segment's tensors for another process.

    Torch's reducer for a CPU tensor sent to another process (a spawn or
    forkserver child's arguments, any multiprocessing queue) moves its
    storage into fresh shared memory: the tensor would silently stop viewing
    the segment, and the two processes would hold two copies.  Every other
    tensor still goes to torch's own reducer.
    """
    global _pickle_guard_installed
    if _pickle_guard_installed or torch is None:
        return
    import importlib
    import pickle
    from multiprocessing.reduction import ForkingPickler

    importlib.import_module("torch.multiprocessing")  # registers torch's reducers first

    torch_reduce = ForkingPickler._extra_reducers.get(torch.Tensor)  # type: ignore[attr-defined]

    def reduce(tensor: Any) -> Any:
        if _segment_holding(tensor) is not None:
            raise pickle.PicklingError(
                "A tensor of a shared segment cannot be sent to another process by pickling (a spawn or "
                "forkserver child's arguments, a multiprocessing queue): torch would move it out of the "
                "segment into a private copy.  Let the other process attach to the segment instead: "
                "create_shared_segment() with the same name and blocks in every process of the group, or "
                "start it with the fork method, which inherits the mapping"
            )
        return torch_reduce(tensor) if torch_reduce is not None else tensor.__reduce_ex__(2)

    ForkingPickler.register(torch.Tensor, reduce)
    _pickle_guard_installed = True


def _check_viewable(block: str, spec: _BlockSpec) -> None:
    """Refuse a view torch would make broken: quantized dtypes have no quantizer over raw bytes."""
    if spec.dtype_name.startswith(("qint", "quint")):
        # Refused here, not at create (as upstream): buffers() read such a block, and torch
        # would crash (1.13: SIGSEGV in frombuffer) or give a tensor without scale and zero point.
        plain = {"qint8": "int8", "qint32": "int32"}.get(spec.dtype_name, "uint8")
        raise SharedSegmentError(
            f"Block {block!r} has the quantized dtype torch.{spec.dtype_name}: a view of raw pages cannot "
            f"carry its quantizer (scale, zero point); read its bytes with buffers({block!r}), or declare the "
            f"block as {plain} and quantize a copy (torch.quantize_per_tensor)"
        )


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
    that would race with it raise RuntimeError naming that call.  The
    readiness calls are the exception: :meth:`wait_ready`, :attr:`ready_bytes`
    and :meth:`ready_future` may run from any thread beside each other and the
    getters, and :meth:`close` ends the waits within about 0.1 s instead of
    refusing them; so are the publish slots' calls (:attr:`slots`), whose
    waits release the GIL and end at :meth:`close` the same way.
    """

    def __init__(
        self,
        native: Any,
        specs: Mapping[str, _BlockSpec],
        offsets: Mapping[str, int],
        stride: int,
        device_id: int,
        host_group: Optional[_HostGroup] = None,
        slot_count: int = 0,
        block_alignment: int = alignment,
    ) -> None:
        self._native = native
        self._block_alignment = block_alignment
        self._slots = SegmentSlots(native, slot_count, device_id) if slot_count else None
        self._host_group = host_group
        self._specs = dict(specs)
        self._offsets = dict(offsets)
        self._stride = stride
        self._device_id = device_id
        # What the segment got at create, read once: tensors() must not ask info(), which reads
        # the residency from /proc/self/smaps in time proportional to the segment.
        read_facts = getattr(native, "facts", None)  # a native module of upstream's shape has none
        facts = read_facts() if read_facts is not None else {"device_addr": native.device_addr()}
        self._base_for_guard, self._size_for_guard = int(native.base_addr()), int(native.size())
        _LIVE_SEGMENTS.add(self)
        self._device_base = int(facts["device_addr"]) or None
        self._accelerator = str(facts.get("accelerator", ""))
        # background=True with host_register: the device address comes once this rank has registered.
        self._registering = bool(self._accelerator) and self._device_base is None
        self._backend = str(facts.get("backend", ""))
        self._warm = bool(facts.get("warm", False))
        self._keep_generation = int(facts.get("keep_generation", 0)) or None
        # ready_future()'s one future per process (a fork child's watcher thread is gone).
        self._ready_lock = threading.Lock()
        self._ready: Optional[Tuple[int, "Future[int]"]] = None

    @property
    def warm(self) -> bool:
        """True when this is a kept segment (``keep=``) whose pages existed before this group.

        The bytes are then what the last group left in them: check your own
        index in the segment before reusing them.  False for a segment that
        the keeper made for this group, and for one that is not kept.
        """
        return self._warm

    @property
    def keep_generation(self) -> Optional[int]:
        """A kept segment's generation in its keeper (never reused for its name), else None."""
        return self._keep_generation

    @property
    def device_base(self) -> Optional[int]:
        """The segment's base as the accelerator sees it (host_register, or mmap=False), else None.

        With ``background=True`` it is None until this rank has registered
        (once the front has passed its range); :meth:`wait_ready` before
        device views.
        """
        if self._registering:
            address = int(self._native.device_addr()) if not self._native.closed else 0
            if address:
                self._device_base, self._registering = address, False
        return self._device_base

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
        _check_viewable(block, spec)
        # As upstream: the views of a segment registered with Ascend are NPU tensors.
        if (device is None and self._accelerator == "ascend") or (device is not None and str(device).startswith("npu")):
            return self._npu_tensors(spec, dtype, self._entry_offsets(block))
        if (device is None and self._backend == "cuda-vmm") or (device is not None and str(device).startswith("cuda")):
            return self._cuda_tensors(spec, dtype, str(device or "cuda"), self._entry_offsets(block))
        if device is not None and str(device) != "cpu":
            raise SharedSegmentError(f"tensors(device={device!r}): only 'cpu', 'cuda' and 'npu' views are available")
        _install_pickle_guard()
        views = []
        for offset in self._entry_offsets(block):
            # frombuffer over a memoryview: the tensor's storage holds the
            # memoryview, which holds an export of the native segment.
            try:
                tensor = torch.frombuffer(self._native.view(offset, spec.nbytes), dtype=dtype).view(spec.shape)
            except (TypeError, RuntimeError) as exc:  # a dtype object this torch cannot make tensors of
                raise SharedSegmentError(
                    f"Block {block!r} has dtype {dtype}, of which the installed torch cannot make a tensor "
                    f"({exc}): read its bytes with buffers({block!r}), or upgrade torch"
                ) from exc
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
        except ImportError as exc:  # absent, or installed but broken (a missing CANN library): as upstream
            raise SharedSegmentError(
                "torch_npu is required to expose device-mapped shared-segment tensors"
                + ("" if isinstance(exc, ModuleNotFoundError) and exc.name == "torch_npu" else f" ({exc})")
            ) from exc
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
        The alignment: ``alignment``, what this rank's base is a multiple of
        (``alignment=`` at create, or by default the page size in use: the
        HugeTLB page, or the THP size), and ``block_alignment``, what every
        block's offset is a multiple of (``alignment=``, or 4096).
        """
        info = dict(self._native.info())
        info["block_alignment"] = self._block_alignment
        if self._host_group is not None:
            info.update(self._host_group.info())
        return info

    def wait_ready(self, offset: int = 0, length: Optional[int] = None, timeout: Optional[float] = None) -> bool:
        """Wait until bytes [offset, offset + length) are ready; True once they are.

        Ready means committed by the owner and, on a rank that registers them
        (``host_register``, its ``register_offset``/``register_length``),
        registered with its accelerator.  ``length`` None: to the end;
        ``timeout`` in seconds, None: no limit, 0: only look.  Without
        ``background=True`` everything is ready when create returns.  The
        first 2 MiB (or huge page) are ready at once.  Touching a byte beyond
        the front is safe, only slower (that fault commits the page itself).

        The GIL is released while waiting; several threads may wait at once,
        and :meth:`close` ends their waits (ValueError) within about 0.1 s.
        In the main thread a signal ends the wait within about 0.1 s with
        its handler's exception (Ctrl-C: KeyboardInterrupt), with or without
        a timeout; a wait that succeeded returns True all the same.

        Raises TimeoutError (``errno`` ETIMEDOUT) when ``timeout`` passes
        first, and SharedSegmentError with the C library's message on every
        rank when the commit failed: the owner died (``errno`` ESRCH, found
        within 0.1 s), destroyed the segment half way (ECANCELED) or ran out
        of memory (ENOMEM, ENOSPC, EIO), or when this rank's registration
        failed.  Bad arguments are SharedSegmentError too.
        """
        offset, length, timeout = _wait_arguments(offset, length, timeout, self.total_size())
        wait = getattr(self._native, "wait_ready", None)
        if wait is None:  # a native module of upstream's shape: everything is ready at create
            return True
        try:
            return bool(wait(offset, length, timeout))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def register_ranges(
        self, max_bytes: int, align: Any = "block", *, ready_only: bool = False, timeout: Optional[float] = None
    ) -> Iterator[Tuple[int, int]]:
        """(address, length) pairs to register with an RDMA transfer engine (Mooncake Transfer Engine, NIXL).

        The ranges cover the whole mapping in order, at this rank's
        addresses, each at most ``max_bytes`` (the engine's largest memory
        region) and made of whole pieces of ``align``: ``"block"`` (every
        entry of every block, with its padding), ``"layer"`` (entry i of
        every block: one stride) or a byte count (a multiple of 4096).  They
        are packed greedily, so they are as few as the limit allows.  The
        last range also holds the mapping's tail past the blocks (the rest of
        the last page or huge page, so that a transfer touching it works),
        or, where that does not fit, a range of its own.  A piece larger
        than ``max_bytes`` is a SharedSegmentError naming it.

        An iterator: each range is handed out once the readiness front has
        passed it (:meth:`wait_ready`, ``timeout`` in seconds for each), so
        with ``background=True`` an engine registers the first layers while
        the rest commits; without it every range is ready at once.  With
        ``ready_only=True`` it hands out only the ranges ready now and stops
        at the first that is not, without waiting.
        """
        _check_flags({"ready_only": ready_only})
        size = self.total_size()
        alloc_size = getattr(self._native, "alloc_size", None)  # a native module of upstream's shape has none
        ranges = _plan_ranges(
            self._offsets,
            self._stride,
            size,
            int(alloc_size()) if alloc_size is not None else size,
            max_bytes,
            align,
        )
        return _hand_out(
            ranges, self.base_addr(), size, lambda: self.ready_bytes, self.wait_ready, bool(ready_only), timeout
        )

    @property
    def slots(self) -> SegmentSlots:
        """The publish slots declared with ``create_shared_segment(..., slots=N)``: a :class:`SegmentSlots`.

        ``len(seg.slots)`` is N; ``publish``/``wait``, the seqlock
        (``writing``, ``read_begin``, ``read_retry``), claims (``try_claim``,
        ``release_claim``) and ``sequences()``.  SharedSegmentError when the
        segment was created without slots.
        """
        if self._slots is None:
            raise SharedSegmentError(
                "This shared segment has no publish slots: pass slots=N to create_shared_segment on every rank"
            )
        return self._slots

    @property
    def ready_bytes(self) -> int:
        """How many bytes from offset 0 are ready now: :meth:`total_size` once all of them are."""
        ready_bytes = getattr(self._native, "ready_bytes", None)
        return int(ready_bytes()) if ready_bytes is not None else self.total_size()

    def ready_future(self) -> "Future[int]":
        """A ``concurrent.futures.Future`` of the whole segment's readiness, for a health check.

        Its result is the segment's size (:meth:`total_size`) once every byte
        is ready; its exception the SharedSegmentError :meth:`wait_ready`
        would raise (the owner died, the commit or this rank's registration
        failed).  Every call returns the same future until it is cancelled.
        Done at once when the segment is already ready; otherwise a daemon
        thread waits in slices of 0.2 s, holding only a weak reference to the
        segment, so it neither keeps the segment alive nor holds up
        :meth:`close`.  :meth:`close` (or the segment being freed) before the
        segment is ready cancels the future.  Cancelling it stops its thread.
        """
        with self._ready_lock:
            if self._ready is not None:
                pid, future = self._ready
                if pid == os.getpid() and not future.cancelled():
                    return future
            future = _ready_future(self, self._native, self.total_size())
            self._ready = (os.getpid(), future)
            return future

    def close(self) -> None:
        """Unmap this rank's view now; BufferError while tensors, buffers or slot sequences are alive.

        Waits of other threads in :meth:`wait_ready` and in the slots' waits
        end with ValueError, a pending :meth:`ready_future` is cancelled.
        """
        self._native.close()
        _LIVE_SEGMENTS.discard(self)  # its range may hold other memory from now on
        ready = self._ready
        if ready is not None:
            ready[1].cancel()  # no-op once it is done

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
    hugetlb: bool = False,
    *,
    tp_group: Any = None,
    numa_node: int = -1,
    background: bool = False,
    commit_threads: Optional[int] = None,
    register_offset: int = 0,
    register_length: Optional[int] = None,
    register_pause_us: Optional[int] = None,
    slots: int = 0,
    keep: Optional[str] = None,
    keep_identity: Any = None,
    keep_replace: bool = False,
    keep_mode: str = "create_or_attach",
    keep_sharing: str = "uid",
    keep_gid: Optional[int] = None,
    keep_owner: Optional[int] = None,
    alignment: Optional[int] = None,
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

    ``hugetlb=True`` backs the segment with HugeTLB pages (the free pool;
    fails closed without one); it is the tenth argument, where upstream's
    #4152 puts it, so it may be passed by position or by name.

    Our additions, keyword only: ``numa_node``, and the readiness front.
    ``background=True`` makes create return once the first 2 MiB (or huge
    page) are committed, the owner's threads committing
    the rest in order behind a front every rank sees; wait for it with
    :meth:`SharedSegment.wait_ready` or :meth:`SharedSegment.ready_future`.
    The room check still covers the whole segment before create returns.
    A rank without it waits in create for the whole front, as before.
    ``commit_threads``: the owner's committing threads (None or 0:
    automatic).  With ``host_register``, ``register_offset`` and
    ``register_length`` (None: to the end) choose the part this rank
    registers; with ``background`` too it registers on a thread of its own
    once the front has passed that part, in one driver call (a copy across
    two registrations would fail).  ``register_pause_us`` (None: the
    library's 1000) is the pause between chunks where the C option
    ``register_chunk_size`` splits a registration; from Python it has no
    chunks to pause between.

    ``slots``: publish slots beside the segment (0 to 65536; 0: none), part
    of the declaration, so every rank passes the same number; see
    :attr:`SharedSegment.slots`.

    ``keep="name"`` makes it a kept segment: the owner takes the pages from
    the node keeper (mooncake-segmentd; its socket from
    ``MOONCAKE_SEGMENT_KEEPER``) under that name, and they outlive the group.
    A later group creating the same name with the same blocks attaches to
    them in well under a second at any size and sees
    :attr:`SharedSegment.warm` True; different blocks, size, world size or
    ``keep_identity`` (your own str or bytes, at most 64: model, KV dtype,
    engine version) raise naming the field, unless ``keep_replace=True`` and
    nobody maps the old pages.  ``keep_mode``: ``"create_or_attach"``,
    ``"attach"`` (raise if absent) or ``"create"`` (raise if present).
    ``keep_sharing``: ``"uid"`` (this user only), ``"group"`` (and
    ``keep_gid``'s members) or ``"any"``; ``keep_owner``: attach to that
    uid's segment shared with this user.  Every rank passes the same
    ``keep*`` arguments.  Release it with ``mooncake-segment keep release``.

    ``alignment`` (None: 4096, upstream's): every block's offset, hence
    the stride and the size, and every rank's base address are multiples
    of it, a power of two from 4096 to 1 GiB (2 MiB for an engine's
    huge-page pool, 64 KiB for Ascend SVM registration).  Part of the
    declaration: every rank passes the same, or every rank raises naming
    it.  What it costs is padding only: the blocks' bytes rounded up to
    it.  Without it the base still has the page size in use (the HugeTLB
    page, or the THP size) and the blocks 4096.  For an RDMA transfer
    engine, :meth:`SharedSegment.register_ranges` cuts the segment.

    Raises SharedSegmentError on every rank when any rank fails.  A failure
    of a background commit after create returned is every rank's too, at
    :meth:`SharedSegment.wait_ready`.
    """
    group_obj, alias_error = _select_comm_group(comm_group, tp_group)
    if group_obj is None:
        # No group to share an error with: this rank raises alone.
        _check_world_size(world_size, group_given=False)
        if world_size != 1:
            raise SharedSegmentError("comm_group is required when world_size > 1")

    # With a group, even for world_size=1: its ranks must agree that they are one group.
    collective = _Collective(group_obj) if group_obj is not None else None
    group = _Group(world_size, rank_id, collective)

    native = blob = None
    declaration: Optional[_Declaration] = None
    front: Dict[str, Any] = {}
    keep_args: Dict[str, Any] = {}
    specs: Dict[str, _BlockSpec] = {}
    offsets: Dict[str, int] = {}
    stride = 0
    device = 0
    slot_count = 0
    block_alignment = 4096
    error: Optional[BaseException] = None
    try:
        if alias_error:
            raise SharedSegmentError(alias_error)
        if collective is not None:
            # Local checks, before the first collective: every rank then joins the consensus.
            _check_world_size(world_size, group_given=True)
            _check_group(collective, world_size, rank_id)
        _check_arguments(
            name,
            rank_id,
            {"mmap": mmap, "host_register": host_register, "hugetlb": hugetlb, "background": background},
        )
        mmap, host_register, hugetlb, background = bool(mmap), bool(host_register), bool(hugetlb), bool(background)
        if host_register and not mmap:
            raise SharedSegmentError("host_register requires mmap=True")
        keep_args = _keep_options(keep, keep_identity, keep_replace, keep_mode, keep_sharing, keep_gid, keep_owner)
        if keep is not None and not mmap:
            raise SharedSegmentError("keep= needs mmap=True: a kept segment is host memory (the keeper's memfd)")
        capability = _capability_error(mmap, host_register, hugetlb, device_id)
        if capability:
            raise SharedSegmentError(capability)
        block_alignment = _block_alignment(alignment)
        specs, offsets, stride, total, tag = _build_layout(blocks, block_alignment)
        front = _front_options(
            background, host_register, commit_threads, register_offset, register_length, register_pause_us, total
        )
        slot_count = _slot_count(slots, int(getattr(_native, "MAX_SLOTS", 0)) or 65536)
        declaration = _declaration(name, specs, block_alignment)
        device = _default_device_id() if device_id is None else device_id
    except Exception as exc:  # every local failure joins the consensus
        error = exc
    # Every rank joins the hosts' all-gather, failed or not; each host gets its own copy.
    hosts, hosts_error = _plan_hosts(group, error, owner_rank, (owner_rank, mmap, host_register, hugetlb, slots))
    try:
        if hosts_error:
            raise SharedSegmentError(hosts_error)
        if hosts is not None:
            local_owner = owner_rank if hosts.host_count == 1 else hosts.local(hosts.owner)
            args: List[Any] = [
                f"{name}|{tag}",
                total,
                len(hosts.ranks) if hosts.host_count > 1 else world_size,
                hosts.local(rank_id) if hosts.host_count > 1 else rank_id,
                local_owner,
                device,
                mmap,
                host_register,
            ]
            # Upstream's eight arguments; ours only where the caller asked for them.
            extra: Dict[str, Any] = {"numa_node": numa_node} if numa_node != -1 else {}
            extra.update(front)
            if slot_count:
                extra["slot_count"] = slot_count
            # The default is not passed: a declaration without alignment keeps its fingerprint.
            if block_alignment != 4096:
                extra["alignment"] = block_alignment
            extra.update(keep_args)
            if hugetlb:
                args.append(hugetlb)
            native, blob = _native.SharedSegment.create(*args, **extra)
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
    finish = getattr(native, "finish", None)  # a native module of upstream's shape has none
    if finish is not None:
        finish()
    return SharedSegment(native, specs, offsets, stride, device, hosts, slot_count, block_alignment)
