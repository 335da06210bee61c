"""``--her-goals K``: every step stored again K times when its episode ends, with goals the episode achieved later.

The falsifiable checks: the goals' places in the flattened row are gymnasium's; every relabelled row's goal is
an ``achieved_goal`` of the same or a later step of its episode, its reward is ``compute_reward`` of that goal,
and every other value is the step's own; the real rows are exactly those of a sampler without HER of the same
seed; a one-goal ``compute_reward`` and ``compute_terminated`` are used as the env defines them; pacing and the
serial loop count updates per env step, not per row; an env that cannot be relabelled is one line at the start.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.checkpoint import load_latest
from spreeze_like.config import TrainConfig
from spreeze_like.envs import make_env
from spreeze_like.errors import ConfigError, EnvError
from spreeze_like.metrics import stats_schema
from spreeze_like.procs import pacing
from spreeze_like.roles.her import HerEpisodes, check_her, goal_slices
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.roles.sampler import SamplerWorker
from spreeze_like.structured_obs import structured_space_of
from spreeze_like.training import train
from spreeze_like.transition import TransitionLayout

from .test_cli import assert_one_line_error, run_cli
from .test_serial import TINY as TINY_RUN

GOAL = "trainer.goal_envs:"
OBS_DIM = 4  # TinyReach: achieved_goal (1), desired_goal (1), observation (2), in that order
AG, DG = slice(0, 1), slice(1, 2)


class BatchSink:
    """Keeps each write apart: a sampler's step writes its real rows first, then the relabelled ones."""

    def __init__(self) -> None:
        self.writes: list[np.ndarray] = []

    def write(self, rows: np.ndarray) -> None:
        self.writes.append(rows.copy())


def sampler(env: str, her_goals: int, n_envs: int = 2, seed: int = 1):
    spec = AlgoSpec(algo="sac", obs_dim=OBS_DIM, act_dim=1, hidden_sizes=(8,), her_goals=her_goals, seed=seed)
    sink, stats = BatchSink(), LocalStatsBlock(stats_schema(1)).role("sampler-0")
    return SamplerWorker(GOAL + env, spec, 0, n_envs, 10**9, sink, LocalBoard(), stats), sink, stats


def test_the_goals_places_are_where_gymnasium_flattens_them():
    space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "desired_goal": gym.spaces.Box(-1, 1, (2,)),
                             "achieved_goal": gym.spaces.Box(-1, 1, (2,)), "phase": gym.spaces.Discrete(3)})
    sample = {"observation": np.array([1, 2, 3], np.float32), "desired_goal": np.array([4, 5], np.float32),
              "achieved_goal": np.array([6, 7], np.float32), "phase": 1}
    flat = gym.spaces.flatten(space, sample)
    places = goal_slices(space)
    assert places is not None
    np.testing.assert_array_equal(flat[places.achieved], [6, 7])
    np.testing.assert_array_equal(flat[places.desired], [4, 5])
    assert goal_slices(gym.spaces.Dict({"achieved_goal": gym.spaces.Box(-1, 1, (2,)),
                                        "desired_goal": gym.spaces.Box(-1, 1, (3,))})) is None  # shapes differ
    assert goal_slices(gym.spaces.Box(-1, 1, (3,))) is None


def episode(steps: int):
    """A made-up episode of TinyReach rows: position t/7 after step t (steps of 0.14: no two positions within 0.1
    of each other, so a relabelled goal is reached exactly when it is the step's own), goal 0.9."""
    rows = []
    for t in range(steps):
        obs = np.array([t / 7, 0.9, t / 7, t], np.float32)
        nxt = np.array([(t + 1) / 7, 0.9, (t + 1) / 7, t + 1], np.float32)
        rows.append((obs, np.array([0.4], np.float32), nxt, 0.0, float(t == steps - 1), {"t": t}))
    return rows


def test_each_step_is_relabelled_k_times_with_goals_achieved_later_in_its_episode():
    env = make_env(GOAL + "TinyReach-v0")
    her = HerEpisodes(2, 4, goal_slices(structured_space_of(env)), env, np.random.default_rng(3), "TinyReach")
    steps = episode(9)
    for step in steps:
        her.add(0, *step)
    her.add(1, *steps[0])  # another env's episode: not part of this one's relabels
    assert her.pending == 10
    obs, action, reward, next_obs, terminated, truncated = her.end(0)
    assert len(obs) == 4 * 9 and her.pending == 1 and her.end(0) is None
    later_goals = set()
    for i in range(len(obs)):
        t = i // 4
        own_obs, own_action, own_next, _, own_truncated, _ = steps[t]
        goal = next_obs[i, DG][0]
        achieved_later = [s[2][AG][0] for s in steps[t:]]
        assert goal in achieved_later  # the 'future' strategy: t' in [t, T)
        later_goals.add(achieved_later.index(goal) > 0)
        np.testing.assert_array_equal(obs[i, DG], next_obs[i, DG])
        np.testing.assert_array_equal(np.delete(obs[i], 1), np.delete(own_obs, 1))  # all but the desired goal
        np.testing.assert_array_equal(np.delete(next_obs[i], 1), np.delete(own_next, 1))
        np.testing.assert_array_equal(action[i], own_action)
        assert reward[i] == -float(abs(own_next[0] - goal) > 0.1)
        assert terminated[i] == 0.0 and truncated[i] == own_truncated  # TinyReach never terminates
    assert later_goals == {True, False}  # both the step's own goal and later ones were drawn
    assert set(reward) == {0.0, -1.0}
    assert her.drop(1) == 1 and her.pending == 0


@pytest.mark.parametrize("strategy", ["final", "episode"])
def test_the_final_and_episode_strategies_draw_their_goals_where_they_say(strategy):
    env = make_env(GOAL + "TinyReach-v0")
    her = HerEpisodes(1, 4, goal_slices(structured_space_of(env)), env, np.random.default_rng(5), "TinyReach",
                      strategy)
    steps = episode(9)
    for step in steps:
        her.add(0, *step)
    _, _, reward, next_obs, _, _ = her.end(0)
    achieved = [s[2][AG][0] for s in steps]
    sources = [achieved.index(goal) for goal in next_obs[:, DG][:, 0]]
    first = np.repeat(np.arange(9), 4)
    if strategy == "final":
        assert sources == [8] * 36  # every copy takes the episode's last achieved goal
    else:
        assert any(src < t for src, t in zip(sources, first))  # earlier steps' goals too, which 'future' never takes
        assert len(set(sources)) > 4
    np.testing.assert_array_equal(reward, np.where(np.array(sources) == first, 0.0, -1.0))


def test_an_unknown_strategy_is_refused():
    with pytest.raises(ConfigError, match="her_strategy|her-strategy"):
        dataclasses.replace(TrainConfig(), her_strategy="random").validate()


@pytest.mark.parametrize("env", ["TinyReachOneGoal-v0", "TinyReachEnds-v0"])
def test_a_one_goal_compute_reward_and_compute_terminated_are_used_as_the_env_defines_them(env):
    made = make_env(GOAL + env)
    her = HerEpisodes(1, 3, goal_slices(structured_space_of(made)), made, np.random.default_rng(0), env)
    for step in episode(6):
        her.add(0, *step)
    _, _, reward, next_obs, terminated, _ = her.end(0)
    close = np.abs(next_obs[:, 0] - next_obs[:, 1]) <= 0.1
    np.testing.assert_array_equal(reward, np.where(close, 0.0, -1.0))
    np.testing.assert_array_equal(terminated, close if env == "TinyReachEnds-v0" else np.zeros(len(close)))
    assert her.batched == (env != "TinyReachOneGoal-v0")


def test_the_real_rows_are_a_plain_samplers_and_the_relabelled_ones_follow_each_episodes_end():
    plain, plain_sink, _ = sampler("TinyReach-v0", 0)
    her, her_sink, stats = sampler("TinyReach-v0", 3)
    for _ in range(20):  # 2 envs x 20 steps: 2 whole 8-step episodes each, 4 steps of a third held
        assert plain.step() == 2
        emitted = her.step()
        assert emitted == 2 + (2 * 3 * 8 if her.env_steps % 16 == 0 else 0)
    real = [w for w in her_sink.writes if len(w) == 2]
    relabelled = [w for w in her_sink.writes if len(w) != 2]
    assert len(real) == 20 and [len(w) for w in relabelled] == [48, 48]
    np.testing.assert_array_equal(np.concatenate(real), np.concatenate(plain_sink.writes))
    assert stats.get("her_rows") == 96 and stats.get("env_steps") == 40 and her.her.pending == 8
    layout = TransitionLayout(OBS_DIM, 1)
    rows = layout.unpack(np.concatenate(relabelled))
    success = np.abs(rows["next_obs"][:, 0] - rows["next_obs"][:, 1]) <= 0.1
    np.testing.assert_array_equal(rows["reward"], np.where(success, 0.0, -1.0))
    assert success.mean() > 0.1  # hindsight: far more successes than the random policy's real rows have
    state = her.state_dict()
    assert "her_rng" in state and "her_rng" not in plain.state_dict()


def test_relabelled_rows_that_are_not_finite_are_dropped_and_pacing_still_counts_exactly_the_rows_stored():
    worker, sink, stats = sampler("TinyReachNaN-v0", 4, n_envs=1)
    for _ in range(24):  # 3 whole episodes
        worker.step()
    stored = sum(len(w) for w in sink.writes)
    dropped = stats.get("nonfinite_dropped")
    assert stats.get("her_rows") == 4 * 24 and 0 < dropped < 4 * 24  # made; about half had a goal above 0
    assert stored == 24 + 4 * 24 - dropped
    assert np.isfinite(np.concatenate(sink.writes)).all()
    counts = {name: stats.get(name) for name in ("env_steps", "nonfinite_dropped", "nstep_dropped", "nstep_pending",
                                                   "her_rows")}
    assert pacing.claimed([{**counts, "in_flight": 0.0}]) == stored


def test_pacing_counts_relabelled_rows_once_made():
    row = {"env_steps": 100.0, "nonfinite_dropped": 0.0, "nstep_dropped": 0.0, "nstep_pending": 0.0,
           "her_rows": 320.0, "in_flight": 0.0}
    assert pacing.claimed([row]) == 420


def test_utd_stays_updates_per_env_step():
    assert dataclasses.replace(TrainConfig(), utd=2.0, her_goals=4).utd_per_row == pytest.approx(0.4)
    assert TrainConfig(utd=0.5).utd_per_row == 0.5


@pytest.mark.parametrize("change, said", [({"her_goals": -1}, "must be an integer in [0, 32]"),
                                          ({"her_goals": 33}, "must be an integer in [0, 32]"),
                                          ({"her_goals": 4, "n_step": 3}, "does not combine with --n-step"),
                                          ({"her_goals": 4, "remote_samplers": 1, "ray": "auto"}, "remote samplers")])
def test_the_flag_is_bounded_and_refuses_what_it_does_not_combine_with(change, said):
    with pytest.raises(ConfigError, match="her") as raised:
        dataclasses.replace(TrainConfig(), **change).validate()
    assert said in str(raised.value)


@pytest.mark.parametrize("env, said", [
    ("Pendulum-v1", "its observation is a Box, not a Dict"),
    (GOAL + "TinyGoal-v0", "has no 'achieved_goal' and 'desired_goal' Boxes"),
    (GOAL + "TinyReachBadReward-v0", "compute_reward(achieved_goal, desired_goal, info) raised ZeroDivisionError"),
])
def test_an_env_that_cannot_be_relabelled_is_refused_before_anything_starts(env, said):
    with pytest.raises(EnvError, match="her-goals") as raised:
        check_her(env, None, 4)
    assert said in str(raised.value)


def test_the_cli_says_so_in_one_line_and_makes_no_run_folder(tmp_path):
    proc = run_cli("--env", "Pendulum-v1", "--her-goals", "4", "--logdir", str(tmp_path))
    assert_one_line_error(proc, "--her-goals 4 needs a goal env", "'Pendulum-v1' is not one")
    assert not any(tmp_path.iterdir())


@pytest.fixture(scope="module")
def her_run(tmp_path_factory):
    config = dataclasses.replace(TrainConfig(), logdir=str(tmp_path_factory.mktemp("r")),
                                 **{**TINY_RUN, "env": GOAL + "TinyReach-v0", "her_goals": 3, "total_steps": 400,
                                    "learning_starts": 64})
    return train(config, print_fn=lambda line: None)


def test_a_serial_run_stores_1_plus_k_rows_per_step_and_updates_per_env_step(her_run):
    """400 steps = 50 whole 8-step episodes: 400 real rows and 1,200 relabelled; utd 1 per env step is 1/4 per row,
    counted from the first row past learn_after = max(32, 64) = 64 rows."""
    assert her_run.env_steps == 400 and her_run.episodes == 50
    assert her_run.critic_updates == pacing.critic_budget(1600, pacing.learn_after(32, 64), 0.25) == 384


def test_a_resume_continues_with_relabelling_and_may_change_k(tmp_path):
    """Replay rows are plain transitions whatever K made them, so a resume may change K (unlike --n-step's N)."""
    base = {**TINY_RUN, "env": GOAL + "TinyReach-v0", "her_goals": 3, "total_steps": 400, "learning_starts": 64,
            "logdir": str(tmp_path)}
    first = train(dataclasses.replace(TrainConfig(), **base), print_fn=lambda line: None)
    state = load_latest(first.run_dir)[0]["roles"]["sampler-0"]
    assert "her_rng" in state
    second = train(dataclasses.replace(TrainConfig(), **{**base, "her_goals": 1, "total_steps": 600,
                                                         "resume": str(first.run_dir)}), print_fn=lambda line: None)
    assert second.run_dir == first.run_dir and second.env_steps == 600
    assert load_latest(first.run_dir)[0]["config"]["her_goals"] == 1
    # replay starts empty again (no --save-replay): 200 steps = 25 episodes, 1 + 1 rows a step from row 64 on
    assert second.critic_updates == first.critic_updates + pacing.critic_budget(400, 64, 0.5)


def test_envs_whose_episodes_end_apart_are_relabelled_each_at_its_own_end():
    """TinyReachEnds terminates on success, so the two envs' episodes end at different steps: each end writes K
    rows per step of that episode only, and every step of a finished episode is relabelled exactly K times."""
    worker, sink, stats = sampler("TinyReachEnds-v0", 3)
    finished_steps = 0
    for _ in range(60):
        lengths = worker.episode_length.copy()
        worker.step()
        ended = worker.episode_length == 0  # reset by hand after the episode's last step
        finished_steps += int((lengths[ended] + 1).sum())
    assert worker.episodes > 2 * (60 // 8)  # some episodes ended early, on success
    assert stats.get("her_rows") == 3 * finished_steps
    assert worker.her.pending == 2 * 60 - finished_steps
    assert sum(len(w) for w in sink.writes) == 2 * 60 + 3 * finished_steps
