"""Evaluator role (``evaluator``): deterministic episodes with the newest actor weights.

An :class:`Evaluator` owns ``episodes`` envs of its own (never a sampler's), loads the newest actor
vector from its weights source, and runs one episode per env with the deterministic action
(``tanh(mean)`` for SAC, the plain policy for TD3/DDPG), all envs batched through one policy
forward per step. Env ``i`` starts every evaluation from the same seed, ``seeding.eval_seed(seed,
i)``, so successive evaluations differ only by the policy and the curve is not noise
from new start states. Results go to the stats block (``eval_return`` etc., picked up by the
monitor) and are returned; an env whose last step of an episode says ``is_success`` (or ``success``) in its
``info`` (goal envs; :func:`~spreeze_like.envs.episode_success`) also gets a success rate. Owns no shared
resource. It acts with a
:class:`~spreeze_like.algos.numpy_policy.NumpyPolicy` (no torch in the evaluator's process); before
any actor vector is published (version 0) that policy's action is 0, the middle of the action box. An
observation that does not match the env's declared Box raises :class:`~spreeze_like.errors.EnvError`
(``envs.obs_vector``), as in the samplers. It calls :attr:`Evaluator.beat` between env resets and
after each step of its envs; the parallel mode sets it to its heartbeat, so a long evaluation is
not taken for a hang (review finding 9). With ``videos`` (``--video-every``), episode 0 of the evaluations it
schedules is also written as a video file (:mod:`spreeze_like.roles.eval_video`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.envs import episode_success, make_env, obs_vector, reset_env
from spreeze_like.roles.eval_video import EvalVideos
from spreeze_like.roles.ports import StatsWriter, WeightsSource
from spreeze_like.seeding import eval_seed


def _no_beat() -> None:
    pass

# An env without a time limit could run forever under a good policy; cap its evaluation episode.
MAX_EVAL_STEPS = 10_000


@dataclass(frozen=True)
class EvalResult:
    """One evaluation: mean return over the episodes, each return and length, and what was evaluated."""

    env_step: int
    mean_return: float
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    version: int
    successes: tuple[bool, ...] | None = None  # per episode, when the env says (info["is_success"]); else None

    @property
    def success_rate(self) -> float | None:
        return sum(self.successes) / len(self.successes) if self.successes else None


class Evaluator:
    """See the module docstring."""

    def __init__(self, env_id: str, spec: AlgoSpec, weights: WeightsSource, stats: StatsWriter, episodes: int,
                 env_kwargs: Mapping[str, Any] | None = None, videos: EvalVideos | None = None) -> None:
        self.env_id, self.spec, self.weights, self.stats, self.videos = env_id, spec, weights, stats, videos
        # with videos, episode 0's env renders (rgb_array): the video is the evaluated episode itself
        self.envs = [make_env(env_id, render_mode="rgb_array" if videos is not None and i == 0 else None,
                              env_kwargs=env_kwargs) for i in range(episodes)]
        limit = self.envs[0].spec.max_episode_steps if self.envs[0].spec is not None else None
        self.max_steps = min(limit or MAX_EVAL_STEPS, MAX_EVAL_STEPS)
        self._obs_shape = self.envs[0].observation_space.shape
        self.policy = NumpyPolicy(spec)
        self._vec = np.zeros(self.policy.size, dtype=np.float32)
        self.history: list[EvalResult] = []
        # Called between env resets and after every batched step: the parallel mode sets the heartbeat of
        # its stats row here, so an evaluation longer than --evaluator-hang-s is not taken for a hang
        # (finding 9), while a single step that hangs still is.
        self.beat: Callable[[], None] = _no_beat

    def evaluate(self, env_step: int, final: bool = False) -> EvalResult:
        """Run one deterministic episode per env with the newest actor; returns and logs the result.

        ``final``: the run's last evaluation (recorded whenever videos are on)."""
        version = self.weights.read(self._vec)
        if version > 0:
            self.policy.load(self._vec)
        n = len(self.envs)
        recording = self.videos.begin(self.envs[0], env_step, final) if self.videos is not None else None
        returns = np.zeros(n, dtype=np.float64)
        complete = False
        try:
            obs = np.stack([self._reset(env, i) for i, env in enumerate(self.envs)])
            if recording is not None:
                recording.frame(self.envs[0])
            lengths = np.zeros(n, dtype=np.int64)
            running = np.ones(n, dtype=bool)
            last_info: list[dict] = [{}] * n  # each episode's last step's, read once at the end for its success
            for _ in range(self.max_steps):
                actions = self.policy.act_deterministic(obs)
                for i in np.flatnonzero(running):
                    o, r, terminated, truncated, info = self.envs[i].step(actions[i])
                    obs[i] = obs_vector(o, self._obs_shape, self.env_id, "step")  # refuses a wrong shape or dtype
                    returns[i] += float(r)
                    lengths[i] += 1
                    last_info[i] = info
                    if terminated or truncated:
                        running[i] = False
                    if i == 0 and recording is not None:
                        recording.frame(self.envs[0])
                self.beat()
                if not running.any():
                    break
            complete = True
        finally:  # an interrupted evaluation leaves no half-written video
            if recording is not None:
                recording.end(complete, float(returns[0]))
        success = [episode_success(info) for info in last_info]
        successes = None if None in success else tuple(bool(s) for s in success)
        result = EvalResult(env_step, float(returns.mean()), tuple(returns.tolist()), tuple(lengths.tolist()), version,
                            successes)
        self.history.append(result)
        self.stats.set("eval_return", result.mean_return)
        self.stats.set("eval_length", float(lengths.mean()))
        self.stats.set("eval_env_step", float(env_step))
        self.stats.set("eval_version", float(version))
        self.stats.set("eval_success", result.success_rate or 0.0)
        self.stats.set("eval_success_n", float(len(result.successes or ())))
        self.stats.add("evaluations")
        return result

    def _reset(self, env: Any, i: int) -> np.ndarray:
        self.beat()
        return reset_env(env, self.env_id, seed=eval_seed(self.spec.seed, i))

    def close(self) -> None:
        for env in self.envs:
            env.close()
