"""What both learner roles share: the weight-board plumbing, replay batch -> device tensors, metrics."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spreeze_like.algos.base import Batch
from spreeze_like.roles.ports import StatsWriter, WeightsSink, WeightsSource, observe


def _tensor(array: Any, device: torch.device, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    t = torch.as_tensor(np.ascontiguousarray(array, dtype=np.float32))
    if shape is not None:
        t = t.reshape(shape)
    return t.to(device, non_blocking=True) if device.type != "cpu" else t


def to_batch(raw: Any, device: torch.device, use_weights: bool) -> Batch:
    """A replay sample (numpy fields) as a :class:`Batch` on ``device``.

    ``weights`` stays None unless ``use_weights`` (prioritized replay for the critic), so the
    uniform path does no importance-weight multiply at all.
    """
    n = len(raw.obs)
    return Batch(
        obs=_tensor(raw.obs, device, (n, -1)),
        action=_tensor(raw.action, device, (n, -1)),
        reward=_tensor(raw.reward, device, (n,)),
        next_obs=_tensor(raw.next_obs, device, (n, -1)),
        terminated=_tensor(raw.terminated, device, (n,)),
        weights=_tensor(raw.weights, device, (n,)) if use_weights and raw.weights is not None else None,
    )


class MetricMeans:
    """Sums scalar metric tensors on the learner's device and hands them to stats every ``period`` updates.

    One ``torch.stack`` per update and one device-to-host copy per period: logging never forces a
    GPU sync per update, and the stats block sees a handful of writes per period, not per update.
    A step the non-finite guard skipped (``applied`` 0) adds nothing: its metrics may be NaN.
    """

    def __init__(self, stats: StatsWriter, period: int = 20) -> None:
        self.stats, self.period = stats, period
        self._keys: tuple[str, ...] = ()
        self._sum: torch.Tensor | None = None
        self._kept: torch.Tensor | None = None  # applied steps in the sums (a device scalar)
        self._count = 0

    def add(self, metrics: dict[str, torch.Tensor], applied: torch.Tensor | float = 1.0) -> None:
        """Add one update's metrics; ``applied`` is 1.0, or 0.0 for a skipped step (a tensor: no sync)."""
        keys = tuple(metrics)
        values = torch.stack([v.reshape(()).float() for v in metrics.values()])
        kept = torch.as_tensor(applied, dtype=torch.float32, device=values.device)
        values = torch.where(kept > 0, values, torch.zeros_like(values))
        if self._sum is None or keys != self._keys:
            self.flush()
            self._keys, self._sum, self._kept = keys, values, kept.clone()
        else:
            self._sum += values
            self._kept += kept
        self._count += 1
        if self._count >= self.period:
            self.flush()

    def flush(self) -> None:
        if self._sum is not None and self._count:
            *totals, kept = torch.cat([self._sum, self._kept.reshape(1)]).tolist()
            if kept > 0:
                for key, total in zip(self._keys, totals):
                    observe(self.stats, key, total, kept)
        self._sum, self._kept, self._count = None, None, 0


class LearnerRole:
    """The part of a learner role that is the same for the critic and the actor half.

    It holds the algorithm half (``part``), publishes the half's own vector to ``sink`` and loads
    the other half's vector from ``source`` into its copy. Versions are board publish counts: the
    first publish, at construction, is the seed-determined initial network, which equals the copy
    the other learner built from the same seed, so the two agree without waiting for each other.
    Subclasses set ``own_vector`` / ``load_copy`` / ``copy_size`` to their half's methods.

    Non-finite steps: a :class:`~spreeze_like.roles.nonfinite.NonFiniteGuard` on the half's optimisers
    skips them (``guard.begin()``/``guard.end()`` around each step), counts them in ``nonfinite_steps``
    and raises :class:`~spreeze_like.errors.NonFiniteError` after ``max_nonfinite_steps`` in a row.
    """

    def __init__(self, part: Any, source: WeightsSource, sink: WeightsSink, stats: StatsWriter, batch_size: int,
                 sync_period: int, copy_size: int, role: str, max_nonfinite_steps: int = 10) -> None:
        from spreeze_like.roles.nonfinite import NonFiniteGuard  # here: nonfinite imports nothing of ours back
        self.part, self.source, self.sink, self.stats = part, source, sink, stats
        self.batch_size, self.sync_period = batch_size, sync_period
        self.copy_version = 0  # board version held in the copy; 0: the seed-determined initial network
        self.version = 0  # board version of our last publish
        self._copy_vec = np.zeros(copy_size, dtype=np.float32)
        self.metrics = MetricMeans(stats)
        self.guard = NonFiniteGuard(part, role, stats, max_nonfinite_steps)
        self.publish()

    @property
    def updates(self) -> int:
        return self.part.updates

    def own_vector(self) -> np.ndarray:
        raise NotImplementedError

    def load_copy(self, vec: np.ndarray) -> None:
        raise NotImplementedError

    def sync_due(self) -> bool:
        return self.part.updates % self.sync_period == 0

    def refresh_copy(self) -> None:
        """Load the other half's newest vector into the copy, if there is a newer one."""
        if self.source.version() > self.copy_version:
            version = self.source.read(self._copy_vec)
            if version > 0:
                self.load_copy(self._copy_vec)
                self.copy_version = version

    def observe_staleness(self) -> None:
        observe(self.stats, "copy_staleness", float(max(0, self.source.version() - self.copy_version)))

    def publish(self) -> None:
        self.version = self.sink.publish(self.own_vector())
        self.stats.set("version", float(self.version))

    def flush(self) -> None:
        """Hand pending metric sums and skip counts to the stats block (call before a final read).

        Raises NonFiniteError if the last updates were skipped ``max_nonfinite_steps`` times in a row.
        """
        self.metrics.flush()
        self.guard.check()

    def check_finite(self) -> None:
        """Before a checkpoint: raise NonFiniteError unless every network and optimiser tensor is finite."""
        self.flush()
        self.guard.assert_finite_state()

    def state_dict(self) -> dict[str, Any]:
        return {"part": self.part.state_dict(), "updates": self.part.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.part.load_state_dict(state["part"])
        self.part.updates = int(state["updates"])
        self.publish()
