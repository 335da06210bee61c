"""The transports a role is handed, as small protocols, with their in-process implementations.

Roles (sampler, critic learner, actor learner, evaluator, monitor) never create their transports:
they receive them. ``--serial`` mode passes the in-process objects below; the parallel mode
passes the shared-memory objects of :mod:`spreeze_like.ipc`, which have the same methods (a
``WeightBoard`` attached as reader *is* a :class:`WeightsSource`, as writer a :class:`WeightsSink`;
``StatsBlock.role(name)`` *is* a :class:`StatsWriter` and ``StatsBlock.snapshot`` what the monitor
reads). So the role code is the same in both modes, and each protocol here is the whole contract.

============================  ===========================  =========================================
port                          serial (this module)         parallel (spreeze_like.ipc)
============================  ===========================  =========================================
TransitionSink.write(rows)    roles.replay_writer          a sampler's Ring (writer side)
WeightsSource.version/read    LocalBoard                   WeightBoard attached as "reader"
WeightsSink.publish           LocalBoard                   WeightBoard attached as "writer"
ReplaySampler.sample/update   replay.samplers.*            same, over shared-memory storage
StatsWriter.add/set           LocalStatsBlock.role(name)   StatsBlock.role(name)
monitor's snapshot()          LocalStatsBlock.snapshot     StatsBlock.snapshot
============================  ===========================  =========================================

Versions are the board's publish count: 1 for the first publish, then 2, 3, ...; 0 means nothing
has been published. Staleness is measured in these versions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class TransitionSink(Protocol):
    """Where a sampler puts finished transitions: float32 rows ``[n, layout.width]``."""

    def write(self, rows: np.ndarray) -> None:
        """Take ``rows`` (the caller reuses the array after the call returns). May block on backpressure."""


@runtime_checkable
class WeightsSource(Protocol):
    """Newest published weight vector of one network (actor or critic)."""

    def version(self) -> int:
        """Version of the newest publish (0: none). Cheap: polled every step."""

    def read(self, out: np.ndarray) -> int:
        """Copy the newest vector into ``out`` (float32, the board's length); return its version (0: none)."""


@runtime_checkable
class WeightsSink(Protocol):
    """Publishes one network's weight vector."""

    def publish(self, params: np.ndarray) -> int:
        """Make ``params`` (float32, fixed length per board) the newest; returns its version."""


@runtime_checkable
class ReplaySampler(Protocol):
    """Batches from replay storage; see ``spreeze_like.replay.samplers``."""

    def sample(self, n: int) -> Any:
        """A batch with ``obs, action, reward, next_obs, terminated, weights, slots, generations``."""

    def update_priorities(self, slots: np.ndarray, generations: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities from TD errors; updates of slots overwritten since sampling are dropped."""


@runtime_checkable
class StatsWriter(Protocol):
    """A role's row of scalars (one writer). Counters only grow; gauges hold the current value."""

    def add(self, name: str, delta: float = 1) -> None:
        """Add to a counter (a total; the monitor turns deltas into rates and means)."""

    def set(self, name: str, value: float) -> None:
        """Overwrite a gauge."""


def observe(stats: StatsWriter, key: str, total: float, count: float = 1) -> None:
    """Feed a mean: ``key.sum += total`` and ``key.count += count`` (two counters, see metrics.py)."""
    stats.add(key + ".sum", total)
    stats.add(key + ".count", count)


class LocalBoard:
    """In-process weight board: both :class:`WeightsSource` and :class:`WeightsSink`.

    Holds a copy of the newest vector; ``read`` copies out, as a shared-memory board does, so no
    reader aliases the writer's array. Created and dropped by whoever wires the roles.
    """

    def __init__(self) -> None:
        self._vec: np.ndarray | None = None
        self._version = 0

    def version(self) -> int:
        return self._version

    def publish(self, params: np.ndarray) -> int:
        if self._vec is not None and params.shape != self._vec.shape:
            raise ValueError(f"board holds {self._vec.shape[0]} floats, got {params.shape}")
        self._vec = np.array(params, dtype=np.float32, copy=True).reshape(-1)
        self._version += 1
        return self._version

    def read(self, out: np.ndarray) -> int:
        if self._vec is not None:
            out[...] = self._vec
        return self._version


class LocalRoleStats:
    """One role's row in a :class:`LocalStatsBlock`; unknown names raise, as a fixed shm layout would."""

    def __init__(self, role: str, names: Sequence[str]) -> None:
        self.role = role
        self._slots = dict.fromkeys(names, 0.0)

    def add(self, name: str, delta: float = 1) -> None:
        self._slots[self._check(name)] += delta

    def set(self, name: str, value: float) -> None:
        self._slots[self._check(name)] = value

    def get(self, name: str) -> float:
        return self._slots[self._check(name)]

    def _check(self, name: str) -> str:
        if name not in self._slots:
            raise KeyError(f"stats slot {name!r} is not declared for role {self.role!r} (see spreeze_like.metrics)")
        return name


class LocalStatsBlock:
    """In-process stand-in for ``ipc.StatsBlock``: ``role(name)`` rows and a ``snapshot()`` of all."""

    def __init__(self, schema: Mapping[str, Sequence[str]]) -> None:
        self.rows = {role: LocalRoleStats(role, names) for role, names in schema.items()}

    def role(self, role: str) -> LocalRoleStats:
        return self.rows[role]

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {role: dict(row._slots) for role, row in self.rows.items()}
