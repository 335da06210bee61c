"""``--env-kwargs``: keyword arguments of ``gymnasium.make`` for every env of a run.

What a user relies on: the flag reaches every env the run makes (samplers, evaluator, the autotune probes,
``load_policy`` and ``python -m spreeze_like.evaluate``), it is saved in config.json so a resume makes the same
env, a resume with other kwargs is refused as another env is, and every bad value is one ``error:`` line.
Pendulum-v1's ``g`` (gravity) and ``make``'s own ``max_episode_steps`` are what the tests change: both are
visible from outside (the env's attribute, episode lengths and counts).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys

import pytest

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.autotune.cache import cache_path
from spreeze_like.config import TrainConfig
from spreeze_like.curves import read_curves
from spreeze_like.envs import env_info, make_env
from spreeze_like.errors import ConfigError, EnvError
from spreeze_like.evaluate import run_episodes
from spreeze_like.flags import parse_cli
from spreeze_like.policy import load_policy
from spreeze_like.remote.worker import RemoteSampler
from spreeze_like.training import train

from .test_cli import assert_one_line_error, run_cli
from .test_serial import TINY

SHORT = {"max_episode_steps": 50}


def test_the_flag_parses_a_json_object_and_defaults_to_none():
    assert TrainConfig().env_kwargs == {}
    assert TrainConfig().env_kwargs is not TrainConfig().env_kwargs  # a default_factory: no shared dict
    config = parse_cli(["--env-kwargs", '{"g": 5.0, "max_episode_steps": 50}'])
    assert config.env_kwargs == {"g": 5.0, "max_episode_steps": 50}


@pytest.mark.parametrize("value, fragments", [
    ('{"g": 5.0', ["--env-kwargs", "is not JSON"]),
    ("[1, 2]", ["--env-kwargs", "not a JSON object"]),
    ('{"render_mode": "human"}', ["--env-kwargs", "renders nothing", "spreeze_like.evaluate"]),
    ('{"not a name": 1}', ["--env-kwargs", "keyword arguments"]),
    ('{"g": NaN}', ["--env-kwargs", "finite"]),
])
def test_a_bad_value_is_one_error_line(value, fragments):
    assert_one_line_error(run_cli("--env-kwargs", value, "--plan-only"), *fragments)


def test_a_config_file_value_that_is_not_an_object_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"env_kwargs": [1]}))
    with pytest.raises(ConfigError, match="env_kwargs"):
        parse_cli(["--config", str(path)])


def test_make_env_passes_them_to_gymnasium_make():
    env = make_env("Pendulum-v1", env_kwargs={"g": 5.0})
    try:
        assert env.unwrapped.g == 5.0
    finally:
        env.close()
    assert make_env("Pendulum-v1").unwrapped.g == 10.0
    assert env_info("Pendulum-v1", SHORT).max_episode_steps == 50
    assert env_info("Pendulum-v1").max_episode_steps == 200


def test_a_name_the_env_does_not_take_is_one_line_naming_the_flag():
    with pytest.raises(EnvError) as err:
        make_env("Pendulum-v1", env_kwargs={"gravity_typo": 1.0})
    message = str(err.value)
    assert "--env-kwargs" in message and "gravity_typo" in message and "\n" not in message
    assert_one_line_error(run_cli("--env-kwargs", '{"gravity_typo": 1.0}', "--total-steps", "300"),
                          "--env-kwargs", "gravity_typo")


def test_a_value_only_the_step_uses_is_one_line_before_any_process_starts(tmp_path):
    """Pendulum-v1 stores ``g`` in its constructor and first uses it in ``step``: a string there passed every
    check made before the samplers started, and each sampler then crashed on its first step, a crash loop of
    about 3 minutes (10 restarts with back-off) that ended with exit status 1 (measured 2026-11-29, parallel
    mode). The planning process now steps the env once: one line, exit status 2, no run folder."""
    with pytest.raises(EnvError) as err:
        env_info("Pendulum-v1", {"g": "x"}, first_step=True)
    message = str(err.value)
    assert '--env-kwargs {"g": "x"}' in message and "raised TypeError at pendulum.py:" in message
    assert "on its first step()" in message and "\n" not in message
    assert env_info("Pendulum-v1", {"g": "x"}).obs_dim == 3  # only the sizes: no step, as the roles ask
    logdir = tmp_path / "runs"
    assert_one_line_error(run_cli("--env-kwargs", '{"g": "x"}', "--total-steps", "300", "--logdir", str(logdir)),
                          '--env-kwargs {"g": "x"}', "on its first step()", "TypeError")
    assert not logdir.exists()


def test_the_probe_cache_is_another_file_per_set_of_kwargs():
    plain = cache_path("fp", "HalfCheetah-v5", "sac", (256, 256))
    assert cache_path("fp", "HalfCheetah-v5", "sac", (256, 256), {}) == plain
    one = cache_path("fp", "HalfCheetah-v5", "sac", (256, 256), {"a": 1, "b": 2})
    assert one != plain and one == cache_path("fp", "HalfCheetah-v5", "sac", (256, 256), {"b": 2, "a": 1})
    assert cache_path("fp", "HalfCheetah-v5", "sac", (256, 256), {"a": 2, "b": 2}) != one


def test_a_remote_sampler_makes_its_envs_with_them():
    spec = AlgoSpec(algo="sac", obs_dim=3, act_dim=1, hidden_sizes=(8,))
    sampler = RemoteSampler("Pendulum-v1", spec, 0, 2, 10, 0, env_kwargs={"g": 5.0})
    try:
        assert [e.unwrapped.g for e in sampler.worker.envs] == [5.0, 5.0]
    finally:
        sampler.worker.close()


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A tiny serial run whose episodes are 50 steps (Pendulum's own: 200)."""
    logdir = tmp_path_factory.mktemp("runs")
    config = dataclasses.replace(TrainConfig(), logdir=str(logdir), env_kwargs=dict(SHORT),
                                 **{**TINY, "eval_episodes": 2})
    return train(config, print_fn=lambda line: None).run_dir


def test_config_json_keeps_them_and_the_policy_is_scored_on_that_env(short_run):
    assert json.loads((short_run / "config.json").read_text())["env_kwargs"] == SHORT
    policy = load_policy(short_run)
    assert policy.env_kwargs == SHORT
    assert [e.length for e in run_episodes(policy, 2, None, None)] == [50, 50]
    out = subprocess.run([sys.executable, "-m", "spreeze_like.evaluate", str(short_run), "--episodes", "1"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '--env-kwargs {"max_episode_steps": 50}' in out.stdout and "50 steps" in out.stdout


def test_the_samplers_step_that_env(short_run):
    curves = read_curves(short_run)  # its header names them, and so does a plot's legend
    assert curves.meta["env_kwargs"] == SHORT and curves.label.endswith('{"max_episode_steps":50}')
    rows = [r for r in csv.DictReader(line for line in (short_run / "curves.csv").open() if not line.startswith("#"))
            if r["kind"] == "train"]
    # one row per finished episode: every 50 env steps (Pendulum's own episodes: 3 rows, every 200)
    assert [int(r["env_steps"]) for r in rows] == list(range(50, TINY["total_steps"] + 1, 50))


def test_a_resume_keeps_them_and_refuses_others(short_run):
    other = run_cli("--resume", str(short_run), "--total-steps", "700", "--env-kwargs", '{"max_episode_steps": 60}')
    assert_one_line_error(other, "--env-kwargs", '{"max_episode_steps": 50}', "another env")
    assert parse_cli(["--resume", str(short_run)]).env_kwargs == SHORT


def test_the_autotune_probes_make_their_envs_with_them():
    """The env probe (in the probe worker) and the multi-process sampler probe get the run's kwargs: a name
    Pendulum does not take fails in each, where it would pass unseen if they were dropped."""
    from spreeze_like.autotune.env_probe import probe_env
    from spreeze_like.autotune.sampler_scaling import SamplerScalingError, measure_scaling

    fields = {"algo": "sac", "obs_dim": 3, "act_dim": 1, "hidden_sizes": (8,)}
    with pytest.raises(EnvError, match="gravity_typo"):
        probe_env("Pendulum-v1", AlgoSpec(**fields), 0.5, lambda line: None, options=(1,),
                  env_kwargs={"gravity_typo": 1.0})
    with pytest.raises(SamplerScalingError, match="gravity_typo"):
        measure_scaling("Pendulum-v1", fields, [1], [1], 0.2, env_kwargs={"gravity_typo": 1.0})
    assert measure_scaling("Pendulum-v1", fields, [1], [1], 0.2, env_kwargs={"g": 5.0})[1][1].value > 0
