"""Weight board: one writer publishes a flat float32 parameter vector; many readers copy the newest.

The actor learner publishes the policy for samplers and the evaluator (``w-actor``), the critic
learner publishes the Q networks for the actor learner (``w-critic``).

Ownership: the supervisor creates the board (:meth:`WeightBoard.create`) and unlinks it at the
end; the one writer and any number of readers attach (:meth:`WeightBoard.attach`) and only close.
A crashed supervisor's board is removed by the next start's sweep.

Protocol: a double-buffered seqlock (``native/include/spreeze/shm_seq.hpp``). Version ``v``
(1, 2, ...) is written into slot ``v % 2``, whose sequence word is odd while the copy runs and
``2v`` when it is complete; then ``latest = v`` is published with a release store. A reader loads
``latest`` (acquire), copies slot ``latest % 2``, and accepts the copy only if that slot's
sequence word read ``2v`` both before and after the copy (acquire fence in between); otherwise it
retries. What each side may see:

- A reader never returns a torn vector: every accepted copy is exactly one published version.
- Readers never block the writer, and a reader only retries if the writer laps it (writes two
  versions during one copy); with two slots a reader copying version ``v`` is not disturbed by
  the writing of ``v + 1``.
- A writer that dies mid-copy leaves the previous version intact in the other slot: readers keep
  reading it. A restarted writer continues the version count.
- :meth:`WeightBoard.version` is one acquire load, cheap enough to poll every step.
"""

from __future__ import annotations

import os
import time
from typing import Literal

import numpy as np

from spreeze_like.errors import ShmError
from spreeze_like.ipc.segment import CACHE_LINE, Segment, align_up
from spreeze_like.native import _native

Role = Literal["writer", "reader"]

MAGIC = 0x314452414F425A53  # b"SZBOARD1" little-endian
LAYOUT_VERSION = 1
_MAGIC, _LAYOUT, _CREATOR, _N_PARAMS = 0, 1, 2, 3  # uint64 words of line 0, constant after create
_LATEST_OFF = 1 * CACHE_LINE
_SEQ_OFFS = (2 * CACHE_LINE, 3 * CACHE_LINE)
_WRITER_PID = 4 * CACHE_LINE // 8
SLOT0_OFFSET = 8 * CACHE_LINE


def _slot_offsets(n_params: int) -> tuple[int, int]:
    return SLOT0_OFFSET, SLOT0_OFFSET + align_up(n_params * 4)


class WeightBoard:
    """A seqlocked, double-buffered float32 vector of ``n_params`` elements in shared memory.

    Attributes:
        name: Segment name.
        n_params: Length of the vector.
        role: ``"writer"``, ``"reader"`` or ``None`` (the supervisor's handle).
    """

    def __init__(self, seg: Segment, role: Role | None) -> None:
        self._seg = seg
        self.name = seg.name
        hdr = seg.ndarray(np.uint64, SLOT0_OFFSET // 8, 0)
        if _native.load_u64(seg.mmap, 0) != MAGIC or int(hdr[_LAYOUT]) != LAYOUT_VERSION:
            raise ShmError(
                f"shared memory segment {seg.name} is not a weight board of layout {LAYOUT_VERSION}: "
                "it belongs to another version of spreeze_like; stop that run or sweep stale segments"
            )
        self._hdr = hdr
        self.n_params = int(hdr[_N_PARAMS])
        self.role = role
        slot0, slot1 = _slot_offsets(self.n_params)
        self._core = _native.BoardCore(seg.mmap, _LATEST_OFF, *_SEQ_OFFS, slot0, slot1, self.n_params * 4)
        self.version = self._core.latest  # bound native method: the cheap poll
        if role == "writer":
            hdr[_WRITER_PID] = os.getpid()

    @staticmethod
    def nbytes_for(n_params: int) -> int:
        """Segment size of a board for ``n_params`` float32."""
        return _slot_offsets(n_params)[1] + align_up(n_params * 4)

    @classmethod
    def create(cls, name: str, n_params: int, role: Role | None = None) -> WeightBoard:
        """Create the board (supervisor). Version 0 means nothing published yet.

        Raises:
            ShmError: Name clash or full /dev/shm.
        """
        if n_params < 1:
            raise ValueError(f"a weight board needs n_params >= 1, got {n_params}")
        seg = Segment.create(name, cls.nbytes_for(n_params))
        try:
            hdr = seg.ndarray(np.uint64, 8, 0)
            hdr[[_LAYOUT, _CREATOR, _N_PARAMS]] = [LAYOUT_VERSION, os.getpid(), n_params]
            del hdr
            _native.store_u64(seg.mmap, _MAGIC * 8, MAGIC)  # last, with release
            return cls(seg, role)
        except BaseException:
            seg.close()
            seg.unlink()
            raise

    @classmethod
    def attach(cls, name: str, role: Role) -> WeightBoard:
        """Attach an existing board as its (single) writer or as a reader."""
        return cls(Segment.attach(name, min_size=SLOT0_OFFSET), role)

    def close(self) -> None:
        """Drop this process's mapping (never unlinks)."""
        self._core = None
        self.version = _closed_version
        self._hdr = None  # type: ignore[assignment]
        self._seg.close()

    def unlink(self) -> None:
        """Remove the segment's name (creator only)."""
        self._seg.unlink()

    def __repr__(self) -> str:
        return f"WeightBoard({self.name!r}, n_params={self.n_params}, role={self.role})"

    # ----------------------------------------------------------------------------- writer
    def publish(self, params: np.ndarray) -> int:
        """Publish a new version (writer only); returns its number (1, 2, ...).

        Args:
            params: C-contiguous float32 array of ``n_params`` elements (any shape).
        """
        if self.role != "writer":
            raise RuntimeError(f"weight board {self.name} is attached as {self.role!r}, not as its writer")
        return self._core.publish(params)

    # ----------------------------------------------------------------------------- readers
    def has_newer(self, version: int) -> bool:
        """True if a version newer than ``version`` has been published (one acquire load)."""
        return self._core.latest() > version

    def read(self, out: np.ndarray, timeout: float = 10.0) -> int:
        """Copy the newest complete version into ``out``; return its number (0: nothing published yet).

        Args:
            out: C-contiguous float32 array of ``n_params`` elements.
            timeout: Give up if every attempt for this long was torn by the writer (it would have
                to publish faster than one copy takes, continuously).

        Raises:
            TimeoutError: No untorn copy within ``timeout``.
        """
        version = self._core.read(out)
        if version >= 0:
            return version
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(1e-4)
            version = self._core.read(out)
            if version >= 0:
                return version
        raise TimeoutError(
            f"could not copy weight board {self.name} in {timeout:.0f} s: the writer overwrote it during every copy; "
            "publish less often"
        )

    def read_if_newer(self, out: np.ndarray, version: int) -> int:
        """Copy into ``out`` only if a version newer than ``version`` exists; return the version now in ``out``."""
        if self._core.latest() <= version:
            return version
        return self.read(out)


def _closed_version() -> int:
    raise ValueError("weight board is closed")
