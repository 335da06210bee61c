"""Single-producer single-consumer ring of fixed-size float32 records in shared memory.

One sampler writes whole transitions into its own ring, packed as one row of ``record_width``
float32 (obs | action | reward | next_obs | terminated | truncated); one reader (the feeder that
drains rings into replay storage) reads them in batches.

Ownership: the supervisor creates the ring (:meth:`Ring.create`) and unlinks it at the end; the
writer and the reader attach (:meth:`Ring.attach`) with their role and only close. On a crash of
the supervisor the segment stays until the next start's sweep
(:func:`~spreeze_like.ipc.sweep.sweep_dead_segments`).

Protocol (the orderings live in native code, ``native/include/spreeze/shm_seq.hpp``):

- ``write_seq`` and ``read_seq`` are monotonically increasing record counts, each on its own cache
  line; record ``i`` lives in slot ``i % capacity``.
- The writer copies a batch into free slots and then publishes ``write_seq`` with a *release*
  store, in one native call. The reader loads ``write_seq`` with *acquire*, so every record below
  it is complete when the reader looks at it; it never sees a torn or half-written record.
- The reader releases records by publishing ``read_seq`` (release) after it has copied them; the
  writer never overwrites a slot at or above ``read_seq``.
- When the ring is full the writer waits (backpressure; nothing is ever dropped), checking that
  the reader is alive and giving up after ``timeout`` with a one-line error. A waiting side
  sleeps in the kernel on a futex doorbell in the header and the other side's publish wakes it:
  no CPU burnt while waiting, microseconds of wake-up latency. Each write that had to
  wait counts once in ``full_waits`` (the ``ipc/ring_full_waits`` metric), its time in
  ``full_wait_s``.
- A restarted writer attaches the same ring and continues from the published ``write_seq``;
  records its dead predecessor copied but never published are overwritten, never read.
- Nothing read from the shared header is trusted: the sizes are checked against the segment at
  attach, and counters that claim more records than the ring holds (memory another process
  overwrote, or two writers) raise :class:`~spreeze_like.errors.ShmError` instead of steering a
  copy outside the mapping.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Literal

import numpy as np

from spreeze_like.errors import PeerDeadError, ShmError
from spreeze_like.ipc.naming import pid_alive
from spreeze_like.ipc.segment import CACHE_LINE, Segment, align_up
from spreeze_like.native import _native

Role = Literal["writer", "reader"]

MAGIC = 0x315A5053474E4952  # b"RINGSPZ1" little-endian
LAYOUT_VERSION = 1
# uint64 word indices in the header; one cache line per owner so the two sides never false-share.
_MAGIC, _LAYOUT, _CREATOR, _CAPACITY, _WIDTH = 0, 1, 2, 3, 4  # line 0: constant after create
# line 1, writer's: write_seq (u64, release), doorbell to the reader (u32), reader-is-sleeping flag
# (u32), end-of-stream flag (u64, release). Line 2, reader's: read_seq, doorbell to the writer,
# writer-is-sleeping flag. The native core derives the words after each counter from its offset.
_WRITE_SEQ_OFF = 1 * CACHE_LINE
_READ_SEQ_OFF = 2 * CACHE_LINE
_WRITER_PID, _FULL_WAITS, _FULL_WAIT_NS = 24, 25, 26  # line 3: writer-owned, monitoring only
_READER_PID = 32  # line 4: reader-owned
DATA_OFFSET = 8 * CACHE_LINE
_PEER_CHECK_S = 0.05  # how often a waiting side checks that the other one is alive


class Ring:
    """An SPSC ring of ``capacity`` records of ``record_width`` float32 each.

    Attributes:
        name: Segment name.
        capacity: Records the ring holds.
        record_width: float32 values per record.
        role: ``"writer"``, ``"reader"`` or ``None`` (the supervisor's handle, for stats and unlink).
    """

    def __init__(self, seg: Segment, role: Role | None, peer_alive: Callable[[], bool] | None = None) -> None:
        self._seg = seg
        self.name = seg.name
        self._hdr = seg.ndarray(np.uint64, DATA_OFFSET // 8, 0)
        if _native.load_u64(seg.mmap, 0) != MAGIC or int(self._hdr[_LAYOUT]) != LAYOUT_VERSION:
            raise ShmError(
                f"shared memory segment {seg.name} is not a ring of layout {LAYOUT_VERSION}: "
                "it belongs to another version of spreeze_like; stop that run or sweep stale segments"
            )
        self.capacity = int(self._hdr[_CAPACITY])
        self.record_width = int(self._hdr[_WIDTH])
        # The header is shared memory that any process of this user can overwrite: its sizes are
        # checked (in Python integers, which cannot overflow) before anything is laid over them.
        if self.capacity < 1 or self.record_width < 1 or self.nbytes_for(self.capacity, self.record_width) > seg.size:
            raise ShmError(
                f"ring {seg.name} has a corrupt header: {self.capacity} records of {self.record_width} float32 "
                f"do not fit its {seg.size} bytes; another process wrote into it; restart the run"
            )
        self.role = role
        self._records = seg.ndarray(np.float32, (self.capacity, self.record_width), DATA_OFFSET)
        self._core = _native.RingCore(
            seg.mmap, _WRITE_SEQ_OFF, _READ_SEQ_OFF, DATA_OFFSET, self.capacity, self.record_width * 4, seg.name
        )
        self._peer_alive = peer_alive
        self._push = self._core.push if role == "writer" else self._not_writer
        if role == "writer":
            self._hdr[_WRITER_PID] = os.getpid()
            self._core.set_closed(False)  # a restarted writer reopens the stream
        elif role == "reader":
            self._hdr[_READER_PID] = os.getpid()

    # ----------------------------------------------------------------------------- lifecycle
    @staticmethod
    def nbytes_for(capacity: int, record_width: int) -> int:
        """Segment size of a ring of ``capacity`` records of ``record_width`` float32."""
        return DATA_OFFSET + align_up(capacity * record_width * 4)

    @classmethod
    def create(cls, name: str, capacity: int, record_width: int, role: Role | None = None) -> Ring:
        """Create the ring's segment (supervisor). Raises ShmError on a name clash or a full /dev/shm."""
        if capacity < 1 or record_width < 1:
            raise ValueError(f"ring capacity and record width must be >= 1, got {capacity} and {record_width}")
        seg = Segment.create(name, cls.nbytes_for(capacity, record_width))
        try:
            hdr = seg.ndarray(np.uint64, 8, 0)
            hdr[[_CREATOR, _CAPACITY, _WIDTH, _LAYOUT]] = [os.getpid(), capacity, record_width, LAYOUT_VERSION]
            del hdr
            _native.store_u64(seg.mmap, _MAGIC * 8, MAGIC)  # last, with release: attachers see a full header
            return cls(seg, role)
        except BaseException:
            seg.close()
            seg.unlink()
            raise

    @classmethod
    def attach(cls, name: str, role: Role, peer_alive: Callable[[], bool] | None = None) -> Ring:
        """Attach an existing ring as its writer or reader.

        Args:
            name: Segment name.
            role: ``"writer"`` or ``"reader"``; the pid is recorded so the other side can check it.
            peer_alive: Optional callable telling whether the other side lives; by default the
                peer's pid in the header is checked.
        """
        return cls(Segment.attach(name, min_size=DATA_OFFSET), role, peer_alive)

    def close(self) -> None:
        """Drop this process's mapping (never unlinks)."""
        self._push = self._not_writer
        self._core = None  # releases the native side's hold on the mapping
        self._records = self._hdr = None  # type: ignore[assignment]
        self._seg.close()

    def unlink(self) -> None:
        """Remove the segment's name (creator only, see :meth:`Segment.unlink`)."""
        self._seg.unlink()

    def __repr__(self) -> str:
        return f"Ring({self.name!r}, capacity={self.capacity}, record_width={self.record_width}, role={self.role})"

    # ----------------------------------------------------------------------------- writer
    def write(self, rows: np.ndarray, timeout: float | None = 60.0) -> None:
        """Append records (shape ``(n, record_width)`` or ``(record_width,)``, C-contiguous float32).

        Returns when every record is published; waits while the ring is full.

        Raises:
            PeerDeadError: The reader died while the ring was full.
            TimeoutError: The ring stayed full for ``timeout`` seconds.
            ValueError: ``rows`` has the wrong shape or dtype.
        """
        left = self._push(rows)
        if left:
            self._wait_and_write(rows, left, timeout)

    def try_write(self, rows: np.ndarray) -> int:
        """Append as many records as fit now, without waiting; returns how many were written."""
        n = 1 if rows.ndim == 1 else len(rows)
        return n - self._push(rows)

    def wait_writable(self, n: int = 1, timeout: float = 0.05) -> bool:
        """Sleep until ``n`` slots are free (at most the capacity) or ``timeout`` passes; True if free.

        No liveness check and no exception: the building block for a writer with its own stop
        condition (``while not done: try_write; if stopping: break; wait_writable(...)``).
        """
        return self._core.wait_space(n, timeout)

    def close_writer(self) -> None:
        """Mark the end of the stream: the reader sees :attr:`writer_closed` once it has read everything."""
        self._core.set_closed(True)

    def _wait_and_write(self, rows: np.ndarray, left: int, timeout: float | None) -> None:
        n = 1 if rows.ndim == 1 else len(rows)
        start = time.monotonic()
        while left:
            # Sleep on the reader's doorbell (no CPU, woken within microseconds of a release), for
            # at most one liveness-check period at a time.
            if not self._core.wait_space(left, _PEER_CHECK_S):
                now = time.monotonic()
                if not self._reader_alive():
                    self._count_wait(start)
                    raise PeerDeadError(
                        f"reader of ring {self.name} (pid {int(self._hdr[_READER_PID])}) died while the ring was "
                        f"full ({left} records not written); the run cannot go on: see that process's error above"
                    )
                if timeout is not None and now - start > timeout:
                    self._count_wait(start)
                    raise TimeoutError(
                        f"ring {self.name} stayed full for {timeout:.0f} s (reader pid "
                        f"{int(self._hdr[_READER_PID])} is alive but not reading); the reader is stuck or too "
                        "slow: check its log or raise the timeout"
                    )
            left = self._core.push_from(rows, n - left)
        self._count_wait(start)

    def _count_wait(self, start: float) -> None:
        self._hdr[_FULL_WAITS] += 1
        self._hdr[_FULL_WAIT_NS] += int((time.monotonic() - start) * 1e9)

    def _reader_alive(self) -> bool:
        if self._peer_alive is not None:
            return self._peer_alive()
        pid = int(self._hdr[_READER_PID])
        return pid == 0 or pid_alive(pid)  # no reader attached yet: the timeout decides

    def _not_writer(self, rows: np.ndarray) -> int:
        raise RuntimeError(f"ring {self.name} is attached as {self.role!r}, not as its writer")

    # ----------------------------------------------------------------------------- reader
    def available(self) -> int:
        """Records published and not yet released (reader side)."""
        return self._core.available()

    def peek(self, max_rows: int | None = None) -> np.ndarray:
        """A read-only view of the next readable records, without waiting (possibly empty).

        The view covers records up to the end of the buffer only; after the wrap the next peek
        returns the rest. Copy what you need, then call :meth:`release` with the number consumed:
        until then the writer cannot reuse those slots.
        """
        slot, count = self._core.peek()
        if max_rows is not None and count > max_rows:
            count = max_rows
        view = self._records[slot : slot + count]
        view.flags.writeable = False
        return view

    def release(self, n: int) -> None:
        """Give ``n`` peeked records back to the writer."""
        self._core.release(n)

    def pop_into(self, out: np.ndarray) -> int:
        """Copy up to ``len(out)`` records into ``out`` (C-contiguous float32), release them, return how many."""
        return self._core.pop_into(out)

    def wait_readable(self, timeout: float | None = 60.0) -> int:
        """Wait until a record is available or the writer closed the stream; return :meth:`available`.

        Raises:
            PeerDeadError: The writer died without closing and nothing is left to read.
            TimeoutError: Nothing arrived within ``timeout`` seconds.
        """
        start = time.monotonic()
        while True:
            avail = self._core.wait_data(_PEER_CHECK_S)  # sleeps on the writer's doorbell
            if avail or self._core.closed():
                return self._core.available()
            if not self._writer_alive() and not self._core.available() and not self._core.closed():
                raise PeerDeadError(
                    f"writer of ring {self.name} (pid {int(self._hdr[_WRITER_PID])}) died without closing it; "
                    "the supervisor restarts samplers, or restart the run"
                )
            if timeout is not None and time.monotonic() - start > timeout:
                raise TimeoutError(f"no record arrived in ring {self.name} for {timeout:.0f} s; is the sampler stuck?")

    @property
    def writer_closed(self) -> bool:
        """True once the writer called :meth:`close_writer` (records may still be unread)."""
        return self._core.closed()

    def _writer_alive(self) -> bool:
        if self._peer_alive is not None:
            return self._peer_alive()
        pid = int(self._hdr[_WRITER_PID])
        return pid == 0 or pid_alive(pid)

    # ----------------------------------------------------------------------------- stats
    @property
    def write_seq(self) -> int:
        """Records ever published."""
        return self._core.write_seq()

    @property
    def read_seq(self) -> int:
        """Records ever released by the reader."""
        return self._core.read_seq()

    def fill(self) -> int:
        """Records in the ring now (published, not released): the ``ipc/ring_fill`` metric."""
        return self._core.write_seq() - self._core.read_seq()

    @property
    def writer_pid(self) -> int:
        """Pid of the last process that attached as writer (0: none yet)."""
        return int(self._hdr[_WRITER_PID])

    @property
    def reader_pid(self) -> int:
        """Pid of the last process that attached as reader (0: none yet)."""
        return int(self._hdr[_READER_PID])

    @property
    def full_waits(self) -> int:
        """Writes that found the ring full and had to wait (``ipc/ring_full_waits``)."""
        return int(self._hdr[_FULL_WAITS])

    @property
    def full_wait_s(self) -> float:
        """Total seconds the writer spent waiting on a full ring."""
        return int(self._hdr[_FULL_WAIT_NS]) / 1e9
