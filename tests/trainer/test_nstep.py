"""``--n-step N``: rows of N-step returns folded in the sampler, bootstrapped with gamma^N by every learner.

The falsifiable checks: an N-step sampler's rows equal what a reference computes from a one-step sampler's
rows of the same seed (same envs, same actions); each learner's update with (gamma, N) equals its update with
(gamma^N, 1) on the same batch; the steps a truncation drops are counted and pacing excludes them (a parallel
run whose samplers dropped 4 of every 5 steps would otherwise wait for data forever); a resume keeps N.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from spreeze_like.algos import make_critic_part
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.checkpoint import load_latest
from spreeze_like.config import TrainConfig
from spreeze_like.errors import ConfigError
from spreeze_like.flags import parse_cli
from spreeze_like.metrics import stats_schema
from spreeze_like.procs import pacing
from spreeze_like.roles.nstep import NStepWindows
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.roles.sampler import SamplerWorker
from spreeze_like.training import train
from spreeze_like.transition import TransitionLayout

from .test_algos import batch
from .test_cli import assert_one_line_error, run_cli
from .test_sampler import TINY, ListSink
from .test_serial import TINY as TINY_RUN

GAMMA = 0.9


def obs(t: int) -> np.ndarray:
    return np.array([t, 10 + t], np.float32)


def test_a_window_sums_n_discounted_rewards_and_a_truncation_drops_the_short_ones():
    windows = NStepWindows(1, 3, 0.5)
    out, lost = [], []
    for t in range(5):  # rewards 1..5; the time limit truncates after step 4
        rows, dropped = windows.add(0, obs(t), np.array([t], np.float32), t + 1.0, obs(t + 1), False, t == 4)
        out += rows
        lost.append(dropped)
    assert [(r.obs[0], r.reward, r.next_obs[0], r.terminated, r.truncated) for r in out] == [
        (0, 1 + 0.5 * 2 + 0.25 * 3, 3, 0.0, 0.0), (1, 2 + 0.5 * 3 + 0.25 * 4, 4, 0.0, 0.0),
        (2, 3 + 0.5 * 4 + 0.25 * 5, 5, 0.0, 1.0)]  # the last completes its 3 rewards at the time limit
    assert lost == [0, 0, 0, 0, 2] and windows.pending == 0  # steps 3 and 4 had fewer than 3 rewards left


def test_a_termination_turns_every_held_step_into_a_terminated_row():
    windows = NStepWindows(2, 4, 0.5)
    windows.add(1, obs(0), np.zeros(1, np.float32), 1.0, obs(1), False, False)  # the other env: untouched
    for t in range(2):
        windows.add(0, obs(t), np.zeros(1, np.float32), 1.0, obs(t + 1), False, False)
    rows, lost = windows.add(0, obs(2), np.zeros(1, np.float32), 1.0, obs(3), True, False)
    assert [(r.obs[0], r.reward, r.next_obs[0], r.terminated) for r in rows] == [
        (0, 1.75, 3, 1.0), (1, 1.5, 3, 1.0), (2, 1.0, 3, 1.0)]  # fewer than 4 rewards: exact, no bootstrap
    assert lost == 0 and windows.pending == 1 and windows.drop(1) == 1 and windows.pending == 0


def reference_nstep(one_step: dict[str, np.ndarray], n: int, gamma: float) -> list[tuple]:
    """What N-step rows must be, from one env's one-step rows in order (written from the definition)."""
    rows, episode = [], []
    for i in range(len(one_step["reward"])):
        episode.append(i)
        term, trunc = one_step["terminated"][i] > 0, one_step["truncated"][i] > 0
        if not (term or trunc):
            continue
        for k, first in enumerate(episode):
            steps = episode[k:k + n]
            if len(steps) < n and not term:
                continue  # cut by the time limit: dropped
            ret = sum(gamma ** m * float(one_step["reward"][s]) for m, s in enumerate(steps))
            rows.append((first, ret, steps[-1], float(term and steps[-1] == episode[-1])))
        episode = []
    return rows


@pytest.mark.parametrize("env, n", [("TinyWalk-v0", 3), ("TinyTerminate-v0", 4), ("TinyWalk-v0", 5)])
def test_the_samplers_rows_are_the_reference_n_step_returns_of_the_same_steps(env, n):
    def sampler(n_step: int):
        spec = AlgoSpec(algo="sac", obs_dim=2, act_dim=1, hidden_sizes=(8,), gamma=GAMMA, n_step=n_step)
        sink, stats = ListSink(), LocalStatsBlock(stats_schema(1)).role("sampler-0")
        worker = SamplerWorker(TINY + env, spec, 0, 1, 10**9, sink, LocalBoard(), stats)
        return worker, sink, stats

    (one, one_sink, _), (many, many_sink, stats) = sampler(1), sampler(n)
    for _ in range(30):  # random warm-up actions from the same seeded generator: the same steps in both
        one.step()
        many.step()
    layout = TransitionLayout(2, 1)
    single, folded = layout.unpack(one_sink.all()), layout.unpack(many_sink.all())
    expected = reference_nstep(single, n, GAMMA)
    assert len(folded["reward"]) == len(expected) > 0
    for i, (first, ret, last, term) in enumerate(expected):
        np.testing.assert_array_equal(folded["obs"][i], single["obs"][first])
        np.testing.assert_array_equal(folded["action"][i], single["action"][first])
        np.testing.assert_array_equal(folded["next_obs"][i], single["next_obs"][last])
        assert folded["reward"][i] == pytest.approx(ret, rel=1e-6) and folded["terminated"][i] == term
    held = int(stats.get("nstep_pending"))
    assert stats.get("env_steps") == 30 == len(expected) + stats.get("nstep_dropped") + held


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg", "crossq"])
def test_every_learner_bootstraps_with_gamma_to_the_n(algo):
    """(gamma 0.9, N 3) and (gamma 0.729, N 1) give the same update on the same batch: the targets see gamma^N."""
    def update(**kw):
        torch.manual_seed(0)
        spec = AlgoSpec(algo=algo, obs_dim=3, act_dim=2, hidden_sizes=(16, 16), **kw)
        part = make_critic_part(spec, "cpu")
        td, metrics = part.step(batch(seed=1))
        return td, metrics["qf1_loss"]

    td_n, loss_n = update(gamma=0.9, n_step=3)
    td_1, loss_1 = update(gamma=0.9**3, n_step=1)
    torch.testing.assert_close(td_n, td_1)
    torch.testing.assert_close(loss_n, loss_1)
    assert not torch.allclose(update(gamma=0.9, n_step=1)[1], loss_n)  # and it is not gamma's own update


def test_pacing_counts_no_held_or_dropped_step_as_emitted():
    row = {"env_steps": 100.0, "nonfinite_dropped": 2.0, "nstep_dropped": 30.0, "nstep_pending": 4.0, "in_flight": 8.0,
           "her_rows": 0.0}
    assert pacing.claimed([row]) == 100 - 2 - 30 - 4 + 8


def test_the_flag_is_bounded():
    with pytest.raises(ConfigError, match="n_step|n-step"):
        dataclasses.replace(TrainConfig(), n_step=0).validate()


@pytest.fixture(scope="module")
def nstep_run(tmp_path_factory):
    config = dataclasses.replace(TrainConfig(), logdir=str(tmp_path_factory.mktemp("r")),
                                 **{**TINY_RUN, "n_step": 3, "total_steps": 400})
    return train(config, print_fn=lambda line: None)


def test_a_serial_run_stores_only_rows_and_updates_on_them(nstep_run):
    """Pendulum's 200-step episodes at N = 3: each drops its last 2 steps, so replay holds 198 rows per episode,
    and the critic updates per row stored (the UTD ratio counts transitions that reach replay)."""
    assert nstep_run.env_steps == 400 and nstep_run.episodes == 2
    rows = 2 * 198
    # the serial loop's count: utd updates per row once replay holds learn_after = max(32, 200) rows
    assert nstep_run.critic_updates == pacing.critic_budget(rows, pacing.learn_after(32, 200), 1.0) == 197
    payload, _ = load_latest(nstep_run.run_dir)
    assert payload["config"]["n_step"] == 3


def test_a_resume_keeps_n_and_refuses_another(nstep_run):
    assert parse_cli(["--resume", str(nstep_run.run_dir)]).n_step == 3
    other = run_cli("--resume", str(nstep_run.run_dir), "--total-steps", "700", "--n-step", "1")
    assert_one_line_error(other, "was trained with --n-step 3, not 1", "resume without --n-step")


def test_a_remote_sampler_reports_its_dropped_and_held_steps_with_its_rows():
    """The Ray path: a collect call's reply carries the rows and the counts the bridge adds to the remote row,
    so pacing's count of a remote sampler's rows is exact too. TinyWalk, N = 3, 2 envs, 12 steps: each env
    did 6 steps, one whole episode (3 rows, 2 dropped) and 1 step held."""
    from spreeze_like.remote.worker import RemoteSampler

    spec = AlgoSpec(algo="sac", obs_dim=2, act_dim=1, hidden_sizes=(8,), n_step=3)
    sampler = RemoteSampler(TINY + "TinyWalk-v0", spec, 0, 2, 10**9, 0)
    try:
        reply = sampler.collect(12, None, 0)
    finally:
        sampler.worker.close()
    assert reply["steps"] == 12 and len(reply["rows"]) == 6
    assert reply["add"]["env_steps"] == 12 and reply["add"]["nstep_dropped"] == 4
    assert reply["set"]["nstep_pending"] == 2


def test_a_dead_writers_held_steps_become_dropped_steps():
    """What a restarted sampler process (or the Ray bridge, forgetting a dead actor) does to the row first."""
    row = LocalStatsBlock(stats_schema(1)).role("sampler-0")
    row.add("env_steps", 10)
    row.add("nstep_dropped", 2)
    row.set("nstep_pending", 3)
    before = pacing.claimed([{"env_steps": 10, "nonfinite_dropped": 0, "nstep_dropped": 2, "nstep_pending": 3,
                              "in_flight": 0, "her_rows": 0}])
    pacing.drop_held_steps(row)
    assert row.get("nstep_dropped") == 5 and row.get("nstep_pending") == 0
    after = pacing.claimed([{**{k: row.get(k) for k in ("env_steps", "nonfinite_dropped", "nstep_dropped",
                                                       "nstep_pending", "her_rows")}, "in_flight": 0}])
    assert after == before == 5  # the same count: the held steps are now dropped, not emitted
    pacing.drop_held_steps(row)  # nothing held: nothing changes
    assert row.get("nstep_dropped") == 5
