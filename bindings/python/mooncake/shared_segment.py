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
"""

from __future__ import annotations

import math
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


def _dtype_name_and_size(name: str, dtype: Any) -> Tuple[str, int]:
    """Torch's name of @dtype (a torch dtype, a numpy dtype or a name) and its element size."""
    if torch is not None and isinstance(dtype, torch.dtype):
        return str(dtype)[len("torch.") :], torch.empty(0, dtype=dtype).element_size()
    if isinstance(dtype, str):
        text = dtype[len("torch.") :] if dtype.startswith("torch.") else dtype
    else:
        try:
            import numpy
        except ModuleNotFoundError:
            numpy = None  # type: ignore[assignment]  # numpy dtypes are optional too
        try:
            text = numpy.dtype(dtype).name if numpy is not None else str(dtype)
        except TypeError:
            text = str(dtype)
    text = _DTYPE_ALIASES.get(text, text)
    if text not in _DTYPE_SIZES:
        raise SharedSegmentError(
            f"Block {name!r} has an unknown dtype {dtype!r}: use a torch dtype, a numpy dtype "
            f"or one of {', '.join(sorted(_DTYPE_SIZES))}"
        )
    return text, _DTYPE_SIZES[text]


def _parse_block(name: Any, spec: Mapping[str, Any]) -> _BlockSpec:
    if not isinstance(name, str) or not name or any(s in name for s in _NAME_SEPARATORS):
        raise SharedSegmentError(
            f"Block name {name!r} must be a non-empty str without ':', ';' or '|' "
            "(they separate the fields of the layout tag)"
        )
    try:
        count = int(spec["count"])
        shape = tuple(int(d) for d in spec["shape"])
        dtype = spec["dtype"]
    except (KeyError, TypeError):
        raise SharedSegmentError(f"Block {name!r} needs count, shape and dtype") from None
    except ValueError as exc:
        raise SharedSegmentError(f"Block {name!r} needs integer count and shape: {exc}") from None
    if count <= 0:
        raise SharedSegmentError(f"Block {name!r} needs a positive count")
    if not shape or any(d <= 0 for d in shape):
        raise SharedSegmentError(f"Block {name!r} needs a positive shape")
    dtype_name, element_size = _dtype_name_and_size(name, dtype)
    return _BlockSpec(count, shape, dtype, element_size * math.prod(shape), dtype_name)


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
    total = stride * max(spec.count for spec in specs.values())
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


class _Group:
    """The ranks of one create_shared_segment call: local errors become everyone's."""

    def __init__(self, world_size: int, rank_id: int, collective: Optional[_Collective]) -> None:
        self.world_size = world_size
        self.rank_id = rank_id
        self.collective = collective

    def consensus(self, phase: str, error: Optional[BaseException], native: Any) -> None:
        """Raise on every rank if any rank failed @phase; releases @native first."""
        if self.collective is None:
            if error is not None:
                _release(native)
                raise SharedSegmentError(_describe(error), _errno_of(error)) from error
            return
        contribution = None if error is None else (self.rank_id, _describe(error), _errno_of(error))
        entries = self.exchange(phase, contribution, native)
        failures = [entry for entry in entries if entry is not None]
        if failures:
            _release(native)
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


def _check_group(collective: _Collective, world_size: int, rank_id: int) -> None:
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


def _capability_error(mmap: bool, host_register: bool, hugetlb: bool) -> Optional[str]:
    if shared_segment_supported(mmap=mmap, host_register=host_register, hugetlb=hugetlb):
        return None
    if not mmap:
        return "This mooncake build has no VMM backend for shared segments"
    if host_register:
        return "This mooncake build cannot HostRegister shared-segment pages"
    if hugetlb:
        return "This host cannot back shared segments with HugeTLB pages (no hugetlbfs memfd support)"
    return "This mooncake build has no mmap shared-segment backend"


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
    no view remains (BufferError otherwise).
    """

    def __init__(
        self,
        native: Any,
        specs: Mapping[str, _BlockSpec],
        offsets: Mapping[str, int],
        stride: int,
        device_id: int,
    ) -> None:
        self._native = native
        self._specs = dict(specs)
        self._offsets = dict(offsets)
        self._stride = stride
        self._device_id = device_id
        self.device_base = int(native.device_addr()) or None

    def _spec(self, block: str) -> _BlockSpec:
        spec = self._specs.get(block)
        if spec is None:
            raise SharedSegmentError(f"Unknown shared segment block {block!r}")
        return spec

    def _entry_offsets(self, block: str) -> List[int]:
        spec, base = self._spec(block), self._offsets[block]
        return [base + i * self._stride for i in range(spec.count)]

    def buffers(self, block: str) -> List[memoryview]:
        """The block's entries as writable memoryviews of ``nbytes`` each (no torch needed)."""
        spec = self._spec(block)
        return [self._native.view(offset, spec.nbytes) for offset in self._entry_offsets(block)]

    def tensors(self, block: str, device: Optional[str] = None) -> List["torch.Tensor"]:
        """The block's entries as zero-copy tensors of the declared shape and dtype.

        By default CPU tensors over the shared pages; when the segment was
        created with ``host_register=True`` on CUDA, torch sees them as pinned,
        so ``non_blocking=True`` copies are asynchronous.  ``device="cuda"``
        gives CUDA tensors over the registered pages' device address instead.
        New views on every call; each keeps the segment mapped for as long as
        it, or any tensor derived from it, is alive.
        """
        spec = self._spec(block)
        if torch is None:
            raise SharedSegmentError(
                f"PyTorch is required to create shared-segment tensor views; {_TORCH_PACKAGE_HINT}"
            )
        dtype = spec.dtype if isinstance(spec.dtype, torch.dtype) else getattr(torch, spec.dtype_name)
        accelerator = self._native.info().get("accelerator") if self.device_base is not None else ""
        # As upstream: the views of a segment registered with Ascend are NPU tensors.
        if (device is None and accelerator == "ascend") or (device is not None and str(device).startswith("npu")):
            return self._npu_tensors(spec, dtype, self._entry_offsets(block))
        if device is not None and str(device).startswith("cuda"):
            return self._cuda_tensors(spec, dtype, str(device), self._entry_offsets(block))
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
        if self.device_base is None or self._native.info().get("accelerator") != "ascend":
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
        if self.device_base is None or self._native.info().get("accelerator") != "cuda":
            raise SharedSegmentError(
                "CUDA tensor views need a segment registered with CUDA: create it with host_register=True"
            )
        if not torch.cuda.is_available():
            raise SharedSegmentError("CUDA tensor views need a torch built with CUDA and a visible GPU")
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
        """What the segment actually got: page size, residency, huge pages, NUMA, commit."""
        return dict(self._native.info())

    def close(self) -> None:
        """Unmap this rank's view now; BufferError while tensors or buffers are alive."""
        self._native.close()

    def __enter__(self) -> "SharedSegment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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
    runtime's VMM API; every rank's current NPU must be its ``device_id``.

    Raises SharedSegmentError on every rank when any rank fails.
    """
    group_obj, alias_error = _select_comm_group(comm_group, tp_group)
    if world_size != 1 and group_obj is None:
        raise SharedSegmentError("comm_group is required when world_size > 1")

    collective: Optional[_Collective] = None
    if world_size != 1:
        collective = _Collective(group_obj)
    group = _Group(world_size, rank_id, collective)

    native = blob = None
    specs: Dict[str, _BlockSpec] = {}
    offsets: Dict[str, int] = {}
    stride = 0
    device = 0
    error: Optional[BaseException] = None
    try:
        if alias_error:
            raise SharedSegmentError(alias_error)
        if host_register and not mmap:
            raise SharedSegmentError("host_register requires mmap=True")
        capability = _capability_error(mmap, host_register, hugetlb)
        if capability:
            raise SharedSegmentError(capability)
        specs, offsets, stride, total, tag = _build_layout(blocks)
        device = _default_device_id() if device_id is None else device_id
        if collective is not None:
            _check_group(collective, world_size, rank_id)
        native, blob = _native.SharedSegment.create(
            f"{name}|{tag}",
            total,
            world_size,
            rank_id,
            owner_rank,
            device,
            mmap,
            host_register,
            hugetlb,
            numa_node=numa_node,
        )
    except Exception as exc:  # every local failure joins the consensus
        error = exc
    group.consensus("create", error, native)
    if native is None:
        raise SharedSegmentError("Shared segment create returned no segment")

    error = None
    blobs = group.exchange("complete", blob, native)
    try:
        native.complete(blobs)
    except Exception as exc:
        error = exc
    # Also the barrier: no rank, the owner least of all, returns before every
    # rank has mapped the pages; only then may the owner drop its descriptor.
    group.consensus("complete", error, native)
    native.finish()
    return SharedSegment(native, specs, offsets, stride, device)
