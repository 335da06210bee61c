"""The --serial mode end to end: determinism, all three algorithms, UTD, TensorBoard tags, resume."""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np
import pytest
import torch

from spreeze_like.checkpoint import list_checkpoints, load_latest
from spreeze_like.config import TrainConfig
from spreeze_like.training import train

from .tb import scalars, text_tags

# Small networks and budgets: these tests check the plumbing, not the learning (test_learning.py).
TINY = {
    "serial": True,
    "hidden_sizes": (32, 32),
    "batch_size": 32,
    "learning_starts": 200,
    "total_steps": 600,
    "eval_every": 0,
    "eval_episodes": 2,
    "log_interval": 0,
    "tb_interval": 0,
    "checkpoint_every": 0,
}


def tiny(tmp_path, **changes) -> TrainConfig:
    return dataclasses.replace(TrainConfig(), logdir=str(tmp_path), **{**TINY, **changes})


def final_state(run_dir) -> dict:
    payload, _ = load_latest(run_dir)
    return payload["roles"]


def flat(state: dict) -> torch.Tensor:
    return torch.cat([v.reshape(-1).float() for v in state.values()])


def test_serial_mode_is_deterministic_for_a_seed(tmp_path):
    quiet = {"print_fn": lambda line: None}
    a = train(tiny(tmp_path / "a"), **quiet)
    b = train(tiny(tmp_path / "b"), **quiet)
    c = train(tiny(tmp_path / "c", seed=2), **quiet)
    assert a.final_eval_returns == b.final_eval_returns
    assert (a.critic_updates, a.actor_updates) == (b.critic_updates, b.actor_updates) == (401, 401)
    sa, sb, sc = final_state(a.run_dir), final_state(b.run_dir), final_state(c.run_dir)
    for role in ("critic-learner", "actor-learner"):
        for name, module in sa[role]["part"]["modules"].items():
            torch.testing.assert_close(flat(module), flat(sb[role]["part"]["modules"][name]), rtol=0, atol=0)
    assert not torch.equal(
        flat(sa["actor-learner"]["part"]["modules"]["actor"]), flat(sc["actor-learner"]["part"]["modules"]["actor"])
    )
    la = scalars(a.run_dir)["losses/qf1_loss"]
    lb = scalars(b.run_dir)["losses/qf1_loss"]
    assert la[-1][1] == lb[-1][1]


@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_td3_and_ddpg_run(tmp_path, algo):
    result = train(tiny(tmp_path, algo=algo), print_fn=lambda line: None)
    assert np.isfinite(result.final_eval_return) and result.env_steps == 600
    assert result.critic_updates == 401
    assert result.actor_updates == (401 // 2 if algo == "td3" else 401)
    assert "losses/actor_loss" in scalars(result.run_dir)


def test_utd_ratio_is_kept_and_logged(tmp_path):
    result = train(tiny(tmp_path, utd=2.0, total_steps=400), print_fn=lambda line: None)
    assert result.critic_updates == 2 * (400 - 199)  # learning starts once 200 transitions are in replay
    utd = scalars(result.run_dir)["perf/utd"]
    assert utd[-1][1] == pytest.approx(2.0, rel=0.05)


TAGS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "losses/qf1_loss",
    "losses/qf2_loss",
    "losses/qf1_values",
    "losses/actor_loss",
    "losses/alpha",
    "losses/alpha_loss",
    "eval/episodic_return",
    "perf/sample_hz",
    "perf/update_hz",
    "perf/update_frames_hz",
    "perf/utd",
    "perf/policy_lag",
    "perf/weight_staleness",
    "replay/size",
    "hw/cpu_percent",
    "hw/mem_used",
]


def test_tensorboard_holds_the_listed_tags_and_config(tmp_path):
    result = train(tiny(tmp_path, eval_every=300), print_fn=lambda line: None)
    got = scalars(result.run_dir)
    missing = [t for t in TAGS if t not in got]
    assert not missing, f"missing tags: {missing}"
    assert [s for s, _ in got["eval/episodic_return"]] == [300, 600]
    assert got["replay/size"][-1][1] == 600
    assert (result.run_dir / "config.json").is_file()
    assert any("config" in t for t in text_tags(result.run_dir))


def test_resume_continues_steps_updates_and_curve(tmp_path):
    first = train(tiny(tmp_path, checkpoint_every=300, eval_every=300), print_fn=lambda line: None)
    assert [p.name for p in list_checkpoints(first.run_dir)] == ["ckpt_0000000300.pt", "ckpt_0000000600.pt"]
    lines: list[str] = []
    second = train(tiny(tmp_path, resume=str(first.run_dir), total_steps=1000, eval_every=300), print_fn=lines.append)
    assert second.run_dir == first.run_dir and second.env_steps == 1000
    assert any("resuming at env step 600" in line for line in lines)
    # replay is not checkpointed: learning resumes once learning_starts new transitions are in
    assert second.critic_updates == first.critic_updates + (400 - 199)
    payload, _ = load_latest(first.run_dir)
    assert payload["env_steps"] == 1000 and payload["generation"] == 1
    curve = scalars(first.run_dir)["charts/SPS"]
    steps = [s for s, _ in curve]
    assert steps[-1] == 1000 and min(steps) <= 600 and steps == sorted(steps)
    evals = [s for s, _ in scalars(first.run_dir)["eval/episodic_return"]]
    assert evals == [300, 600, 900, 1000]


def test_prioritized_replay_weights_the_critic(tmp_path):
    result = train(tiny(tmp_path, prioritized=True, total_steps=500), print_fn=lambda line: None)
    got = scalars(result.run_dir)
    assert result.critic_updates == 301 and np.isfinite(result.final_eval_return)
    weights = [v for _, v in got["replay/is_weight_mean"]]
    assert all(0.0 < w <= 1.0 for w in weights) and min(weights) < 1.0  # priorities differ: weights < 1


def test_stop_at_return_ends_the_run_at_the_first_good_evaluation(tmp_path):
    result = train(tiny(tmp_path, eval_every=300, stop_at_return=-1e9), print_fn=lambda line: None)
    assert result.stopped_early and result.env_steps == 300
    assert [e[0] for e in result.evals] == [300] and result.evals[0][2] > 0


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)])
def test_a_signal_stops_the_run_at_a_step_boundary(tmp_path, monkeypatch, sig, raised):
    """Ctrl-C / SIGTERM mid-update: the update finishes, a checkpoint is written, and this process trains
    normally afterwards. (A KeyboardInterrupt inside ``torch.autocast.__enter__`` once left the bf16 cast
    cache on for good, so every later run in the process learned nothing.)"""
    from spreeze_like.roles.critic_learner import CriticLearner

    original, calls = CriticLearner.update, {"started": 0, "finished": 0}

    def update(self):
        calls["started"] += 1
        if calls["started"] == 50:
            os.kill(os.getpid(), sig)  # delivered at the next bytecode boundary, inside this update
        original(self)
        calls["finished"] += 1

    monkeypatch.setattr(CriticLearner, "update", update)
    lines: list[str] = []
    with pytest.raises(raised) as info:
        # bf16 named: the autocast path on every machine (auto keeps a tiny network in fp32)
        train(tiny(tmp_path / "stopped", total_steps=5000, precision="bf16"), print_fn=lines.append)
    if raised is SystemExit:
        assert info.value.code == 128 + signal.SIGTERM
    assert calls["started"] == calls["finished"] == 50  # the update the signal hit ran to its end
    run_dir = next((tmp_path / "stopped").iterdir())
    payload, _ = load_latest(run_dir)
    assert payload["roles"]["critic-learner"]["updates"] == 50
    assert any("interrupted at 249 env steps" in line and "--resume" in line for line in lines)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers were given back

    monkeypatch.setattr(CriticLearner, "update", original)
    quiet = {"print_fn": lambda line: None}
    after = train(tiny(tmp_path / "after", precision="bf16"), **quiet)
    assert after.final_eval_returns == train(tiny(tmp_path / "again", precision="bf16"), **quiet).final_eval_returns
    n = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    assert n == 1  # no autocast region left open
