"""Helpers both learner roles use: replay batch -> device tensors, and cheap metric aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spreeze_like.algos.base import Batch
from spreeze_like.roles.ports import StatsWriter, observe


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
