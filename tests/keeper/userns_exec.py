# SPDX-License-Identifier: Apache-2.0
"""Run a command in a user namespace of its own with the maps given, as a
container runtime does: the command's process unshares, and this one, root
in the parent namespace, writes its maps (several ranges, which `unshare
--map-users` cannot write without newuidmap).

Usage: userns_exec.py UID_MAP GID_MAP -- COMMAND...  (ranges "INSIDE OUTSIDE
COUNT" separated by ";").  SIGTERM and SIGINT are passed on; the exit status
is the command's."""

import ctypes
import os
import signal
import sys

CLONE_NEWUSER = 0x10000000

uid_map, gid_map = (text.replace(";", "\n") + "\n" for text in sys.argv[1:3])
command = sys.argv[4:]
unshared_r, unshared_w = os.pipe()
mapped_r, mapped_w = os.pipe()
child = os.fork()
if child == 0:
    os.close(unshared_r)
    os.close(mapped_w)
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER) != 0:
        os._exit(126)
    os.write(unshared_w, b"u")
    if os.read(mapped_r, 1) != b"m":
        os._exit(126)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    os.execvp(command[0], command)
os.close(unshared_w)
os.close(mapped_r)
if os.read(unshared_r, 1) != b"u":
    sys.exit("userns_exec.py: the child could not unshare its user namespace")
with open(f"/proc/{child}/setgroups", "w") as f:
    f.write("deny")
for kind, text in (("uid_map", uid_map), ("gid_map", gid_map)):
    with open(f"/proc/{child}/{kind}", "w") as f:
        f.write(text)
for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda signum, frame: os.kill(child, signum))
os.write(mapped_w, b"m")
_, status = os.waitpid(child, 0)
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
