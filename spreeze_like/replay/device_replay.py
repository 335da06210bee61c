"""A learner's mirror of the replay columns on its own device, so that batches never cross PCIe per update.

The host :class:`~spreeze_like.replay.storage.ReplayStorage` (shared memory) stays the one source of
truth. Each learner process keeps a :class:`DeviceReplay`: the same slots, only the columns it needs
(the actor learner mirrors ``obs``; the critic all five), as tensors on its device. New rows go to
the device once, in bulk, by :meth:`DeviceReplay.sync_from`; every update then gathers its batch on
the device from indices drawn on the device (uniform) or uploaded in one small copy (prioritized).

Per update that is one tiny host-to-device copy at most (the prioritized slots and weights); the
transition payload crosses the bus once per transition per learner instead of once per sample.

Ownership: a mirror owns only tensors of its own process: the device columns, its random
generator, and two host staging buffers (pinned on cuda) with one event each. Nothing in it is
shared, nothing is named; it is freed with the object, and a crash frees it with the process (the
driver reclaims device memory and pinned pages of a dead process).

Concurrency: the mirror only reads the storage, below the cursor the writer published, through the
storage's per-slot seqlock (the native ``gather_rows``). A row whose slot the writer has lapped and
is rewriting while it is read is torn: it is read again (any complete row found then is one the writer
finished); if it stays torn its mirror slot keeps its older complete row, and as the writer's newer
row in that slot is published after the cursor this sync read, the next sync covers it. A slot with
no older row (the first fill) is re-read until the writer completes it. So a mirror slot holds a row
the writer completed; only a writer that dies mid-write can leave an unfilled slot at zeros.
A mirror object itself is for one thread (the learner's): sync and sampling are not locked.

Stream order: copies are enqueued on the device's current stream; gathers issued later on that
stream see them. The column tensors are allocated once and only written in place, so CUDA graphs
that read them stay valid.

Uniform draws read the mirror's size from a device tensor (``_size_f``), refreshed by each sync
with an asynchronous fill: a draw and its gather are then pure device work with no host value baked
in, so a learner captures them inside its update's CUDA graph (``roles/batches.py``) and every
replay draws fresh indices over the rows synced so far. Indices are ``floor(u * size)`` with ``u``
uniform float64 in [0, 1) (exact for any capacity below 2**52), clamped to ``size - 1`` against the
one rounding case where ``u * size`` rounds up to ``size``.

Layout: the columns are views of one packed ``[capacity, width]`` tensor (a row holds every mirrored
column, in ``columns`` order), so a synced run of rows is one host-to-device copy and a batch is one
``index_select`` into a packed static batch of the same layout (:meth:`gather_packed`). On the H100
the five per-column gathers and their launch overhead were the largest host cost of an update
after the graph launch itself (tools/profile_critic_update.py, BENCHMARKS.md).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch

from spreeze_like.native import _native
from spreeze_like.replay.storage import ReplayStorage

ALL_COLUMNS: tuple[str, ...] = ("obs", "action", "reward", "next_obs", "terminated")
_TORN_REREADS = 1  # a slot mid-rewrite that holds an older complete row is read once more, then kept
_UNFILLED_WAIT_S = 0.5  # how long an unfilled slot is re-read while the writer completes it


def _column_width(name: str, obs_dim: int, act_dim: int) -> int:
    """Floats per row of a column (0-d columns, reward and terminated, count as 1)."""
    return {"obs": obs_dim, "next_obs": obs_dim, "action": act_dim, "reward": 1, "terminated": 1}[name]


def _check_columns(columns: tuple[str, ...]) -> tuple[str, ...]:
    columns = tuple(columns)
    unknown = [c for c in columns if c not in ALL_COLUMNS]
    if unknown or not columns or len(set(columns)) != len(columns):
        raise ValueError(f"device replay columns must be distinct names from {ALL_COLUMNS}, got {columns}")
    return columns


def device_replay_bytes(capacity: int, obs_dim: int, act_dim: int, columns: tuple[str, ...] = ALL_COLUMNS) -> int:
    """Device memory the mirror's columns take (float32); host staging buffers are not counted."""
    widths = sum(_column_width(c, obs_dim, act_dim) for c in _check_columns(columns))
    return 4 * int(capacity) * widths


class _HostStaging:
    """Two host byte buffers used in turn (pinned when the device is cuda).

    Before a buffer is refilled, the event recorded after the last copy that read it is waited on,
    so an asynchronous copy never reads a buffer that is being overwritten. On cpu copies are
    synchronous and no event is needed.
    """

    def __init__(self, device: torch.device, nbytes: int) -> None:
        self._cuda = device.type == "cuda"
        self._device = device
        self._buffers = [self._alloc(nbytes), self._alloc(nbytes)]
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0

    def _alloc(self, nbytes: int) -> torch.Tensor:
        return torch.empty(max(int(nbytes), 64), dtype=torch.uint8, pin_memory=self._cuda)

    def take(self, nbytes: int) -> torch.Tensor:
        """The next buffer, at least ``nbytes`` long, once the device has finished reading it."""
        self._turn ^= 1
        event = self._events[self._turn]
        if event is not None:
            event.synchronize()  # normally long complete: one chunk's copy ago
            self._events[self._turn] = None
        if self._buffers[self._turn].numel() < nbytes:
            self._buffers[self._turn] = self._alloc(max(nbytes, 2 * self._buffers[self._turn].numel()))
        return self._buffers[self._turn][:nbytes]

    def copies_enqueued(self) -> None:
        """Mark that every copy reading the current buffer has been enqueued."""
        if self._cuda:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self._device))
            self._events[self._turn] = event


def _contiguous_runs(first_slot: int, n: int, capacity: int, skip: np.ndarray) -> list[tuple[int, int, int]]:
    """(first position, end position, first slot) of each run of kept positions over contiguous slots.

    Positions 0..n-1 map to slots (first_slot + i) % capacity; a run breaks where the slots wrap
    and around every skipped (torn) position.
    """
    cuts = {0, n, *(int(p) for p in skip), *(int(p) + 1 for p in skip)}
    wrap = capacity - first_slot
    if 0 < wrap < n:
        cuts.add(wrap)
    skipped = {int(p) for p in skip}
    bounds = sorted(c for c in cuts if 0 <= c <= n)
    runs = []
    for a, b in itertools.pairwise(bounds):
        if b > a and a not in skipped:
            runs.append((a, b, (first_slot + a) % capacity))
    return runs


def packed_layout(columns: tuple[str, ...], obs_dim: int, act_dim: int) -> tuple[tuple[str, int, int], ...]:
    """(column, first float, width) of each column in a packed row, in ``columns`` order."""
    layout, offset = [], 0
    for name in columns:
        width = _column_width(name, obs_dim, act_dim)
        layout.append((name, offset, width))
        offset += width
    return tuple(layout)


def column_view(packed: torch.Tensor, name: str, first: int, width: int) -> torch.Tensor:
    """A column of a packed ``[rows, width]`` tensor: ``[rows, width]``, or ``[rows]`` for reward/terminated."""
    return packed[:, first] if name in ("reward", "terminated") else packed[:, first : first + width]


class DeviceReplay:
    """The replay columns ``columns`` of a storage, mirrored slot for slot on ``device``.

    Args:
        capacity: slots; must equal the host storage's capacity (slot numbers are shared).
        obs_dim, act_dim: row shape, as in the host storage.
        device: where the columns live ("cpu" or "cuda:N").
        columns: which storage columns to mirror (the actor learner needs only ``("obs",)``).
        seed: seed of the mirror's own generator for :meth:`sample_uniform`.
        chunk_rows: most rows read from the host per staging copy in :meth:`sync_from`.
    """

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        act_dim: int,
        device: str | torch.device,
        columns: tuple[str, ...] = ALL_COLUMNS,
        seed: int = 0,
        chunk_rows: int = 4096,
    ) -> None:
        sizes = {"capacity": capacity, "obs_dim": obs_dim, "act_dim": act_dim, "chunk_rows": chunk_rows}
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"device replay {name} must be a positive integer, got {value!r}")
        self.capacity, self.obs_dim, self.act_dim = int(capacity), int(obs_dim), int(act_dim)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.columns = _check_columns(columns)
        self.chunk_rows = int(chunk_rows)
        self.seen = 0
        self.torn_rows = 0  # rows found torn (being rewritten) while syncing, re-read or skipped
        self.skipped_rows = 0  # of those, rows still torn after the re-read: their slot kept older content
        self.layout = packed_layout(self.columns, self.obs_dim, self.act_dim)
        self.width = sum(w for _, _, w in self.layout)
        self._packed = torch.zeros((self.capacity, self.width), dtype=torch.float32, device=self.device)
        self._data: dict[str, torch.Tensor] = {name: column_view(self._packed, name, a, w)
                                               for name, a, w in self.layout}
        self._row_bytes = 4 * self.width
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(int(seed))
        # the synced row count, on the device (float64: the draw's scale; int64: its last valid index)
        self._size_f = torch.zeros((), dtype=torch.float64, device=self.device)
        self._last_index = torch.zeros((), dtype=torch.int64, device=self.device)
        self._rows_staging = _HostStaging(self.device, self.chunk_rows * self._row_bytes)
        self._index_staging = _HostStaging(self.device, 12 * 1024)

    @property
    def size(self) -> int:
        """Rows the mirror holds: min(seen, capacity). A host-side int, never a device sync."""
        return min(self.seen, self.capacity)

    @property
    def generator(self) -> torch.Generator:
        """The generator of the uniform draws (a CUDA graph that captures a draw registers it)."""
        return self._generator

    def column(self, name: str) -> torch.Tensor:
        """The device tensor of a mirrored column ([capacity, width], or [capacity] for reward/terminated)."""
        return self._data[name]

    def sync_from(self, storage: ReplayStorage) -> int:
        """Copy the rows published since the last call into the same slots on the device; returns rows copied.

        If more than ``capacity`` rows were published since, only the last ``capacity`` are read (the
        others are overwritten on the host as well). Torn rows are not copied (see the module docstring).
        """
        if (storage.capacity, storage.obs_dim, storage.act_dim) != (self.capacity, self.obs_dim, self.act_dim):
            raise ValueError(
                f"storage has (capacity, obs_dim, act_dim)={(storage.capacity, storage.obs_dim, storage.act_dim)}, "
                f"the mirror {(self.capacity, self.obs_dim, self.act_dim)}; build the mirror with the storage's shape"
            )
        inserted = storage.inserted  # acquire: every row below it was completely written once
        if inserted < self.seen:
            raise ValueError(f"storage cursor {inserted} is behind the mirror's {self.seen}: not the same storage")
        first = max(self.seen, inserted - self.capacity)
        sources = tuple(getattr(storage, name) for name in self.columns)
        copied = 0
        for start in range(first, inserted, self.chunk_rows):
            n = min(self.chunk_rows, inserted - start)
            copied += self._sync_chunk(storage, sources, start % self.capacity, n)
        size_before = self.size
        self.seen = inserted
        if self.size != size_before:  # two tiny asynchronous fills, after the rows' copies on the same stream
            self._size_f.fill_(float(self.size))
            self._last_index.fill_(self.size - 1)
        return copied

    def _sync_chunk(self, storage: ReplayStorage, sources: tuple[np.ndarray, ...], first_slot: int, n: int) -> int:
        slots = np.arange(first_slot, first_slot + n, dtype=np.int64) % self.capacity
        rows, _, torn = _native.gather_rows(storage.generations, slots, sources)
        if torn.size:
            self.torn_rows += int(torn.size)
            torn = self._reread_torn(storage, sources, slots, rows, torn)
            self.skipped_rows += int(torn.size)
        runs = _contiguous_runs(first_slot, n, self.capacity, torn)
        # the rows packed as the device holds them, then one copy per contiguous run of slots
        staged = self._rows_staging.take(n * self._row_bytes).view(torch.float32).view(n, self.width)
        packed_rows = staged.numpy()
        for (_, first, width), host in zip(self.layout, rows):
            packed_rows[:, first : first + width] = host.reshape(n, width)
        cuda = self.device.type == "cuda"
        for a, b, slot in runs:
            self._packed[slot : slot + b - a].copy_(staged[a:b], non_blocking=cuda)
        self._rows_staging.copies_enqueued()
        return sum(b - a for a, b, _ in runs)

    def _reread_torn(
        self,
        storage: ReplayStorage,
        sources: tuple[np.ndarray, ...],
        slots: np.ndarray,
        rows: list[np.ndarray],
        torn: np.ndarray,
    ) -> np.ndarray:
        """Read torn positions again, patching ``rows`` with the complete rows found; returns those left torn.

        Any complete row the slot holds now is a row the writer finished (possibly newer than this
        sync's cursor; the next sync rewrites the slot anyway). A slot that already holds an older
        complete row is re-read ``_TORN_REREADS`` times and then kept as it is. A slot never filled
        (zeros on the device, but inside ``size``) must not be left for samplers to draw, so it is
        re-read until the writer completes it; only a writer that died mid-write makes that wait end
        at ``_UNFILLED_WAIT_S`` with the slot still unfilled.
        """
        filled_before = self.size  # FIFO fills slots 0, 1, ... in order; one sync reads a slot at most once
        deadline = time.monotonic() + _UNFILLED_WAIT_S
        left: list[np.ndarray] = []
        rounds = 0
        while torn.size:
            again, _, torn_again = _native.gather_rows(storage.generations, slots[torn], sources)
            complete = np.setdiff1d(np.arange(torn.size), torn_again)
            for dst, src in zip(rows, again):
                dst[torn[complete]] = src[complete]
            torn = torn[torn_again]
            rounds += 1
            if rounds >= _TORN_REREADS:
                filled = slots[torn] < filled_before
                left.append(torn[filled])
                torn = torn[~filled]
                if time.monotonic() > deadline:
                    break
                time.sleep(0)  # let the writer finish the row
        left.append(torn)
        return np.sort(np.concatenate(left))

    def sample_uniform(self, batch_size: int) -> torch.Tensor:
        """``batch_size`` int64 slot indices on the device, uniform with replacement over [0, size).

        Device work only (see the module docstring): safe to capture in a CUDA graph, whose replays
        then draw over the size of the latest sync.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")
        self.require_rows()
        u = torch.rand(int(batch_size), generator=self._generator, device=self.device, dtype=torch.float64)
        return torch.minimum(u.mul_(self._size_f).long(), self._last_index)

    def require_rows(self) -> None:
        """Raise unless a sync copied rows: a captured draw over size 0 would index slot -1."""
        if self.size == 0:
            raise ValueError("the device replay is empty: call sync_from(storage) after rows were stored")

    def draw_uniform_into(self, out: torch.Tensor) -> None:
        """Draw ``len(out)`` uniform slots and gather their packed rows into ``out``: device work only."""
        self.gather_packed(self.sample_uniform(out.shape[0]), out)

    def upload_indices(
        self, slots: np.ndarray, weights: np.ndarray | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prioritized replay's host-drawn slots (and importance weights) on the device, in one copy.

        Both are packed into one host buffer (pinned on cuda) and copied together; the returned
        tensors are fresh (they do not alias a buffer a later call reuses).

        Raises:
            ValueError: slots not 1-D, outside [0, size) (sync before sampling), or weights of another length.
        """
        slots = np.asarray(slots)
        if slots.ndim != 1 or not np.issubdtype(slots.dtype, np.integer) or slots.size == 0:
            raise ValueError(f"slots must be a non-empty 1-D integer array, got shape {slots.shape} {slots.dtype}")
        n = slots.size
        if int(slots.min()) < 0 or int(slots.max()) >= self.size:
            # An index past the mirror would read a zero row (or, on cuda, fail a device assertion).
            raise ValueError(
                f"slots must lie in [0, {self.size}) (the rows synced so far); call sync_from before sampling"
            )
        if weights is not None and np.shape(weights) != (n,):
            raise ValueError(f"weights must have shape ({n},) like the slots, got {np.shape(weights)}")
        nbytes = 8 * n + (4 * n if weights is not None else 0)
        host = self._index_staging.take(nbytes)
        host[: 8 * n].view(torch.int64).numpy()[:] = slots
        if weights is not None:
            host[8 * n :].view(torch.float32).numpy()[:] = weights
        packed = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        packed.copy_(host, non_blocking=self.device.type == "cuda")
        self._index_staging.copies_enqueued()
        indices = packed[: 8 * n].view(torch.int64)
        return indices, (packed[8 * n :].view(torch.float32) if weights is not None else None)

    def gather_into(self, indices: torch.Tensor, out: dict[str, torch.Tensor]) -> None:
        """Write the rows at ``indices`` into the preallocated ``out[name]`` ([B, ...]) of each mirrored column.

        Keys of ``out`` that are not replay columns (e.g. a weights buffer) are left alone; a replay
        column this mirror does not hold is an error rather than a buffer silently left stale.
        """
        for name in out:
            if name in ALL_COLUMNS and name not in self._data:
                raise KeyError(f"column {name!r} is not mirrored (this mirror holds {self.columns})")
        for name, column in self._data.items():
            if name in out:
                torch.index_select(column, 0, indices, out=out[name])

    def gather_packed(self, indices: torch.Tensor, out: torch.Tensor) -> None:
        """Write the packed rows at ``indices`` into ``out`` ([B, width], this mirror's layout): one gather."""
        if tuple(out.shape) != (indices.numel(), self.width):  # index_select would resize ``out`` silently
            raise ValueError(f"out has shape {tuple(out.shape)}, not ({indices.numel()}, {self.width})")
        torch.index_select(self._packed, 0, indices, out=out)

    def gather(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """Fresh tensors of the rows at ``indices``, one per mirrored column."""
        return {name: column.index_select(0, indices) for name, column in self._data.items()}
