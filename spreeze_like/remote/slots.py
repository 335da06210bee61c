"""What the ray bridge keeps per remote sampler, and what it needs of a cluster.

- :class:`Cluster`: the interface :class:`~spreeze_like.remote.bridge.Bridge` drives (Ray's in
  :mod:`~spreeze_like.remote.ray_handles`, a fake in ``tests/remote/fakes.py``).
- :class:`RemoteSlot`: one remote sampler (one ``sampler-<i>`` row) across the actors that run it in
  turn: the current actor, its calls in flight, the restart bookkeeping of a
  :class:`~spreeze_like.procs.children.RoleProcess`, and what ``remote_samplers.json`` shows.

Owns nothing: the rows and rings are the supervisor's, the actors the bridge's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from spreeze_like.procs.control import RUN
from spreeze_like.procs.pacing import drop_held_steps


class Cluster(Protocol):
    """What the bridge needs of a Ray cluster. Futures are opaque (hashable) objects."""

    address: str

    def create(self, index: int, init: dict[str, Any]) -> Any:
        """Start an actor running ``RemoteSampler(**init)``; returns its handle (placement may take long)."""

    def ping(self, actor: Any) -> Any:
        """A future of ``RemoteSampler.ping()``; it answers once the actor is placed and built."""

    def collect(self, actor: Any, n: int, weights: Any, version: int) -> Any:
        """A future of ``RemoteSampler.collect(n, weights, version)`` (``weights``: a :meth:`put` reference or None)."""

    def put(self, vector: np.ndarray) -> Any:
        """Store ``vector`` once for every actor to fetch; returns the reference."""

    def wait(self, futures: list[Any], timeout: float) -> list[Any]:
        """The futures of ``futures`` that are done, in completion order; waits up to ``timeout`` for one."""

    def get(self, future: Any) -> Any:
        """A done future's value. Raises SpreezeError for a user error inside the actor; anything else is a death."""

    def kill(self, actor: Any) -> None:
        """Kill the actor now (no restart by the cluster); harmless on a dead one."""

    def pending_placement(self, actor: Any) -> bool:
        """True when the cluster reports that no node has taken the actor yet (best effort)."""


@dataclass
class Call:
    steps: int  # env steps asked for (a multiple of n_envs): what the call will add to env_steps
    issued_at: float
    board_version: int  # the actor board's version when the call was issued (for the policy lag)


class RemoteSlot:
    """One remote sampler across its actors: the bookkeeping of a :class:`~spreeze_like.procs.children.RoleProcess`."""

    def __init__(self, index: int, row: Any, ring: Any, n_envs: int) -> None:
        self.index, self.row, self.ring, self.n_envs = index, row, ring, n_envs
        self.role = f"sampler-{index}"
        self.actor: Any = None
        self.ping: Any = None  # the first ping's future while the actor is not placed yet
        self.placed = False
        self.waiting_for_node = False
        self.created_at = 0.0
        self.checked_placement_at = 0.0
        self.calls: dict[Any, Call] = {}
        self.in_flight = 0  # env steps of self.calls
        self.pending: np.ndarray | None = None  # rows a reply brought that did not fit (never expected)
        self.actor_version = 0  # the newest weights version passed to the current actor
        self.restarts = int(row.get("remote_restarts"))
        self.deaths: list[float] = []
        self.failures = 0
        self.restart_at: float | None = None
        self.abandoned = bool(row.get("abandoned"))
        self.node_ip, self.node_id, self.pid = "", "", None
        self.rate: float | None = None  # env steps per second of the actor's stepping (EMA)
        self.lag = 0.0

    def forget_calls(self) -> None:
        """The actor's calls are lost (it died, hung or was given up, or the bridge restarted): so are its
        n-step windows."""
        self.calls.clear()
        self.in_flight = 0
        self.row.set("in_flight", 0.0)
        drop_held_steps(self.row)

    def state(self, phase: int, quota: float) -> str:
        if self.abandoned:
            return "abandoned"
        if self.done(phase, quota):
            return "done"
        if self.actor is None:
            return "restarting"
        if not self.placed:
            return "waiting for a Ray node" if self.waiting_for_node else "starting"
        return "running"

    def done(self, phase: int, quota: float) -> bool:
        if self.abandoned:
            return True
        if self.calls or self.pending is not None:
            return False
        return phase != RUN or self.row.get("env_steps") >= quota
