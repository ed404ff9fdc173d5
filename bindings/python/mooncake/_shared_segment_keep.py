# SPDX-License-Identifier: Apache-2.0
"""Kept segments: ``create_shared_segment(..., keep="name")``.

The owner rank takes the pages from the node keeper (mooncake-segmentd,
doc/keeper.md) under that name instead of allocating them, so that they
outlive the group: a later group that creates the same name with the same
blocks attaches to them warm (no commit, no copy) and
:attr:`SharedSegment.warm` says so.  This module turns the keyword
arguments into the native create()'s ``keep_*`` options.
"""

from typing import Any, Dict, Optional, Union

# The C library's MOONCAKE_SEGMENT_KEEP_* flags and sharing modes.
_KEEP_REPLACE = 1 << 0
_KEEP_ATTACH_ONLY = 1 << 1
_KEEP_CREATE_ONLY = 1 << 2
_SHARING = {"uid": 0, "group": 1, "any": 2}
_MODES = {"create_or_attach": 0, "attach": _KEEP_ATTACH_ONLY, "create": _KEEP_CREATE_ONLY}
IDENTITY_MAX = 64


def keep_options(
    keep: Optional[str],
    identity: Union[str, bytes, None],
    replace: Any,
    mode: str,
    sharing: str,
    gid: Optional[int],
    owner: Optional[int],
) -> Dict[str, Any]:
    """The native create()'s keyword arguments for these ``keep*`` arguments; ValueError or TypeError naming one."""
    if keep is None:
        if identity is not None or replace or mode != "create_or_attach" or sharing != "uid" or gid is not None:
            raise ValueError("keep_identity, keep_replace, keep_mode, keep_sharing and keep_gid need keep='name'")
        if owner is not None:
            raise ValueError("keep_owner needs keep='name'")
        return {}
    if not isinstance(keep, str):
        raise TypeError(f"keep must be a str (the kept segment's name), got {keep!r}")
    if not keep:
        raise ValueError("keep must not be empty: give the kept segment's name")
    for label, value in (("keep_gid", gid), ("keep_owner", owner)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise TypeError(f"{label} must be a uid or gid (an int >= 0), got {value!r}")
    if not isinstance(replace, bool):
        raise TypeError(f"keep_replace must be a bool, got {replace!r}")
    if mode not in _MODES:
        raise ValueError(f"keep_mode must be one of {sorted(_MODES)}, got {mode!r}")
    if sharing not in _SHARING:
        raise ValueError(f"keep_sharing must be one of {sorted(_SHARING)}, got {sharing!r}")
    if (gid is not None) != (sharing == "group"):
        raise ValueError("keep_sharing='group' needs keep_gid=GID, and keep_gid needs keep_sharing='group'")
    raw = identity.encode() if isinstance(identity, str) else identity
    if raw is not None and not isinstance(raw, bytes):
        raise TypeError(f"keep_identity must be str or bytes, got {type(identity).__name__}")
    if raw is not None and len(raw) > IDENTITY_MAX:
        raise ValueError(f"keep_identity must be at most {IDENTITY_MAX} bytes (hash a longer one), got {len(raw)}")
    options: Dict[str, Any] = {
        "keep_name": keep,
        "keep_flags": (_KEEP_REPLACE if replace else 0) | _MODES[mode],
        "keep_sharing": _SHARING[sharing],
    }
    if raw:
        options["keep_identity"] = raw
    if gid is not None:
        options["keep_gid"] = gid
    if owner is not None:
        options["keep_owner_uid"] = owner
    return options
