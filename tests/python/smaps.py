# SPDX-License-Identifier: Apache-2.0
"""The kernel's own figures for the rank workers, read from /proc/self/smaps here in
Python, independently of the library's reader (lib/host/smaps.c), so that a test
never checks the library against itself."""


def mapping_pss(base: int) -> int:
    """The PSS of every VMA of this process that starts at @base, in bytes."""
    inside, pss = False, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == base
            elif inside and line.startswith("Pss:"):
                pss += int(line.split()[1]) * 1024
    return pss
