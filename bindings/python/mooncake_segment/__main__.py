# SPDX-License-Identifier: Apache-2.0
"""python3 -m mooncake_segment [--doctor]: which file `import mooncake.shared_segment` gives.

Exit status 0 when it is mooncake-segment's, 1 otherwise.  --doctor prints one
line "ok|warn<TAB>what was seen<TAB>fix" for `mooncake-segment doctor`.
"""

import sys

from ._locate import SharedSegmentResolution, which_shared_segment


def doctor_line(resolution: SharedSegmentResolution) -> tuple:
    """Status, what was seen and the fix, short enough for doctor's table."""
    gives = resolution.resolves_to or "ModuleNotFoundError"
    if resolution.is_ours:
        return "ok", f"{sys.executable}: mooncake.shared_segment is ours ({gives})", ""
    if resolution.ours is None:
        return "warn", f"{sys.executable}: mooncake-segment's Python package is not installed for it", resolution.fix
    if resolution.shadowed_by:
        seen = (
            f"{sys.executable}: a regular `mooncake` package (with __init__.py) at {resolution.shadowed_by} "
            f"hides ours; mooncake.shared_segment gives {gives}"
        )
        return "warn", seen, "import mooncake_segment (same API) instead, or use an environment without that package"
    return "warn", f"{sys.executable}: mooncake.shared_segment gives {gives}, not ours", resolution.fix


def main(argv: list) -> int:
    resolution = which_shared_segment()
    if argv[1:] == ["--doctor"]:
        print("\t".join(doctor_line(resolution)))
    elif argv[1:]:
        print("usage: python3 -m mooncake_segment [--doctor]", file=sys.stderr)
        return 2
    else:
        print(resolution)
    return 0 if resolution.is_ours else 1


sys.exit(main(sys.argv))
