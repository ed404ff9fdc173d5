# SPDX-License-Identifier: Apache-2.0
"""An engine's use of a kept segment, inside the booted root (check-under-systemd.sh).

Usage: kept_client.py write|read NAME.  Keeps NAME (4 MiB, through the
keeper at /run/mooncake-segment/keeper.sock, socket activated), with
"write" puts a pattern at its head, and prints one JSON line: whether the
pages were warm, the keeper's generation, and the head's bytes.  The
installed python3-mooncake-segment, as an engine would use it; no torch."""

import json
import sys

from mooncake.shared_segment import create_shared_segment

MIB = 1 << 20
PATTERN = b"kept-by-systemd!"

mode, name = sys.argv[1], sys.argv[2]
seg = create_shared_segment("kv", {"kv": {"count": 1, "shape": (4 * MIB,), "dtype": "uint8"}}, 1, 0, keep=name)
head = seg.buffers("kv")[0]
if mode == "write":
    head[: len(PATTERN)] = PATTERN
print(json.dumps({"warm": seg.warm, "generation": seg.keep_generation, "head": bytes(head[: len(PATTERN)]).decode()}))
del head  # no view of the pages may outlive close()
seg.close()
