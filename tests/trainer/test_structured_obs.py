"""Dict and Tuple observation spaces: flattened by make_env, checked at every reset and step, learnable.

What a user relies on: a goal-conditioned env (``observation``, ``desired_goal``, ...) trains with no wrapper of
theirs; the flattened vector holds every part in the space's order (the goal reaches the networks: a policy
that cannot see it scores about -4 on TinyGoal, one that sees it about -0.6); an observation that does not fit
its space is one ``error:`` line naming the part; a part with no fixed size is refused when the env is made;
and the trained policy acts on the unwrapped env's dicts as well as on the flat vectors.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from spreeze_like.config import TrainConfig
from spreeze_like.curves import read_curves
from spreeze_like.envs import env_info, make_env, reset_env
from spreeze_like.errors import EnvError
from spreeze_like.evaluate import run_episodes
from spreeze_like.policy import load_policy
from spreeze_like.structured_obs import check_observation, describe, flatten_observation, unflattenable_part
from spreeze_like.training import train

from .tb import scalars
from .test_serial import TINY

GOAL = "trainer.goal_envs:"
TESTS_DIR = str(Path(__file__).resolve().parents[1])


def test_a_dict_observation_is_flattened_in_the_spaces_key_order():
    env = make_env(GOAL + "TinyGoal-v0")
    assert isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.shape == (6,)
    obs = reset_env(env, "TinyGoal-v0", seed=3)
    goal = env.unwrapped.goal
    # keys sorted by the Dict space: desired_goal, observation (position, t / 8), phase (one-hot of t mod 3)
    np.testing.assert_allclose(obs, [goal, 0.0, 0.0, 1.0, 0.0, 0.0], rtol=1e-6)
    step_obs = env.step(np.array([1.0], np.float32))[0]
    np.testing.assert_allclose(step_obs, [goal, 0.25, 0.125, 0.0, 1.0, 0.0], rtol=1e-6)
    env.close()


def test_a_tuple_observation_is_flattened_in_its_order():
    env = make_env(GOAL + "TinyGoalTuple-v0")
    obs = reset_env(env, "TinyGoalTuple-v0", seed=3)
    np.testing.assert_allclose(obs, [0.0, 0.0, env.unwrapped.goal, 1.0, 0.0, 0.0], rtol=1e-6)
    env.close()


def test_env_info_gives_the_flat_size_and_the_envs_own_space():
    info = env_info(GOAL + "TinyGoal-v0")
    assert (info.obs_dim, info.act_dim, info.max_episode_steps) == (6, 1, 8)
    assert describe(info.structured_obs_space) == "Dict(desired_goal: Box(1), observation: Box(2), phase: Discrete(3))"
    assert env_info("Pendulum-v1").structured_obs_space is None


@pytest.mark.parametrize(
    "env_id, fragments",
    [
        ("TinyGoalMissingKey-v0", ["from step()", "missing ['desired_goal']"]),
        ("TinyGoalBadPhase-v0", ["from step()", "observation['phase'] is 3, not a member of Discrete(3)"]),
        ("TinyGoalBadShape-v0", ["from reset()", "observation['desired_goal'] has shape (2,)"]),
    ],
)
def test_an_observation_that_does_not_fit_its_space_is_one_line_naming_the_part(env_id, fragments):
    env = make_env(GOAL + env_id)
    with pytest.raises(EnvError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's own checker warns of the bad reset observation first
        reset_env(env, env_id, seed=1)
        for _ in range(3):
            env.step(np.zeros(1, np.float32))
    assert "\n" not in str(info.value) and "fix the env" in str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value)
    env.close()


def test_a_part_without_a_fixed_size_is_refused_when_the_env_is_made():
    with pytest.raises(EnvError, match=r"observation\['note'\] \(a Text space has no fixed size\)") as info:
        make_env(GOAL + "TinyGoalText-v0")
    assert "\n" not in str(info.value)


def test_the_check_catches_what_flattening_would_get_silently_wrong():
    """gymnasium one-hot encodes a Discrete value by indexing: -1 would set the last slot without a word."""
    phase = gym.spaces.Discrete(3)
    assert np.asarray(gym.spaces.flatten(phase, -1)).tolist() == [0, 0, 1]  # what the check stands in front of
    assert check_observation(phase, -1) == "observation is -1, not a member of Discrete(3)"
    nested = gym.spaces.Tuple((gym.spaces.Dict({"a": gym.spaces.MultiBinary(2)}), gym.spaces.MultiDiscrete([2, 3])))
    assert check_observation(nested, ({"a": np.array([1, 0])}, np.array([1, 2]))) is None
    assert "observation[0]['a']" in check_observation(nested, ({"a": np.array([1, 2])}, np.array([1, 2])))
    assert "observation[1]" in check_observation(nested, ({"a": np.array([1, 0])}, np.array([2, 0])))
    assert "extra ['b']" in check_observation(gym.spaces.Dict({"a": phase}), {"a": 1, "b": 2})
    assert "tuple of 2" in check_observation(nested, [{"a": np.array([1, 0])}])
    assert "observation['x'] has shape (2,) and dtype complex64" in check_observation(
        gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))}), {"x": np.zeros(2, np.complex64)})
    assert unflattenable_part(gym.spaces.Tuple((phase, gym.spaces.Sequence(phase)))) == \
        "observation[1] (a Sequence space has no fixed size)"
    with pytest.raises(EnvError, match=r"from step\(\) whose observation\['a'\] is 5"):
        flatten_observation(gym.spaces.Dict({"a": phase}), {"a": 5}, "MyEnv-v0", "step")


@pytest.fixture(scope="module")
def goal_run(tmp_path_factory):
    """SAC on TinyGoal for 2,000 env steps in serial mode (about 10 s here)."""
    config = dataclasses.replace(TrainConfig(), env=GOAL + "TinyGoal-v0", logdir=str(tmp_path_factory.mktemp("runs")),
                                 **{**TINY, "hidden_sizes": (64, 64), "batch_size": 256, "learning_starts": 500,
                                    "total_steps": 2000, "eval_episodes": 20})
    lines: list[str] = []
    result = train(config, print_fn=lines.append)
    return result, lines


def test_sac_learns_to_reach_the_goal_it_observes(goal_run):
    result, lines = goal_run
    assert "[spreeze] observations: Dict(desired_goal: Box(1), observation: Box(2), phase: Discrete(3)), " \
           "flattened into 6 inputs in that order" in lines
    # Without the goal the best a policy can do is stay at 0: about -4 per episode (E|goal| = 0.5 a step, 8
    # steps); seed 1 reached -0.5 after 3,000 steps here. -2 is far from both.
    assert result.final_eval_return > -2.0, result


def test_the_success_rate_is_recorded_where_the_env_says(goal_run):
    """TinyGoal's info["is_success"] (within 0.1 of the goal) of each evaluation episode's last step: the final
    result and TensorBoard's eval/success_rate hold the same episodes (the parallel test reads evals.jsonl)."""
    result, _ = goal_run
    won = result.final_eval_successes
    assert won is not None and len(won) == 20 and all(isinstance(w, bool) for w in won)
    assert sum(won) >= 1  # a learned policy reaches some goals in 8 steps (16 of 20 for seed 1 here)
    got = scalars(result.run_dir)
    assert got["eval/success_rate"][-1] == (2000, pytest.approx(sum(won) / 20))
    # training episodes too (SB3's rollout/success_rate): the exploring policy's share, one point per write
    train_rates = [rate for _, rate in got["charts/success_rate"]]
    assert train_rates and all(0.0 <= rate <= 1.0 for rate in train_rates)
    # and curves.csv's success column, what tools/plot_runs.py draws: the same shares at the same steps
    curves = read_curves(result.run_dir)
    assert [(p.env_steps, p.success) for p in curves.eval][-1] == (2000, pytest.approx(sum(won) / 20))
    assert [p.success for p in curves.train] == pytest.approx(train_rates)


def test_an_env_that_says_nothing_has_no_success_rate(tmp_path):
    result = train(dataclasses.replace(TrainConfig(), env="trainer.tiny_envs:TinyWalk-v0", logdir=str(tmp_path),
                                       **TINY), print_fn=lambda line: None)
    assert result.final_eval_successes is None
    got = scalars(result.run_dir)
    assert "eval/success_rate" not in got and "charts/success_rate" not in got and "charts/episodic_return" in got
    curves = read_curves(result.run_dir)
    assert curves.eval and all(p.success is None for p in curves.eval + curves.train)


def test_the_policy_acts_on_the_unwrapped_envs_dicts_as_on_the_flat_vectors(goal_run):
    policy = load_policy(goal_run[0].run_dir, env=GOAL + "TinyGoal-v0")
    raw = gym.make("TinyGoal-v0")  # registered by make_env's import of trainer.goal_envs
    obs, _ = raw.reset(seed=5)
    flat = make_env(GOAL + "TinyGoal-v0")
    flat_obs = reset_env(flat, "TinyGoal-v0", seed=5)
    np.testing.assert_array_equal(policy(obs), policy(flat_obs))
    with pytest.raises(ValueError, match="missing"):
        policy({"observation": obs["observation"], "phase": 0})
    assert len(run_episodes(policy, 2, None, None)) == 2
    raw.close()
    flat.close()


def test_evaluate_scores_it_from_the_command_line(goal_run):
    out = subprocess.run([sys.executable, "-m", "spreeze_like.evaluate", str(goal_run[0].run_dir), "--episodes", "3",
                          "--env", GOAL + "TinyGoal-v0"],
                         capture_output=True, text=True, check=False, timeout=120,
                         env={**os.environ,
                              "PYTHONPATH": os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stderr
    episodes = [line for line in out.stdout.splitlines() if line.startswith("episode ")]
    assert len(episodes) == 3 and all(line.endswith((", 8 steps, success", ", 8 steps, failure")) for line in episodes)
    won = sum(line.endswith("success") for line in episodes)
    assert out.stdout.splitlines()[-1].endswith(f"over 3 episodes, success {won}/3"), out.stdout


def test_a_dict_of_boxes_takes_the_short_way_with_the_same_vector_and_errors():
    """FlatObservation joins a Dict or Tuple of Boxes itself (7 us against 16-18 us): the same float32 vector as
    gymnasium's flatten, and whatever does not fit goes the general way, which names the part."""
    from spreeze_like.structured_obs import FlatObservation

    class Env(gym.Env):
        observation_space = gym.spaces.Dict({"b": gym.spaces.Box(-9, 9, (2, 2), np.int64),
                                             "a": gym.spaces.Box(-1, 1, (2,), np.float32)})
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    wrapper = FlatObservation(Env(), "Mine-v0")
    assert wrapper._box_parts is not None  # the short way is taken
    good = {"a": np.array([0.25, -0.5], np.float64), "b": [[1, 2], [3, 4]]}
    general = flatten_observation(wrapper.structured_space, good, "Mine-v0", "step")
    np.testing.assert_array_equal(wrapper.flat(good, "step").astype(np.float32), general.astype(np.float32))
    for bad, fragment in (({"a": good["a"]}, "missing ['b']"), ({**good, "c": 1}, "extra ['c']"),
                          ({**good, "a": np.zeros(3)}, "observation['a'] has shape (3,)"),
                          ({**good, "b": np.zeros((2, 2), np.complex64)}, "dtype complex64"),
                          ([good["a"], good["b"]], "is a list, not a dict")):
        with pytest.raises(EnvError, match=re.escape(fragment)):
            wrapper.flat(bad, "step")
