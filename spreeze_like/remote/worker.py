"""The body of a remote sampler actor: a :class:`SamplerWorker` that steps on request and returns its rows.

:class:`RemoteSampler` is a plain class. The bridge (:mod:`spreeze_like.procs.ray_bridge_proc`) wraps it
as a Ray actor (``ray_handles``); tests call it directly. It runs the very same
:class:`~spreeze_like.roles.sampler.SamplerWorker` as a local sampler process, with in-process ports
instead of shared memory:

- :class:`RowCollector` (the transition sink) keeps the rows of the current call;
- :class:`PassedWeights` (the weights source) holds the last actor vector the bridge passed in;
- :class:`StatDeltas` (the stats writer) records what the worker adds and sets during a call, so the
  bridge can apply the same deltas to the sampler's shared stats row.

So rows, seeds, warm-up, non-finite handling and episode bookkeeping are those of a local sampler with
the same index, generation and weights (``tests/remote/test_remote_worker.py`` checks it row for row).

Owns its envs only (closed by :meth:`RemoteSampler.close`, or with the actor's process). If the actor
dies, the rows of the call in hand are lost; the bridge never counted them (it counts rows when it
writes them), so nothing is counted twice or lost from the run's accounting.

Imports neither torch nor ray at module import: a Ray worker node needs numpy, gymnasium and this
package, nothing more; :meth:`RemoteSampler.ping` imports ray only when the process already has it.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

import numpy as np

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.roles.sampler import SamplerWorker
from spreeze_like.transition import TransitionLayout

# The worker observes policy_lag against the version it was handed, which is 0 by construction; the
# bridge knows the newest version when the rows arrive and observes the real lag per batch instead.
_BRIDGE_OBSERVED = ("policy_lag.sum", "policy_lag.count")


class RowCollector:
    """A :class:`~spreeze_like.roles.ports.TransitionSink` that keeps the rows written since :meth:`take`."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._chunks: list[np.ndarray] = []

    def write(self, rows: np.ndarray) -> None:
        self._chunks.append(np.array(rows, dtype=np.float32, copy=True))  # the worker reuses its array

    def take(self) -> np.ndarray:
        """All rows since the last call, ``[m, width]`` float32 (C-contiguous, possibly ``m = 0``)."""
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return np.empty((0, self.width), dtype=np.float32)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


class PassedWeights:
    """A :class:`~spreeze_like.roles.ports.WeightsSource` over the vector the bridge last passed in."""

    def __init__(self, size: int) -> None:
        self._vec = np.zeros(size, dtype=np.float32)
        self._version = 0

    def give(self, vector: np.ndarray, version: int) -> None:
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vector.shape != self._vec.shape:
            raise ValueError(f"actor vector has {vector.shape[0]} floats, this sampler's policy needs {self._vec.shape[0]}")
        np.copyto(self._vec, vector)
        self._version = version

    def version(self) -> int:
        return self._version

    def read(self, out: np.ndarray) -> int:
        out[...] = self._vec
        return self._version


class StatDeltas:
    """A :class:`~spreeze_like.roles.ports.StatsWriter` that records counter deltas and gauge values."""

    def __init__(self) -> None:
        self.added: dict[str, float] = {}
        self.gauges: dict[str, float] = {}

    def add(self, name: str, delta: float = 1) -> None:
        self.added[name] = self.added.get(name, 0.0) + float(delta)

    def set(self, name: str, value: float) -> None:
        self.gauges[name] = float(value)

    def take(self) -> tuple[dict[str, float], dict[str, float]]:
        added, gauges = self.added, self.gauges
        self.added, self.gauges = {}, {}
        return added, gauges


class RemoteSampler:
    """One remote sampler (role ``sampler-<index>``); see the module docstring.

    Args:
        env_id: gymnasium id or ``module:EnvId`` (installed on the node that runs this).
        spec: the run's algorithm spec.
        index: the sampler row's index ``i`` (seeds depend on it, as for a local sampler).
        n_envs: envs stepped by this sampler.
        random_steps: its share of the warm-up (uniform random actions).
        generation: ``session generation + 1000 x restarts of this sampler``.
        env_steps: env steps this sampler took before (resume and restarts), for the warm-up rule.
        episodes: episodes it finished before.
        env_kwargs: the run's ``--env-kwargs`` for ``gymnasium.make``.
    """

    def __init__(self, env_id: str, spec: AlgoSpec, index: int, n_envs: int, random_steps: int, generation: int,
                 env_steps: int = 0, episodes: int = 0, env_kwargs: dict[str, Any] | None = None) -> None:
        self._stats = StatDeltas()
        self._sink = RowCollector(TransitionLayout(spec.obs_dim, spec.act_dim).width)
        self._weights = PassedWeights(NumpyPolicy(spec).size)
        self.worker = SamplerWorker(env_id, spec, index, n_envs, random_steps, self._sink, self._weights, self._stats,
                                    generation=generation, env_kwargs=env_kwargs)
        self.worker.env_steps, self.worker.episodes = int(env_steps), int(episodes)

    @property
    def n_envs(self) -> int:
        return len(self.worker.envs)

    def collect(self, n: int, weights: np.ndarray | None, version: int) -> dict[str, Any]:
        """Step every env ``ceil(n / n_envs)`` times and return what that produced.

        Args:
            n: env steps wanted; the worker steps all its envs at once, so it takes ``n`` rounded up
                to a multiple of ``n_envs`` (the bridge asks for multiples).
            weights: a newer actor vector, or None to keep the current one.
            version: the board version of ``weights`` (ignored when ``weights`` is None).

        Returns:
            ``rows`` (float32 ``[m, width]``, the finite transitions), ``add`` (counter deltas:
            ``env_steps``, ``episodes``, ``nonfinite_dropped``, mean sums and counts), ``set`` (gauges),
            ``version`` (the policy version the rows were collected with; 0: random warm-up only),
            ``steps`` (env steps taken) and ``busy_s`` (seconds spent stepping, for the batch size).
        """
        if weights is not None:
            self._weights.give(weights, version)
        t0 = time.perf_counter()
        steps = 0
        while steps < n:
            self.worker.step()
            steps += self.n_envs
        busy_s = time.perf_counter() - t0
        added, gauges = self._stats.take()
        for name in _BRIDGE_OBSERVED:
            added.pop(name, None)
        return {"rows": self._sink.take(), "add": added, "set": gauges, "version": self.worker.version,
                "steps": steps, "busy_s": busy_s}

    def ping(self) -> dict[str, Any]:
        """Where this actor runs: ``node_ip``, ``node_id`` (Ray's, when run as an actor), ``pid``, ``hostname``."""
        node_ip, node_id = "", ""
        ray = sys.modules.get("ray")  # never imported here: only a Ray worker process has it loaded
        if ray is not None and ray.is_initialized():
            node_ip = ray.util.get_node_ip_address()
            node_id = ray.get_runtime_context().get_node_id()
        hostname = socket.gethostname()
        return {"node_ip": node_ip or hostname, "node_id": node_id, "pid": os.getpid(), "hostname": hostname}

    def close(self) -> None:
        self.worker.close()
