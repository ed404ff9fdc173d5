# SPDX-License-Identifier: Apache-2.0
"""mooncake-segment's Python API under a name no other package claims.

``import mooncake_segment`` gives the same names as ``mooncake.shared_segment``
(create_shared_segment, shared_segment_supported, SharedSegment,
SharedSegmentError, alignment, and our shared_segment_room, SegmentSlots and
SlotClaim), whatever else is installed.  Where Mooncake's
own wheel makes `mooncake` a regular package, which hides ours, this module
uses its own copy (the wheel's) or loads mooncake-segment's files from the
namespace directory itself, under its own name, and leaves `mooncake` alone.

:func:`which_shared_segment` says which file ``import mooncake.shared_segment``
resolves to here and, when it is not ours, why and what to do;
``python3 -m mooncake_segment`` prints the same.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

from ._locate import (
    PRIVATE_PARTS,
    SharedSegmentResolution,
    bundled_module_file,
    namespace_module_file,
    namespace_native_file,
    which_shared_segment,
)


def _load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _implementation() -> ModuleType:
    resolution = which_shared_segment()
    if resolution.is_ours:
        from mooncake import shared_segment  # the normal case: one module object for both names

        return shared_segment
    if bundled_module_file() is not None:  # the wheel's own copy and its native module
        return importlib.import_module(__name__ + ".shared_segment")
    module_file, native_file = namespace_module_file(), namespace_native_file()
    if module_file is None or native_file is None:
        missing = "mooncake/shared_segment.py" if module_file is None else "the native module mooncake/_segment"
        raise ImportError(f"mooncake_segment cannot find mooncake-segment's {missing} on sys.path.\n{resolution}")
    part_files = {part: os.path.join(os.path.dirname(module_file), part + ".py") for part in PRIVATE_PARTS}
    for part, path in part_files.items():
        if not os.path.isfile(path):
            raise ImportError(f"mooncake_segment cannot find mooncake-segment's {path}.\n{resolution}")
    # shared_segment.py imports its native module and its private parts
    # relatively (from . import _segment), so all of them live under this
    # package's name, loaded in the order they import one another.
    native = _load(__name__ + "._segment", native_file)
    globals()["_segment"] = native
    for part, path in part_files.items():
        globals()[part] = _load(f"{__name__}.{part}", path)
    return _load(__name__ + ".shared_segment", module_file)


_impl = _implementation()
SharedSegment = _impl.SharedSegment
SharedSegmentError = _impl.SharedSegmentError
create_shared_segment = _impl.create_shared_segment
shared_segment_supported = _impl.shared_segment_supported
shared_segment_room = _impl.shared_segment_room  # ours, not upstream's: outside mooncake.shared_segment.__all__
alignment = _impl.alignment
SegmentSlots = _impl.SegmentSlots  # ours: the publish slots (create_shared_segment(..., slots=N))
SlotClaim = _impl.SlotClaim

__all__ = list(_impl.__all__) + [
    "alignment",
    "shared_segment_room",
    "SegmentSlots",
    "SlotClaim",
    "which_shared_segment",
    "SharedSegmentResolution",
]
