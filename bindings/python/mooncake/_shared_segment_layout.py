# SPDX-License-Identifier: Apache-2.0
"""The byte layout of a shared segment, from its block declarations (private).

Block specs and their dtypes (by torch's names, so that no torch is needed),
offsets, stride and total, the layout tag folded into the segment's name, and
the declarations ranks compare, with the text that names what differs.  Pure
computation: no collective, no system call; from the native module only the
largest segment size.  mooncake.shared_segment is the public module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _segment
from ._shared_segment_base import SharedSegmentError, _an_int, torch

#: Every block starts on this boundary (relative to the segment's base) unless
#: create_shared_segment(..., alignment=N) asks for more.
alignment = 4096
# alignment=N: a power of two in [4 KiB, 1 GiB], the C library's bounds.
_MAX_ALIGNMENT = 1 << 30

# Element sizes by torch's dtype name, so that layouts need no torch.  A torch
# dtype is sized by itself (its itemsize, torch >= 2.1), so a dtype torch adds
# later needs no entry here; names need one to work without torch.
_DTYPE_SIZES: Dict[str, int] = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,  # torch >= 2.7: MX scales
    "float4_e2m1fn_x2": 1,  # torch >= 2.8: two FP4 values a byte
    "bits1x8": 1,
    "bits2x4": 1,
    "bits4x2": 1,
    "bits8": 1,
    "bits16": 2,
    "qint8": 1,  # quantized: bytes only, tensors() cannot view them
    "quint8": 1,
    "quint4x2": 1,
    "quint2x4": 1,
    "qint32": 4,
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
# Sub-byte integers (torch >= 2.3 and 2.6) are stored a byte each.
_DTYPE_SIZES.update({f"{kind}{bits}": 1 for kind in ("uint", "int") for bits in range(1, 8)})
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
# The C library's largest segment (64 TiB): the layout checks against it.
# The C library's MOONCAKE_SEGMENT_MAX_SIZE; a native module that does not say
# (a test's stand-in, as upstream's harness has) gets the same value.
_MAX_SIZE: int = getattr(_segment, "MAX_SIZE", 1 << 46)
# Upstream's text for a size out of range (its native create's, code included), which ours leads with.
_SIZE_BOUNDS = f"InvalidArgument: Shared segment size must be in (0, {_MAX_SIZE}]"


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


def _is_torch_dtype(dtype: Any) -> bool:
    """Whether @dtype is a torch.dtype, also one of a torch other than the one imported here."""
    if torch is not None and isinstance(dtype, torch.dtype):
        return True
    kind = type(dtype)
    return kind.__name__ == "dtype" and kind.__module__ == "torch"


def _torch_dtype_size(dtype: Any, text: str) -> Optional[int]:
    """The element size of torch dtype @dtype (named @text), None if it has no fixed one.

    Its itemsize (torch >= 2.1), else the table's, else what torch says of
    an empty tensor of it, as upstream asks (torch < 2.1, a stand-in torch).
    """
    size = _an_int(getattr(dtype, "itemsize", None))
    if size is None:
        size = _DTYPE_SIZES.get(text)
    if size is None and torch is not None:
        try:
            size = _an_int(torch.empty(0, dtype=dtype).element_size())
        except (TypeError, RuntimeError):  # not a dtype torch can make a tensor of: no size to lay out
            size = None
    return size if size is not None and size > 0 else None


def _dtype_name(name: str, dtype: Any) -> str:
    """Torch's name of @dtype: a native-endian numpy dtype or a name."""
    if dtype is None:
        raise SharedSegmentError(
            f"Block {name!r} has dtype None: name one (a torch dtype, a numpy dtype or one of " f"{_accepted_dtypes()})"
        )
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
    """@dtype's torch name, its element size and the installed torch's dtype (None without torch).

    Every torch dtype is taken by its element size, whatever torch made it;
    what has no fixed size is refused.  The name, not only the size, goes
    into the declaration and the layout tag, so bits8 and uint8 differ.
    """
    if _is_torch_dtype(dtype):
        text = str(dtype)
        text = text[len("torch.") :] if text.startswith("torch.") else text
        size = _torch_dtype_size(dtype, text)
        if size is None:
            raise SharedSegmentError(
                f"Block {name!r} has an unsupported dtype {dtype!r}: it has no fixed element size, so no "
                "layout can hold it; declare the block as uint8 with a shape in bytes"
            )
        return text, size, dtype
    text = _dtype_name(name, dtype)
    text = _DTYPE_ALIASES.get(text, text)
    torch_dtype = getattr(torch, text, None) if torch is not None else None
    if not _is_torch_dtype(torch_dtype):
        torch_dtype = None
    elif str(torch_dtype).startswith("torch."):
        text = str(torch_dtype)[len("torch.") :]  # torch's own aliases (torch.int is int32)
    size = _DTYPE_SIZES.get(text)
    if size is None and torch_dtype is not None:
        size = _torch_dtype_size(torch_dtype, text)  # a name this torch has and the table does not
    if size is None:
        raise SharedSegmentError(
            f"Block {name!r} has an unsupported dtype {dtype!r}: use a torch dtype, a numpy dtype "
            f"or a name, one of {_accepted_dtypes()}"
        )
    if torch is not None and torch_dtype is None:
        # A name the table sizes but this torch lacks: tensors() could never view it.
        version = getattr(torch, "__version__", "")
        raise SharedSegmentError(
            f"Block {name!r} has dtype {text}, which the installed torch {version} does not "
            f"have, so tensors() could not view it: upgrade torch, or declare the block as uint8"
            + (f" with a last dimension {size} times longer" if size > 1 else "")
            + " and reinterpret the bytes"
        )
    return text, size, torch_dtype


_BLOCK_KEYS = ("count", "shape", "dtype")


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
    # A typo in a layout ("dtpye", "shapes") must not pass unseen.
    unknown = sorted(repr(key) for key in spec if key not in _BLOCK_KEYS)
    if unknown:
        raise SharedSegmentError(
            f"Block {name!r} has unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            "a block takes count, shape and dtype"
        )
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
            f"{_SIZE_BOUNDS}, got at least {nbytes}: block {name!r} entries are {nbytes} bytes each, "
            "above the largest segment: lower its shape"
        )
    return _BlockSpec(count, shape, dtype, nbytes, dtype_name, torch_dtype)


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def _block_alignment(value: Any) -> int:
    """The block alignment create's ``alignment=`` asks for: None is the module's 4096."""
    if value is None:
        return alignment
    number = _an_int(value)
    if number is None or number < alignment or number > _MAX_ALIGNMENT or number & (number - 1):
        raise SharedSegmentError(
            f"alignment must be a power of two from {alignment} (4 KiB) to {_MAX_ALIGNMENT} (1 GiB), got "
            f"{value!r}: pass an int such as 2 << 20 (2 MiB), or None for the default {alignment}"
        )
    return int(number)


def _build_layout(
    blocks: Mapping[str, Mapping[str, Any]],
    block_alignment: int = alignment,
) -> Tuple[Dict[str, _BlockSpec], Dict[str, int], int, int, str]:
    """Specs, offsets, stride, total and the layout tag, in sorted-name order.

    Every block starts on a multiple of @block_alignment, so the stride and
    the total are multiples of it too.
    """
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
        offset += _align_up(spec.nbytes, block_alignment)
    stride = offset
    largest = max(specs, key=lambda name: specs[name].count)
    total = stride * specs[largest].count
    if total > _MAX_SIZE:
        raise SharedSegmentError(
            f"{_SIZE_BOUNDS}, got {total}: block {largest!r} has count {specs[largest].count} "
            f"({stride} bytes per entry), above the largest segment: lower its count"
        )
    # The keeper reads this tag back (keeper/declaration.c, doc/keeper-protocol.md) to name the block
    # and field a kept segment's re-create changes: keep its fields and separators in step with it.
    tag = ";".join(
        f"{name}:{spec.count}:{'x'.join(str(d) for d in spec.shape)}:torch.{spec.dtype_name}:{spec.nbytes}"
        for name, spec in specs.items()
    )
    return specs, offsets, stride, total, tag


# A declaration as ranks compare it: the name, per block (count, shape, dtype name), the block alignment.
_Declaration = Tuple[str, Tuple[Tuple[str, int, Tuple[int, ...], str], ...], int]
_MAX_LISTED_DIFFERENCES = 10


def _declaration(name: str, specs: Mapping[str, _BlockSpec], block_alignment: int = alignment) -> _Declaration:
    return name, tuple((block, s.count, s.shape, s.dtype_name) for block, s in specs.items()), block_alignment


def _differences(mine: _Declaration, rank: int, theirs: _Declaration, their_rank: int) -> List[str]:
    """What rank @rank declares differently from rank @their_rank, field by field."""
    found = []
    if mine[0] != theirs[0]:
        found.append(f"name {mine[0]!r} on rank {rank}, {theirs[0]!r} on rank {their_rank}")
    if mine[2] != theirs[2]:
        found.append(f"alignment {mine[2]} on rank {rank}, {theirs[2]} on rank {their_rank}")
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
