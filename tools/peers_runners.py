"""The peers of ``tools/bench_vs_sb3.py``: SB3 and SBX SAC, TD3 and DDPG, and SBX CrossQ, each in a child process
(RLtools, ``peers_rltools.py``, and the single-file SAC, TD3 and DDPG scripts, ``peers_script.py``, run their own
loops in it).

SBX (package ``sbx-rl``) is SB3's API with the networks and the update in JAX, JIT-compiled; it keeps
SB3's numpy replay buffer and env loop. Each peer run is a fresh child process (:func:`peer_child`,
started by :func:`run_peer_child` with ``python -c``): JAX and torch never share a process or a GPU
allocator, one run's torch threads cannot leak into the next, and a peer that crashes takes only its
child down (the parent raises with the child's exit status; the child's output is on the console).
A ``probe`` child per peer first checks that the peer is installed and that its device exists, so a
wrong device fails with one ``error:`` line before any run. The child writes its result as JSON into
the benchmark's scratch folder, which the benchmark removes.

**Settings.** Every peer gets the same shared settings (:func:`shared_kwargs`): the recorded env, the
peers' learning rate ``--sb3-lr`` (rl-zoo's for the env) for actor, critic and alpha, 1M replay,
``learning_starts``, batch 256, gamma ``--peer-gamma`` (0.99 but where rl-zoo tunes it: 0.9999 on Swimmer-v5),
UTD 1 (train_freq 1, gradient_steps 1), the seed. SAC and CrossQ add the entropy tuned from alpha 1 to -act_dim. SAC (SB3 and SBX alike) adds tau 0.005 (their
default; ``--peer-tau`` changes it) and MLPs 256-256 (SBX's policy_delay stays its default, 1). TD3 and
DDPG add the same tau and MLPs, and Gaussian exploration noise of std 0.1 on actions scaled to [-1, 1]
(rl-baselines3-zoo's; ours, ``--exploration-noise``, defaults to it; SB3's own default is none); TD3 keeps
its defaults of policy delay 2 and target noise 0.2 clipped at 0.5 (ours too), and SBX's DDPG gets the
shared rate for its critic (its own default is 1e-3 there). CrossQ adds
nothing of SAC's: it has no target networks (no tau) and keeps what makes it CrossQ as SBX ships it:
policy delay 3 (the paper's), Batch Renormalization in actor and critic, Adam beta1 0.5, an actor
256-256 and a critic 1024-1024 (``--crossq-critic-units N`` makes the critic N-N, e.g. 256 to match
SAC's networks).

**Devices.** SB3 gets ``--peer-device`` as ``device=`` (SB3 itself falls back to the CPU silently when
asked for an absent GPU; here that is an error). SBX: JAX chooses its platform; ``cpu`` sets
``JAX_PLATFORMS=cpu``, ``auto`` lets JAX take the GPU when its CUDA plugin is installed, ``cuda``
insists on that; the platform JAX used is read after the run and reported. SBX's own ``device=`` (the
torch side: its replay buffer) stays ``cpu``, where SBX puts that buffer anyway.

**Evaluations and clock.** A callback runs ``--eval-episodes`` deterministic episodes every
``--eval-every`` env steps on a separate (unrecorded) env, from our evaluator's start seeds; the time
they take is subtracted from the peer's clock (in the peer's favour). The clock starts just before the
model's constructor: the child's interpreter start and imports come before it (in the peer's favour);
JAX's backend start and SBX's JIT compilation are inside it.

**Paired seeds.** SB3 and SBX reset their one training env first with the seed (``s + i`` for env ``i``,
gymnasium's vector-env convention), and so do we (``spreeze_like.seeding.env_seed``): seed ``s``
plays its training episodes from the same initial states on every side, and its evaluations from the
same start states. The warm-up actions and everything learned differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
from peers_record import EPISODE_DIR_VAR, RECORDED_ID, RunRecord, both_reached, train_curve

from spreeze_like.errors import ConfigError
from spreeze_like.seeding import eval_seed

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Peer:
    """One peer: its ``--peers`` name (also its run name, JSON key and curves ``system``) and where it lives."""

    name: str
    label: str  # in the report: "ratios ours / <label>"
    module: str  # the importable package
    package: str  # its PyPI name
    model: str  # the class in ``module``
    algo: str  # "sac", "td3", "ddpg" or "crossq"
    framework: str  # "torch" (SB3's API), "jax" (SBX), "cpp" (RLtools) or "script" (our eager script)


PEER_LIST = (
    Peer("sb3", "SB3 SAC", "stable_baselines3", "stable-baselines3", "SAC", "sac", "torch"),
    Peer("sbx", "SBX SAC", "sbx", "sbx-rl", "SAC", "sac", "jax"),
    Peer("sbx-crossq", "SBX CrossQ", "sbx", "sbx-rl", "CrossQ", "crossq", "jax"),
    Peer("sb3-td3", "SB3 TD3", "stable_baselines3", "stable-baselines3", "TD3", "td3", "torch"),
    Peer("sbx-td3", "SBX TD3", "sbx", "sbx-rl", "TD3", "td3", "jax"),
    Peer("sb3-ddpg", "SB3 DDPG", "stable_baselines3", "stable-baselines3", "DDPG", "ddpg", "torch"),
    Peer("sbx-ddpg", "SBX DDPG", "sbx", "sbx-rl", "DDPG", "ddpg", "jax"),
    Peer("rltools", "RLtools SAC", "rltools", "rltools", "SAC", "sac", "cpp"),  # peers_rltools.py
    Peer("script-sac", "script SAC", "torch", "torch", "SAC", "sac", "script"),  # peers_script.py
    Peer("script-td3", "script TD3", "torch", "torch", "TD3", "td3", "script"),
    Peer("script-ddpg", "script DDPG", "torch", "torch", "DDPG", "ddpg", "script"),
)
PEERS = {peer.name: peer for peer in PEER_LIST}
# RLtools only when named (it compiles C++ and has its own settings), the scripts (peers_script.py) only when named
# (the default set stays what the headline rows ran), and the TD3 / DDPG peers, which go with ``--set algo='"td3"'``
# (or ddpg) on our side
DEFAULT_PEERS = ("sb3", "sbx", "sbx-crossq")
# The peers' discount where rl-baselines3-zoo tunes it away from SB3's 0.99, per algorithm (Swimmer-v3 in its sac.yml
# and td3.yml: 0.9999, a swimmer's forward reward comes hundreds of steps after the strokes that earn it; in its
# crossq.yml: 0.999). Ours takes the same from its presets (presets/sac.toml, td3.toml, ddpg.toml, crossq.toml),
# yet this table is not read from them on purpose: it says what the peers' own tuned configuration is, so a change
# of our presets (a measured gamma of our own) must not change the settings we compare against.
# ``--peer-gamma`` gives every peer one value instead.
PEER_GAMMA = {"Swimmer-v5": {"sac": 0.9999, "td3": 0.9999, "ddpg": 0.9999, "crossq": 0.999}}
SB3_GAMMA = 0.99
CHILD_CODE = "import sys, peers_runners; sys.exit(peers_runners.peer_child(sys.argv[1]))"


def peer_env(args: argparse.Namespace, peer: Peer, episode_dir: str | None) -> dict[str, str]:
    """The environment of a peer's child process."""
    env = dict(os.environ)
    env.pop(EPISODE_DIR_VAR, None)
    if episode_dir:
        env[EPISODE_DIR_VAR] = episode_dir
    if peer.framework == "jax":
        # JAX reserves 75 % of the GPU's memory at its first use unless told not to. The runs here take turns,
        # but anything else on the GPU at the time (the torch side of this same child, another tool) would then
        # fail its allocations, and SBX's real use would be unreadable. Without preallocation JAX's allocator
        # grows with what SBX's small networks need, as torch's caching allocator does for SB3.
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        # cpu keeps JAX off the GPU; auto and cuda leave JAX its own choice (the GPU when its CUDA plugin is
        # installed) and cuda is then checked in the child: jax 0.10 fails JAX_PLATFORMS=cuda without the plugin
        # by an AssertionError, not a message
        if args.peer_device == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
    return env


def run_peer_child(args: argparse.Namespace, name: str, mode: str, seed: int, scratch: Path) -> dict:
    """Runs :func:`peer_child` in a fresh interpreter and returns what it wrote (``mode``: probe or train)."""
    peer = PEERS[name]
    out = scratch / f"{name}-{mode}-{seed}.json"
    folder = scratch / f"{name}-{seed}"
    if mode == "train":
        folder.mkdir(parents=True)
    spec = {"args": vars(args), "peer": name, "mode": mode, "seed": seed, "out": str(out), "folder": str(folder)}
    proc = subprocess.run([sys.executable, "-c", CHILD_CODE, json.dumps(spec)], check=False,
                          env=peer_env(args, peer, str(folder) if mode == "train" else None))
    result = json.loads(out.read_text()) if out.exists() else {}
    if "error" in result:
        raise ConfigError(result["error"])
    if proc.returncode != 0 or not result:
        raise RuntimeError(f"the {peer.label} {mode} child (seed {seed}) exited with status {proc.returncode}"
                           " and no result; its output is above")
    return result


def run_peer(args: argparse.Namespace, name: str, seed: int, scratch: Path) -> RunRecord:
    """One peer run, one seed, in its own child process."""
    return RunRecord.from_dict(run_peer_child(args, name, "train", seed, scratch)["record"])


def peer_child(spec_json: str) -> int:
    """Entry point of a peer's child process: ``probe`` checks the peer and its device, ``train`` trains it."""
    spec = json.loads(spec_json)
    args = argparse.Namespace(**spec["args"])
    peer = PEERS[spec["peer"]]
    try:
        if spec["mode"] == "probe":
            result = {"device": peer_device(peer, args.peer_device)}
        else:  # the device is read after the run, so that JAX's backend start-up stays inside SBX's clock
            record = train_peer(args, peer, spec["seed"], Path(spec["folder"]))
            record.device = peer_device(peer, args.peer_device)
            result = {"record": dataclasses.asdict(record)}
    except ConfigError as exc:
        result = {"error": str(exc)}
    Path(spec["out"]).write_text(json.dumps(result))
    return 2 if "error" in result else 0


def peer_device(peer: Peer, requested: str) -> str:
    """Where the peer's networks will run, in words; a ConfigError where the asked-for device is missing."""
    if importlib.util.find_spec(peer.module) is None:
        raise ConfigError(f"{peer.package} is not installed: pip install -e '.[bench]', or leave {peer.name} out "
                          f"(--skip-{peer.name} / --peers)")
    if peer.framework == "cpp":
        from peers_rltools import rltools_device

        return rltools_device(requested)
    if peer.framework in ("torch", "script"):
        import torch

        device = torch_device(requested)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return f"torch {device} ({name})"
    import jax  # the parent set JAX_PLATFORMS=cpu for --peer-device cpu

    backend, first = jax.default_backend(), jax.devices()[0]
    if requested == "cuda" and backend != "gpu":
        raise ConfigError(f"--peer-device cuda: JAX runs on {backend} here (no CUDA plugin, or no GPU it can "
                          "use: pip install 'jax[cuda12]'); use --peer-device cpu or auto")
    return f"jax {backend} ({first.device_kind})"


def torch_device(requested: str) -> torch.device:
    """``--peer-device`` for a torch peer (SB3's, the script): ``auto`` takes CUDA when torch sees it (as SB3's own
    ``get_device`` does), ``cuda`` insists on it: SB3 itself would fall back to the CPU, silently."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--peer-device cuda: torch sees no CUDA device here; use --peer-device cpu or auto")
    return torch.device("cuda" if requested != "cpu" and torch.cuda.is_available() else "cpu")


def peer_gamma(args: argparse.Namespace, algo: str) -> float:
    """The discount of a peer running ``algo``: ``--peer-gamma`` if given, else rl-zoo's for the env (PEER_GAMMA)."""
    if args.peer_gamma is not None:
        return args.peer_gamma
    return PEER_GAMMA.get(args.env, {}).get(algo, SB3_GAMMA)


def shared_kwargs(args: argparse.Namespace, peer: Peer, seed: int) -> dict:
    """The constructor arguments every peer gets alike (SB3 and SBX, every algorithm)."""
    # SBX's torch side (its replay buffer) is always on the CPU; JAX picks the networks' device
    device = args.peer_device if peer.framework == "torch" else "cpu"
    return {"learning_rate": args.sb3_lr, "buffer_size": 1_000_000, "learning_starts": args.learning_starts,
            "batch_size": 256, "gamma": peer_gamma(args, peer.algo), "train_freq": 1, "gradient_steps": 1, "seed": seed, "device": device}


def algo_kwargs(args: argparse.Namespace, peer: Peer, act_dim: int) -> dict:
    """What the algorithm adds: SAC's entropy, target networks and MLPs; TD3's and DDPG's target networks, MLPs and
    exploration noise; CrossQ's entropy and its own defaults, bar the critic width."""
    entropy = {"ent_coef": "auto_1.0", "target_entropy": "auto"}
    if peer.algo == "sac":
        return {**entropy, "tau": args.peer_tau, "policy_kwargs": {"net_arch": [256, 256]}}
    if peer.algo in ("td3", "ddpg"):
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        from spreeze_like.config import TrainConfig

        std = TrainConfig().exploration_noise  # our default (actions in [-1, 1]), rl-zoo's for TD3 and DDPG
        noise = NormalActionNoise(np.zeros(act_dim), std * np.ones(act_dim))
        critic_lr = {"qf_learning_rate": args.sb3_lr} if peer.framework == "jax" else {}  # SBX's own knob
        return {"tau": args.peer_tau, "policy_kwargs": {"net_arch": [256, 256]}, "action_noise": noise, **critic_lr}
    units = args.crossq_critic_units
    return {**entropy, **({"policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [units, units]}}} if units else {})}


def her_kwargs(args: argparse.Namespace) -> dict:
    """``--her-goals K``: SB3's HerReplayBuffer (SBX trains from SB3's buffers too) with K goals per real transition
    (``--her-strategy``, SB3's names: future, final, episode), so K / (1 + K) of each batch is relabelled, as in
    ours (1 + K rows stored per env step)."""
    k = getattr(args, "her_goals", 0)
    if not k:
        return {}
    from stable_baselines3 import HerReplayBuffer

    return {"replay_buffer_class": HerReplayBuffer,
            "replay_buffer_kwargs": {"n_sampled_goal": k,
                                     "goal_selection_strategy": getattr(args, "her_strategy", "future")}}


def make_model(args: argparse.Namespace, peer: Peer, seed: int):
    """The peer's model on the recorded env (imports the peer: call it inside the clock's child)."""
    model_class = getattr(importlib.import_module(peer.module), peer.model)
    env = gym.make(RECORDED_ID)
    policy = "MultiInputPolicy" if isinstance(env.observation_space, gym.spaces.Dict) else "MlpPolicy"
    act_dim = int(env.action_space.shape[0])
    model = model_class(policy, env, **shared_kwargs(args, peer, seed), **algo_kwargs(args, peer, act_dim),
                        **her_kwargs(args))
    # a logger that writes nowhere: left to itself, every learn() makes an empty /tmp/SB3-<time> folder
    # (SB3's configure_logger with no log folder), and the benchmark reads the Monitor's files instead
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


class Progress:
    """A peer run's clock, evaluations and stop rules, one for every peer's training loop.

    ``start`` starts the clock; ``after_step`` (each env step) evaluates every ``--eval-every`` env steps with the
    deterministic ``act`` on a separate env (its time taken out of the clock, in the peer's favour) and says
    whether to go on (``--stop-when-reached``, ``--wall-budget``); ``finish`` fills the record."""

    def __init__(self, args: argparse.Namespace, record: RunRecord, folder: Path, seed: int) -> None:
        self.args, self.record, self.folder, self.seed = args, record, folder, seed
        self.excluded: list[tuple[float, float]] = []  # wall intervals spent in evaluations (not counted)
        self.next_eval = args.eval_every
        self.eval_env = gym.make(args.env, **args.env_kwargs)
        self.t0 = time.time()

    def start(self) -> None:
        self.t0 = time.time()

    def clock(self, t: float) -> float:
        """Wall time t with the evaluation time spent before t taken out."""
        return t - sum(min(e, t) - s for s, e in self.excluded if s < t)

    def after_step(self, env_steps: int, act: Callable[[object], object]) -> bool:
        args, record = self.args, self.record
        if args.eval_every and env_steps >= self.next_eval:
            self.next_eval += args.eval_every
            start = time.time()
            mean = evaluate(act, self.eval_env, args.eval_episodes, self.seed)
            end = time.time()
            self.excluded.append((start, end))
            record.evals.append((self.clock(end) - self.t0, env_steps, mean))
            if args.stop_when_reached and both_reached(
                    train_curve(self.folder, self.t0, self.clock), [r for _, _, r in record.evals],
                    args.threshold_train, args.threshold_eval, args.window):
                record.note = "stopped once both thresholds were reached"
                return False
        if args.wall_budget and self.clock(time.time()) - self.t0 >= args.wall_budget:
            record.note = "stopped at the wall budget"
            return False
        return True

    def finish(self, env_steps: int, updates: int) -> RunRecord:
        self.record.wall_s = self.clock(time.time()) - self.t0
        self.record.env_steps, self.record.updates = env_steps, updates
        self.record.train = train_curve(self.folder, self.t0, self.clock)
        self.eval_env.close()
        return self.record


def train_peer(args: argparse.Namespace, peer: Peer, seed: int, folder: Path) -> RunRecord:
    """One peer run in this (child) process; the SB3-API peers share the definitions and the callback."""
    progress = Progress(args, RunRecord(peer.name, seed, algo=peer.algo, budget_s=args.wall_budget), folder, seed)
    if peer.framework == "cpp":
        from peers_rltools import train_rltools

        return train_rltools(args, seed, progress)
    if peer.framework == "script":
        from peers_script import train_script

        return train_script(args, peer, seed, progress)
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    importlib.import_module(peer.module)  # imports before the clock, as for every peer
    if args.sb3_threads:
        torch.set_num_threads(args.sb3_threads)

    class Bench(BaseCallback):
        def _on_step(self) -> bool:
            return progress.after_step(self.num_timesteps, lambda obs: self.model.predict(obs, deterministic=True)[0])

    progress.start()
    model = make_model(args, peer, seed)
    model.learn(total_timesteps=args.total_steps, callback=Bench())
    return progress.finish(int(model.num_timesteps), int(model._n_updates))


def evaluate(act: Callable[[object], object], env: gym.Env, episodes: int, seed: int) -> float:
    """Mean return of deterministic episodes (``act``: observation -> action in the env's bounds) from fixed start
    seeds, the same ones every time and the same as our evaluator's (``seeding.eval_seed``): both sides are
    evaluated from the same initial states."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=eval_seed(seed, i))
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return sum(returns) / len(returns)
