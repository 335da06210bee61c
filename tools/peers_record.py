"""The benchmark's one definition of an episode, for ours and every peer of ``tools/bench_vs_sb3.py``.

Every side trains on the env id ``peers_record:SpzBench/Recorded-v0``: the base env (named by
``SPZ_BENCH_BASE_ENV``, made with the ``gymnasium.make`` keyword arguments of
``SPZ_BENCH_BASE_ENV_KWARGS``, a JSON object: the benchmark's ``--env-kwargs``) inside
:class:`EpisodeRecorder`, which appends every finished episode (end wall time, return, length) to a CSV file
of its own in the folder named by ``SPZ_BENCH_EPISODE_DIR``.
Our samplers and evaluator make it through the ``module:EnvId`` entry point (this module is imported
by name in our spawned processes: the benchmark puts ``tools/`` on ``PYTHONPATH``), the peers through
``gym.make``, so the same code records all. Our evaluator's envs are told apart by the module that
makes them (``spreeze_like/roles/evaluator.py`` on the stack) and recorded as evaluation episodes.

Who writes and removes: each env instance writes its own ``<role>.<pid>.<n>.<id>.csv``; the folder
is a run's folder inside the benchmark's scratch folder, which the benchmark removes at its end
(also when a run raises). A process killed mid-episode leaves at most that episode unwritten.

:class:`RunRecord` is what one run (ours or a peer, one seed) produced, and :func:`train_curve`
reads a run's training episodes back from its folder.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym

from spreeze_like.envs import filter_known_mujoco_warnings

EPISODE_DIR_VAR = "SPZ_BENCH_EPISODE_DIR"
BASE_ENV_VAR = "SPZ_BENCH_BASE_ENV"
# Why the base env's kwargs travel here and not through gym.make(RECORDED_ID, **kwargs): gym.make keeps
# max_episode_steps for its own TimeLimit around the recorder, which would then never see an episode end.
BASE_ENV_KWARGS_VAR = "SPZ_BENCH_BASE_ENV_KWARGS"
RECORDED_ID = "SpzBench/Recorded-v0"
MODULE = "peers_record"  # the module part of our ``module:EnvId``: this file, importable from tools/


class EpisodeRecorder(gym.Wrapper):
    """Appends ``end_wall_time,return,length`` of each finished episode to its own CSV file.

    Created by whoever makes the env (our sampler/evaluator processes, or a peer in its child process);
    the file lives in the bench's scratch folder, which the bench removes at the end.
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
    filter_known_mujoco_warnings(os.environ[BASE_ENV_VAR])  # as spreeze_like's make_env does for the base id
    base_kwargs = json.loads(os.environ.get(BASE_ENV_KWARGS_VAR) or "{}")
    env = gym.make(os.environ[BASE_ENV_VAR], **{**base_kwargs, **kwargs})
    out_dir = os.environ.get(EPISODE_DIR_VAR)
    if not out_dir:
        return env
    return EpisodeRecorder(env, out_dir, "eval" if _made_by_evaluator() else "train")


if RECORDED_ID not in gym.registry:
    gym.register(RECORDED_ID, entry_point=make_recorded, disable_env_checker=True)


@dataclass
class RunRecord:
    """What one run (ours or a peer, one seed) produced; times are seconds since the run's clock started."""

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
    algo: str = "sac"  # the algorithm it trained (the curves' ``algo``)
    budget_s: float = 0.0  # the wall budget it ran under (0: none); a run stopped there did not reach by then

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

    @classmethod
    def from_dict(cls, data: dict) -> RunRecord:
        """A record back from its JSON form (``dataclasses.asdict``; tuples came back as lists)."""
        data = dict(data)
        data["train"] = [tuple(x) for x in data["train"]]
        data["evals"] = [tuple(x) for x in data["evals"]]
        return cls(**data)


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


def both_reached(train: list[tuple[float, int, float]], eval_means: list[float], threshold_train: float,
                 threshold_eval: float, window: int) -> bool:
    """The training threshold (a full window) and the evaluation threshold are both reached."""
    probe = RunRecord("probe", 0, train=train)
    return probe.first_train(threshold_train, window) is not None and any(r >= threshold_eval for r in eval_means)
