# SPDX-License-Identifier: Apache-2.0
"""The readiness front of a shared segment, as Python sees it (private).

With ``background=True`` the owner's create returns once the first chunk
(2 MiB, or one huge page) is committed, and the C library commits the rest
behind a front that every rank sees (and, with host_register, each rank
registers its part behind it).  This module checks the arguments of
``create_shared_segment``'s front options and of ``wait_ready``, turns the
native module's errors into the public ones, and runs the watcher thread of
``ready_future``.  mooncake.shared_segment is the public module.

The watcher thread never keeps a segment alive and never holds up close():
it holds only a weak reference to the public SharedSegment between waits of
``_WATCH_SLICE_SECONDS``, and the native wait itself ends within a slice of
its own when close() runs (the native object counts its waiters and destroys
the segment only once they have left).
"""

from __future__ import annotations

import math
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Dict, Optional, Tuple

from ._shared_segment_base import SharedSegmentError, _an_int

#: How long the watcher of ready_future() waits at a time before it looks
#: again whether its segment still exists and whether its future was cancelled.
_WATCH_SLICE_SECONDS = 0.2

#: The library's upper bound on register_pause_us (a uint32_t).
_MAX_PAUSE_US = (1 << 32) - 1


def _front_options(
    background: Any,
    host_register: bool,
    commit_threads: Any,
    register_offset: Any,
    register_length: Any,
    register_pause_us: Any,
    total: int,
) -> Dict[str, Any]:
    """The native create's keyword arguments for these options: only those asked for.

    ``background`` has been checked to be a bool.  Raises SharedSegmentError
    naming the first bad option.
    """
    options: Dict[str, Any] = {}
    if background:
        options["background_commit"] = True
    if commit_threads is not None:
        if _an_int(commit_threads) is None or commit_threads < 0:
            raise SharedSegmentError(
                f"commit_threads must be an int >= 0 (the owner's threads committing the pages; 0: automatic), "
                f"got {commit_threads!r}"
            )
        if commit_threads:
            options["commit_threads"] = int(commit_threads)
    if register_offset != 0 or register_length is not None:
        if not host_register:
            raise SharedSegmentError(
                "register_offset and register_length choose the part of the segment this rank registers: "
                "they need host_register=True"
            )
        if _an_int(register_offset) is None or not 0 <= register_offset <= total:
            raise SharedSegmentError(
                f"register_offset must be an int in [0, {total}] (the segment's size), got {register_offset!r}"
            )
        if register_length is not None and (
            _an_int(register_length) is None or not 0 < register_length <= total - register_offset
        ):
            raise SharedSegmentError(
                f"register_length must be None (to the end) or an int in [1, {total - register_offset}] "
                f"(the {total} bytes of the segment after register_offset {register_offset}), "
                f"got {register_length!r}"
            )
        if register_offset:
            options["register_offset"] = int(register_offset)
        if register_length is not None:
            options["register_length"] = int(register_length)
    if register_pause_us is not None:
        if not (background and host_register):
            raise SharedSegmentError(
                "register_pause_us is the pause between the chunks of a background registration: "
                "it needs background=True and host_register=True"
            )
        if _an_int(register_pause_us) is None or not 1 <= register_pause_us <= _MAX_PAUSE_US:
            raise SharedSegmentError(
                f"register_pause_us must be None (the library's 1000) or an int in [1, {_MAX_PAUSE_US}] "
                f"microseconds, got {register_pause_us!r}"
            )
        options["register_pause_us"] = int(register_pause_us)
    return options


def _wait_arguments(offset: Any, length: Any, timeout: Any, size: int) -> Tuple[int, int, Optional[float]]:
    """wait_ready()'s arguments checked against a segment of @size bytes: (offset, length, timeout)."""
    if _an_int(offset) is None or not 0 <= offset <= size:
        raise SharedSegmentError(
            f"wait_ready: offset must be an int in [0, {size}] (the segment's size), got {offset!r}"
        )
    if length is None:
        length = size - offset
    elif _an_int(length) is None or not 0 <= length <= size - offset:
        raise SharedSegmentError(
            f"wait_ready: length must be None (to the end) or an int in [0, {size - offset}] "
            f"(the bytes after offset {offset}), got {length!r}"
        )
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < math.inf:
            raise SharedSegmentError(
                f"wait_ready: timeout must be None (no limit) or a finite number of seconds >= 0, got {timeout!r}"
            )
        timeout = float(timeout)
    return int(offset), int(length), timeout


def _public_error(exc: BaseException) -> BaseException:
    """The native module's error as the public API raises it: SharedSegmentError with the C message.

    TimeoutError and ValueError (closed) stay what they are.
    """
    if isinstance(exc, RuntimeError) and not isinstance(exc, SharedSegmentError):
        errno = getattr(exc, "errno", None)
        error = SharedSegmentError(str(exc), errno if isinstance(errno, int) else None)
        error.__cause__ = exc
        return error
    return exc


def _settle(future: "Future[int]", result: Optional[int] = None, error: Optional[BaseException] = None) -> None:
    """Complete @future, unless its holder cancelled it."""
    if not future.set_running_or_notify_cancel():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]  # the size: set whenever error is None


def _ready_future(segment: Any, native: Any, size: int) -> "Future[int]":
    """A future of @segment's whole readiness: done now, or settled by a watcher thread."""
    future: "Future[int]" = Future()
    wait = getattr(native, "wait_ready", None)
    if wait is None:  # a native module of upstream's shape: everything is ready at create
        _settle(future, size)
        return future
    try:
        wait(0, None, 0)
    except TimeoutError:
        pass
    except (RuntimeError, OSError) as exc:
        _settle(future, error=_public_error(exc))
        return future
    else:
        _settle(future, size)
        return future
    thread = threading.Thread(
        target=_watch, args=(weakref.ref(segment), future, size), name="mooncake-segment-ready", daemon=True
    )
    thread.start()
    return future


def _watch(segment_ref: "weakref.ref[Any]", future: "Future[int]", size: int) -> None:
    """The watcher thread: wait in slices until the segment is ready, failed, closed or gone."""
    try:
        while True:
            segment = segment_ref()
            if segment is None:  # freed without close(): nobody can want the answer
                future.cancel()
                return
            native = segment._native
            del segment  # never keep the public segment alive across a wait
            if future.cancelled():
                return
            try:
                native.wait_ready(0, None, _WATCH_SLICE_SECONDS)
            except TimeoutError:
                continue
            except ValueError:
                if native.closed:  # close() ended the wait, or came between two
                    future.cancel()
                    return
                raise
            finally:
                del native  # the last reference may be this one: free the segment here, not later
            _settle(future, size)
            return
    except BaseException as exc:  # noqa: BLE001 - every failure is the future's, never a silent thread death
        if not future.done():
            _settle(future, error=_public_error(exc))
