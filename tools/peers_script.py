"""A single-file eager PyTorch SAC, TD3 or DDPG script as a peer of ``tools/bench_vs_sb3.py`` (``--peers script-sac``,
``script-td3``, ``script-ddpg``).

The README promises runs that finish sooner than "a CleanRL script": these are that peer, so the promise has a
figure for every algorithm ours trains bar CrossQ (CleanRL has no CrossQ script; SBX's is the CrossQ peer). Each is
what a researcher's own single-file script looks like (the CleanRL layout: one process, one env, a numpy replay,
one update per env step, plain eager PyTorch), written from the algorithm, not copied. The networks and the update
are ``tools/eager_sac_peer.py``'s ``EagerSACPeer`` (the issue-15 peer of the critic rate; twin Q nets and their
Polyak-averaged targets, a tanh-squashed Gaussian actor with log-std in [-5, 2], entropy tuned towards -act_dim)
and ``tools/eager_td3_peer.py``'s ``EagerTD3Peer`` (TD3: twin Q nets, target smoothing, policy delay 2; DDPG: one
Q net, delay 1), all with torch's default ``Adam``; this module adds the loop around them:

- warm-up: ``learning_starts`` uniform random actions, then the policy's exploring action: SAC's sampled one, TD3's
  and DDPG's deterministic one plus Gaussian noise of std ``TrainConfig().exploration_noise`` (0.1: ours and the
  other TD3/DDPG peers'), clipped to [-1, 1];
- replay: numpy arrays of ``min(total_steps, 1M)`` rows, FIFO; a uniform batch per update drawn with numpy's
  generator and turned into tensors each time (what SB3's ``ReplayBuffer.sample``, which CleanRL's scripts use,
  does);
- one critic step per env step once the warm-up is over, and the actor's every ``policy_delay`` of them (SAC 1:
  the other SAC peers' policy delay; CleanRL's SAC updates the policy twice every second step, the same count;
  TD3 2; DDPG 1, as SB3's DDPG);
- bootstrapping cut only where the episode terminated, not where it was truncated by its time limit;
- actions live in [-1, 1] and are mapped to the env's bounds outside the network (SB3's convention; CleanRL
  scales inside its actor, which for SAC shifts the entropy by a constant per env).

**Settings.** The shared ones of every peer (``peers_runners.shared_kwargs``): the peers' learning rate
(``--sb3-lr``) for every optimiser, ``--peer-gamma``, ``--peer-tau``, batch 256, 1M replay, ``learning_starts``,
UTD 1, MLPs 256-256; SAC's alpha from 1. Torch threads: ``--sb3-threads`` (0: torch's default), as for SB3. Device:
``--peer-device``, read as for SB3 (``peers_runners.torch_device``).

**Clock, seeds, evaluations** as for the SB3-API peers: the clock starts before the env and the networks are made
(imports before it); the training env's first reset gets ``env_seed(seed, 0)`` (later resets continue its generator);
torch's generator is seeded with the seed, the replay's with it and the warm-up's with seed + 1; evaluations are
``peers_runners.Progress``'s, on the deterministic action (SAC: tanh of the mean), taken out of the clock.

Refused with one ``error:`` line: ``--her-goals`` (the scripts have no HER; the benchmark refuses it before any
run), and observations or actions that are not flat Boxes (at the script's first run).

Owns nothing outside its own (child) process: its env, its arrays and its networks end with it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from eager_sac_peer import EagerSACPeer, SACBatch
from eager_td3_peer import EagerTD3Peer
from peers_record import RECORDED_ID, RunRecord
from peers_runners import peer_gamma, torch_device

from spreeze_like.config import TrainConfig
from spreeze_like.errors import ConfigError
from spreeze_like.seeding import env_seed

if TYPE_CHECKING:
    from peers_runners import Peer, Progress

BATCH_SIZE = 256
REPLAY_ROWS = 1_000_000
HIDDEN = (256, 256)


class Replay:
    """The script's replay: one numpy array per column, FIFO once full; actions stored in [-1, 1]."""

    def __init__(self, rows: int, obs_dim: int, act_dim: int, device: torch.device, seed: int) -> None:
        self.obs = np.zeros((rows, obs_dim), np.float32)
        self.next_obs = np.zeros((rows, obs_dim), np.float32)
        self.actions = np.zeros((rows, act_dim), np.float32)
        self.rewards = np.zeros((rows, 1), np.float32)
        self.dones = np.zeros((rows, 1), np.float32)
        self.rows, self.size, self.pos, self.device = rows, 0, 0, device
        self.rng = np.random.default_rng(seed)

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float, next_obs: np.ndarray, terminated: bool) -> None:
        i = self.pos
        self.obs[i], self.actions[i], self.rewards[i], self.next_obs[i], self.dones[i] = (
            obs, action, reward, next_obs, float(terminated))
        self.pos = (i + 1) % self.rows
        self.size = min(self.size + 1, self.rows)

    def sample(self, n: int) -> SACBatch:
        idx = self.rng.integers(0, self.size, n)
        return SACBatch(*(torch.as_tensor(column[idx], device=self.device)
                          for column in (self.obs, self.actions, self.rewards, self.next_obs, self.dones)))


def flat_box_sizes(env: gym.Env, name: str, peer: str = "script-sac") -> tuple[int, int]:
    """(obs_dim, act_dim) of an env with flat Box observations and actions; a ConfigError for any other."""
    obs_space, act_space = env.observation_space, env.action_space
    if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1
            and isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1):
        raise ConfigError(f"{peer}: {name} needs flat Box observations and actions (the script's MLPs); leave "
                          f"{peer} out of --peers for this env")
    return int(obs_space.shape[0]), int(act_space.shape[0])


class ScriptAgent(NamedTuple):
    """What the loop needs of an algorithm: its update, and its actions in [-1, 1] (no gradients taken)."""

    update: Callable[[SACBatch], None]
    mode: Callable[[torch.Tensor], torch.Tensor]  # the deterministic action: what an evaluation plays
    explore: Callable[[torch.Tensor], torch.Tensor]  # the action taken while training


def make_agent(args: argparse.Namespace, algo: str, obs_dim: int, act_dim: int, device: torch.device,
               seed: int) -> ScriptAgent:
    """The script's SAC (``EagerSACPeer``), TD3 or DDPG (``EagerTD3Peer``) with the shared settings."""
    gamma, lr = peer_gamma(args, algo), args.sb3_lr
    if algo == "sac":
        sac = EagerSACPeer(obs_dim, act_dim, str(device), BATCH_SIZE, seed=seed, hidden=HIDDEN, gamma=gamma,
                           tau=args.peer_tau, q_lr=lr, policy_lr=lr, alpha_lr=lr)
        return ScriptAgent(sac.update, sac.actor.mode, lambda obs: sac.actor.sample(obs)[0])
    td3 = algo == "td3"  # else DDPG: SB3's, as the other DDPG peers (one Q net, delay 1, no target smoothing)
    agent = EagerTD3Peer(obs_dim, act_dim, str(device), seed=seed, hidden=HIDDEN, gamma=gamma, tau=args.peer_tau,
                         lr=lr, twin=td3, policy_delay=2 if td3 else 1, target_noise=0.2 if td3 else 0.0)
    std = TrainConfig().exploration_noise  # ours and the other TD3/DDPG peers' (rl-zoo's), actions in [-1, 1]

    def explore(obs: torch.Tensor) -> torch.Tensor:
        action = agent.actor(obs)
        return (action + std * torch.randn_like(action)).clamp(-1.0, 1.0)

    return ScriptAgent(agent.update, agent.actor, explore)


def train_script(args: argparse.Namespace, peer: Peer, seed: int, progress: Progress) -> RunRecord:
    """One run of the script of ``peer.algo`` in this (child) process; ``progress`` is the run's
    ``peers_runners.Progress``."""
    if getattr(args, "her_goals", 0):
        raise ConfigError(f"{peer.name} has no HER: leave it out of --peers with --her-goals")
    progress.start()  # the env's making inside the clock, as for the SB3-API peers (make_model)
    env = gym.make(RECORDED_ID)
    obs_dim, act_dim = flat_box_sizes(env, args.env, peer.name)
    low, high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
    device = torch_device(args.peer_device)
    if args.sb3_threads:
        torch.set_num_threads(args.sb3_threads)

    def to_env(unit: np.ndarray) -> np.ndarray:
        return low + (np.asarray(unit, np.float64) + 1.0) * 0.5 * (high - low)

    def act(obs: object) -> np.ndarray:  # the evaluations' deterministic policy
        with torch.no_grad():
            unit = agent.mode(torch.as_tensor(np.asarray(obs, np.float32)[None], device=device))
        return to_env(unit[0].cpu().numpy())

    agent = make_agent(args, peer.algo, obs_dim, act_dim, device, seed)
    replay = Replay(min(args.total_steps, REPLAY_ROWS), obs_dim, act_dim, device, seed)
    warmup = np.random.default_rng(seed + 1)
    obs, _ = env.reset(seed=env_seed(seed, 0))
    steps = updates = 0
    while steps < args.total_steps:
        if steps < args.learning_starts:
            unit = warmup.uniform(-1.0, 1.0, act_dim).astype(np.float32)
        else:
            with torch.no_grad():
                unit = agent.explore(torch.as_tensor(obs[None], dtype=torch.float32, device=device))
            unit = unit[0].cpu().numpy()
        next_obs, reward, terminated, truncated, _ = env.step(to_env(unit))
        replay.add(obs, unit, float(reward), next_obs, terminated)
        obs = env.reset()[0] if terminated or truncated else next_obs
        steps += 1
        if steps > args.learning_starts:
            agent.update(replay.sample(BATCH_SIZE))
            updates += 1
        if not progress.after_step(steps, act):
            break
    env.close()
    record = progress.finish(steps, updates)
    threads = torch.get_num_threads()
    shape = (f"eager torch script, {HIDDEN[0]}x{HIDDEN[1]}, batch {BATCH_SIZE}, {threads} "
             f"thread{'s' if threads > 1 else ''}")
    record.note = "; ".join(filter(None, [record.note, shape]))
    return record
