"""A small numpy sum tree: the executable specification of the native one, for tests only.

It keeps a flat float64 array of priorities and answers every question by scanning it, so it is
obviously right and far too slow for training (O(N) per call). The native tree must agree with it:
same errors on bad input, same applied/skipped updates, same leaves, sums within 1e-9 relative,
and the same slot for every prefix sum away from interval boundaries.

Sampling semantics it pins down:

* ``find(u)`` returns the first slot whose running sum exceeds ``u`` (``u`` clamped into
  ``[0, total)``), so a zero-priority slot, owning an empty interval, is never returned.
* stratified sampling of n draws puts draw i uniformly in ``[i, i+1) * total / n``.
* the importance weight of slot i is ``(N P(i))^-beta / max_j (N P(j))^-beta = (p_min / p_i)^beta``
  with ``p_min`` the smallest positive priority, so every weight is at most 1.
"""

from __future__ import annotations

import math

import numpy as np


class ReferenceSumTree:
    """Flat-array proportional priorities with the native tree's interface and errors."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"sum tree capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.priorities = np.zeros(capacity, np.float64)
        self._max = 1.0

    def _check_slots(self, slots: np.ndarray) -> np.ndarray:
        slots = np.asarray(slots)
        if slots.dtype.kind not in "iu":
            raise TypeError("slots must be an integer array")
        bad = np.flatnonzero((slots < 0) | (slots >= self.capacity))
        if bad.size:
            raise ValueError(f"slot {slots[bad[0]]} at position {bad[0]} is outside the tree's capacity")
        return slots.astype(np.int64)

    def update(
        self,
        slots: np.ndarray,
        priorities: np.ndarray,
        expected_generations: np.ndarray | None = None,
        generations: np.ndarray | None = None,
    ) -> int:
        """Set priorities (in batch order: a repeated slot keeps its last value); returns #applied."""
        slots = self._check_slots(slots)
        pr = np.asarray(priorities, np.float64)
        bad = np.flatnonzero(~np.isfinite(pr) | ~(pr >= 0))
        if bad.size:
            raise ValueError(f"priority at position {bad[0]} is {pr[bad[0]]}; priorities must be finite and >= 0")
        applied = 0
        for i, s in enumerate(slots):
            if expected_generations is not None and generations[s] != expected_generations[i]:
                continue
            self.priorities[s] = pr[i]
            self._max = max(self._max, pr[i])
            applied += 1
        return applied

    def update_from_td(self, slots, td_errors, alpha: float, eps: float, expected_generations=None, generations=None):
        """Priorities (|td| + eps) ** alpha."""
        td = np.asarray(td_errors, np.float64)
        if not np.all(np.isfinite(td)):
            raise ValueError("TD errors must be finite")
        return self.update(slots, (np.abs(td) + eps) ** alpha, expected_generations, generations)

    def set_max(self, slots: np.ndarray) -> None:
        """Give slots the largest priority seen so far."""
        slots = self._check_slots(slots)
        self.priorities[slots] = self._max

    def raise_max(self, priority: float) -> None:
        """Raise the largest priority to at least ``priority`` (positive and finite)."""
        if not (priority > 0 and math.isfinite(priority)):
            raise ValueError("the largest priority must be positive and finite")
        self._max = max(self._max, float(priority))

    def max_priority(self) -> float:
        return self._max

    def total(self) -> float:
        """Exactly rounded sum (math.fsum), the yardstick for the tree's float64 sums."""
        return math.fsum(self.priorities)

    def min(self) -> float:
        """Smallest positive priority, inf if none."""
        positive = self.priorities[self.priorities > 0]
        return float(positive.min()) if positive.size else math.inf

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """First slot whose running sum exceeds each prefix sum."""
        total = self.total()
        if not total > 0:
            raise ValueError("cannot search an empty sum tree")
        running = np.cumsum(self.priorities)
        u = np.clip(np.asarray(prefix_sums, np.float64), 0.0, np.nextafter(total, 0.0))
        idx = np.searchsorted(running, u, side="right")
        last_positive = int(np.flatnonzero(self.priorities > 0)[-1])
        return np.minimum(idx, last_positive).astype(np.int64)

    def boundary_distance(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Distance of each prefix sum to the nearest interval boundary (where rounding may differ)."""
        running = np.concatenate([[0.0], np.cumsum(self.priorities)])
        u = np.asarray(prefix_sums, np.float64)
        idx = np.clip(np.searchsorted(running, u), 1, running.size - 1)
        return np.minimum(np.abs(running[idx] - u), np.abs(running[idx - 1] - u))

    def probabilities(self) -> np.ndarray:
        """P(i) = p_i / total."""
        return self.priorities / self.total()

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified draw of n slots."""
        u = (np.arange(n) + rng.random(n)) * (self.total() / n)
        return self.find(u)

    def weights(self, slots: np.ndarray, beta: float) -> np.ndarray:
        """Importance weights normalised by the largest possible weight."""
        n_filled = np.count_nonzero(self.priorities)
        prob = self.probabilities()
        w = (n_filled * prob[slots]) ** -beta
        return w / (n_filled * self.min() / self.total()) ** -beta
