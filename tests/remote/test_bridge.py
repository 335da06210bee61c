"""The bridge's scheduling against a fake cluster (tests/remote/fakes.py): no Ray, real stats block and rings.

Pacing (the critic's allowance, quotas, ring room, two calls per actor), weights (one put per
version, passed only to actors that lack it, policy lag), faults (death, back-off, budget, hang,
unplaced, late rows after abandonment, a user error inside an actor), stopping, and
remote_samplers.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.errors import EnvError
from spreeze_like.procs.control import DONE, FINISH, HALT, RUN, STARTING
from spreeze_like.remote.bridge import Bridge
from spreeze_like.remote.sizing import AUTO_BATCH, MIN_BATCH, batch_rows, remote_batch_rows
from tests.remote.fakes import SPEC, Clock, FakeCluster, Shm, config, reply

SPEC_POLICY_SIZE = NumpyPolicy(SPEC).size


@pytest.fixture
def shm() -> Iterator[Shm]:
    s = Shm(rows=3, first=1)
    yield s
    s.unlink()


def make_bridge(shm: Shm, cluster: FakeCluster, clock: Clock | None = None, lead: int = 64, run_dir: Any = None,
                **cfg: Any) -> Bridge:
    lines: list[str] = []
    bridge = Bridge(cluster, config(**cfg), SPEC, shm.block, shm.rings, shm.board, first=1, count=2,
                    generation=5, lead=lead, run_dir=run_dir, clock=clock or Clock(), say=lines.append)
    bridge.lines = lines  # type: ignore[attr-defined]
    return bridge


def emitted(shm: Shm) -> float:
    return sum(shm.row(i).get("env_steps") - shm.row(i).get("nonfinite_dropped") for i in range(3))


def in_flight(shm: Shm) -> float:
    return sum(shm.row(i).get("in_flight") for i in range(3))


def auto(actor: Any, n: int, weights: Any, version: int) -> dict:
    return reply(n)


# --- sizing ----------------------------------------------------------------------------------------------------
def test_batch_rule() -> None:
    low = config(utd=0.05)  # sampling-bound: the largest calls
    assert remote_batch_rows(low) == AUTO_BATCH and remote_batch_rows(config(remote_batch=500)) == 500
    # the cap holds 256 critic updates' worth of rows: policy lag, not call cost, bounds it at UTD >= 1/8
    assert remote_batch_rows(config(utd=1.0)) == MIN_BATCH == remote_batch_rows(config(utd=4.0))
    assert remote_batch_rows(config(utd=0.25)) == 1024 and remote_batch_rows(config(utd=0.125)) == AUTO_BATCH
    assert batch_rows(low, None) == MIN_BATCH  # before a rate is measured: a short first call
    assert batch_rows(low, 100.0) == MIN_BATCH  # slow envs: at least 256 rows
    assert batch_rows(low, 5000.0) == 500  # 0.1 s of stepping
    assert batch_rows(low, 1e6) == AUTO_BATCH  # never above what the rings are sized for
    assert batch_rows(config(utd=1.0), 5000.0) == MIN_BATCH  # ... which at UTD 1 is 256 rows
    assert batch_rows(config(remote_batch=100), 5000.0) == 100  # --remote-batch: that many, always


# --- pacing ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_envs", [1, 3])
def test_never_past_the_allowance_and_all_of_it_used(shm: Shm, n_envs: int) -> None:
    for i in range(3):
        shm.set_quota(i, 10**6)
    shm.allowance(1000)
    shm.row(0).add("env_steps", 100)  # the local sampler took its part already
    bridge = make_bridge(shm, FakeCluster(auto=auto), remote_envs_per_sampler=n_envs)
    bridge.start()
    for allowance in (1000, 1037, 1038, 3000):
        before = emitted(shm)
        shm.allowance(allowance)
        for _ in range(40):
            bridge.poll(timeout=0)
            assert emitted(shm) + in_flight(shm) <= allowance + n_envs - 1
            shm.drain(1), shm.drain(2)
        assert in_flight(shm) == 0
        if allowance - before >= 32:  # half the lead free: every free step was used, up to the rounding
            assert allowance <= emitted(shm) <= allowance + n_envs - 1  # to whole steps of a sampler's envs
        else:  # less: it waits for a burst's worth, as a waiting local sampler does
            assert emitted(shm) == before
    # the rows counted are the rows written
    assert shm.block.role("ray-bridge").get("rows_written") == emitted(shm) - 100


def test_in_flight_counts_against_the_allowance_and_waits_for_a_burst(shm: Shm) -> None:
    for i in range(3):
        shm.set_quota(i, 10**6)
    shm.allowance(200)
    cluster = FakeCluster()
    bridge = make_bridge(shm, cluster, lead=64)
    bridge.start()
    bridge.poll(timeout=0)  # placed (pings answered at once); calls issued
    bridge.poll(timeout=0)
    calls = [f for a in cluster.actors for f in a.calls]
    assert sum(f.args[0] for f in calls) == 200 == in_flight(shm)  # shrunk to what was free, nothing more
    shm.allowance(220)  # 20 free: less than half the lead (32): wait for a burst
    bridge.poll(timeout=0)
    assert len([f for a in cluster.actors for f in a.calls]) == len(calls)
    shm.allowance(232)
    bridge.poll(timeout=0)
    new = [f for a in cluster.actors for f in a.calls if f not in calls]
    assert [f.args[0] for f in new] == [32]


def test_quota_is_exact_and_rows_end_done(shm: Shm) -> None:
    shm.set_quota(1, 1000)
    shm.set_quota(2, 333)
    shm.allowance(10**9)
    bridge = make_bridge(shm, FakeCluster(auto=auto))
    bridge.start()
    for _ in range(30):
        bridge.poll(timeout=0)
        shm.drain(1), shm.drain(2)
    assert shm.row(1).get("env_steps") == 1000 and shm.row(2).get("env_steps") == 333
    snap = shm.block.snapshot()
    assert snap["sampler-1"]["state"] == DONE and snap["sampler-1"]["done"] == 1.0
    assert snap["ray-bridge"]["done"] == 1.0 and bridge.all_done


def test_actors_are_made_with_the_runs_env_kwargs(shm: Shm) -> None:
    """Each actor's init is what ``RemoteSampler(**init)`` runs on its node: the run's --env-kwargs with it."""
    import inspect

    from spreeze_like.remote.worker import RemoteSampler

    cluster = FakeCluster(auto=auto)
    make_bridge(shm, cluster, env_kwargs={"g": 5.0}).start()
    assert cluster.actors and all(a.init["env_kwargs"] == {"g": 5.0} for a in cluster.actors)
    inspect.signature(RemoteSampler).bind(**cluster.actors[0].init)  # every key is one of its arguments


def test_two_calls_per_actor_and_ring_room_reserved(shm: Shm) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 0)  # only sampler-1 works
    shm.allowance(10**6)
    ring = shm.rings[1]
    ring.write(np.zeros((4096 - 700, 10), np.float32))  # 700 free slots, the reader is slow
    cluster = FakeCluster()
    bridge = make_bridge(shm, cluster)
    bridge.start()
    for _ in range(5):
        bridge.poll(timeout=0)
    calls = list(cluster.live(1).calls)
    assert len(calls) == 2  # never more than two in flight
    assert sum(f.args[0] for f in calls) <= 700  # every row in flight has room reserved
    for f in calls:
        f.resolve(reply(f.args[0]))
    bridge.poll(timeout=0)
    assert ring.fill() == 4096 - 700 + sum(f.args[0] for f in calls)  # written whole, without waiting
    (refill,) = cluster.live(1).calls[2:]  # a new call for what room is left, and no more
    assert shm.row(1).get("in_flight") == refill.args[0] == 4096 - ring.fill()


# --- weights ---------------------------------------------------------------------------------------------------
def test_one_put_per_version_passed_once_per_actor(shm: Shm) -> None:
    for i in (1, 2):
        shm.set_quota(i, 10**6)
    shm.allowance(10**6)
    cluster = FakeCluster()
    clock = Clock()
    bridge = make_bridge(shm, cluster, clock=clock)
    bridge.start()
    bridge.poll(timeout=0)  # placed, first calls without weights (nothing published)
    vec = np.arange(bridge.vector.size, dtype=np.float32)
    shm.board.publish(vec)
    for _ in range(3):  # within 50 ms: the board is not looked at again
        bridge.poll(timeout=0)
    assert cluster.puts == []
    clock.t += 0.06
    for a in cluster.actors:  # answer everything so new calls go out
        for f in a.calls:
            f.resolve(reply(f.args[0]))
    for _ in range(3):
        clock.t += 0.06
        bridge.poll(timeout=0)
        for a in cluster.actors:
            for f in a.calls:
                if not f.done:
                    f.resolve(reply(f.args[0], version=f.args[2] or 1))
    assert len(cluster.puts) == 1 and np.array_equal(cluster.puts[0], vec)
    for a in cluster.actors:
        with_weights = [f.args for f in a.calls if f.args[1] is not None]
        assert with_weights == [(with_weights[0][0], "ref-1", 1)]  # once, then kept by the actor
    shm.drain(1), shm.drain(2)
    shm.board.publish(vec + 1)
    shm.board.publish(vec + 2)  # two versions between checks: only the newest is put
    clock.t += 0.06
    bridge.poll(timeout=0)
    assert len(cluster.puts) == 2 and np.array_equal(cluster.puts[1], vec + 2)
    sent = [f.args[1:] for a in cluster.actors for f in a.calls if f.args[1] == "ref-2"]
    assert sent == [("ref-2", 3), ("ref-2", 3)]


def test_policy_lag_observed_per_batch(shm: Shm) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 0)
    shm.allowance(10**6)
    cluster = FakeCluster()
    bridge = make_bridge(shm, cluster)
    bridge.start()
    shm.board.publish(np.zeros(bridge.vector.size, np.float32))
    bridge.poll(timeout=0)  # calls issued with the board at version 1
    for _ in range(4):
        shm.board.publish(np.zeros(bridge.vector.size, np.float32))
    f = cluster.live(1).calls[0]
    f.resolve(reply(f.args[0], version=1))  # collected with version 1; the board went from 1 to 5 meanwhile
    bridge.poll(timeout=0)
    row = shm.row(1)
    assert row.get("policy_lag.sum") == 2 * f.args[0] and row.get("policy_lag.count") == f.args[0]
    assert row.get("policy_version") == 1


# --- faults ----------------------------------------------------------------------------------------------------
def test_death_restarts_with_back_off_then_budget_abandons(shm: Shm) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 10**6)
    shm.allowance(10**6)
    cluster, clock = FakeCluster(), Clock()
    bridge = make_bridge(shm, cluster, clock=clock, max_restarts=2, sampler_hang_s=1e6)
    bridge.start()
    bridge.poll(timeout=0)
    delays = []
    for death in range(3):
        actor = cluster.live(1)
        actor.calls[0].fail(RuntimeError("ActorDiedError: the worker node died"))
        died_at = clock.t
        bridge.poll(timeout=0)
        assert actor.killed and shm.row(1).get("in_flight") == 0
        if death == 2:
            break
        while not [a for a in cluster.actors if a.index == 1 and not a.killed]:
            clock.t += 0.25
            bridge.poll(timeout=0)
        delays.append(clock.t - died_at)
        new = cluster.live(1)
        assert new.init["generation"] == 5 + 1000 * (death + 1)  # new seeds per restart
        assert shm.row(1).get("remote_restarts") == death + 1
        bridge.poll(timeout=0)  # placed, calls again
        assert new.calls
    assert delays == [pytest.approx(1.0, abs=0.26), pytest.approx(2.0, abs=0.26)]  # 1, 2, 4 ... s
    # the third death within the window is one more than --max-restarts 2: given up
    assert shm.row(1).get("abandoned") == 1.0 and shm.block.snapshot()["sampler-1"]["state"] == DONE
    clock.t += 100
    bridge.poll(timeout=0)
    assert not [a for a in cluster.actors if a.index == 1 and not a.killed]
    assert cluster.live(2).calls  # the other remote sampler goes on
    assert any("abandoned" in line for line in bridge.lines)


def test_hung_call_is_killed_and_counted_as_a_death(shm: Shm) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 0)
    shm.allowance(10**6)
    cluster, clock = FakeCluster(), Clock()
    bridge = make_bridge(shm, cluster, clock=clock, sampler_hang_s=30.0)
    bridge.start()
    bridge.poll(timeout=0)
    actor = cluster.live(1)
    clock.t += 29.0
    bridge.poll(timeout=0)
    assert not actor.killed
    clock.t += 2.0
    bridge.poll(timeout=0)
    assert actor.killed and any("has not returned" in line for line in bridge.lines)
    clock.t += 1.0
    bridge.poll(timeout=0)
    assert cluster.live(1).number != actor.number and shm.row(1).get("remote_restarts") == 1


def test_unplaced_actor_is_abandoned_and_its_late_rows_dropped(shm: Shm, tmp_path: Path) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 10**6)
    shm.allowance(10**6)
    cluster, clock = FakeCluster(auto_ping=False), Clock()
    bridge = make_bridge(shm, cluster, clock=clock, run_dir=tmp_path, remote_place_timeout_s=120.0,
                         sampler_hang_s=1000.0)
    bridge.start()
    a1, a2 = cluster.actors
    a1.pending = True  # the cluster says: no node has taken it
    ping2 = next(f for f, s in bridge._future_slot.items() if s.index == 2)
    ping2.resolve({"node_ip": "127.0.0.1", "node_id": "n2", "pid": 4242})  # a2 is placed, a1 is not
    clock.t += 1.5
    bridge.poll(timeout=0)
    bridge.poll(timeout=0)
    info = json.loads((tmp_path / "remote_samplers.json").read_text())
    assert info["samplers"]["sampler-1"]["state"] == "waiting for a Ray node"
    s2 = info["samplers"]["sampler-2"]
    assert (s2["state"], s2["pid"], s2["node_ip"], s2["node_id"], s2["restarts"]) == ("running", 4242, "127.0.0.1",
                                                                                      "n2", 0)
    assert set(s2) == {"node_ip", "node_id", "pid", "state", "restarts", "steps_per_s", "policy_lag"}
    assert shm.block.snapshot()["sampler-1"]["state"] == STARTING
    clock.t += 120.0
    bridge.poll(timeout=0)
    assert a1.killed and shm.row(1).get("abandoned") == 1.0
    info = json.loads((tmp_path / "remote_samplers.json").read_text())
    assert info["samplers"]["sampler-1"]["state"] == "abandoned" and info["ray_address"] == "127.0.0.1:6400"
    # sampler-2's first call fails (its node died): the second call in flight is forgotten with the actor,
    # and when its rows arrive after all they are never written nor counted
    first, second = a2.calls[:2]
    first.fail(RuntimeError("node lost"))
    bridge.poll(timeout=0)
    assert a2.killed and shm.row(2).get("in_flight") == 0
    second.resolve(reply(second.args[0]))
    for _ in range(3):
        bridge.poll(timeout=0)
    assert (shm.rings[2].fill(), shm.row(2).get("env_steps")) == (0, 0)


def test_user_error_in_an_actor_ends_the_bridge_with_its_line(shm: Shm) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 10**6)
    shm.allowance(10**6)
    cluster = FakeCluster(auto_ping=False)
    bridge = make_bridge(shm, cluster)
    bridge.start()
    pings = list(bridge._future_slot)
    pings[0].fail(EnvError("unknown env 'Nope-v0'"))
    with pytest.raises(EnvError, match=r"^remote sampler-1: unknown env 'Nope-v0'$"):
        bridge.poll(timeout=0)


# --- stopping and restarting -------------------------------------------------------------------------------------
@pytest.mark.parametrize("phase", [FINISH, HALT])
def test_stop_drops_calls_in_flight_and_rows_say_done(shm: Shm, phase: int) -> None:
    for i in (1, 2):
        shm.set_quota(i, 10**6)
    shm.allowance(10**6)
    cluster = FakeCluster()
    bridge = make_bridge(shm, cluster)
    bridge.start()
    bridge.poll(timeout=0)
    shm.block.role("control").set("phase", phase)
    bridge.poll(timeout=0)
    assert in_flight(shm) == 0 and bridge.all_done
    for a in cluster.actors:
        for f in a.calls:
            f.resolve(reply(f.args[0]))
    n = len([f for a in cluster.actors for f in a.calls])
    bridge.poll(timeout=0)
    assert shm.rings[1].fill() == shm.rings[2].fill() == 0 and len([f for a in cluster.actors for f in a.calls]) == n
    bridge.close()
    assert all(a.killed for a in cluster.actors)
    shm.block.role("control").set("phase", RUN)


def test_restarted_bridge_counts_a_restart_and_continues_the_counters(shm: Shm) -> None:
    shm.set_quota(1, 10**6)
    shm.set_quota(2, 10**6)
    shm.row(1).add("env_steps", 300)
    shm.row(1).add("episodes", 2)
    shm.row(2).set("abandoned", 1.0)
    cluster = FakeCluster()
    bridge = Bridge(cluster, config(), SPEC, shm.block, shm.rings, shm.board, first=1, count=2,
                    restored={1: (1000, 7)}, generation=5, clock=Clock(), say=lambda line: None)
    bridge.start(bridge_restarted=True)
    (actor,) = cluster.actors  # the abandoned one stays abandoned
    assert actor.init["env_steps"] == 1300 and actor.init["episodes"] == 9
    assert actor.init["generation"] == 5 + 1000 and shm.row(1).get("remote_restarts") == 1
    assert actor.init["random_steps"] == 34  # ceil(100 / 3 sampler rows)
    bridge.close()


def test_ring_holds_a_local_samplers_rows(shm: Shm) -> None:
    """The bridge over real RemoteSampler objects: what reaches the ring is what a local sampler would write."""
    from spreeze_like.remote.worker import RemoteSampler
    from tests.remote.test_remote_worker import local_rows

    shm.set_quota(1, 300)
    shm.set_quota(2, 0)
    shm.allowance(10**6)
    samplers: dict[int, RemoteSampler] = {}

    def run(actor: Any, n: int, weights: Any, version: int) -> dict:
        sampler = samplers.setdefault(actor.number, RemoteSampler(**actor.init))
        vector = None if weights is None else cluster.puts[cluster.refs.index(weights)]
        return sampler.collect(n, vector, version)

    cluster = FakeCluster(auto=run)
    vec = np.random.default_rng(0).normal(0, 0.5, size=SPEC_POLICY_SIZE).astype(np.float32)
    shm.board.publish(vec)
    bridge = make_bridge(shm, cluster)
    bridge.start()
    for _ in range(10):
        bridge.poll(timeout=0)
    assert bridge.all_done and len(samplers) == 1
    got = shm.drain(1)
    expected, stats = local_rows(SPEC, vec, 300, index=1, n_envs=1, random_steps=34, generation=5)
    np.testing.assert_array_equal(got, expected)
    for name in ("env_steps", "episodes", "episodic_return.sum", "episodic_length.count"):
        assert shm.row(1).get(name) == pytest.approx(stats.get(name)), name
    assert shm.row(1).get("episodes") == 1
    for sampler in samplers.values():
        sampler.close()



def test_a_bridge_that_cannot_rejoin_gives_every_remote_sampler_up(shm: Shm, tmp_path: Path) -> None:
    from spreeze_like.procs.ray_bridge_proc import Unreachable

    shm.set_quota(1, 500)
    shm.set_quota(2, 500)
    shm.row(1).add("env_steps", 200)
    lines: list[str] = []
    bridge = Bridge(Unreachable("127.0.0.1:6400"), config(), SPEC, shm.block, shm.rings, shm.board, first=1, count=2,
                    run_dir=tmp_path, clock=Clock(), say=lines.append)
    bridge.abandon_all("cannot join the Ray cluster at 127.0.0.1:6400: nothing answers")
    shm.board.publish(np.zeros(SPEC_POLICY_SIZE, np.float32))  # nobody to put it for: Unreachable has no put
    for _ in range(3):
        bridge.poll(timeout=0)
    assert [shm.row(i).get("abandoned") for i in (1, 2)] == [1.0, 1.0] and bridge.all_done
    assert shm.row(1).get("env_steps") == 200  # what was written stays; the supervisor moves the rest
    info = json.loads((tmp_path / "remote_samplers.json").read_text())
    assert {s["state"] for s in info["samplers"].values()} == {"abandoned"} and len(lines) == 2
