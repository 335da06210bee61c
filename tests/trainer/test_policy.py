"""A trained policy outside the trainer: load_policy and python -m spreeze_like.evaluate.

The falsifiable check: on the checkpoint a run writes at its end, the loaded policy replays the run's
own final evaluation (same start states, deterministic actions) return for return, for every
algorithm's actor layout and in both modes' checkpoints; then every way a path can be unusable.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch

from spreeze_like.checkpoint import FORMAT_VERSION, list_checkpoints, save_checkpoint
from spreeze_like.config import TrainConfig
from spreeze_like.errors import CheckpointError
from spreeze_like.evaluate import main, run_episodes
from spreeze_like.policy import Policy, load_policy
from spreeze_like.training import train

TINY = {"serial": True, "hidden_sizes": (32, 32), "batch_size": 32, "learning_starts": 200, "total_steps": 600,
        "eval_every": 0, "eval_episodes": 2, "log_interval": 0, "tb_interval": 0, "checkpoint_every": 0}


def trained(tmp_path, **changes):
    config = dataclasses.replace(TrainConfig(), logdir=str(tmp_path), **{**TINY, **changes})
    return train(config, print_fn=lambda line: None)


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg", "crossq"])
def test_the_loaded_policy_repeats_the_runs_final_evaluation(tmp_path, algo):
    result = trained(tmp_path, algo=algo)
    policy = load_policy(result.run_dir)
    assert (policy.algo, policy.env_id, policy.env_steps) == (algo, "Pendulum-v1", 600)
    assert policy.checkpoint == list_checkpoints(result.run_dir)[-1]
    returns = [e.ret for e in run_episodes(policy, 2, None, None)]
    assert returns == pytest.approx(list(result.final_eval_returns), rel=1e-6)
    # an untrained actor (all zeros: every action 0) scores otherwise, so the weights were really loaded
    policy.actor.vector[:] = 0.0
    assert [e.ret for e in run_episodes(policy, 2, None, None)] != pytest.approx(returns, abs=1e-3)


def test_the_parallel_modes_checkpoint_loads_the_same_way(tmp_path):
    result = trained(tmp_path, serial=False)
    policy = load_policy(list_checkpoints(result.run_dir)[-1])  # a checkpoint file, not the folder
    assert [e.ret for e in run_episodes(policy, 2, None, None)] == pytest.approx(list(result.final_eval_returns),
                                                                                rel=1e-6)


def test_actions_for_one_observation_or_a_batch_and_in_the_envs_bounds(tmp_path):
    policy = load_policy(trained(tmp_path).run_dir)
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    batch = policy(obs)
    assert batch.shape == (5, 1) and np.all(np.abs(batch) <= 1.0)
    assert np.allclose(policy(obs[2]), batch[2], atol=1e-6)  # BLAS may round a batch of 1 otherwise
    with pytest.raises(ValueError, match=r"takes \(3,\)"):
        policy(np.zeros(4))
    low, high = np.array([-2.0]), np.array([2.0])
    assert Policy.env_action(np.array([-1.0]), low, high) == -2.0 and Policy.env_action(np.array([0.5]), low, high) == 1.0


def test_the_command_prints_each_episode_and_the_mean(tmp_path, capsys):
    import spreeze_like

    result = trained(tmp_path)
    assert spreeze_like.load_policy is load_policy  # the package's lazy export
    assert main([str(result.run_dir), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"mean return {np.mean(result.final_eval_returns):.1f}" in out and "episode 1: return" in out
    assert main([str(result.run_dir), "--episodes", "1", "--seed", "123"]) == 0


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_unusable_paths_are_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in _error_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no checkpoint in" in _error_line(capsys)
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    assert main([str(corrupt)]) == 2
    assert "corrupt or unreadable" in _error_line(capsys)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}}, foreign)
    assert main([str(foreign)]) == 2
    assert "not a spreeze_like checkpoint" in _error_line(capsys)
    (tmp_path / "run").mkdir()
    actorless = save_checkpoint(tmp_path / "run", {"format_version": FORMAT_VERSION, "config": {
        "env": "Pendulum-v1", "algo": "sac", "hidden_sizes": [32, 32]}, "roles": {}}, 100)
    with pytest.raises(CheckpointError, match="holds no actor"):
        load_policy(actorless)


def test_a_checkpoint_that_does_not_fit_its_env_is_refused(tmp_path):
    result = trained(tmp_path)
    payload = torch.load(list_checkpoints(result.run_dir)[-1], weights_only=True)
    payload["config"]["hidden_sizes"] = [64, 64]  # the saved actor is 32x32
    (tmp_path / "edited").mkdir()
    path = save_checkpoint(tmp_path / "edited", payload, 600)
    with pytest.raises(CheckpointError, match="does not fit Pendulum-v1"):
        load_policy(path)


@pytest.mark.parametrize("args", [["--episodes", "0"], ["--no-such-flag"], [], ["runs/x", "--seed", "-3"]])
def test_bad_flags_are_one_line_and_exit_2(args):
    """A negative --seed is the flag's fault, said as such (it was "env 'Pendulum-v1' raised Error on reset ...;
    fix the env or pick another", after loading the policy)."""
    proc = subprocess.run([sys.executable, "-m", "spreeze_like.evaluate", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "--seed" not in args or "--seed -3: give a seed >= 0" in lines[0]
