# SPDX-License-Identifier: Apache-2.0
"""Where mooncake-segment's files are, and what `import mooncake.shared_segment` gives.

mooncake-segment installs `mooncake` as a namespace package (a directory with no
__init__.py).  Mooncake's own wheel installs `mooncake` as a regular package
(with __init__.py), and Python then never merges namespace portions: whatever
the order on sys.path, `import mooncake.shared_segment` gives upstream's module,
or nothing.  Everything here reads the file system and importlib specs only:
it imports neither `mooncake` nor anything in it.

Where our files are: the wheel bundles a copy of shared_segment.py and the
native module inside mooncake_segment/ itself, because pip installs Mooncake's
wheel and ours into the same site-packages/mooncake/ directory, where the last
one installed overwrites mooncake/shared_segment.py.  The system packages and
`make install` have no such copy: there ours are the namespace directory's.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import List, Optional

PUBLIC_MODULE = "mooncake.shared_segment"
# shared_segment.py's private parts, beside it and imported relatively, in the
# order they import one another: wherever the module is loaded from, they are.
PRIVATE_PARTS = (
    "_shared_segment_base",
    "_shared_segment_layout",
    "_shared_segment_group",
    "_shared_segment_front",
    "_shared_segment_slots",
    "_shared_segment_keep",
    "_shared_segment_ranges",
)


def namespace_portions() -> List[str]:
    """The `mooncake` directories without __init__.py on sys.path, in order:
    those a namespace package would merge."""
    found = []
    for entry in sys.path:
        path = os.path.join(entry or os.getcwd(), "mooncake")
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__init__.py")) and path not in found:
            found.append(path)
    return found


def our_file(stem: str, suffixes: List[str]) -> Optional[str]:
    """The first namespace portion's file @stem + one of @suffixes, as the namespace package would find it."""
    for portion in namespace_portions():
        for suffix in suffixes:
            path = os.path.join(portion, stem + suffix)
            if os.path.isfile(path):
                return path
    return None


def namespace_module_file() -> Optional[str]:
    """Our shared_segment.py in the `mooncake` namespace package, when one is on sys.path."""
    return our_file("shared_segment", [".py"])


def namespace_native_file() -> Optional[str]:
    return our_file("_segment", importlib.machinery.EXTENSION_SUFFIXES)


def bundled_module_file() -> Optional[str]:
    """The wheel's copy of shared_segment.py inside mooncake_segment/, if this install has one."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shared_segment.py")
    return path if os.path.isfile(path) else None


@dataclass(frozen=True)
class SharedSegmentResolution:
    """What `import mooncake.shared_segment` resolves to in this interpreter.

    ``resolves_to``: the file it gives (None: the import fails); ``ours``:
    the file `import mooncake_segment` uses (None: not installed for this
    interpreter); ``is_ours``: mooncake.shared_segment is mooncake-segment's
    (then ``ours`` is the same file); ``reason`` and
    ``fix``: empty when it is ours, otherwise why not and what to do;
    ``shadowed_by``: the directory of a regular `mooncake` package that hides
    ours, else None.
    """

    resolves_to: Optional[str]
    ours: Optional[str]
    is_ours: bool
    reason: str
    fix: str
    shadowed_by: Optional[str] = None

    def __str__(self) -> str:
        lines = [f"{PUBLIC_MODULE} resolves to: {self.resolves_to or 'nothing (the import fails)'}"]
        lines.append(f"mooncake-segment's module: {self.ours or 'not found on sys.path'}")
        if not self.is_ours:
            lines += [f"why: {self.reason}", f"fix: {self.fix}"]
        return "\n".join(lines)


_FIX_SHADOWED = (
    "import mooncake_segment instead (the same API: mooncake_segment.create_shared_segment, "
    "mooncake_segment.shared_segment_supported, ...), which finds mooncake-segment's files whatever else "
    "is installed; code that must say `import mooncake.shared_segment` needs an environment without that "
    "regular `mooncake` package (for Mooncake's wheel: another virtualenv)"
)
_FIX_MISSING = (
    "install mooncake-segment for this interpreter: apt install python3-mooncake-segment / "
    "dnf install python3-mooncake-segment (system Python, or a venv made with --system-site-packages), "
    "or pip install --no-build-isolation <mooncake-segment source tree or tarball> against the system "
    "library (README: Which install fits you)"
)


def _same(a: Optional[str], b: Optional[str]) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def which_shared_segment() -> SharedSegmentResolution:
    """Report which file `import mooncake.shared_segment` gives here and, when
    it is not mooncake-segment's, why and what to do.  Imports nothing."""
    in_namespace = namespace_module_file()
    ours = bundled_module_file() or in_namespace  # what mooncake_segment uses when mooncake is not ours
    loaded = sys.modules.get(PUBLIC_MODULE)
    try:
        spec = importlib.util.find_spec("mooncake")  # a top-level name: finding it imports nothing
    except ValueError:  # a `mooncake` in sys.modules without __spec__ (made by hand)
        reason = "the `mooncake` module already imported has no import spec: it was not loaded from a package"
        return SharedSegmentResolution(getattr(loaded, "__file__", None), ours, False, reason, _FIX_SHADOWED)
    if spec is None:
        return SharedSegmentResolution(
            None, ours, False, "no `mooncake` package or directory is on sys.path", _FIX_MISSING
        )
    locations = list(spec.submodule_search_locations or [])
    regular = spec.origin is not None and os.path.basename(spec.origin).startswith("__init__.")
    if loaded is not None and getattr(loaded, "__file__", None):
        resolves_to: Optional[str] = loaded.__file__
    else:
        module_spec = importlib.machinery.PathFinder.find_spec(PUBLIC_MODULE, locations)
        resolves_to = module_spec.origin if module_spec is not None else None
    if _same(resolves_to, in_namespace):
        return SharedSegmentResolution(resolves_to, resolves_to, True, "", "")
    if regular:
        package_dir = os.path.dirname(spec.origin or "")
        reason = (
            f"`mooncake` at {package_dir} is a regular package (it has {os.path.basename(spec.origin or '')}, "
            "as Mooncake's own wheel installs it), so Python never merges the namespace package "
            "mooncake-segment installs: "
            f"`import {PUBLIC_MODULE}` gives "
            f"{resolves_to or 'ModuleNotFoundError'} whatever the order on sys.path"
        )
        fix = _FIX_SHADOWED if ours else _FIX_MISSING
        return SharedSegmentResolution(resolves_to, ours, False, reason, fix, package_dir)
    if ours is None:
        return SharedSegmentResolution(
            resolves_to, None, False, "mooncake-segment's mooncake/shared_segment.py is not on sys.path", _FIX_MISSING
        )
    reason = f"an earlier `mooncake` namespace directory on sys.path holds another {PUBLIC_MODULE}"
    return SharedSegmentResolution(
        resolves_to, ours, False, reason, f"remove or rename {resolves_to}, or import mooncake_segment"
    )
