"""Samplers over a :class:`~spreeze_like.replay.storage.ReplayStorage`: uniform and prioritized.

A learner's use is two lines, the same for both samplers::

    batch = sampler.sample(256)   # obs, action, reward, next_obs, terminated, weights, slots, generations
    sampler.update_priorities(batch.slots, batch.generations, td_errors)

The inserting process calls ``sampler.add(...)`` (for the prioritized sampler this also gives the
new rows the largest priority seen so far). Sampler objects are per process; the storage and the
sum tree they sit on may be shared by all processes (see their module docstrings for the rules).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spreeze_like.errors import ConfigError
from spreeze_like.replay.storage import Columns, ReplayStorage, Rows
from spreeze_like.replay.sum_tree import SumTree

# A torn row needs a writer racing this very slot; needing more rounds than this means the writer
# is stuck half-way through a chunk that covers most of the storage.
_MAX_REDRAW_ROUNDS = 32


@dataclass(slots=True)
class Batch(Columns):
    """One sampled batch; arrays are fresh copies, owned by the caller."""

    weights: np.ndarray  # float32[n]: importance weights, max possible weight = 1 (uniform: all 1)
    slots: np.ndarray  # int64[n]
    generations: np.ndarray  # uint64[n]: hand back to update_priorities


def _check_batch(storage: ReplayStorage, n: int) -> int:
    size = storage.size
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"batch size must be a positive integer, got {n!r}")
    if n > size:
        raise ValueError(
            f"cannot sample {n} transitions: only {size} stored; start learning once at least the batch size "
            "is stored (learning_starts >= batch_size)"
        )
    return size


class UniformSampler:
    """Uniform sampling with replacement over the filled part of the storage.

    Args:
        storage: the (possibly shared) storage.
        seed: seed of this sampler's random generator (None: fresh entropy).
    """

    def __init__(self, storage: ReplayStorage, *, seed: int | None = None) -> None:
        self.storage = storage
        self._rng = np.random.default_rng(seed)

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray | None = None,
    ) -> np.ndarray:
        """Append a chunk of transitions (see :meth:`ReplayStorage.add`); returns their slots."""
        return self.storage.add(obs, action, reward, next_obs, terminated, truncated)

    def sample(self, batch_size: int) -> Batch:
        """Draw ``batch_size`` transitions uniformly (weights all 1)."""
        size = _check_batch(self.storage, batch_size)
        slots = self._rng.integers(0, size, batch_size, dtype=np.int64)
        rows = self.storage.gather(slots)
        for _ in range(_MAX_REDRAW_ROUNDS):
            if rows.torn.size == 0:
                break
            # Rows being rewritten right now: draw other slots for those positions only.
            new = self._rng.integers(0, size, rows.torn.size, dtype=np.int64)
            slots[rows.torn] = new
            _patch(rows, self.storage.gather(new), rows.torn)
        else:
            raise RuntimeError("replay rows stayed torn after repeated redraws; is the writer stuck mid-chunk?")
        weights = np.ones(batch_size, np.float32)
        return Batch(
            rows.obs, rows.action, rows.reward, rows.next_obs, rows.terminated, weights, slots, rows.generations
        )

    def update_priorities(self, slots: np.ndarray, generations: np.ndarray, td_errors: np.ndarray) -> int:
        """No-op (uniform sampling has no priorities); returns 0 so learners need no branch."""
        return 0


@dataclass(frozen=True)
class PrioritizedConfig:
    """Proportional prioritized replay settings (Schaul et al. 2016)."""

    alpha: float = 0.6  # priority exponent: 0 = uniform, 1 = fully proportional to |TD error| + eps
    beta0: float = 0.4  # importance-weight exponent at the first sample; annealed linearly to 1
    beta_steps: int = 1_000_000  # sample() calls over which beta goes from beta0 to 1
    eps: float = 1e-6  # added to |TD error| so that no transition's priority becomes zero

    def __post_init__(self) -> None:
        if not (0.0 <= self.alpha <= 1.0):
            raise ConfigError(f"prioritized replay alpha must be in [0, 1], got {self.alpha}")
        if not (0.0 <= self.beta0 <= 1.0):
            raise ConfigError(f"prioritized replay beta0 must be in [0, 1], got {self.beta0}")
        if self.beta_steps <= 0:
            raise ConfigError(f"prioritized replay beta_steps must be positive, got {self.beta_steps}")
        if not (self.eps >= 0.0 and np.isfinite(self.eps)):
            raise ConfigError(f"prioritized replay eps must be finite and >= 0, got {self.eps}")


class PrioritizedSampler:
    """Proportional prioritized sampling through a (possibly shared) native sum tree.

    Args:
        storage: the storage whose slots the tree covers (same capacity).
        tree: the sum tree.
        config: alpha, beta schedule and eps.
        seed: reseeds this process's tree random stream (None: keep the tree object's own seed).
    """

    def __init__(
        self, storage: ReplayStorage, tree: SumTree, config: PrioritizedConfig | None = None, *, seed: int | None = None
    ) -> None:
        if tree.capacity != storage.capacity:
            raise ConfigError(f"sum tree capacity {tree.capacity} != storage capacity {storage.capacity}")
        self.storage = storage
        self.tree = tree
        self.config = config or PrioritizedConfig()
        self.steps = 0  # sample() calls so far: drives the beta schedule (restore it from a checkpoint)
        if seed is not None:
            tree.seed(seed)

    @property
    def beta(self) -> float:
        """Importance-weight exponent for the next sample: beta0 -> 1 linearly over beta_steps."""
        c = self.config
        return c.beta0 + (1.0 - c.beta0) * min(1.0, self.steps / c.beta_steps)

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray | None = None,
    ) -> np.ndarray:
        """Append transitions; they get the largest priority seen so far. Returns their slots."""
        return self.storage.add(obs, action, reward, next_obs, terminated, truncated, on_written=self.tree.set_max)

    def sample(self, batch_size: int) -> Batch:
        """Draw a stratified proportional batch with importance weights (max weight 1)."""
        _check_batch(self.storage, batch_size)
        beta = self.beta
        slots, _, weights = self.tree.sample_weighted(batch_size, beta)
        rows = self.storage.gather(slots)
        for _ in range(_MAX_REDRAW_ROUNDS):
            if rows.torn.size == 0:
                break
            new, _, new_w = self.tree.sample_weighted(rows.torn.size, beta)
            slots[rows.torn] = new
            weights[rows.torn] = new_w
            _patch(rows, self.storage.gather(new), rows.torn)
        else:
            raise RuntimeError("replay rows stayed torn after repeated redraws; is the writer stuck mid-chunk?")
        self.steps += 1
        return Batch(
            rows.obs, rows.action, rows.reward, rows.next_obs, rows.terminated, weights, slots, rows.generations
        )

    def sample_slots(self, batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw slots and weights only (slots, weights, generations): a device mirror gathers the rows.

        For the storage's writer process (the critic learner), whose mirror holds exactly what the
        storage holds; the generations are those of the rows as they are now, for the priority write.
        """
        _check_batch(self.storage, batch_size)
        slots, _, weights = self.tree.sample_weighted(batch_size, self.beta)
        self.steps += 1
        return slots, weights, self.storage.generations[slots].copy()

    def update_priorities(self, slots: np.ndarray, generations: np.ndarray, td_errors: np.ndarray) -> int:
        """Set priorities (|td| + eps)^alpha for the sampled slots not rewritten since; returns #applied."""
        c = self.config
        return self.tree.update_from_td(slots, td_errors, c.alpha, c.eps, generations, self.storage.generations)


def _patch(rows: Rows, new_rows: Rows, positions: np.ndarray) -> None:
    """Replace the rows at ``positions`` with freshly drawn ones (whose own torn rows stay marked)."""
    rows.obs[positions] = new_rows.obs
    rows.action[positions] = new_rows.action
    rows.reward[positions] = new_rows.reward
    rows.next_obs[positions] = new_rows.next_obs
    rows.terminated[positions] = new_rows.terminated
    rows.generations[positions] = new_rows.generations
    rows.torn = positions[new_rows.torn]
