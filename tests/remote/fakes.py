"""A fake cluster for the bridge tests (no Ray): futures the test resolves, fails or leaves stalled.

Also the shared-memory pieces a bridge works on, real ones: a stats block with the rows and slots
of the contract (``control`` with ``phase`` and ``quota-<i>``, ``critic-learner`` with ``allowance``,
``sampler-<i>`` rows with ``in_flight``/``abandoned``/``remote_restarts``, ``ray-bridge``), and rings.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.ipc import Ring, StatsBlock, new_run_id, segment_name
from spreeze_like.metrics import SAMPLER
from spreeze_like.roles.ports import LocalBoard

SPEC = AlgoSpec(algo="sac", obs_dim=3, act_dim=1, hidden_sizes=(8,), seed=1)
WIDTH = 3 + 1 + 1 + 3 + 2
SAMPLER_SLOTS = [*SAMPLER.slot_names(), "done", "pace_wait_s", "ring_waits", "ring_wait_s", "abandoned",
                 "remote_restarts", "in_flight"]


class FakeFuture:
    _ids = itertools.count()

    def __init__(self, kind: str, actor: FakeActor, args: tuple = ()) -> None:
        self.id = next(self._ids)
        self.kind, self.actor, self.args = kind, actor, args
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: Any) -> None:
        self.done, self.value = True, value

    def fail(self, error: BaseException) -> None:
        self.done, self.error = True, error

    def __repr__(self) -> str:
        return f"FakeFuture({self.kind}, actor {self.actor.number}, {self.args})"


@dataclass
class FakeActor:
    number: int
    index: int
    init: dict[str, Any]
    killed: bool = False
    pending: bool = False
    calls: list[FakeFuture] = field(default_factory=list)


def reply(n: int, version: int = 0, finite: bool = True, busy_s: float = 0.01) -> dict[str, Any]:
    """What RemoteSampler.collect returns for ``n`` env steps (rows of n, their index in column 0)."""
    rows = np.zeros((n, WIDTH), dtype=np.float32)
    rows[:, 0] = np.arange(n)
    return {"rows": rows, "add": {"env_steps": float(n), "episodes": 1.0}, "set": {"policy_version": float(version)},
            "version": version, "steps": n, "busy_s": busy_s}


class FakeCluster:
    """The bridge's Cluster. ``auto``: collect and ping futures resolve at once (``auto(actor, n, w, v)``)."""

    address = "127.0.0.1:6400"

    def __init__(self, auto: Callable[[FakeActor, int, Any, int], dict] | None = None, auto_ping: bool = True) -> None:
        self.auto, self.auto_ping = auto, auto_ping
        self.actors: list[FakeActor] = []
        self.puts: list[np.ndarray] = []
        self.refs: list[str] = []

    def create(self, index: int, init: dict[str, Any]) -> FakeActor:
        actor = FakeActor(len(self.actors), index, init)
        self.actors.append(actor)
        return actor

    def ping(self, actor: FakeActor) -> FakeFuture:
        f = FakeFuture("ping", actor)
        if self.auto_ping:
            f.resolve({"node_ip": "127.0.0.1", "node_id": f"node-{actor.number}", "pid": 1000 + actor.number})
        return f

    def collect(self, actor: FakeActor, n: int, weights: Any, version: int) -> FakeFuture:
        assert not actor.killed, "a call to a killed actor"
        f = FakeFuture("collect", actor, (n, weights, version))
        actor.calls.append(f)
        if self.auto is not None:
            f.resolve(self.auto(actor, n, weights, version))
        return f

    def put(self, vector: np.ndarray) -> str:
        self.puts.append(vector.copy())
        self.refs.append(f"ref-{len(self.puts)}")
        return self.refs[-1]

    def wait(self, futures: list[FakeFuture], timeout: float) -> list[FakeFuture]:
        return [f for f in futures if f.done]

    def get(self, future: FakeFuture) -> Any:
        assert future.done
        if future.error is not None:
            raise future.error
        return future.value

    def kill(self, actor: FakeActor) -> None:
        actor.killed = True

    def pending_placement(self, actor: FakeActor) -> bool:
        return actor.pending

    def live(self, index: int) -> FakeActor:
        (actor,) = [a for a in self.actors if a.index == index and not a.killed]
        return actor


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def config(**kw: Any) -> SimpleNamespace:
    base = {"env": "Pendulum-v1", "env_kwargs": {}, "samplers": 1, "remote_samplers": 2, "envs_per_sampler": 1,
            "remote_envs_per_sampler": 0, "remote_batch": 0, "learning_starts": 100, "sampler_hang_s": 60.0,
            "remote_place_timeout_s": 120.0, "max_restarts": 10}
    base.update(kw)
    return SimpleNamespace(**base)


class Shm:
    """A stats block and rings for ``rows`` sampler rows (remote ones from ``first``); unlink() at the end."""

    def __init__(self, rows: int, first: int, ring_capacity: int = 4096) -> None:
        self.run_id = new_run_id()
        schema = {"control": ["phase", "ckpt_request", "eval_request", "eval_step",
                              *[f"quota-{i}" for i in range(rows)]],
                  "critic-learner": ["allowance"],
                  **{f"sampler-{i}": SAMPLER_SLOTS for i in range(rows)},
                  "ray-bridge": ["done", "connected", "cpu_s", "rows_written", "calls"]}
        self.block = StatsBlock.create(segment_name(self.run_id, "ctl", 0), schema)
        self.rings = {i: Ring.create(segment_name(self.run_id, "ring", i), ring_capacity, WIDTH, role="writer")
                      for i in range(first, rows)}
        self.board = LocalBoard()

    def set_quota(self, i: int, quota: float) -> None:
        self.block.role("control").set(f"quota-{i}", quota)

    def allowance(self, value: float) -> None:
        self.block.role("critic-learner").set("allowance", value)

    def row(self, i: int) -> Any:
        return self.block.role(f"sampler-{i}")

    def drain(self, i: int) -> np.ndarray:
        """What ring ``i`` holds, released (the feeder's part)."""
        ring = self.rings[i]
        out = np.empty((ring.fill(), WIDTH), dtype=np.float32)
        done = 0
        while done < len(out):
            done += ring.pop_into(out[done:])
        return out

    def unlink(self) -> None:
        for ring in self.rings.values():
            ring.close()
            ring.unlink()
        self.block.close()
        self.block.unlink()
