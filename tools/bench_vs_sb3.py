"""Learning speed of spreeze_like vs Stable-Baselines3 SAC and SBX SAC: same env, seeds and machine, one run.

    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2                       # parallel mode vs SB3 and SBX
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --serial              # serial mode vs both
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --serial --parallel   # both modes vs both
    python tools/bench_vs_sb3.py --env HalfCheetah-v5 --seeds 1 2 --total-steps 200000 --wall-budget 1800
    python tools/bench_vs_sb3.py --env HalfCheetah-v5 --device cuda:0 --peer-device cuda   # on a GPU machine
    python tools/bench_vs_sb3.py --total-steps 600 --seeds 1 --skip-sb3 --skip-sbx   # ours only

For each seed it trains ours (``spreeze_like.train``, in this process tree) and then each peer of
``--peers`` (default ``sb3 sbx``; ``--skip-sb3`` / ``--skip-sbx`` leave one out), one after the other.
SBX (package ``sbx-rl``) is SB3's API with the networks and the update in JAX; it keeps SB3's numpy
replay buffer and env loop. Each peer run is a fresh child process (``peer_child``): JAX and torch never
share a process or a GPU allocator, and one run's torch threads cannot leak into the next. A ``probe``
child per peer first checks that the peer is installed and that its device exists, so a wrong
device fails with one ``error:`` line (exit 2) before any run, and so does a device of ours
(``--device``, or ``--set actor_device=...``) that the machine lacks.

**Devices.** Ours: ``--device`` sets both learners (``--set actor_device="cuda:0"`` and
``critic_device`` one by one; ``--set`` wins); the devices ``TrainConfig.resolve()`` picks are
printed and stored per run. Peers: ``--peer-device auto|cpu|cuda`` (default auto). SB3 gets it as
``device=`` (SB3 itself falls back to the CPU silently when asked for an absent GPU; here that is an
error). SBX: JAX chooses its platform; ``cpu`` sets ``JAX_PLATFORMS=cpu``, ``auto`` lets JAX take the
GPU when its CUDA plugin is installed, ``cuda`` insists on that; the platform JAX used
(``jax.default_backend()``) is read after the run and reported. SBX's own ``device=`` (the torch
side: its replay buffer) stays ``cpu``, where SBX puts that buffer anyway.

**One definition of "training return" for all.** All train on the same env id,
``bench_vs_sb3:SpzBench/Recorded-v0``: the base env (``--env``) inside a wrapper that appends every
finished episode (end wall time, return, length) to a CSV file (one per env instance) in a scratch
folder. Our samplers make it through the ``module:EnvId`` entry point, the peers through ``gym.make``,
so the same code records all. Our evaluator's envs are told apart by the module that makes them
(``spreeze_like/roles/evaluator.py`` on the stack) and recorded as evaluation episodes. The training
return at an episode's end is the mean of the last ``--window`` finished training episodes.

**Evaluations.** Ours: its own evaluator, every ``--eval-every`` env steps, ``--eval-episodes``
deterministic episodes; in the parallel mode it runs beside the training in its own process, so its
cost is inside our wall clock. Peers: a callback that runs the same number of deterministic episodes
every ``--eval-every`` env steps on a separate (unrecorded) env; the time it takes is *subtracted*
from the peer's wall clock (in the peer's favour). Wall clocks start just before ``train()`` /
``SAC(...)``: our process start-ups, env creation and network construction count for all; the peers'
interpreter start and imports happen before their clock (in their favour); SBX's JIT compilation and
JAX's backend start are inside its clock, as our learners' CUDA start is inside ours.

**Hyperparameters.** Identical: MLPs 256-256, gamma 0.99, tau 0.005, batch 256, 1M replay,
``learning_starts`` (Pendulum 1,000; MuJoCo 10,000 as in rl-zoo), train_freq 1 / gradient_steps 1
(UTD 1; SBX's policy_delay 1), automatic entropy tuning from alpha 1 with target -act_dim. Learning
rates: ours keeps its defaults for the base env (actor ``auto``: 1e-3 on Pendulum-v1, 3e-4 elsewhere;
critic 1e-3; alpha 1e-3); each peer has one rate for all three and gets rl-zoo's tuned value
(Pendulum-v1 1e-3, MuJoCo 3e-4; ``--sb3-lr``, SB3 and SBX alike). On Pendulum-v1 all thus train with
the same three rates. Threads: ours 1 torch thread per process; the peers torch's default
(``--sb3-threads 0``: one per core, SB3's fastest on a quiet 2-core machine, 85 vs 57 steps/s with 1;
on a loaded 2-core machine it was far slower, 2.3 updates/s in a smoke run at load 7-11). SBX's JAX
uses its own thread pool whatever ``--sb3-threads`` says.

Reports per seed and the median over seeds: wall time until the training return first reaches
``--threshold-train``, wall time (and env step) of the first evaluation reaching ``--threshold-eval``,
the training and evaluation return at a fixed wall time (``--fixed-wall``, default the shortest run),
env steps/s and updates/s, the device of every run, and per peer the ratios ours/peer per seed, their
median and the ratio of the medians. The machine load is printed before and after. ``--json FILE``
writes ``rows`` (per run name, per seed), ``ratios`` (per peer) and ``devices`` (per run name).

**Curves.** With ``--json`` or ``--curves-dir``, every run's curve is written as a ``curves.csv``
(``spreeze_like.curves``' format; system ``ours-parallel``, ``ours-serial``, ``sb3`` or ``sbx``) in a
folder per run, and all of them are drawn into one PNG for the env (``--png``, default
``curves_<env>.png`` in the curves folder; ``--no-png`` skips it). Every curve, ours included, is
built from this benchmark's own records and clock (``tools/bench_curves.py``), not from our
monitor's file, whose clock starts after our start-up.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym

from spreeze_like.errors import ConfigError, SpreezeError

EPISODE_DIR_VAR = "SPZ_BENCH_EPISODE_DIR"
BASE_ENV_VAR = "SPZ_BENCH_BASE_ENV"
RECORDED_ID = "SpzBench/Recorded-v0"
MODULE = "bench_vs_sb3"

# env -> (threshold_train, threshold_eval, learning_starts, sb3 learning rate, total steps, eval_every)
ENV_DEFAULTS: dict[str, tuple[float, float, int, float, int, int]] = {
    "Pendulum-v1": (-250.0, -200.0, 1000, 1e-3, 20_000, 1000),
    "HalfCheetah-v5": (1500.0, 1500.0, 10_000, 3e-4, 200_000, 10_000),
}
FALLBACK_DEFAULTS = (0.0, 0.0, 10_000, 3e-4, 100_000, 10_000)


# --- the recording env (imported by our spawned samplers / evaluator as well) ---------------------------
class EpisodeRecorder(gym.Wrapper):
    """Appends ``end_wall_time,return,length`` of each finished episode to its own CSV file.

    Created by whoever makes the env (our sampler/evaluator processes, or SB3 in the bench process); the
    file lives in the bench's scratch folder, which the bench removes at the end.
    """

    _count = 0

    def __init__(self, env: gym.Env, out_dir: str, role: str) -> None:
        super().__init__(env)
        EpisodeRecorder._count += 1
        self.path = Path(out_dir) / f"{role}.{os.getpid()}.{EpisodeRecorder._count}.{id(self)}.csv"
        self.ret, self.len = 0.0, 0

    def reset(self, **kwargs):  # type: ignore[override]
        self.ret, self.len = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):  # type: ignore[override]
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.ret += float(reward)
        self.len += 1
        if terminated or truncated:
            with open(self.path, "a") as f:  # one short append per episode: negligible next to 200+ steps
                f.write(f"{time.time():.6f},{self.ret:.6f},{self.len}\n")
        return obs, reward, terminated, truncated, info


def _made_by_evaluator() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith("spreeze_like/roles/evaluator.py"):
            return True
        frame = frame.f_back
    return False


def make_recorded(**kwargs) -> gym.Env:
    env = gym.make(os.environ[BASE_ENV_VAR], **kwargs)
    out_dir = os.environ.get(EPISODE_DIR_VAR)
    if not out_dir:
        return env
    return EpisodeRecorder(env, out_dir, "eval" if _made_by_evaluator() else "train")


if RECORDED_ID not in gym.registry:
    gym.register(RECORDED_ID, entry_point=make_recorded, disable_env_checker=True)


# --- reading the records -----------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """What one run (ours or SB3, one seed) produced; times are seconds since the run's clock started."""

    name: str
    seed: int
    wall_s: float = math.nan
    env_steps: int = 0
    updates: int = 0
    # (t, env_step, return) of every training episode, in end order
    train: list[tuple[float, int, float]] = field(default_factory=list)
    # (t, env_step or -1, mean return) of every evaluation
    evals: list[tuple[float, int, float]] = field(default_factory=list)
    note: str = ""
    device: str = ""  # where its networks ran, in words

    def moving(self, window: int) -> list[tuple[float, int, float]]:
        out, rets = [], []
        for t, step, ret in self.train:
            rets.append(ret)
            out.append((t, step, sum(rets[-window:]) / len(rets[-window:])))
        return out

    def first_train(self, threshold: float, window: int) -> tuple[float, int] | None:
        """(wall s, env step) at the first episode end where the mean of the last ``window`` episodes
        (a full window) reaches ``threshold``."""
        return next(((t, s) for i, (t, s, m) in enumerate(self.moving(window)) if i + 1 >= window and m >= threshold),
                    None)

    def first_eval(self, threshold: float) -> tuple[float, int] | None:
        return next(((t, s) for t, s, r in self.evals if r >= threshold), None)

    def train_at(self, t_fixed: float, window: int) -> float:
        seen = [m for t, _, m in self.moving(window) if t <= t_fixed]
        return seen[-1] if seen else math.nan

    def eval_at(self, t_fixed: float) -> float:
        seen = [r for t, _, r in self.evals if t <= t_fixed]
        return seen[-1] if seen else math.nan


def read_episodes(folder: Path, role: str) -> list[list[tuple[float, float, int]]]:
    """Per env instance (file), its episodes (end wall time, return, length)."""
    out = []
    for path in sorted(folder.glob(f"{role}.*.csv")):
        with open(path) as f:
            out.append([(float(t), float(r), int(n)) for t, r, n in csv.reader(f)])
    return out


def train_curve(folder: Path, t0: float,
                shift: Callable[[float], float] = lambda t: t) -> list[tuple[float, int, float]]:
    """All training episodes merged by end time; env step = summed lengths of the episodes finished so far
    (exact with one env, a slight undercount with several)."""
    episodes = sorted(e for per_env in read_episodes(folder, "train") for e in per_env)
    curve, steps = [], 0
    for t, ret, length in episodes:
        steps += length
        curve.append((shift(t) - t0, steps, ret))
    return curve


# --- ours ----------------------------------------------------------------------------------------------------
def ours_config(args: argparse.Namespace, seed: int, serial: bool):  # -> TrainConfig
    from spreeze_like.config import TrainConfig, auto_actor_lr

    devices = {"actor_device": args.device, "critic_device": args.device} if args.device else {}
    return dataclasses.replace(
        TrainConfig(), env=f"{MODULE}:{RECORDED_ID}", seed=seed, total_steps=args.total_steps, serial=serial,
        learning_starts=args.learning_starts, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        logdir=args.logdir, log_interval=0, checkpoint_every=0,
        # our default for the base env: ``auto`` would see the recording wrapper's id instead; --set wins
        **{"actor_lr": auto_actor_lr(args.env), **devices, **dict(args.set)},
    )


def ours_device(config) -> str:
    """Our learners' devices as ``resolve()`` fills them in (a ConfigError for a device this machine lacks)."""
    resolved = config.resolve()
    step = getattr(resolved, "learner_step", None)
    return (f"actor {resolved.actor_device}, critic {resolved.critic_device}, {resolved.precision}"
            + (f", learner step {step}" if step else ""))


def run_ours(args: argparse.Namespace, seed: int, serial: bool, scratch: Path) -> RunRecord:
    from spreeze_like.training import train

    folder = scratch / f"ours-{'serial' if serial else 'parallel'}-{seed}"
    folder.mkdir(parents=True)
    config = ours_config(args, seed, serial)
    record = RunRecord(f"ours-{'serial' if serial else 'parallel'}", seed, device=ours_device(config))
    os.environ[EPISODE_DIR_VAR] = str(folder)
    t0 = time.time()
    stop = threading.Event()

    def watch() -> None:  # Ctrl-C to ourselves at the budget or once reached: both modes stop cleanly on SIGINT
        while not stop.wait(0.5):
            over = args.wall_budget and time.time() - t0 >= args.wall_budget
            if over or (args.stop_when_reached and reached(folder, t0, args)):
                record.note = "stopped at the wall budget" if over else "stopped once both thresholds were reached"
                os.kill(os.getpid(), signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    result = None
    try:
        watcher.start()
        result = train(config, print_fn=lambda line: None)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        os.environ.pop(EPISODE_DIR_VAR, None)
    record.wall_s = time.time() - t0
    record.train = train_curve(folder, t0)
    if result is not None:
        record.env_steps, record.updates = result.env_steps, result.critic_updates
        known = [(int(s), float(r)) for s, r, *_ in result.evals]
    else:  # interrupted: the run folder's status.json / evals file hold the counters and the eval steps
        record.env_steps, record.updates, known = interrupted_counters(Path(args.logdir), record)
    # evaluation k = the k-th episode of each evaluator env; its result is known when the last one ends
    per_env = read_episodes(folder, "eval")
    rounds = min((len(e) for e in per_env), default=0)
    for k in range(rounds):
        group = [e[k] for e in per_env]
        mean = sum(r for _, r, _ in group) / len(group)
        step = next((st for st, r in known if abs(r - mean) < 1e-3 * max(1.0, abs(mean))), -1)
        record.evals.append((max(t for t, _, _ in group) - t0, step, mean))
    return record


def reached(folder: Path, t0: float, args: argparse.Namespace) -> bool:
    """Both thresholds reached, judged from the episode files written so far."""
    probe = RunRecord("probe", 0, train=train_curve(folder, t0))
    per_env = read_episodes(folder, "eval")
    rounds = min((len(e) for e in per_env), default=0)
    evals = [sum(e[k][1] for e in per_env) / len(per_env) for k in range(rounds)]
    return probe.first_train(args.threshold_train, args.window) is not None and any(
        r >= args.threshold_eval for r in evals)


def interrupted_counters(logdir: Path, record: RunRecord) -> tuple[int, int, list[tuple[int, float]]]:
    """(env steps, critic updates, [(eval env step, mean return)]) of the newest run folder under logdir."""
    from spreeze_like.procs.evaluator_proc import read_results

    runs = sorted(logdir.glob("*/"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return (record.train[-1][1] if record.train else 0), 0, []
    run_dir = runs[-1]
    known = [(int(r["env_step"]), float(r["mean_return"])) for r in read_results(run_dir)]
    try:
        status = json.loads((run_dir / "status.json").read_text())
        counters = status.get("counters", {})
        return int(status["env_steps"]), int(counters.get("critic-learner", {}).get("total_updates", 0)), known
    except (OSError, ValueError, KeyError):
        return (record.train[-1][1] if record.train else 0), 0, known


# --- the peers: Stable-Baselines3 SAC and SBX SAC, each run in a child process --------------------------------
PEERS = ("sb3", "sbx")
PEER_LABELS = {"sb3": "SB3", "sbx": "SBX"}
PEER_PACKAGES = {"sb3": ("stable_baselines3", "stable-baselines3"), "sbx": ("sbx", "sbx-rl")}
CHILD_CODE = "import sys, bench_vs_sb3; sys.exit(bench_vs_sb3.peer_child(sys.argv[1]))"


def peer_env(args: argparse.Namespace, peer: str, episode_dir: str | None) -> dict[str, str]:
    """The environment of a peer's child process."""
    env = dict(os.environ)
    env.pop(EPISODE_DIR_VAR, None)
    if episode_dir:
        env[EPISODE_DIR_VAR] = episode_dir
    if peer == "sbx":
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


def run_peer_child(args: argparse.Namespace, peer: str, mode: str, seed: int, scratch: Path) -> dict:
    """Runs ``peer_child`` in a fresh interpreter and returns what it wrote.

    A child per run: JAX and torch never share a process (nor their GPU allocators), SB3's torch
    threads do not leak into the next run, and each run starts from the same clean state.
    """
    out = scratch / f"{peer}-{mode}-{seed}.json"
    folder = scratch / f"{peer}-{seed}"
    if mode == "train":
        folder.mkdir(parents=True)
    spec = {"args": vars(args), "peer": peer, "mode": mode, "seed": seed, "out": str(out), "folder": str(folder)}
    proc = subprocess.run([sys.executable, "-c", CHILD_CODE, json.dumps(spec)], check=False,
                          env=peer_env(args, peer, str(folder) if mode == "train" else None))
    result = json.loads(out.read_text()) if out.exists() else {}
    if "error" in result:
        raise ConfigError(result["error"])
    if proc.returncode != 0 or not result:
        raise RuntimeError(f"the {PEER_LABELS[peer]} {mode} child (seed {seed}) exited with status {proc.returncode}"
                           " and no result; its output is above")
    return result


def peer_child(spec_json: str) -> int:
    """Entry point of a peer's child process: ``probe`` checks the peer and its device, ``train`` trains it."""
    spec = json.loads(spec_json)
    args = argparse.Namespace(**spec["args"])
    try:
        if spec["mode"] == "probe":
            result = {"device": peer_device(spec["peer"], args.peer_device)}
        else:  # the device is read after the run, so that JAX's backend start-up stays inside SBX's clock
            record = train_peer(args, spec["peer"], spec["seed"], Path(spec["folder"]))
            record.device = peer_device(spec["peer"], args.peer_device)
            result = {"record": dataclasses.asdict(record)}
    except ConfigError as exc:
        result = {"error": str(exc)}
    Path(spec["out"]).write_text(json.dumps(result))
    return 2 if "error" in result else 0


def peer_device(peer: str, requested: str) -> str:
    """Where the peer's networks will run, in words; a ConfigError where the asked-for device is missing."""
    module, package = PEER_PACKAGES[peer]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"{package} is not installed: pip install -e '.[bench]', or leave {peer} out "
                          f"(--skip-{peer} / --peers)")
    if peer == "sb3":
        import torch

        # SB3 itself falls back to the CPU, silently, when asked for an absent GPU
        if requested == "cuda" and not torch.cuda.is_available():
            raise ConfigError("--peer-device cuda: torch sees no CUDA device here; use --peer-device cpu or auto")
        from stable_baselines3.common.utils import get_device

        device = get_device(requested)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return f"torch {device} ({name})"
    import jax  # the parent set JAX_PLATFORMS=cpu for --peer-device cpu

    backend, first = jax.default_backend(), jax.devices()[0]
    if requested == "cuda" and backend != "gpu":
        raise ConfigError(f"--peer-device cuda: JAX runs on {backend} here (no CUDA plugin, or no GPU it can "
                          "use: pip install 'jax[cuda12]'); use --peer-device cpu or auto")
    return f"jax {backend} ({first.device_kind})"


def train_peer(args: argparse.Namespace, peer: str, seed: int, folder: Path) -> RunRecord:
    """One peer run in this (child) process; SB3 and SBX share the API, the definitions and the callback."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    if peer == "sb3":
        from stable_baselines3 import SAC

        device = args.peer_device
    else:
        from sbx import SAC

        device = "cpu"  # SBX's torch side (its replay buffer) is always on the CPU; JAX picks the net's device
    if args.sb3_threads:
        torch.set_num_threads(args.sb3_threads)
    record = RunRecord(peer, seed)
    excluded: list[tuple[float, float]] = []  # wall intervals spent in evaluations (not counted)

    def clock(t: float) -> float:
        """Wall time t with the evaluation time spent before t taken out."""
        return t - sum(min(e, t) - s for s, e in excluded if s < t)

    eval_env = gym.make(args.env)

    class Bench(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = args.eval_every

        def _on_step(self) -> bool:
            if args.eval_every and self.num_timesteps >= self.next_eval:
                self.next_eval += args.eval_every
                start = time.time()
                mean = evaluate(self.model, eval_env, args.eval_episodes, seed)
                end = time.time()
                excluded.append((start, end))
                record.evals.append((clock(end) - t0, self.num_timesteps, mean))
                if args.stop_when_reached and reached_peer():
                    record.note = "stopped once both thresholds were reached"
                    return False
            if args.wall_budget and clock(time.time()) - t0 >= args.wall_budget:
                record.note = "stopped at the wall budget"
                return False
            return True

    def reached_peer() -> bool:
        probe = RunRecord("probe", 0, train=train_curve(folder, t0, clock))
        return probe.first_train(args.threshold_train, args.window) is not None and any(
            r >= args.threshold_eval for _, _, r in record.evals)

    t0 = time.time()
    model = SAC(
        "MlpPolicy", gym.make(f"{RECORDED_ID}"), learning_rate=args.sb3_lr, buffer_size=1_000_000,
        learning_starts=args.learning_starts, batch_size=256, tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1,
        ent_coef="auto_1.0", target_entropy="auto", policy_kwargs={"net_arch": [256, 256]}, seed=seed, device=device,
    )
    model.learn(total_timesteps=args.total_steps, callback=Bench())
    end = time.time()
    record.wall_s = clock(end) - t0
    record.env_steps, record.updates = int(model.num_timesteps), int(model._n_updates)
    record.train = train_curve(folder, t0, clock)
    eval_env.close()
    return record


def run_peer(args: argparse.Namespace, peer: str, seed: int, scratch: Path) -> RunRecord:
    data = run_peer_child(args, peer, "train", seed, scratch)["record"]
    data["train"] = [tuple(x) for x in data["train"]]
    data["evals"] = [tuple(x) for x in data["evals"]]
    return RunRecord(**data)


def evaluate(model, env: gym.Env, episodes: int, seed: int) -> float:
    """Mean return of deterministic episodes from fixed start seeds (the same ones every time)."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 * seed + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return sum(returns) / len(returns)


# --- report --------------------------------------------------------------------------------------------------
def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def median(values: list[float | None]) -> float | None:
    """Median over seeds, or None if any seed did not reach (a missing value is not 'fast')."""
    if not values or any(v is None or math.isnan(v) for v in values):
        return None
    return statistics.median(values)


def report(records: list[RunRecord], args: argparse.Namespace) -> dict:
    finished = [r for r in records if r.train or r.evals]
    t_fixed = args.fixed_wall or (min(r.wall_s for r in finished) if finished else math.nan)
    rows: dict[str, dict[int, dict]] = {}
    for r in records:
        hit_train = r.first_train(args.threshold_train, args.window)
        hit_eval = r.first_eval(args.threshold_eval)
        rows.setdefault(r.name, {})[r.seed] = {
            "wall_s": r.wall_s, "env_steps": r.env_steps, "updates": r.updates,
            "steps_per_s": r.env_steps / r.wall_s if r.wall_s > 0 else math.nan,
            "updates_per_s": r.updates / r.wall_s if r.wall_s > 0 else math.nan,
            "t_train": hit_train[0] if hit_train else None, "step_train": hit_train[1] if hit_train else None,
            "t_eval": hit_eval[0] if hit_eval else None, "step_eval": hit_eval[1] if hit_eval else None,
            "train_at": r.train_at(t_fixed, args.window), "eval_at": r.eval_at(t_fixed),
            "final_eval": r.evals[-1][2] if r.evals else math.nan, "episodes": len(r.train), "note": r.note,
            "evals": [(round(t, 1), s, round(m, 1)) for t, s, m in r.evals], "device": r.device,
        }
    print(f"\n== {args.env}: training return = mean of the last {args.window} training episodes; thresholds "
          f"train {args.threshold_train:g}, eval {args.threshold_eval:g}; fixed wall time {fmt(t_fixed, '.0f')} s")
    head = (f"{'run':<15} {'seed':>4} {'wall s':>7} {'steps':>7} {'steps/s':>8} {'upd/s':>7} "
            f"{'train-thr s':>11} {'@step':>6} {'eval-thr s':>10} {'@step':>6} {'train@T':>8} {'eval@T':>7} "
            f"{'final ev':>8}")
    print(head)
    for name, per_seed in rows.items():
        for seed, v in per_seed.items():
            print(f"{name:<15} {seed:>4} {v['wall_s']:>7.1f} {v['env_steps']:>7} {v['steps_per_s']:>8.1f} "
                  f"{v['updates_per_s']:>7.1f} {fmt(v['t_train']):>11} {fmt(v['step_train'], 'd'):>6} "
                  f"{fmt(v['t_eval']):>10} {fmt(v['step_eval'], 'd'):>6} {fmt(v['train_at']):>8} "
                  f"{fmt(v['eval_at']):>7} {fmt(v['final_eval']):>8} {v['note']}")
        med = {k: median([v[k] for v in per_seed.values()]) for k in
               ("wall_s", "steps_per_s", "updates_per_s", "t_train", "t_eval", "train_at", "eval_at", "step_eval")}
        print(f"{name + ' median':<20} {fmt(med['wall_s']):>7} {'':>7} {fmt(med['steps_per_s']):>8} "
              f"{fmt(med['updates_per_s']):>7} {fmt(med['t_train']):>11} {'':>6} {fmt(med['t_eval']):>10} "
              f"{fmt(med['step_eval'], '.0f'):>6} {fmt(med['train_at']):>8} {fmt(med['eval_at']):>7}")
    for name, per_seed in rows.items():
        for seed, v in per_seed.items():
            print(f"  {name} seed {seed} evals (wall s, env step, mean return): {v['evals']}")
    devices = {name: sorted({v["device"] for v in per_seed.values()}) for name, per_seed in rows.items()}
    print("\ndevices: " + "; ".join(f"{name} {' / '.join(d)}" for name, d in devices.items()))
    ratios: dict[str, dict] = {}
    for peer in (p for p in PEERS if p in rows):
        ratios[peer] = {}
        print(f"\nratios ours / {PEER_LABELS[peer]} (time: lower is better; rates: higher is better)")
        for name in (n for n in rows if n not in PEERS):
            for key, label in (("t_train", "wall to train threshold"), ("t_eval", "wall to eval threshold"),
                               ("steps_per_s", "env steps/s"), ("updates_per_s", "updates/s")):
                per = []
                for seed, v in rows[name].items():
                    theirs = rows[peer].get(seed, {}).get(key)
                    per.append(v[key] / theirs if v[key] is not None and theirs not in (None, 0) else None)
                ours_med, peer_med = (median([v[key] for v in rows[n].values()]) for n in (name, peer))
                ratio_of_medians = ours_med / peer_med if ours_med is not None and peer_med else None
                median_ratio = median(per)
                ratios[peer][f"{name}/{key}"] = {"per_seed": per, "of_medians": ratio_of_medians,
                                                 "median": median_ratio}
                print(f"  {name:<15} {label:<24} per seed {', '.join(fmt(p, '.2f') for p in per)}; "
                      f"median {fmt(median_ratio, '.2f')}; of the medians {fmt(ratio_of_medians, '.2f')}")
    return {"t_fixed": t_fixed, "rows": rows, "ratios": ratios, "devices": devices}


def load_line() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1", help="gymnasium env id (Box actions)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--total-steps", type=int, default=None, help="env steps per run (default per env)")
    parser.add_argument("--threshold-train", type=float, default=None, help="training-return threshold")
    parser.add_argument("--threshold-eval", type=float, default=None, help="evaluation-return threshold")
    parser.add_argument("--window", type=int, default=5, help="training episodes in the moving mean")
    parser.add_argument("--learning-starts", type=int, default=None, help="random warm-up steps, all (default per env)")
    parser.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations, both")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--wall-budget", type=float, default=0.0, help="stop each run after this many s (0: none)")
    parser.add_argument("--stop-when-reached", action="store_true", help="stop each run once the training and "
                        "the evaluation threshold are both reached (ours: checked every 0.5 s; peers: at each "
                        "evaluation)")
    parser.add_argument("--fixed-wall", type=float, default=0.0, help="report returns at this wall time "
                        "(0: the shortest run's wall time)")
    parser.add_argument("--serial", action="store_true", help="measure our serial mode")
    parser.add_argument("--parallel", action="store_true", help="measure our parallel mode (the default if "
                        "--serial is not given)")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS),
                        help="the peers to run after ours, each seed (default: sb3 sbx)")
    parser.add_argument("--skip-sb3", action="store_true", help="leave SB3 out of --peers")
    parser.add_argument("--skip-sbx", action="store_true", help="leave SBX out of --peers")
    parser.add_argument("--skip-ours", action="store_true", help="run the peers only")
    parser.add_argument("--peer-device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="the peers' device: SB3's device=; for SBX the JAX platform (JAX_PLATFORMS; auto: "
                        "JAX's choice, the GPU when its CUDA plugin is installed)")
    parser.add_argument("--device", default=None, help="our two learners' device (auto, cpu, cuda, cuda:N; "
                        "default: our auto); --set actor_device=... / critic_device=... set them one by one")
    parser.add_argument("--sb3-lr", type=float, default=None, help="the peers' learning rate, one for actor, critic "
                        "and alpha, SB3 and SBX alike (default rl-zoo's for the env)")
    parser.add_argument("--sb3-threads", type=int, default=0, help="torch threads for the peers (default 0: "
                        "torch's default, one per core, SB3's fastest on a quiet 2-core machine: 85 vs 57 steps/s "
                        "with 1); SBX's JAX keeps its own thread pool")
    parser.add_argument("--logdir", default=None, help="our run folders (default: a scratch folder, removed)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--curves-dir", default=None, help="write each run's curves.csv in a folder per run "
                        "here (default with --json: <json name>_curves/ beside it; without either: none)")
    parser.add_argument("--png", default=None, help="the learning-curves PNG of this env (default "
                        "<curves dir>/curves_<env>.png)")
    parser.add_argument("--no-png", action="store_true", help="write the curves.csv files but no PNG")
    parser.add_argument("--set", nargs="*", default=[],
                        type=lambda s: (s.split("=", 1)[0], json.loads(s.split("=", 1)[1])),
                        help="extra TrainConfig fields for ours, key=json")
    args = parser.parse_args(argv)
    d_train, d_eval, d_starts, d_lr, d_total, d_every = ENV_DEFAULTS.get(args.env, FALLBACK_DEFAULTS)
    args.threshold_train = d_train if args.threshold_train is None else args.threshold_train
    args.threshold_eval = d_eval if args.threshold_eval is None else args.threshold_eval
    args.learning_starts = d_starts if args.learning_starts is None else args.learning_starts
    args.sb3_lr = d_lr if args.sb3_lr is None else args.sb3_lr
    args.total_steps = d_total if args.total_steps is None else args.total_steps
    args.eval_every = d_every if args.eval_every is None else args.eval_every
    modes = ([False] if args.parallel or not args.serial else []) + ([True] if args.serial else [])
    skipped = {p for p in PEERS if getattr(args, f"skip_{p}")}
    args.peers = [p for p in dict.fromkeys(args.peers) if p not in skipped]
    if args.skip_ours and not args.peers:
        raise ConfigError("nothing to run: --skip-ours and no peer left")
    if args.curves_dir is None and args.json:
        args.curves_dir = str(Path(args.json).with_suffix("")) + "_curves"
    if args.png and not args.curves_dir:
        raise ConfigError("--png needs the curves: give --curves-dir or --json")
    if args.curves_dir and not args.no_png and importlib.util.find_spec("matplotlib") is None:
        raise ConfigError('the curves PNG needs matplotlib: pip install -e ".[plot]", or pass --no-png')

    os.environ[BASE_ENV_VAR] = args.env
    tools_dir = str(Path(__file__).resolve().parent)
    if tools_dir not in sys.path:  # our spawned samplers import this module by name
        sys.path.insert(0, tools_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tools_dir, os.environ.get("PYTHONPATH")]))
    scratch = Path(tempfile.mkdtemp(prefix="spz_bench_vs_sb3_"))
    args.logdir = args.logdir or str(scratch / "runs")
    import torch

    records: list[RunRecord] = []
    try:
        # wrong devices and missing peers fail here, before any run, with one line
        ours_devices = {} if args.skip_ours else {serial: ours_device(ours_config(args, args.seeds[0], serial))
                                                  for serial in modes}
        peer_devices = {peer: run_peer_child(args, peer, "probe", 0, scratch)["device"] for peer in args.peers}
        print(f"load average before: {load_line()}   cores {os.cpu_count()}   torch default threads "
              f"{torch.get_num_threads()}; ours 1 per process; peers {args.sb3_threads or torch.get_num_threads()}")
        print(f"{args.env}: {args.total_steps} env steps, learning_starts {args.learning_starts}, eval every "
              f"{args.eval_every} x {args.eval_episodes} episodes, peers' lr {args.sb3_lr:g}, seeds {args.seeds}")
        for serial, device in ours_devices.items():
            print(f"  ours-{'serial' if serial else 'parallel'} on {device}")
        for peer, device in peer_devices.items():
            print(f"  {peer} on {device}", flush=True)
        for seed in args.seeds:
            if not args.skip_ours:
                for serial in modes:
                    records.append(run_ours(args, seed, serial, scratch))
                    print(f"  done {records[-1].name} seed {seed}: {records[-1].wall_s:.1f} s, load {load_line()}",
                          flush=True)
            for peer in args.peers:
                records.append(run_peer(args, peer, seed, scratch))
                print(f"  done {peer} seed {seed}: {records[-1].wall_s:.1f} s, load {load_line()}", flush=True)
            if args.json:  # the raw records so far: a run cut short still leaves its finished seeds
                Path(args.json).write_text(json.dumps({"partial": [dataclasses.asdict(r) for r in records]}))
        figures = report(records, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average after: {load_line()}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    if args.curves_dir:
        write_curves_and_png(records, args)
    return figures


def write_curves_and_png(records: list[RunRecord], args: argparse.Namespace) -> None:
    from bench_curves import default_png, plot_bench, write_bench_curves

    written = write_bench_curves(records, args.curves_dir, args.env, args.eval_episodes, args.window)
    print(f"curves: {len(written.run_dirs)} runs' curves.csv under {args.curves_dir}"
          + (f" ({written.estimated_eval_steps} evaluations' env steps estimated from the training curve)"
             if written.estimated_eval_steps else ""))
    if not args.no_png:
        png = plot_bench(written.run_dirs, args.png or default_png(args.curves_dir, args.env), args.env,
                         args.window)
        print(f"curves PNG: {png}")


def cli() -> None:
    try:
        main()
    except SpreezeError as exc:  # bad input (a device this machine lacks, a peer not installed): one line
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    cli()
