# SPDX-License-Identifier: Apache-2.0
"""A live segment with publish slots for the CLI tests, through ctypes: create
LABEL of 1 MiB, one rank, with SLOTS slots (0: none) and ALIGNMENT (0: the
default), print the pid, then sleep until killed, holding the segment and its
control area's descriptor.

Usage: slots_holder.py LIBRARY LABEL SLOTS [ALIGNMENT]"""

import ctypes
import os
import signal
import sys

from front_holder import Options


def main():
    library, label, slots = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    lib = ctypes.CDLL(library)
    lib.mooncake_segment_last_error.restype = ctypes.c_char_p
    opt = Options()
    lib.mooncake_segment_options_init(ctypes.byref(opt))
    opt.commit_threads = 1
    opt.slot_count = slots
    opt.alignment = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    seg = ctypes.c_void_p()
    blob = ctypes.create_string_buffer(256)
    if lib.mooncake_segment_create(label, ctypes.c_uint64(1 << 20), ctypes.byref(opt), ctypes.byref(seg), blob):
        print("create failed:", lib.mooncake_segment_last_error().decode(), flush=True)
        return 1
    print(os.getpid(), flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
