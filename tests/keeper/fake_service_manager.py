# SPDX-License-Identifier: Apache-2.0
"""A fake service manager that speaks systemd's real protocols to one service.

What mooncake-segmentd meets under systemd, without systemd (a test cannot
run PID 1, and a container here has none):

- a socket unit: a listening SOCK_SEQPACKET socket at a path, created once and
  passed to every start of the service, named like ``FileDescriptorName=``;
- the notification socket (``NOTIFY_SOCKET``): a datagram socket with
  SO_PASSCRED that reads ``READY=1``, ``STATUS=``, ``STOPPING=1``,
  ``FDSTORE=1`` + ``FDNAME=`` with the descriptors by SCM_RIGHTS, and
  ``FDSTOREREMOVE=1`` + ``FDNAME=``; like ``NotifyAccess=main`` it believes
  only the main process (by the kernel's credentials), and like
  ``FileDescriptorStoreMax=`` it keeps at most so many descriptors, the same
  open file once;
- socket activation on every start: the socket, then the stored descriptors
  in the order they were stored, at descriptors 3, 4, ... with
  ``LISTEN_PID``, ``LISTEN_FDS`` and ``LISTEN_FDNAMES``.

The store outlives the service's processes, as systemd's does across a crash
or ``systemctl restart``; ``stop()`` empties it, as ``systemctl stop`` does
on systemd 252 (no FileDescriptorStorePreserve=).

Usage (one service at a time)::

    with FakeServiceManager(tmpdir, socket_path=tmpdir / "keeper.sock") as manager:
        proc = manager.start(["/usr/sbin/mooncake-segmentd"], stdout=log, stderr=log)
        manager.wait_ready(timeout=10)
        ...                        # clients connect to manager.socket_path
        manager.kill()             # SIGKILL, like a crash
        proc = manager.start([...])  # a restart: the socket and the store come back
        manager.wait_ready(timeout=10)

``start(..., stdin=subprocess.PIPE, stdout=subprocess.PIPE)`` gives pipes on
the returned ``ManagedProcess`` (``.stdin``, ``.stdout``), for a probe that
is driven by commands.  ``stored_names()`` lists the store,
``stored_fd(name)`` gives the manager's own copy of a stored descriptor (to
look at, or to corrupt in a test), and ``messages`` every notification
received, as dictionaries.
"""

import array
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["FakeServiceManager", "ManagedProcess"]

SCM_CREDENTIALS = getattr(socket, "SCM_CREDENTIALS", 2)
SO_PASSCRED = getattr(socket, "SO_PASSCRED", 16)
# systemd's limit for one notification: a datagram, and at most 253 descriptors (SCM_MAX_FD).
MESSAGE_MAX = 4096
FDS_MAX = 253


def fdname_valid(name):
    """systemd's fdname_is_valid(): 1..255 printable ASCII without ':'."""
    return 1 <= len(name) <= 255 and all(0x20 <= ord(c) <= 0x7E and c != ":" for c in name)


class ManagedProcess:
    """The service's main process, forked by the manager (not a Popen: the
    descriptors must land at 3, 4, ... and LISTEN_PID must be its own pid)."""

    def __init__(self, pid, stdin=None, stdout=None):
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def close_pipes(self):
        for f in (self.stdin, self.stdout):
            if f is not None:
                f.close()


class FakeServiceManager:
    """One service unit with its socket unit and its descriptor store."""

    def __init__(
        self,
        workdir,
        *,
        socket_path=None,
        socket_name="keeper",
        socket_mode=0o666,
        fd_store_max=4096,
        export_fdstore=False,
    ):
        """workdir: where the notification socket goes.  socket_path: the
        socket unit's ListenSequentialPacket= (None: no socket unit).
        fd_store_max: FileDescriptorStoreMax= (0 refuses every FDSTORE=1).
        export_fdstore: set $FDSTORE to it in the service's environment, as
        systemd 254 and later do."""
        self.workdir = Path(workdir)
        self.socket_name = socket_name
        self.fd_store_max = fd_store_max
        self.export_fdstore = export_fdstore
        self.stored = []  # [(name, fd)], in the order stored
        self.messages = []  # every notification, parsed, with "pid" and "fds"
        self.refused = []  # (reason, message) for what a real manager would drop
        self.ready = False
        self.status = None
        self.stopping = False
        self.process = None

        self.notify_path = str(self.workdir / "notify.sock")
        if len(self.notify_path) > 100:  # sun_path holds 108 bytes: a deep test directory does not fit
            self._short_dir = tempfile.mkdtemp(prefix="fake-systemd-")
            self.notify_path = os.path.join(self._short_dir, "notify.sock")
        else:
            self._short_dir = None
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.notify.setsockopt(socket.SOL_SOCKET, SO_PASSCRED, 1)
        self.notify.bind(self.notify_path)

        self.socket_path = None
        self.listener = None
        if socket_path is not None:
            self.socket_path = str(socket_path)
            Path(self.socket_path).parent.mkdir(parents=True, exist_ok=True)
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            self.listener.bind(self.socket_path)
            os.chmod(self.socket_path, socket_mode)
            self.listener.listen(128)

    # --- the service's processes ---------------------------------------------

    def start(self, argv, *, env=None, stdin=None, stdout=None, stderr=None, pass_store=True):
        """Start the service: the socket, then (pass_store) the stored
        descriptors at 3, 4, ...  stdin/stdout: subprocess.PIPE for pipes,
        a file object or descriptor, or None to inherit.  Returns the
        ManagedProcess, also kept as .process."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the service still runs: kill() or stop() it first")
        self.process_notifications()
        self.ready = False
        self.stopping = False
        passed, names = [], []
        if self.listener is not None:
            passed.append(self.listener.fileno())
            names.append(self.socket_name)
        if pass_store:
            for name, fd in self.stored:
                passed.append(fd)
                names.append(name)
        environment = dict(os.environ if env is None else env)
        for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "FDSTORE"):
            environment.pop(key, None)
        environment["NOTIFY_SOCKET"] = self.notify_path
        if self.export_fdstore and self.fd_store_max:
            environment["FDSTORE"] = str(self.fd_store_max)
        if passed:
            environment["LISTEN_FDS"] = str(len(passed))
            environment["LISTEN_FDNAMES"] = ":".join(names)

        pipes = {}
        child_stdio = []
        for key, spec, parent_reads in (("stdin", stdin, False), ("stdout", stdout, True), ("stderr", stderr, True)):
            if spec == subprocess.PIPE:
                r, w = os.pipe2(os.O_CLOEXEC)
                child_stdio.append(w if parent_reads else r)
                pipes[key] = (r, w, parent_reads)
            elif spec is None:
                child_stdio.append({"stdin": 0, "stdout": 1, "stderr": 2}[key])
            else:
                child_stdio.append(spec if isinstance(spec, int) else spec.fileno())

        pid = os.fork()
        if pid == 0:  # the child: only descriptor moves, then exec
            try:
                sources = child_stdio + passed
                base = max([3 + len(passed), 16] + sources) + 1
                moved = [os.dup2(fd, base + i, inheritable=False) or (base + i) for i, fd in enumerate(sources)]
                for i in range(3):
                    os.dup2(moved[i], i, inheritable=True)
                for i, fd in enumerate(moved[3:]):
                    os.dup2(fd, 3 + i, inheritable=True)
                os.closerange(3 + len(passed), 1 << 20)  # close_range(): everything else
                environment["LISTEN_PID"] = str(os.getpid())
                if not passed:
                    environment.pop("LISTEN_PID")
                os.execve(argv[0], list(argv), environment)
            finally:
                os._exit(127)

        process = ManagedProcess(pid)
        for key, (r, w, parent_reads) in pipes.items():
            if parent_reads:
                os.close(w)
                setattr(process, key, os.fdopen(r, "r", buffering=1))
            else:
                os.close(r)
                setattr(process, key, os.fdopen(w, "w", buffering=1))
        self.process = process
        return process

    def kill(self, sig=signal.SIGKILL, timeout=10):
        """Signal the main process (SIGKILL: a crash) and reap it; then read
        what it sent before it died.  The store stays, as after a crash."""
        if self.process is not None:
            self.process.send_signal(sig)
            self.process.wait(timeout)
        self.process_notifications()

    def stop(self, timeout=10):
        """`systemctl stop` on systemd 252: SIGTERM, then the store is emptied."""
        self.kill(signal.SIGTERM, timeout)
        self.discard_store()

    def discard_store(self):
        for _, fd in self.stored:
            os.close(fd)
        self.stored = []

    # --- notifications ---------------------------------------------------------

    def process_notifications(self, timeout=0.0):
        """Read every notification waiting (waiting up to timeout seconds
        for the first one); returns how many were read."""
        count = 0
        wait = timeout
        while True:
            readable, _, _ = select.select([self.notify], [], [], wait)
            if not readable:
                return count
            self._receive_one()
            count += 1
            wait = 0

    def wait_for(self, predicate, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the service did not notify in time")
            if self.process is not None and self.process.poll() is not None:
                self.process_notifications()
                if predicate():
                    break
                raise RuntimeError(f"the service exited with {self.process.returncode}")
            self.process_notifications(min(left, 0.1))

    def wait_ready(self, timeout=10.0):
        self.wait_for(lambda: self.ready, timeout)

    def _receive_one(self):
        ancillary = socket.CMSG_SPACE(FDS_MAX * 4) + socket.CMSG_SPACE(12)
        data, cmsgs, flags, _ = self.notify.recvmsg(MESSAGE_MAX, ancillary, socket.MSG_CMSG_CLOEXEC)
        fds, pid = [], None
        for level, kind, payload in cmsgs:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                fds.extend(received)
            elif level == socket.SOL_SOCKET and kind == SCM_CREDENTIALS:
                pid, _, _ = struct.unpack("iII", payload[:12])
        fields = {}
        for line in data.decode("utf-8", "replace").split("\n"):
            if "=" in line:
                key, value = line.split("=", 1)
                fields[key] = value
        message = {"pid": pid, "fds": len(fds), **fields}
        self.messages.append(message)

        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            return self._refuse("truncated notification", message, fds)
        if self.process is None or pid != self.process.pid:
            return self._refuse("not from the main process (NotifyAccess=main)", message, fds)
        if fields.get("READY") == "1":
            self.ready = True
        if "STATUS" in fields:
            self.status = fields["STATUS"]
        if fields.get("STOPPING") == "1":
            self.stopping = True
        name = fields.get("FDNAME", "stored")
        if fields.get("FDSTOREREMOVE") == "1":
            if not fdname_valid(name):
                return self._refuse("FDSTOREREMOVE=1 with an invalid FDNAME", message, fds)
            for stored_name, fd in [s for s in self.stored if s[0] == name]:
                os.close(fd)
            self.stored = [s for s in self.stored if s[0] != name]
        if fields.get("FDSTORE") == "1":
            if not fdname_valid(name):
                return self._refuse("FDSTORE=1 with an invalid FDNAME", message, fds)
            for fd in fds:
                if any(self._same_file(fd, kept) for _, kept in self.stored):
                    os.close(fd)  # the same open file once, as systemd's same_fd()
                elif len(self.stored) >= self.fd_store_max:
                    self.refused.append(("FileDescriptorStoreMax= reached", message))
                    os.close(fd)
                else:
                    self.stored.append((name, fd))
        else:
            for fd in fds:  # descriptors with any other message are closed
                os.close(fd)
        return None

    def _refuse(self, reason, message, fds):
        self.refused.append((reason, message))
        for fd in fds:
            os.close(fd)

    @staticmethod
    def _same_file(a, b):
        sa, sb = os.fstat(a), os.fstat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)

    # --- the store ---------------------------------------------------------------

    def stored_names(self):
        return [name for name, _ in self.stored]

    def stored_fd(self, name):
        """The manager's copy of the first descriptor stored as name (not a
        duplicate: do not close it)."""
        for stored_name, fd in self.stored:
            if stored_name == name:
                return fd
        raise KeyError(name)

    def close(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.process is not None:
            self.process.close_pipes()
        self.discard_store()
        self.notify.close()
        if self.listener is not None:
            self.listener.close()
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass
        try:
            os.unlink(self.notify_path)
        except FileNotFoundError:
            pass
        if self._short_dir:
            os.rmdir(self._short_dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
