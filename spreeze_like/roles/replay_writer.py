"""The transition sink that writes rows into replay storage (serial mode; the parallel ring drain).

:class:`ReplayWriter` is the one place where transition rows become replay columns: it unpacks the
float32 rows (``spreeze_like.transition``) as column views and appends them through the critic's
replay sampler's ``add`` (the prioritized sampler gives new slots the largest priority before they
become visible; the uniform one just appends to the storage). In ``--serial`` mode samplers write straight into it; in the
parallel mode whichever process drains the rings calls :meth:`ReplayWriter.write` with each batch
of rows it read. It owns nothing: the storage belongs to whoever created it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spreeze_like.roles.ports import StatsWriter
from spreeze_like.transition import TransitionLayout


class ReplayWriter:
    """A :class:`~spreeze_like.roles.ports.TransitionSink` over replay storage.

    Args:
        inserter: a ``spreeze_like.replay`` sampler (``UniformSampler`` or ``PrioritizedSampler``) whose
            ``add`` appends to its storage (local or over shared memory).
        layout: the transition row layout.
        stats: the ``replay`` role's stats row (``inserted`` counter, ``size`` gauge).
    """

    def __init__(self, inserter: Any, layout: TransitionLayout, stats: StatsWriter) -> None:
        self.inserter, self.storage, self.layout, self.stats = inserter, inserter.storage, layout, stats

    def write(self, rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        c = self.layout.unpack(rows)
        self.inserter.add(c["obs"], c["action"], c["reward"], c["next_obs"], c["terminated"], c["truncated"])
        self.stats.add("inserted", float(len(rows)))
        self.stats.set("size", float(self.storage.size))

    @property
    def size(self) -> int:
        return int(self.storage.size)
