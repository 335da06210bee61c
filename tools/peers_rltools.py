"""RLtools SAC as a peer of ``tools/bench_vs_sb3.py`` (``--peers rltools``): the CPU's speed reference.

RLtools (package ``rltools``, Eschmann et al., arXiv 2306.03530) is a header-only C++ library; its Python
interface renders the settings into a header and compiles the whole SAC loop (networks, replay, updates) with
``g++ -O3 -march=native`` into a module, which then calls the Python env for each step. It is the peer the
research notes name as the CPU ceiling for small problems. Run here through that interface on the benchmark's
recorded env, so that its episodes are recorded exactly as ours and the SB3-API peers' are.

**Settings.** What every peer shares (``peers_runners.shared_kwargs``) where RLtools has it: the peers' learning
rate (``--sb3-lr``, its one Adam rate), ``--peer-gamma``, ``--peer-tau`` (its polyak 1 - tau for actor and critic),
``learning_starts`` warm-up steps, entropy tuned from alpha 1 to -act_dim, one update per env step, a replay that
holds the whole run. Its own defaults where they set the cost: MLPs of 64-64 and batch 100 (``--rltools-units``,
``--rltools-batch`` change them). It links MKL where the ``mkl`` and ``mkl-include`` packages are installed (the
``[bench]`` extra brings them; RLtools runs it single-threaded): then 3,400-4,100 env steps/s on Pendulum-v1 here
(2026-11-29). Without a BLAS its matrix products are plain loops: 370-430 env steps/s, and 6.7 at SB3's 256-256
with batch 256. The device line says which (``MKL``, ``OpenBLAS`` or ``no BLAS``).

**Clock.** The compilation (about 12 s on the 2-core machine; cached by RLtools in its temp folder) happens
before the clock starts, as the SB3-API peers' imports do; the clock starts before ``State(seed)``. Evaluations
run our deterministic episodes with ``State.action`` (its policy's mean, in [-1, 1], mapped to the env's bounds)
and are taken out of the clock as for every peer.

**Seeds.** ``State(seed)`` seeds RLtools' own generator (initial weights, warm-up actions, exploration); the
training env's first reset is given ``env_seed(seed, 0)`` and later resets continue its generator, as SB3 and our
samplers do, so the training episodes start from the same states on every side. RLtools' loop resets its env
without a seed and ignores ``truncated``: it ends an episode after the env's ``max_episode_steps``, compiled in.

**``--rltools-native``** (Pendulum-v1 only): RLtools trains on its own C++ Pendulum (the dynamics of gymnasium's
Pendulum-v1), so no Python runs in its loop: its published setting and the CPU's ceiling. Its evaluations are
still ours on gymnasium's Pendulum-v1 (the same observation and actions); it has no training curve (no recorded
episodes: the training threshold is not reported) and its initial states are its own (not paired), and
``--stop-when-reached`` cannot stop it (that needs the training curve): it runs its ``--total-steps``.

**Updates** are counted as one per env step after the warm-up (RLtools trains critic and actor every step then);
RLtools does not report them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
from peers_record import RECORDED_ID, RunRecord
from peers_runners import peer_gamma

from spreeze_like.errors import ConfigError
from spreeze_like.seeding import env_seed

if TYPE_CHECKING:
    from peers_runners import Progress

DEFAULT_UNITS = 64  # RLtools' ACTOR_HIDDEN_DIM / CRITIC_HIDDEN_DIM
DEFAULT_BATCH = 100  # RLtools' ACTOR_BATCH_SIZE / CRITIC_BATCH_SIZE


@contextlib.contextmanager
def quiet_fds() -> Iterator[None]:
    """Descriptors 1 and 2 to /dev/null: RLtools' BLAS probe runs a compiler whose 'cannot find -lblas' is expected
    where there is no BLAS (the device probe only; the training's compile keeps its output)."""
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def rltools_device(requested: str) -> str:
    """Where RLtools trains, in words; ConfigError where it cannot run here."""
    if requested == "cuda":
        raise ConfigError("--peer-device cuda: RLtools' Python interface trains on the CPU; use --peer-device cpu or "
                          "auto, or leave rltools out of --peers")
    if not any(shutil.which(c) for c in ("g++", "clang++")):
        raise ConfigError("RLtools compiles its training loop: install g++ or clang++, or leave rltools out of --peers")
    from rltools.src.accelerate import acceleration_flags

    with quiet_fds():
        flags = " ".join(acceleration_flags("spz_probe"))
    blas = "MKL" if "MKL" in flags else "OpenBLAS" if "OPENBLAS" in flags else "no BLAS"
    return f"C++ cpu, one thread ({blas})"


class FirstResetSeeded(gym.Wrapper):
    """The env's first reset gets ``seed`` (RLtools resets without one); its spec says ``max_episode_steps``, which
    RLtools compiles in as its episode limit (the recorded env's own spec has none)."""

    def __init__(self, env: gym.Env, seed: int, max_episode_steps: int | None) -> None:
        super().__init__(env)
        self._seed: int | None = seed
        self._limit = max_episode_steps

    @property
    def spec(self):  # type: ignore[override]
        base = self.env.spec
        return dataclasses.replace(base, max_episode_steps=self._limit) if base is not None else None

    def reset(self, **kwargs):  # type: ignore[override]
        if self._seed is not None:
            kwargs.setdefault("seed", self._seed)
            self._seed = None
        return self.env.reset(**kwargs)


def settings(args: argparse.Namespace) -> dict:
    """RLtools' compile-time settings for this benchmark (see the module docstring)."""
    units = args.rltools_units or DEFAULT_UNITS
    batch = args.rltools_batch or DEFAULT_BATCH
    return {"STEP_LIMIT": args.total_steps, "N_WARMUP_STEPS": args.learning_starts, "GAMMA": peer_gamma(args, "sac"),
            "ACTOR_BATCH_SIZE": batch, "CRITIC_BATCH_SIZE": batch, "ACTOR_HIDDEN_DIM": units,
            "CRITIC_HIDDEN_DIM": units, "ACTOR_POLYAK": 1.0 - args.peer_tau, "CRITIC_POLYAK": 1.0 - args.peer_tau,
            "ALPHA": 1.0, "OPTIMIZER_ALPHA": args.sb3_lr}


# ``--rltools-native``: RLtools' own Pendulum (g 10, max torque 2, 200 steps, observation cos, sin, theta dot: the
# dynamics of gymnasium's Pendulum-v1) as the C++ environment its interface compiles in instead of a Python one
NATIVE_PENDULUM = """#include <rl_tools/rl/environments/pendulum/operations_cpu.h>
template <typename T, typename TI>
using ENVIRONMENT_FACTORY = rl_tools::rl::environments::Pendulum<rl_tools::rl::environments::pendulum::Specification<T, TI>>;
"""


def native_pendulum(folder: Path) -> dict:
    """The ``env_factory`` RLtools takes for a C++ environment: a folder with its ``environment.h``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "environment.h").write_text(NATIVE_PENDULUM)
    return {"path": str(folder), "action_dim": 1, "observation_dim": 3}


def train_rltools(args: argparse.Namespace, seed: int, progress: Progress) -> RunRecord:
    """One RLtools SAC run in this (child) process; ``progress`` is the run's ``peers_runners.Progress``."""
    from rltools import SAC

    base = gym.make(args.env, **args.env_kwargs)
    if not isinstance(base.action_space, gym.spaces.Box) or not isinstance(base.observation_space, gym.spaces.Box):
        raise ConfigError(f"rltools: {args.env} needs Box observations and actions (RLtools' Python interface)")
    low, high, limit = base.action_space.low, base.action_space.high, base.spec.max_episode_steps
    base.close()

    def make() -> gym.Env:
        seeded = FirstResetSeeded(gym.make(RECORDED_ID), env_seed(seed, 0), limit)
        return gym.wrappers.RescaleAction(seeded, -1.0, 1.0)  # RLtools acts in [-1, 1] and insists on it

    native = getattr(args, "rltools_native", False)
    factory = native_pendulum(progress.folder / "native_env") if native else make
    chosen = settings(args)
    # one compiled module per settings (and env sizes, which RLtools adds): seeds after the first reuse it
    name = "spz_" + hashlib.sha1(json.dumps([chosen, args.env, native], sort_keys=True).encode()).hexdigest()[:12]
    # its output stays on the console (a BLAS probe's expected 'cannot find -lblas' among it): a failed compile
    # shows the compiler's own lines
    sac = SAC(factory, enable_evaluation=False, interface_name=name, **chosen)
    shape = f"RLtools {chosen['ACTOR_HIDDEN_DIM']}x{chosen['ACTOR_HIDDEN_DIM']}, batch {chosen['ACTOR_BATCH_SIZE']}" \
            + (", its C++ Pendulum (no training curve; its own initial states)" if native else "")

    def act(obs: np.ndarray) -> np.ndarray:
        unit = np.asarray(sac_state.action(np.asarray(obs, dtype=np.float32)), dtype=np.float64)
        return low + (unit + 1.0) * 0.5 * (high - low)

    progress.start()
    sac_state = sac.State(seed)
    steps = 0
    while steps < args.total_steps:
        finished = sac_state.step()
        steps += 1
        if not progress.after_step(steps, act) or finished:
            break
    record = progress.finish(steps, max(0, steps - args.learning_starts))
    record.note = "; ".join(filter(None, [record.note, shape]))
    return record
