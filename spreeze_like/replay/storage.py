"""Columnar transition storage laid over memory it is handed (a shared-memory segment or a local buffer).

Layout (every column starts on a 64-byte boundary of the buffer; the buffer must be 8-byte aligned)::

    header      uint64[8]          magic, version, capacity, obs_dim, act_dim, cursor, writer pid
    obs         float32[N, obs_dim]
    action      float32[N, act_dim]
    reward      float32[N]
    next_obs    float32[N, obs_dim]
    terminated  float32[N]         1.0 where the episode ended in a terminal state (bootstrap on this only)
    truncated   float32[N]         1.0 where a time limit cut the episode (kept for n-step returns)
    generation  uint64[N]          write generation per slot: odd while the slot is being written

FIFO overwrite: the ``cursor`` counts every row ever written; row ``c`` goes to slot ``c % N``.

Concurrency protocol (enforced where it can be):

* **One writer process.** The first :meth:`ReplayStorage.add` of a process claims the storage by
  writing its pid into the header (compare-and-swap); another live process calling ``add`` gets a
  ``RuntimeError``. A writer that died is replaced: its pid is taken over by the next process that
  adds (if the dead writer's pid was reused by an unrelated live process meanwhile, the claim fails
  loudly rather than letting two writers share the storage). Threads of the writing process must
  not call ``add`` concurrently.
* **Per-slot seqlock.** The writer makes a slot's generation odd, writes the row, calls
  ``on_written(slots)`` (the prioritized sampler sets the new rows' priority there, under the sum
  tree's lock), then makes the generation even again and publishes the new cursor (release). A
  reader reads the generations (acquire), copies the rows, then re-reads the generations: a row
  whose generation was odd or changed is torn and :meth:`gather` reports its position; samplers
  draw a replacement for it. A learner's priority update is applied only if the slot's generation
  still equals the one returned with the sample, so updates for overwritten slots are dropped.
* **Readers never block the writer** and never see a slot at or past the published size.

Ownership: whoever allocates the buffer owns it (the supervisor creates and unlinks the shared
segment; every process only attaches). If the writer dies mid-chunk, the cursor was not advanced,
the chunk's slots keep odd generations (readers treat them as torn) and the next writer overwrites
exactly those slots first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spreeze_like.errors import ConfigError, ShmError
from spreeze_like.native import _native

_MAGIC = 0x3162727A7073  # "spzrb1"
_VERSION = 1
_HEADER_WORDS = 8
_H_MAGIC, _H_VERSION, _H_CAPACITY, _H_OBS, _H_ACT, _H_CURSOR, _H_WRITER = range(7)
_ALIGN = 64


def _columns(capacity: int, obs_dim: int, act_dim: int) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    f32 = np.dtype(np.float32)
    return [
        ("obs", f32, (capacity, obs_dim)),
        ("action", f32, (capacity, act_dim)),
        ("reward", f32, (capacity,)),
        ("next_obs", f32, (capacity, obs_dim)),
        ("terminated", f32, (capacity,)),
        ("truncated", f32, (capacity,)),
        ("generation", np.dtype(np.uint64), (capacity,)),
    ]


def _layout(capacity: int, obs_dim: int, act_dim: int) -> tuple[dict[str, int], int]:
    """Byte offset of every column and the total size; a pure function of the shape."""
    for name, value in (("capacity", capacity), ("obs_dim", obs_dim), ("act_dim", act_dim)):
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ConfigError(f"replay {name} must be a positive integer, got {value!r}")
    offsets: dict[str, int] = {}
    offset = _HEADER_WORDS * 8
    for name, dtype, shape in _columns(capacity, obs_dim, act_dim):
        offset = -(-offset // _ALIGN) * _ALIGN
        offsets[name] = offset
        offset += dtype.itemsize * int(np.prod(shape))
    return offsets, offset


@dataclass(slots=True)
class Columns:
    """The transition columns of some rows (copies); what :class:`Rows` and a sampled batch share."""

    obs: np.ndarray  # float32[n, obs_dim]
    action: np.ndarray  # float32[n, act_dim]
    reward: np.ndarray  # float32[n]
    next_obs: np.ndarray  # float32[n, obs_dim]
    terminated: np.ndarray  # float32[n]


@dataclass(slots=True)
class Rows(Columns):
    """Copies of the rows of some slots, as returned by :meth:`ReplayStorage.gather`."""

    generations: np.ndarray  # uint64[n]: the generation each row was read at
    torn: np.ndarray  # int64[k]: positions whose row was being rewritten while it was copied


class ReplayStorage:
    """FIFO transition storage in a handed buffer, with a write generation per slot.

    Args:
        buffer: writable, C-contiguous buffer of at least :meth:`nbytes` bytes (a shared-memory
            segment's memoryview or a numpy array); it must outlive this object.
        capacity: number of slots N.
        obs_dim: length of an observation vector.
        act_dim: length of an action vector.
        create: True to initialise the buffer (the creator, once per run); False to attach to a
            storage another process initialised (checked against capacity and dims).
    """

    def __init__(self, buffer, capacity: int, obs_dim: int, act_dim: int, *, create: bool) -> None:
        offsets, nbytes = _layout(capacity, obs_dim, act_dim)
        raw = np.frombuffer(buffer, dtype=np.uint8)
        if raw.nbytes < nbytes:
            raise ShmError(f"replay storage buffer has {raw.nbytes} bytes, needs {nbytes} (use ReplayStorage.nbytes)")
        if raw.ctypes.data % 8:
            raise ShmError("replay storage buffer must be 8-byte aligned")
        self._header = raw[: _HEADER_WORDS * 8].view(np.uint64)
        views = {}
        for name, dtype, shape in _columns(capacity, obs_dim, act_dim):
            size = dtype.itemsize * int(np.prod(shape))
            views[name] = raw[offsets[name] : offsets[name] + size].view(dtype).reshape(shape)
        self.obs: np.ndarray = views["obs"]
        self.action: np.ndarray = views["action"]
        self.reward: np.ndarray = views["reward"]
        self.next_obs: np.ndarray = views["next_obs"]
        self.terminated: np.ndarray = views["terminated"]
        self.truncated: np.ndarray = views["truncated"]
        self.generations: np.ndarray = views["generation"]
        self.capacity, self.obs_dim, self.act_dim = int(capacity), int(obs_dim), int(act_dim)
        self._gathered = (self.obs, self.action, self.reward, self.next_obs, self.terminated)
        self._buffer = buffer  # keep the exporter alive as long as the views
        self._pid = os.getpid()
        h = self._header
        if create:
            h[:] = 0
            self.generations[:] = 0
            h[_H_VERSION], h[_H_CAPACITY], h[_H_OBS], h[_H_ACT] = _VERSION, capacity, obs_dim, act_dim
            _native.u64_store(h, _H_MAGIC, _MAGIC)  # attachers may look only now
        else:
            if _native.u64_load(h, _H_MAGIC) != _MAGIC or int(h[_H_VERSION]) != _VERSION:
                raise ShmError("buffer does not hold an initialised replay storage; create it with create=True first")
            found = (int(h[_H_CAPACITY]), int(h[_H_OBS]), int(h[_H_ACT]))
            if found != (capacity, obs_dim, act_dim):
                raise ShmError(
                    f"replay storage in the buffer has (capacity, obs_dim, act_dim)={found}, "
                    f"attached as {(capacity, obs_dim, act_dim)}; attach with the creator's shape"
                )

    @staticmethod
    def nbytes(capacity: int, obs_dim: int, act_dim: int) -> int:
        """Bytes the buffer must have for this shape (header and column alignment included)."""
        return _layout(capacity, obs_dim, act_dim)[1]

    @classmethod
    def local(cls, capacity: int, obs_dim: int, act_dim: int) -> ReplayStorage:
        """A storage in this process's own memory (tests, the ``--serial`` mode)."""
        return cls(np.zeros(cls.nbytes(capacity, obs_dim, act_dim), np.uint8), capacity, obs_dim, act_dim, create=True)

    @property
    def inserted(self) -> int:
        """Rows ever written (published)."""
        return int(_native.u64_load(self._header, _H_CURSOR))

    @property
    def size(self) -> int:
        """Slots that hold a transition: min(inserted, capacity)."""
        return min(self.inserted, self.capacity)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray | None = None,
        *,
        on_written: Callable[[np.ndarray], object] | None = None,
    ) -> np.ndarray:
        """Append a chunk of n transitions (FIFO overwrite) and return the slots they went to.

        Args:
            obs, next_obs: [n, obs_dim] (or [obs_dim] for one transition).
            action: [n, act_dim]; reward, terminated, truncated: [n].
            on_written: called with the slots after the rows are written and before they are
                published (the prioritized sampler sets their priority here).

        Raises:
            ValueError: shapes that do not match the storage, or a chunk larger than the capacity.
            RuntimeError: another live process is the storage's writer.
        """
        obs2 = np.atleast_2d(obs)
        n = obs2.shape[0]
        if not 0 < n <= self.capacity:
            raise ValueError(f"chunk of {n} transitions for a storage of capacity {self.capacity}; add 1..capacity")
        prepared = [  # check every column before touching any slot
            (self.obs, _column(obs2, (n, self.obs_dim), "obs")),
            (self.action, _column(action, (n, self.act_dim), "action")),
            (self.reward, _column(reward, (n,), "reward")),
            (self.next_obs, _column(next_obs, (n, self.obs_dim), "next_obs")),
            (self.terminated, _column(terminated, (n,), "terminated")),
            (self.truncated, np.zeros(n, np.float32) if truncated is None else _column(truncated, (n,), "truncated")),
        ]
        self._claim_writer()
        cursor = int(self._header[_H_CURSOR])  # only the writer moves it, so a plain read is exact
        start = cursor % self.capacity
        slots = np.arange(start, start + n, dtype=np.int64)
        if start + n > self.capacity:
            slots %= self.capacity
        _native.generations_begin_write(self.generations, slots)
        first = min(n, self.capacity - start)  # the chunk is one slice, or two when it wraps
        for dst, arr in prepared:
            if first == n:
                dst[start : start + n] = arr
            else:
                dst[start:] = arr[:first]
                dst[: n - first] = arr[first:]
        if on_written is not None:
            on_written(slots)
        _native.generations_end_write(self.generations, slots)
        _native.u64_store(self._header, _H_CURSOR, cursor + n)
        return slots

    def gather(self, slots: np.ndarray) -> Rows:
        """Copy the rows of ``slots`` and say which may be torn by a concurrent write.

        Rows at the positions in ``Rows.torn`` must not be used (draw replacements); every other
        row is exactly the transition of generation ``Rows.generations[i]``.
        """
        # One native call: read the generations, copy every column's rows, re-read the generations.
        (obs, action, reward, next_obs, terminated), gens, torn = _native.gather_rows(
            self.generations, slots, self._gathered
        )
        return Rows(obs, action, reward, next_obs, terminated, gens, torn)

    def writer_pid(self) -> int:
        """Pid of the process that owns ``add`` (0 when nobody has added yet)."""
        return int(_native.u64_load(self._header, _H_WRITER))

    def release_writer(self) -> None:
        """Give up the writer role so that another process may add (no-op if not the writer)."""
        _native.u64_compare_exchange(self._header, _H_WRITER, os.getpid(), 0)

    def _claim_writer(self) -> None:
        me = os.getpid()
        owner = int(_native.u64_load(self._header, _H_WRITER))
        if owner == me:
            return
        while True:
            if owner != 0 and _pid_alive(owner):
                raise RuntimeError(
                    f"replay storage already has a writer (pid {owner}); only one process may add transitions"
                )
            # Nobody, or a dead writer: take over. Compare-and-swap so two claimants cannot both win.
            if _native.u64_compare_exchange(self._header, _H_WRITER, owner, me):
                return
            owner = int(_native.u64_load(self._header, _H_WRITER))


def _column(src, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``src`` as float32 of exactly ``shape`` (a [n, 1] or flat input of the right size is accepted)."""
    arr = np.asarray(src, dtype=np.float32)
    if arr.shape != shape:
        if arr.size != int(np.prod(shape)):
            raise ValueError(f"{name} has shape {np.shape(src)}, expected {shape} for a chunk of {shape[0]}")
        arr = arr.reshape(shape)
    return arr


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
