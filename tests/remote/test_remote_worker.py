"""RemoteSampler, the remote actor's body, called as a plain object (no Ray needed).

Its rows must be those of a local SamplerWorker with the same index, generation and weights: the
same seeds, warm-up, episode bookkeeping and stats, whatever the call sizes.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.metrics import SAMPLER
from spreeze_like.remote.worker import RemoteSampler
from spreeze_like.roles.ports import LocalBoard, LocalRoleStats
from spreeze_like.roles.sampler import SamplerWorker

ENV = "Pendulum-v1"


def spec(algo: str = "sac") -> AlgoSpec:
    return AlgoSpec(algo=algo, obs_dim=3, act_dim=1, hidden_sizes=(16, 16), seed=7)


def actor_vector(s: AlgoSpec, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.3, NumpyPolicy(s).size).astype(np.float32)


class ListSink:
    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []

    def write(self, rows: np.ndarray) -> None:
        self.rows.append(rows.copy())


def local_rows(s: AlgoSpec, vec: np.ndarray, steps: int, *, index: int, n_envs: int, random_steps: int,
               generation: int, env_steps: int = 0) -> tuple[np.ndarray, LocalRoleStats]:
    board = LocalBoard()
    board.publish(vec)
    sink = ListSink()
    stats = LocalRoleStats("sampler", SAMPLER.slot_names())
    worker = SamplerWorker(ENV, s, index, n_envs, random_steps, sink, board, stats, generation=generation)
    worker.env_steps = env_steps
    for _ in range(steps):
        worker.step()
    worker.close()
    return np.concatenate(sink.rows), stats


@pytest.mark.parametrize(("algo", "env_steps"), [("sac", 0), ("td3", 500)])
def test_rows_equal_a_local_sampler(algo: str, env_steps: int) -> None:
    s = spec(algo)
    vec = actor_vector(s)
    n_envs, random_steps, generation, index = 2, 40, 1003, 4
    expected, stats = local_rows(s, vec, 230, index=index, n_envs=n_envs, random_steps=random_steps,
                                 generation=generation, env_steps=env_steps)
    remote = RemoteSampler(ENV, s, index, n_envs, random_steps, generation, env_steps=env_steps, episodes=0)
    got, added, gauges = [], {}, {}
    # call sizes that do not line up with episodes or the warm-up; weights passed once, then kept
    for n, weights in ((30, vec), (100, None), (330, None)):
        reply = remote.collect(n, weights, 1)
        assert reply["steps"] == n + (-n % n_envs) and reply["version"] == 1
        assert reply["rows"].dtype == np.float32 and reply["rows"].flags.c_contiguous
        got.append(reply["rows"])
        for k, v in reply["add"].items():
            added[k] = added.get(k, 0.0) + v
        gauges.update(reply["set"])
    remote.close()
    got_rows = np.concatenate(got)
    assert got_rows.shape == expected.shape == (460, 3 + 1 + 1 + 3 + 2)
    np.testing.assert_array_equal(got_rows, expected)
    for name in ("env_steps", "episodes", "episodic_return.sum", "episodic_return.count", "episodic_length.sum"):
        assert added.get(name, 0.0) == pytest.approx(stats.get(name)), name
    assert stats.get("episodes") == 2  # two 200-step Pendulum episodes ended: the episode path was exercised
    assert "policy_lag.sum" not in added  # the bridge observes the lag, which only it knows
    assert gauges["policy_version"] == 1


def test_first_call_without_weights_acts_randomly_and_reports_version_0() -> None:
    s = spec()
    remote = RemoteSampler(ENV, s, 0, 1, 0, 0)
    reply = remote.collect(5, None, 0)
    assert reply["version"] == 0 and len(reply["rows"]) == 5 and reply["add"]["env_steps"] == 5
    assert reply["busy_s"] > 0
    reply = remote.collect(1, actor_vector(s), 9)
    assert reply["version"] == 9
    with pytest.raises(ValueError, match="floats"):
        remote.collect(1, np.zeros(3, np.float32), 10)
    remote.close()


def test_ping_names_the_process() -> None:
    remote = RemoteSampler(ENV, spec(), 0, 1, 0, 0)
    info = remote.ping()
    remote.close()
    import os
    import socket

    assert info["pid"] == os.getpid() and info["hostname"] == socket.gethostname()
    assert info["node_ip"] and info["node_id"] == ""  # not in a Ray worker: no node id


def test_remote_modules_import_neither_torch_nor_ray() -> None:
    code = ("import sys; import spreeze_like.remote.worker, spreeze_like.remote.bridge, spreeze_like.remote.sizing, "
            "spreeze_like.remote.ray_handles, spreeze_like.procs.ray_bridge_proc; "
            "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
