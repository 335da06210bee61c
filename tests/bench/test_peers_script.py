"""The script peers of tools/bench_vs_sb3.py (tools/peers_script.py: a single-file eager PyTorch SAC, TD3 or DDPG
loop).

Their updates are tests/bench/test_eager_sac_peer.py's and test_eager_td3_peer.py's; here is the loop around them: the replay keeps FIFO order and the columns apart, only a termination cuts the bootstrap (a time
limit does not), every episode end is followed by a reset, one update per env step after the warm-up, the
evaluations' actions are in the env's bounds, and what the script cannot train is refused with one line. The
whole peer also runs once through the benchmark (needs only torch: it runs in CI).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

import peers_script
from peers_record import RunRecord
from peers_runners import PEERS

from spreeze_like.errors import ConfigError

from .test_bench_vs_sb3 import SMALLEST, check_rows, run_bench
from .test_eager_sac_peer import one_thread  # noqa: F401  (autouse: one torch thread here too)


class RecordingReplay(peers_script.Replay):
    """The script's replay, kept where the test can read it after the run."""

    last: RecordingReplay | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        RecordingReplay.last = self


class StubProgress:
    """peers_runners.Progress's interface without its env and clock: records what the loop hands it."""

    def __init__(self, env_id: str) -> None:
        self.env = gym.make(env_id)
        self.steps_seen: list[int] = []
        self.actions: list[np.ndarray] = []

    def start(self) -> None:
        pass

    def after_step(self, env_steps: int, act) -> bool:
        self.steps_seen.append(env_steps)
        if env_steps % 50 == 0:
            self.actions.append(np.asarray(act(self.env.reset(seed=env_steps)[0])))
        return True

    def finish(self, env_steps: int, updates: int) -> RunRecord:
        record = RunRecord("script-sac", 1, algo="sac")
        record.env_steps, record.updates = env_steps, updates
        return record


def script_args(env_id: str, total: int, warmup: int, her_goals: int = 0) -> argparse.Namespace:
    return argparse.Namespace(env=env_id, her_goals=her_goals, peer_device="cpu", sb3_threads=1, total_steps=total,
                              learning_starts=warmup, peer_tau=0.005, sb3_lr=1e-3, peer_gamma=None)


def run_script(monkeypatch: pytest.MonkeyPatch, env_id: str, total: int, warmup: int,
               peer: str = "script-sac") -> tuple:
    monkeypatch.setattr(peers_script, "RECORDED_ID", env_id)  # the plain env, not the benchmark's recorder
    monkeypatch.setattr(peers_script, "Replay", RecordingReplay)
    progress = StubProgress(env_id)
    record = peers_script.train_script(script_args(env_id, total, warmup), PEERS[peer], 1, progress)
    return record, RecordingReplay.last, progress


def test_the_replay_is_fifo_and_samples_float_tensors_of_every_column() -> None:
    replay = peers_script.Replay(3, 2, 1, torch.device("cpu"), seed=0)
    for i in range(5):
        replay.add(np.full(2, i), np.full(1, -i), float(i), np.full(2, i + 10), terminated=i == 3)
    assert (replay.size, replay.pos) == (3, 2)
    assert replay.obs[:, 0].tolist() == [3, 4, 2]  # rows 0 and 1 overwritten by the 4th and 5th
    assert replay.dones[:, 0].tolist() == [1.0, 0.0, 0.0]
    assert replay.next_obs[:, 0].tolist() == [13, 14, 12]
    batch = replay.sample(64)
    assert [tuple(t.shape) for t in batch] == [(64, 2), (64, 1), (64, 1), (64, 2), (64, 1)]
    assert all(t.dtype == torch.float32 for t in batch)
    assert set(batch.rewards[:, 0].tolist()) <= {2.0, 3.0, 4.0}


def test_a_termination_cuts_the_bootstrap_and_every_episode_end_is_followed_by_a_reset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # InvertedPendulum-v5 falls (terminates) within a few dozen random steps: many episodes in 150
    record, replay, progress = run_script(monkeypatch, "InvertedPendulum-v5", total=150, warmup=120)
    n = replay.size
    assert n == 150 and record.env_steps == 150 and record.updates == 150 - 120
    assert progress.steps_seen == list(range(1, 151))
    ends = np.flatnonzero(replay.dones[:n, 0])
    assert len(ends) >= 3
    for i in range(n - 1):  # within an episode a row's next observation is the next row's observation
        continues = np.allclose(replay.obs[i + 1], replay.next_obs[i])
        assert continues == (i not in ends), i


@pytest.mark.parametrize("peer", ["script-sac", "script-td3", "script-ddpg"])
def test_a_time_limit_does_not_cut_the_bootstrap_and_actions_stay_in_the_bounds(
        monkeypatch: pytest.MonkeyPatch, peer: str) -> None:
    # Pendulum-v1 never terminates; its episodes are truncated at 200 steps, which is no end of the task
    record, replay, progress = run_script(monkeypatch, "Pendulum-v1", total=450, warmup=400, peer=peer)
    assert record.updates == 50 and replay.size == 450
    assert not replay.dones[:450].any()
    assert not np.allclose(replay.obs[200], replay.next_obs[199])  # a reset after the truncation
    assert np.allclose(replay.obs[201], replay.next_obs[200])
    assert np.abs(replay.actions[:450]).max() <= 1.0  # stored in [-1, 1]
    assert len(np.unique(replay.actions[400:450, 0])) == 50  # the policy's exploring actions, not a constant
    evaluated = np.concatenate(progress.actions)
    assert len(evaluated) == 9 and np.abs(evaluated).max() <= 2.0  # Pendulum's torque bounds


def test_what_the_script_cannot_train_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="no HER"):
        peers_script.train_script(script_args("Pendulum-v1", 10, 5, her_goals=4), PEERS["script-td3"], 1,
                                  StubProgress("Pendulum-v1"))
    dict_obs = gym.make("Pendulum-v1")
    dict_obs.observation_space = gym.spaces.Dict({"x": dict_obs.observation_space})
    with pytest.raises(ConfigError, match="script-ddpg: Dict-v0 needs flat Box observations and actions"):
        peers_script.flat_box_sizes(dict_obs, "Dict-v0", "script-ddpg")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--peer-device cuda"):
            peers_script.torch_device("cuda")
        assert peers_script.torch_device("auto") == torch.device("cpu")


def test_the_scripts_run_beside_ours_through_the_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    scripts = ["script-sac", "script-td3", "script-ddpg"]
    proc = run_bench(SMALLEST + ["--peers", *scripts, "--device", "cpu", "--peer-device", "cpu", "--json",
                                 str(out), "--no-png"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"ours-serial", *scripts}
    check_rows(rows)  # the recorder saw their training episodes, their evaluations are tied to their steps
    for name in scripts:
        assert rows[name]["1"]["updates"] == 600 - 400
        assert rows[name]["1"]["device"] == "torch cpu (cpu)"
        assert rows[name]["1"]["algo"] == name.removeprefix("script-")
        assert f"ratios ours / {PEERS[name].label}" in proc.stdout
    assert "eager torch script, 256x256, batch 256" in proc.stdout


@pytest.mark.parametrize(("peers", "refusal"), [
    (["script-sac", "sb3"], "the script-sac peer has no HER; leave it out of --peers"),
    (["sb3", "script-td3", "script-ddpg"], "the script-td3, script-ddpg peers have no HER; leave them out of --peers"),
])
def test_her_goals_with_a_script_is_refused_before_any_run(peers: list[str], refusal: str) -> None:
    proc = run_bench(SMALLEST + ["--her-goals", "4", "--peers", *peers], timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == ["error: --her-goals: " + refusal]
    assert "done ours" not in proc.stdout


@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_td3_and_ddpg_explore_with_gaussian_noise_of_our_std_around_their_action(algo: str) -> None:
    agent = peers_script.make_agent(script_args("Pendulum-v1", 10, 5), algo, 3, 1, torch.device("cpu"), seed=1)
    peer = agent.update.__self__  # the EagerTD3Peer: TD3's twins, delay and smoothing; SB3's DDPG has none of them
    assert (len(peer.qfs), peer.policy_delay, peer.target_noise) == ((2, 2, 0.2) if algo == "td3" else (1, 1, 0.0))
    obs = torch.zeros(4000, 3)
    with torch.no_grad():
        mode, explored = agent.mode(obs), agent.explore(obs)
    assert explored.abs().max() <= 1.0 and mode.abs().max() < 0.5  # a fresh actor: the clip cuts nothing here
    noise = explored - mode
    assert abs(noise.std().item() - peers_script.TrainConfig().exploration_noise) < 0.01
    assert abs(noise.mean().item()) < 0.01
