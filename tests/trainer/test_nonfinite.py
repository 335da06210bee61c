"""NaN and inf in the learners: a non-finite step is skipped (nothing changes, counted), N in a row stop the
run, and no checkpoint is ever written from a non-finite state (serial mode end to end here; the parallel mode
in tests/parallel/test_faults.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from spreeze_like.algos.base import AlgoSpec
from spreeze_like.checkpoint import list_checkpoints, load_latest, nonfinite_tensors, save_checkpoint
from spreeze_like.errors import NonFiniteError
from spreeze_like.metrics import stats_schema
from spreeze_like.roles.actor_learner import ActorLearner
from spreeze_like.roles.critic_learner import CriticLearner
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.training import train

from .test_serial import tiny


class ScriptedReplay:
    """A replay sampler whose batches are random and finite, or carry a NaN reward / obs when asked."""

    def __init__(self, obs_dim: int = 3, act_dim: int = 2) -> None:
        self.rng = np.random.default_rng(0)
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.poison: str | None = None  # None, "reward" or "obs"
        self.priority_updates = 0

    def sample(self, n: int) -> SimpleNamespace:
        r = self.rng
        raw = SimpleNamespace(
            obs=r.standard_normal((n, self.obs_dim)).astype(np.float32),
            action=r.uniform(-1, 1, (n, self.act_dim)).astype(np.float32),
            reward=r.standard_normal(n).astype(np.float32),
            next_obs=r.standard_normal((n, self.obs_dim)).astype(np.float32),
            terminated=np.zeros(n, np.float32), weights=np.ones(n, np.float32),
            slots=np.arange(n), generations=np.zeros(n, np.int64))
        if self.poison == "reward":
            raw.reward[3] = np.nan
        elif self.poison == "obs":
            raw.obs[5, 1] = np.inf
        return raw

    def update_priorities(self, slots, generations, td_errors) -> None:
        assert np.isfinite(td_errors).all()
        self.priority_updates += 1


def make(kind: str, algo: str = "sac", max_in_row: int = 5, prioritized: bool = False, step_mode: str = "auto"):
    spec = AlgoSpec(algo=algo, obs_dim=3, act_dim=2, hidden_sizes=(16, 16), policy_delay=1)
    stats = LocalStatsBlock(stats_schema(1))
    replay, board_a, board_c = ScriptedReplay(), LocalBoard(), LocalBoard()
    if kind == "critic":
        learner = CriticLearner(spec, "cpu", replay, board_a, board_c, stats.role("critic-learner"), 32,
                                prioritized=prioritized, max_nonfinite_steps=max_in_row, step_mode=step_mode)
    else:
        learner = ActorLearner(spec, "cpu", replay, board_c, board_a, stats.role("actor-learner"), 32,
                               max_nonfinite_steps=max_in_row, step_mode=step_mode)
    return learner, replay, stats.role(f"{kind}-learner")


def snapshot(learner) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in _flat(learner.part.state_dict())}


def _flat(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flat(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _flat(v, f"{prefix}/{i}")
    else:
        yield prefix, obj


def changed(before: dict, learner, ignore: tuple[str, ...] = ()) -> list[str]:
    after = dict(_flat(learner.part.state_dict()))
    out = []
    for k, v in before.items():
        if any(i in k for i in ignore):
            continue
        same = torch.equal(v, after[k]) if isinstance(v, torch.Tensor) else v == after[k]
        if not same:
            out.append(k)
    return out


@pytest.mark.parametrize("step_mode", ["explicit", "eager"])  # the CPU's default, and autograd's step
@pytest.mark.parametrize("kind, algo, poison", [("critic", "sac", "reward"), ("critic", "td3", "obs"),
                                                ("actor", "sac", "obs"), ("actor", "ddpg", "obs"),
                                                # CrossQ: the running statistics (buffers) must not move either
                                                ("critic", "crossq", "obs"), ("actor", "crossq", "obs")])
def test_a_non_finite_step_changes_no_parameter_and_no_optimiser_state(kind, algo, poison, step_mode):
    learner, replay, row = make(kind, algo, prioritized=kind == "critic", step_mode=step_mode)
    assert learner.part_step == getattr(learner.part, "explicit_step" if step_mode == "explicit" else "step")
    for _ in range(3):  # Adam has moments to protect
        learner.update()
    before = snapshot(learner)
    replay.poison = poison
    learner.update()
    # the soft target update still moves targets toward the (unchanged) parameters; the generator drew noise
    moved = changed(before, learner, ignore=("critic_target", "actor_target", "generator"))
    assert moved == [], moved
    replay.poison = None
    learner.update()
    assert changed(before, learner, ignore=("critic_target", "actor_target", "generator")), "a good step applies"
    learner.flush()
    assert row.get("nonfinite_steps") == 1
    if kind == "critic":
        assert replay.priority_updates == 4  # the skipped step wrote no priority
        # the skipped step's NaN metrics are masked out of the means
        assert np.isfinite(row.get("qf1_loss.sum")) and row.get("qf1_loss.count") == 4
    else:
        assert np.isfinite(row.get("actor_loss.sum")) and row.get("actor_loss.count") == 4


def test_n_in_a_row_stop_but_interrupted_runs_do_not():
    learner, replay, row = make("critic", max_in_row=5)
    for i in range(40):  # 4 bad, 1 good, repeated: never 5 in a row
        replay.poison = "reward" if i % 5 else None
        learner.update()
    learner.flush()
    assert row.get("nonfinite_steps") == 32
    replay.poison = "reward"
    with pytest.raises(NonFiniteError, match=r"critic-learner: \d+ updates in a row had NaN/inf gradients"):
        for _ in range(25):  # the counters are read every 20 updates
            learner.update()
    learner.check_finite()  # the skipped steps left the state finite


def test_non_finite_weights_are_refused_before_a_checkpoint(tmp_path):
    learner, _, _ = make("actor")
    with torch.no_grad():
        learner.part.actor_optimizer.param_groups[0]["params"][0][0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="actor-learner: non-finite values in actor"):
        learner.check_finite()
    good = save_checkpoint(tmp_path, {"roles": {}, "w": torch.ones(3)}, 100)
    with pytest.raises(NonFiniteError, match="refused to write checkpoint at env step 200: /w"):
        save_checkpoint(tmp_path, {"roles": {}, "w": torch.tensor([1.0, float("inf")])}, 200)
    assert list_checkpoints(tmp_path) == [good]
    assert nonfinite_tensors({"a": [torch.zeros(2), torch.tensor([float("nan")])], "b": 1.0}) == ["/a/1"]


def test_serial_run_stops_on_diverged_learning_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    """Rewards of 3e38 after 500 env steps: finite data, but every critic gradient overflows to inf."""
    monkeypatch.setenv("SPZ_TEST_HUGE_AFTER", "500")
    from trainer import tiny_envs

    monkeypatch.setattr(tiny_envs, "_steps_in_process", 0)
    config = dataclasses.replace(tiny(tmp_path, env="trainer.tiny_envs:TinyHuge-v0", total_steps=5000,
                                      checkpoint_every=200, learning_starts=100, max_nonfinite_steps=10))
    with pytest.raises(NonFiniteError) as caught:
        train(config, print_fn=lambda line: None)
    message = str(caught.value)
    assert "updates in a row had NaN/inf gradients" in message and "the last good checkpoint is" in message
    assert "\n" not in message
    payload, path = load_latest(next(tmp_path.iterdir()))
    assert str(path) in message and 400 <= payload["env_steps"] < 5000
    assert nonfinite_tensors(payload) == []
