# SPDX-License-Identifier: Apache-2.0
"""A background owner for the CLI tests, through ctypes: create LABEL of SIZE
bytes with background_commit and one commit thread, fork a child that keeps
the mappings, print "OWNER_PID CHILD_PID", then stop (SIGSTOP stops the commit
thread with the process, so the front holds still until SIGCONT).  Once
continued it waits for every byte, prints "ready" and sleeps until killed.

Usage: front_holder.py LIBRARY LABEL SIZE"""

import ctypes
import os
import signal
import sys


class Options(ctypes.Structure):
    # struct mooncake_segment_options as of 0.3 (lib/mooncake/segment.h).
    _fields_ = [
        ("world_size", ctypes.c_uint32),
        ("rank_id", ctypes.c_uint32),
        ("owner_rank", ctypes.c_uint32),
        ("device_id", ctypes.c_int32),
        ("mmap", ctypes.c_bool),
        ("host_register", ctypes.c_bool),
        ("hugetlb", ctypes.c_bool),
        ("numa_node", ctypes.c_int32),
        ("commit_threads", ctypes.c_uint32),
        ("populate_on_import", ctypes.c_bool),
        ("hugetlb_page_size", ctypes.c_uint64),
        ("register_chunk_size", ctypes.c_uint64),
        ("background_commit", ctypes.c_bool),
        ("register_pause_us", ctypes.c_uint32),
        ("register_offset", ctypes.c_uint64),
        ("register_length", ctypes.c_uint64),
        ("slot_count", ctypes.c_uint32),
        ("keep_name", ctypes.c_char_p),
        ("keep_identity", ctypes.c_void_p),
        ("keep_identity_bytes", ctypes.c_uint32),
        ("keep_flags", ctypes.c_uint32),
        ("keep_sharing", ctypes.c_uint32),
        ("keep_gid", ctypes.c_uint32),
        ("keep_owner_uid", ctypes.c_uint32),
        ("alignment", ctypes.c_uint64),
    ]


def main():
    library, label, size = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    lib = ctypes.CDLL(library)
    lib.mooncake_segment_last_error.restype = ctypes.c_char_p
    lib.mooncake_segment_ready_bytes.restype = ctypes.c_uint64
    lib.mooncake_segment_ready_bytes.argtypes = [ctypes.c_void_p]
    lib.mooncake_segment_wait_ready.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
    opt = Options()
    lib.mooncake_segment_options_init(ctypes.byref(opt))
    opt.commit_threads = 1
    opt.background_commit = True
    seg = ctypes.c_void_p()
    blob = ctypes.create_string_buffer(256)
    if lib.mooncake_segment_create(label, ctypes.c_uint64(size), ctypes.byref(opt), ctypes.byref(seg), blob):
        print("create failed:", lib.mooncake_segment_last_error().decode(), flush=True)
        return 1
    child = os.fork()
    if child == 0:
        while True:
            signal.pause()
    print(os.getpid(), child, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    err = lib.mooncake_segment_wait_ready(seg, 0, 0, -1)
    print("ready" if err == 0 else "wait_ready: " + lib.mooncake_segment_last_error().decode(), flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
