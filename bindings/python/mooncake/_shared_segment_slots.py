# SPDX-License-Identifier: Apache-2.0
"""The publish slots of a shared segment, as Python sees them (private).

``create_shared_segment(..., slots=N)`` declares N publish slots beside the
segment (in the C library's control area, never in the caller's bytes); every
rank must declare the same N.  ``seg.slots`` is then a :class:`SegmentSlots`:
one writer publishes a block and many readers wait for it, never seeing it
half written (publish/wait), or the writer rewrites in place and the readers
copy and retry (the seqlock: writing()/read_begin()/read_retry()), and ranks
claim the right to fill a block (try_claim/release_claim; a claim of a rank
that died or closed its segment is taken over).  This module checks the
arguments and turns the native module's errors into the public ones; the
waits run in the native module without the GIL, in slices, so close() ends
them within about 0.1 s.  mooncake.shared_segment is the public module.
"""

from __future__ import annotations

import contextlib
import enum
import math
import warnings
from typing import Any, Iterator, Optional, Union

from ._shared_segment_base import SharedSegmentError, _an_int, _CudaArray, torch
from ._shared_segment_front import _public_error

#: The C library's MOONCAKE_SEGMENT_MAX_SLOTS.
MAX_SLOTS = 65536


class SlotClaim(enum.IntEnum):
    """What :meth:`SegmentSlots.try_claim` found; an int, so ``if try_claim(i):`` means "mine now"."""

    #: A live rank holds the claim: not this rank's.
    BUSY = 0
    #: This rank holds it now (it was free, or already this rank's).
    CLAIMED = 1
    #: This rank holds it now, taken over from a rank that died or closed its segment.
    TAKEN_OVER = 2


def _slot_count(slots: Any, max_slots: int = MAX_SLOTS) -> int:
    """create_shared_segment's ``slots``, checked: an int in [0, max_slots]."""
    if _an_int(slots) is None or not 0 <= slots <= max_slots:
        raise SharedSegmentError(
            f"slots must be an int in [0, {max_slots}] (the publish slots beside the segment, the same on "
            f"every rank; 0: none), got {slots!r}"
        )
    return int(slots)


def _timeout(call: str, timeout: Any) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < math.inf:
        raise SharedSegmentError(
            f"{call}: timeout must be None (no limit) or a finite number of seconds >= 0, got {timeout!r}"
        )
    return float(timeout)


def _sequence(call: str, name: str, value: Any) -> int:
    if _an_int(value) is None or not 0 <= value < 1 << 63:
        raise SharedSegmentError(f"{call}: {name} must be a sequence, an int >= 0, got {value!r}")
    return int(value)


def _stream_handle(call: str, stream: Any) -> int:
    """The runtime's handle of @stream: a torch.cuda.Stream's cuda_stream, a torch_npu stream's npu_stream, an int."""
    for attribute in ("cuda_stream", "npu_stream"):
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(handle)
    if _an_int(stream) is None or stream < 0:
        raise SharedSegmentError(
            f"{call}(stream=...) takes a torch.cuda.Stream (or a stream handle as an int >= 0), got {stream!r}"
        )
    return int(stream)


class SegmentSlots:
    """The publish slots of one rank's segment: ``seg.slots``, ``len(seg.slots)`` of them.

    Each slot has a 64-bit sequence, the same for every rank: even when
    published, odd while a write is in progress.  The stores a rank made
    before :meth:`publish` or the end of :meth:`writing` are visible to every
    rank whose :meth:`wait` or :meth:`read_begin` returned that sequence or a
    later one.  Every method may run from any thread beside the others and
    beside the segment's getters; the waits release the GIL, and
    :meth:`SharedSegment.close` ends them (ValueError) within about 0.1 s.

    Failures raise SharedSegmentError with the C library's message and
    ``errno`` (EINVAL, EBUSY, EPERM); a wait that times out raises
    TimeoutError (``errno`` ETIMEDOUT).
    """

    def __init__(self, native: Any, count: int, device_id: int = 0) -> None:
        self._native = native
        self._count = count
        self._device_id = device_id

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"<mooncake.shared_segment.SegmentSlots of {self._count} slots>"

    def _slot(self, call: str, slot: Any) -> int:
        if _an_int(slot) is None or not 0 <= slot < self._count:
            raise SharedSegmentError(
                f"{call}: slot must be an int in [0, {self._count - 1}] (the segment has {self._count} "
                f"slots), got {slot!r}"
            )
        return int(slot)

    def publish(self, slot: int, stream: Any = None, wake_host: bool = True) -> int:
        """Publish @slot: its sequence grows by 2 and every waiter wakes; returns the new sequence.

        Call it after writing the block, once: it does not wait for readers
        (acknowledge on slots of their own when the writer must know).
        SharedSegmentError (``errno`` EBUSY) while a :meth:`write_begin` ...
        :meth:`write_end` is in progress on the slot.

        With ``stream`` (a ``torch.cuda.Stream``, or a stream handle as an int,
        0 the default stream; the segment needs ``host_register=True``) the
        publish is queued on that stream instead and nothing waits: once the
        work queued before it is done (a ``copy_(..., non_blocking=True)``
        into the block), the sequence becomes the returned value, behind a
        system-scope fence, and then (``wake_host``) the CPU waiters wake (on
        CUDA; AscendCL has no host function, so there they notice within 0.1 s).
        Such a slot has one writer: do not also publish it from the CPU while
        stream publishes are queued.  Synchronize the stream before
        :meth:`SharedSegment.close`.
        """
        slot = self._slot("publish", slot)
        try:
            if stream is None:
                return int(self._native.publish(slot))
            return int(self._native.publish_on_stream(slot, _stream_handle("publish", stream), bool(wake_host)))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def wait(self, slot: int, seen: int, timeout: Optional[float] = None, stream: Any = None) -> int:
        """Wait until @slot's sequence is even and not @seen; returns it.

        Pass the sequence this rank last saw (0 at first): the block written
        before that publish is then visible.  ``timeout`` in seconds, None: no
        limit, 0: only look.  The GIL is released while waiting.  TimeoutError
        when it passes, ValueError when :meth:`SharedSegment.close` ended it;
        in the main thread a signal ends it within about 0.1 s with its
        handler's exception (Ctrl-C: KeyboardInterrupt).

        With ``stream`` (as for :meth:`publish`; ``host_register=True``) the
        host does not wait: the wait is queued on the stream, on the device,
        so the work queued after it (a copy out of the block) starts once the
        sequence is published past @seen.  It returns the sequence waited for
        (the next even one past @seen); ``timeout`` must be None (a stream
        waits for as long as it takes: wait for a publish that will come).
        """
        slot = self._slot("wait", slot)
        seen = _sequence("wait", "seen", seen)
        if stream is not None and timeout is not None:
            raise SharedSegmentError("wait(stream=...) takes no timeout: the stream waits on the device")
        timeout = _timeout("wait", timeout)
        try:
            if stream is not None:
                return int(self._native.wait_slot_on_stream(slot, seen, _stream_handle("wait", stream)))
            return int(self._native.wait_slot(slot, seen, timeout))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def write_begin(self, slot: int) -> int:
        """The seqlock writer: make @slot's sequence odd before rewriting its block; returns it.

        SharedSegmentError (``errno`` EBUSY) while another write is in
        progress: one writer at a time (claim the slot first).  A write whose
        claimer died is the exception: the rank whose :meth:`try_claim` took
        the claim over writes over it (its readers never see the half-written
        block).  Prefer :meth:`writing`, which always ends the write.
        """
        slot = self._slot("write_begin", slot)
        try:
            return int(self._native.write_begin(slot))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def write_end(self, slot: int) -> int:
        """The seqlock writer: make @slot's sequence even again and wake the waiters; returns it."""
        slot = self._slot("write_end", slot)
        try:
            return int(self._native.write_end(slot))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    @contextlib.contextmanager
    def writing(self, slot: int) -> Iterator[int]:
        """``with seg.slots.writing(i) as seq:`` rewrite block i; readers retry meanwhile.

        write_begin() on entry (the odd sequence is the ``as`` value),
        write_end() on exit, also when the body raises: a slot left odd would
        block every reader and writer for good, so the block then holds
        whatever the body left, published; rewrite it.
        """
        sequence = self.write_begin(slot)
        try:
            yield sequence
        finally:
            self.write_end(slot)

    def read_begin(self, slot: int, timeout: Optional[float] = None) -> int:
        """The seqlock reader: wait until no write of @slot is in progress; returns the (even) sequence.

        Copy the block, then ask :meth:`read_retry` with this sequence; copy
        again while it says True.  ``timeout`` as for :meth:`wait`.
        """
        slot = self._slot("read_begin", slot)
        timeout = _timeout("read_begin", timeout)
        try:
            return int(self._native.read_begin(slot, timeout))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def read_retry(self, slot: int, sequence: int) -> bool:
        """After copying: True when @slot's block may have changed since @sequence (copy again)."""
        slot = self._slot("read_retry", slot)
        sequence = _sequence("read_retry", "sequence", sequence)
        try:
            return bool(self._native.read_retry(slot, sequence))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def try_claim(self, slot: int) -> SlotClaim:
        """Claim the right to fill @slot's block, without waiting.

        Returns :class:`SlotClaim` (an int): ``CLAIMED`` (1) when this rank
        holds it now, ``TAKEN_OVER`` (2) when it took it over from a rank
        that died or closed its segment, ``BUSY`` (0) when a live rank holds
        it.  A dead holder's claim is free once the kernel has ended every
        thread of that process, a few milliseconds after it shows as dead:
        retry for a moment (the tests allow 2 s) rather than once.
        """
        slot = self._slot("try_claim", slot)
        try:
            return SlotClaim(self._native.try_claim(slot))
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def release_claim(self, slot: int) -> None:
        """Let go of this rank's claim on @slot; SharedSegmentError (``errno`` EPERM) when it holds none."""
        slot = self._slot("release_claim", slot)
        try:
            self._native.release_claim(slot)
        except RuntimeError as exc:
            raise _public_error(exc) from exc

    def device_sequences(self) -> "torch.Tensor":
        """Every slot's sequence as a CUDA int64 tensor on this rank's device: the same words, never a copy.

        For kernels and batched checks on the GPU (``host_register=True``):
        item i is slot i's sequence.  Read only, and a read orders nothing by
        itself (as :meth:`sequences`).  SharedSegmentError without CUDA or
        without host_register.
        """
        if torch is None or not torch.cuda.is_available():
            raise SharedSegmentError("device_sequences() needs a torch built with CUDA and a visible GPU")
        try:
            address, stride = self._native.slot_device_words()
            words, _ = self._native.slot_words()
        except RuntimeError as exc:
            raise _public_error(exc) from exc
        nbytes = words.nbytes
        array = _CudaArray(words, address, nbytes)
        return torch.as_tensor(array, device=f"cuda:{self._device_id}").view(torch.int64)[::stride]

    def sequences(self, tensor: Optional[bool] = None) -> Union["torch.Tensor", memoryview]:
        """Every slot's sequence now and later: a live, read-only view, for engines that batch their checks.

        A torch int64 tensor of ``len(self)`` items when torch is installed
        (``tensor=None``) or ``tensor=True``, else a read-only memoryview of
        format ``q`` (``numpy.asarray`` takes it); either way item i is slot
        i's sequence, read from the shared words (strided: one 64-byte line
        per slot), never a copy.  Never write to it.  A sequence read this
        way orders nothing: before reading the block of a slot that moved,
        confirm with ``wait(i, seen, timeout=0)`` or :meth:`read_begin`.  The
        view holds the segment mapped, as :meth:`SharedSegment.buffers` do:
        drop it before :meth:`SharedSegment.close`.
        """
        if tensor is None:
            tensor = torch is not None
        if tensor and torch is None:
            raise SharedSegmentError("sequences(tensor=True) needs torch; tensor=False gives a memoryview")
        try:
            words, stride = self._native.slot_words()
        except RuntimeError as exc:
            raise _public_error(exc) from exc
        if not tensor:
            return words[::stride]
        with warnings.catch_warnings():
            # Read-only on purpose: torch cannot mark a tensor so, and warns.
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            return torch.frombuffer(words, dtype=torch.int64)[::stride]
