# SPDX-License-Identifier: Apache-2.0
"""What every part of mooncake.shared_segment builds on (private).

The exception every failure becomes, torch when it is installed (imported
here once, so that every part sees the same answer and importing works
without it) and what counts as an integer.  mooncake.shared_segment
re-exports the public names: import them from there.
"""

from __future__ import annotations

import operator
from typing import Any, Optional

try:
    import torch
    import torch.distributed as dist
except ModuleNotFoundError as _exc:  # torch is optional; other import errors are real
    if _exc.name != "torch":
        raise
    torch = None  # type: ignore[assignment]  # the optional module is absent
    dist = None  # type: ignore[assignment]

_TORCH_PACKAGE_HINT = (
    "install python3-torch (Debian/Ubuntu: apt install python3-torch; "
    "Fedora: dnf install python3-torch; pip: pip install torch)"
)


class SharedSegmentError(RuntimeError):
    """Raised for every failure the helper detects or relays.

    ``errno`` holds the C library's errno when one is known, else None.
    """

    def __init__(self, message: str, errno: Optional[int] = None) -> None:
        super().__init__(message)
        self.errno = errno


def _an_int(value: Any) -> Optional[int]:
    """@value as an int if it is one (an int, a numpy or torch integer), else None; never a bool."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


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
