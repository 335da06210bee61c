"""POSIX shared-memory segments: create, attach, numpy views, close, unlink.

Ownership (the design's shared-memory rules):

- **The supervisor creates and unlinks.** :meth:`Segment.create` makes the segment exclusively
  (``O_CREAT | O_EXCL``, mode ``0600``) under a name that carries the run id and the creator pid
  (see :mod:`spreeze_like.ipc.naming`), and reserves all its space at once with
  ``posix_fallocate``: a full /dev/shm fails right there with :class:`~spreeze_like.errors.ShmError`
  instead of a SIGBUS at the first touch of an unbacked page hours later. Only the creator calls
  :meth:`Segment.unlink`; as a last resort an ``atexit`` hook unlinks whatever this process created
  and did not unlink (a normal exit or an uncaught exception).
- **Children only attach** (:meth:`Segment.attach`) and close their mapping; they never unlink.
- **The creator holds a lifetime lock** on the segment's file (a shared ``flock``, through one
  close-on-exec descriptor per segment) from creation until it unlinks it; the kernel drops the
  lock when the creator dies, whatever its PID namespace.
- **On a crash** (SIGKILL, OOM kill) of the creator nothing runs: the segment stays in /dev/shm
  until the next start calls :func:`~spreeze_like.ipc.sweep.sweep_shm`, which unlinks every
  segment of ours whose lifetime lock is free (see :mod:`spreeze_like.ipc.sweep`).

Apart from the lock descriptor, the segment's descriptor is closed right after ``mmap``: the
mapping keeps the memory alive, and no descriptor leaks into children. Numpy views (:meth:`Segment.ndarray`) point straight into the
mapping; :class:`ArrayLayout` packs several arrays into one segment at cache-line-aligned offsets.
"""

from __future__ import annotations

import atexit
import errno
import math
import mmap
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import posix_ipc

from spreeze_like.errors import ShmError
from spreeze_like.ipc.naming import SHM_DIR, hold_lifetime_lock, parse_name, release_lifetime_lock

if TYPE_CHECKING:  # typing.Self needs 3.11; annotations are never evaluated at runtime here
    from typing_extensions import Self

CACHE_LINE = 64
_CREATE_TRIES = 3  # creations lost to a concurrent sweep before giving up (one is already unheard of)

# Names this process created and has not unlinked yet: unlinked at normal interpreter exit.
_created_here: dict[str, int] = {}


def align_up(n: int, alignment: int = CACHE_LINE) -> int:
    """Round ``n`` up to a multiple of ``alignment`` (a power of two)."""
    return (n + alignment - 1) & ~(alignment - 1)


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def shm_free_bytes() -> tuple[int, int]:
    """(free, total) bytes of the filesystem behind POSIX shared memory (/dev/shm)."""
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


class Segment:
    """One mapped POSIX shared-memory segment.

    Build it with :meth:`create` (the owner, i.e. the supervisor) or :meth:`attach` (children,
    tools). The mapping stays valid until :meth:`close` and every numpy view is gone.

    Attributes:
        name: POSIX name, ``/spz.<run-id>.<creator-pid>.<kind>.<index>``.
        size: Size in bytes.
        is_owner: True in the process that created it (the only one that may unlink it).
    """

    def __init__(self, name: str, mm: mmap.mmap, is_owner: bool) -> None:
        self.name = name
        self.size = len(mm)
        self.is_owner = is_owner
        self._mm: mmap.mmap | None = mm

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, name: str, nbytes: int) -> Segment:
        """Create a new segment of ``nbytes`` bytes, exclusively, mode 0600, all space reserved.

        Args:
            name: A name from :func:`~spreeze_like.ipc.naming.segment_name`.
            nbytes: Size in bytes (> 0). The memory reads as zeros.

        Returns:
            The mapped segment, owned by this process.

        Raises:
            ShmError: The name exists already, or /dev/shm has not enough free space (nothing is
                left behind in either case).
        """
        if nbytes <= 0:
            raise ValueError(f"segment size must be > 0 bytes, got {nbytes}")
        shm = _create_locked(name)
        try:
            try:
                # ftruncate alone is lazy on tmpfs (pages come at first touch, or SIGBUS if there
                # are none); fallocate reserves them now, so a full /dev/shm fails here.
                os.posix_fallocate(shm.fd, 0, nbytes)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
                    raise ShmError(_full_message(name, nbytes)) from None
                raise
            mm = mmap.mmap(shm.fd, nbytes)
        except BaseException:
            shm.close_fd()
            _unlink_quietly(name)
            release_lifetime_lock(name)
            raise
        shm.close_fd()  # the mapping keeps the memory; the lock descriptor (close-on-exec) stays
        _created_here[name] = os.getpid()
        return cls(name, mm, is_owner=True)

    @classmethod
    def attach(cls, name: str, min_size: int = 1) -> Segment:
        """Map an existing segment created by another process (or this one).

        Args:
            name: The segment's POSIX name.
            min_size: Fail unless the segment has at least this many bytes.

        Raises:
            ShmError: No such segment, or it is smaller than ``min_size``.
        """
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError:
            raise ShmError(_missing_message(name)) from None
        try:
            if shm.size < min_size:
                raise ShmError(
                    f"shared memory segment {name} has {shm.size} bytes, expected at least {min_size}: "
                    "it belongs to another version or run; stop that run or sweep stale segments"
                )
            mm = mmap.mmap(shm.fd, shm.size)
        finally:
            shm.close_fd()
        return cls(name, mm, is_owner=False)

    def close(self) -> None:
        """Drop this process's mapping (idempotent). Never unlinks.

        If numpy views or memoryviews of the segment are still alive, the mapping is released when
        the last of them is garbage-collected instead; the views stay valid until then.
        """
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # views exported: the mmap object unmaps itself when they are gone

    def unlink(self) -> None:
        """Remove the segment's name (creator only); mappings elsewhere stay valid until closed.

        Raises:
            ShmError: If this process is not the segment's creator (children must not unlink).
        """
        parsed = parse_name(self.name)
        creator = parsed.creator_pid if parsed is not None else None
        if not self.is_owner and creator != os.getpid():
            raise ShmError(
                f"process {os.getpid()} may not unlink {self.name}: only its creator (pid {creator}) does; "
                "close() it instead"
            )
        _unlink_quietly(self.name)
        release_lifetime_lock(self.name)
        _created_here.pop(self.name, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self.is_owner:
            self.unlink()

    def __repr__(self) -> str:
        state = "closed" if self._mm is None else "open"
        return f"Segment({self.name!r}, size={self.size}, owner={self.is_owner}, {state})"

    # ----------------------------------------------------------------------------- views
    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._mm is None

    @property
    def mmap(self) -> mmap.mmap:
        """The underlying mmap object (for native code that takes a buffer)."""
        if self._mm is None:
            raise ValueError(f"segment {self.name} is closed")
        return self._mm

    @property
    def buf(self) -> memoryview:
        """A writable memoryview of the whole segment."""
        return memoryview(self.mmap)

    def ndarray(self, dtype: Any, shape: int | tuple[int, ...], offset: int = 0) -> np.ndarray:
        """A numpy array viewing the segment's bytes at ``offset`` (no copy).

        Args:
            dtype: Element type.
            shape: Array shape.
            offset: Byte offset into the segment; must be a multiple of the element size.

        Raises:
            ValueError: If the view would be misaligned or run past the end of the segment.
        """
        dt = np.dtype(dtype)
        shape_t = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if any(int(n) < 0 for n in shape_t):
            raise ValueError(f"negative dimension in shape {shape_t} for a view of {self.name}")
        nbytes = math.prod(int(n) for n in shape_t) * dt.itemsize  # Python ints: no int64 overflow
        if offset < 0 or offset % dt.alignment:
            raise ValueError(f"offset {offset} is not aligned to {dt.alignment} bytes for {dt} in {self.name}")
        if offset + nbytes > self.size:
            raise ValueError(
                f"view of {nbytes} bytes at offset {offset} runs past the end of {self.name} ({self.size})"
            )
        # frombuffer holds a buffer export (its base is a memoryview), so mmap.close() cannot unmap
        # memory under a live view; np.ndarray(buffer=...) drops the export and would segfault.
        count = nbytes // dt.itemsize
        return np.frombuffer(self.mmap, dtype=dt, count=count, offset=offset).reshape(shape_t)


class ArrayLayout:
    """Offsets of named arrays packed into one segment, each at a cache-line boundary.

    Example::

        layout = ArrayLayout({"obs": (np.float32, (n, 17)), "rew": (np.float32, (n,))})
        seg = Segment.create(name, layout.nbytes)
        arrays = layout.views(seg)   # {"obs": ndarray, "rew": ndarray}
    """

    def __init__(self, fields: Mapping[str, tuple[Any, int | tuple[int, ...]]], start: int = 0) -> None:
        self.fields: dict[str, tuple[np.dtype, tuple[int, ...], int]] = {}
        offset = align_up(start)
        for key, (dtype, shape) in fields.items():
            dt = np.dtype(dtype)
            shape_t = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
            self.fields[key] = (dt, shape_t, offset)
            offset = align_up(offset + int(np.prod(shape_t, dtype=np.int64)) * dt.itemsize)
        self.nbytes = max(offset, CACHE_LINE)

    def views(self, seg: Segment) -> dict[str, np.ndarray]:
        """Numpy views of every field in ``seg``."""
        return {key: seg.ndarray(dt, shape, off) for key, (dt, shape, off) in self.fields.items()}


# ------------------------------------------------------------------------------- helpers
def unlink_segment(name: str) -> bool:
    """Unlink a segment by name; False if it did not exist. For the supervisor's cleanup paths."""
    _created_here.pop(name, None)
    removed = _unlink_quietly(name)
    release_lifetime_lock(name)
    return removed


def _create_locked(name: str) -> posix_ipc.SharedMemory:
    """Create ``name`` exclusively (mode 0600) and take its lifetime lock (held until the unlink).

    The lock is taken right after the exclusive create. A sweep that probed the fresh, unlocked
    file in between has unlinked it (it unlinks only while holding the lock exclusively, which our
    shared lock waits for): the name is free again, so create it anew.
    """
    for _ in range(_CREATE_TRIES):
        try:
            shm = posix_ipc.SharedMemory(name, flags=posix_ipc.O_CREX, mode=0o600)
        except posix_ipc.ExistentialError:
            raise ShmError(_clash_message(name)) from None
        lock_fd = os.dup(shm.fd)  # os.dup makes it close-on-exec: spawned children do not hold it
        try:
            if hold_lifetime_lock(name, lock_fd):
                return shm
        except BaseException:
            os.close(lock_fd)
            shm.close_fd()
            _unlink_quietly(name)
            raise
        os.close(lock_fd)
        shm.close_fd()
    raise ShmError(
        f"shared memory segment {name} was removed {_CREATE_TRIES} times right after its creation: "
        "another process keeps sweeping /dev/shm; stop it and start again"
    )


def _unlink_quietly(name: str) -> bool:
    try:
        posix_ipc.unlink_shared_memory(name)
        return True
    except posix_ipc.ExistentialError:
        return False


def _clash_message(name: str) -> str:
    parsed = parse_name(name)
    owner = f" (creator pid {parsed.creator_pid})" if parsed else ""
    return (
        f"shared memory segment {name} already exists{owner}: another run uses the same run id; "
        "start with a new run id, or remove stale segments with spreeze_like.ipc.sweep_dead_segments()"
    )


def _missing_message(name: str) -> str:
    parsed = parse_name(name)
    owner = f"its creator (pid {parsed.creator_pid})" if parsed else "its creator"
    return f"shared memory segment {name} does not exist: {owner} exited or has not created it yet; restart the run"


def _full_message(name: str, nbytes: int) -> str:
    free, total = shm_free_bytes()
    return (
        f"cannot reserve {_fmt_bytes(nbytes)} for shared memory segment {name}: {SHM_DIR} has "
        f"{_fmt_bytes(free)} free of {_fmt_bytes(total)}; free space in {SHM_DIR} or enlarge it "
        "(e.g. `sudo mount -o remount,size=16G /dev/shm`, or docker run --shm-size=16g), or shrink the replay/ring sizes"
    )


@atexit.register
def _unlink_created_at_exit() -> None:
    """Normal exit or uncaught exception of a creator: unlink what it still owns."""
    me = os.getpid()
    for name, pid in list(_created_here.items()):
        if pid == me:  # a forked child inherits the dict but owns none of it
            _unlink_quietly(name)
            release_lifetime_lock(name)
    _created_here.clear()
