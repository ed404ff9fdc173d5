# SPDX-License-Identifier: Apache-2.0
"""``mooncake.engine`` where Mooncake's own package is absent: its SharedSegment, nothing else.

Upstream's native module ``mooncake.engine`` (a package ``mooncake/engine/``
after RFC #3534) holds the shared segment's native class beside its transfer
engine.  Code that imports that class directly::

    from mooncake.engine import SharedSegment
    segment, blob = SharedSegment.create(name, size, world_size, rank_id)
    segment.complete(blobs)

gets ours, mooncake._segment.SharedSegment, whose create, supported,
complete, ready, base_addr, device_addr and size take upstream's arguments.
The rest of upstream's engine (TransferEngine, ...) is Mooncake's own.

This module never hides upstream's (doc/decisions.md, "mooncake.engine"):
our ``mooncake`` is a namespace package, which an installed Mooncake's
regular package replaces whole, and where both share one directory, Python
prefers upstream's ``engine/`` package and ``engine`` extension to a module.
"""

from typing import NoReturn

from ._segment import SharedSegment

__all__ = ["SharedSegment"]


def __getattr__(name: str) -> NoReturn:
    if name.startswith("__"):  # probes of the import machinery and of tools
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r}: this mooncake.engine is mooncake-segment's, which has "
        f"only SharedSegment; {name} is in Mooncake's own package (pip install mooncake-transfer-engine)"
    )
