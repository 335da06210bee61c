"""The native K-ary sum tree (``spreeze_like._native.SumTreeK*``), laid over memory it is handed.

One tree is shared by every process of a run: the supervisor sizes a shared-memory segment with
:meth:`SumTree.nbytes`, one process creates the tree in it (``create=True``), the others attach
(``create=False``). The tree only borrows the memory; whoever created the segment unlinks it.

Layout: a header (magic, K, capacity, the largest priority seen, the writer lock), then float64
sum levels from the root down to the leaves (one leaf per slot) and float64 min levels (smallest
positive leaf below each inner node). Children of node j of a level are nodes K*j..K*j+K-1 of the
next level; every level starts on a 64-byte boundary, so a sibling group of K=8 doubles is one
cache line. See docs/replay.md for the K sweep behind the default.

Concurrency protocol:

* **Writers** (:meth:`update`, :meth:`update_from_td`, :meth:`set_max`, :meth:`rebuild`) hold a
  process-shared, *robust* mutex in the header for the whole batch, so any number of processes may
  write and their batches never interleave. A batch first writes its leaves, then recomputes each
  touched ancestor once from its children (lazy writing): sums never drift, whatever the order of
  writers. If a writer dies holding the lock, the next writer is told so by the OS (EOWNERDEAD),
  recomputes every inner node from the leaves, and goes on: a crash never leaves a stuck lock or
  an inconsistent tree (``lock_recoveries`` counts these).
* **Samplers** take no lock. While a batch is being written they may see a total or inner sums a
  batch behind the leaves. A descent that runs past the last child takes the last positive child;
  a drawn leaf that reads as zero is redrawn. So a sampler never returns a slot outside
  ``[0, capacity)`` nor a slot whose priority it read as zero; probabilities are computed from the
  total it read when it started, so they may be a batch stale.
* **Stale updates**: pass the storage's live generation column and the generations returned with
  the sample; an entry whose slot was rewritten since (generation changed) is skipped, under the
  lock. The inserting process bumps the generation before it sets the new row's priority, so a
  late update can never overwrite the priority of a newer transition.

Bad input (slots outside the capacity, negative/NaN/inf priorities or TD errors, a non-positive
capacity) raises before anything is written: an invalid batch never half-applies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spreeze_like.errors import ConfigError
from spreeze_like.native import _native

#: K of the default tree: the best of the measured sweep (tools/bench_replay.py, docs/replay.md).
DEFAULT_K: int = int(_native.SUM_TREE_DEFAULT_K)
#: The compiled choices of K.
KS: tuple[int, ...] = tuple(int(k) for k in _native.SUM_TREE_KS)
_CLASSES = {k: getattr(_native, f"SumTreeK{k}") for k in KS}


def _check(capacity: int, k: int) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= 0:
        raise ConfigError(f"sum tree capacity must be a positive integer, got {capacity!r}")
    if k not in _CLASSES:
        raise ConfigError(f"sum tree K must be one of {KS}, got {k!r}")


class SumTree:
    """Proportional sum tree over ``capacity`` slots, in a handed buffer.

    Args:
        buffer: writable C-contiguous buffer of at least :meth:`nbytes` bytes; it stays exported
            (an mmap cannot be closed) while this object lives.
        capacity: number of slots.
        k: fan-out (a compiled power of two, see :data:`KS`).
        create: True to initialise the buffer (all priorities zero); False to attach.
        seed: seed of this object's random stream (None: from the OS).
    """

    def __init__(self, buffer: Any, capacity: int, *, k: int = DEFAULT_K, create: bool, seed: int | None = None):
        _check(capacity, k)
        self._buffer = buffer
        self._impl = _CLASSES[k](buffer, int(capacity), bool(create), seed)
        self.capacity = int(capacity)
        self.k = k

    @staticmethod
    def nbytes(capacity: int, k: int = DEFAULT_K) -> int:
        """Bytes a tree of this capacity and K needs (a pure function; header and slack included)."""
        _check(capacity, k)
        return int(_native.sum_tree_nbytes(int(capacity), k))

    @classmethod
    def local(cls, capacity: int, *, k: int = DEFAULT_K, seed: int | None = None) -> SumTree:
        """A tree in this process's own memory."""
        return cls(np.zeros(cls.nbytes(capacity, k), np.uint8), capacity, k=k, create=True, seed=seed)

    @property
    def depth(self) -> int:
        """Levels below the root (the leaves are level ``depth``)."""
        return int(self._impl.depth)

    def update(
        self,
        slots: np.ndarray,
        priorities: np.ndarray,
        expected_generations: np.ndarray | None = None,
        generations: np.ndarray | None = None,
    ) -> int:
        """Set the priorities of a batch of slots; returns how many were applied.

        With ``expected_generations`` and the storage's live ``generations`` column, entry i is
        applied only if ``generations[slots[i]] == expected_generations[i]``. A slot repeated in a
        batch ends with its last priority.
        """
        return self._impl.update(slots, priorities, expected_generations, generations)

    def update_from_td(
        self,
        slots: np.ndarray,
        td_errors: np.ndarray,
        alpha: float,
        eps: float,
        expected_generations: np.ndarray | None = None,
        generations: np.ndarray | None = None,
    ) -> int:
        """As :meth:`update` with priorities ``(|td| + eps) ** alpha`` computed natively."""
        return self._impl.update_td(slots, td_errors, alpha, eps, expected_generations, generations)

    def set_max(self, slots: np.ndarray) -> None:
        """Give each slot the largest priority seen so far (new transitions; 1.0 at first)."""
        self._impl.set_max(slots)

    def raise_max(self, priority: float) -> None:
        """Raise the largest priority (what :meth:`set_max` writes) to at least ``priority``, no leaf
        changed; a resume restores the saved run's. Positive and finite, else ValueError."""
        self._impl.raise_max(float(priority))

    def sample(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Stratified proportional draw: (slots int64[n], probabilities float64[n])."""
        return self._impl.sample(n)

    def sample_weighted(self, n: int, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`sample`, plus importance weights float32[n] = (p_min / p_i) ** beta, all <= 1."""
        return self._impl.sample(n, beta)

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Slots whose cumulative-priority interval holds each prefix sum (clamped into [0, total))."""
        return self._impl.find(prefix_sums)

    def get(self, slots: np.ndarray) -> np.ndarray:
        """Current priorities of slots (float64)."""
        return self._impl.get(slots)

    def total(self) -> float:
        """Sum of all priorities."""
        return float(self._impl.total())

    def min(self) -> float:
        """Smallest positive priority (inf if every priority is zero)."""
        return float(self._impl.min())

    def max_priority(self) -> float:
        """Largest priority ever set (what :meth:`set_max` writes)."""
        return float(self._impl.max_priority())

    def rebuild(self) -> None:
        """Recompute every inner node from the leaves (under the writer lock)."""
        self._impl.rebuild()

    def seed(self, seed: int) -> None:
        """Restart this object's random stream (other processes' streams are their own)."""
        self._impl.seed(seed)

    def lock_recoveries(self) -> int:
        """How often a writer found the lock held by a dead process and repaired the tree."""
        return int(self._impl.lock_recoveries())

    def level(self, level: int, *, mins: bool = False) -> np.ndarray:
        """Read-only view of one level's sums (or mins), real nodes only; level 0 is the root."""
        return self._impl.level(level, mins)

    def leaves(self) -> np.ndarray:
        """Read-only view of the leaf priorities (one per slot)."""
        return self._impl.level(self.depth, False)
