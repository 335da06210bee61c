"""Envs whose step waits, standing in for a slow simulator; used by the Ray tests and ``tools/bench_remote.py``.

``SlowPendulum-v1`` is gymnasium's Pendulum-v1 (same dynamics, reward and 200-step limit) whose ``step`` also
sleeps ``step_sleep_s`` (2 ms by default). The time is latency, not CPU: like an env that waits on a remote
simulator, a game or a robot, it is bound by how many samplers step at once, not by cores, so a 2-core
machine can show what more samplers on other nodes buy. Name it on the command line as
``--env spreeze_like.slow_envs:SlowPendulum-v1`` (importing this module registers the id, on every node
that imports it: a remote sampler's node only needs spreeze_like installed). Nothing here holds resources.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.pendulum import PendulumEnv

STEP_SLEEP_S = 0.002
SLOW_PENDULUM_ID = "SlowPendulum-v1"


class SlowPendulumEnv(PendulumEnv):
    """Pendulum-v1 whose every step first sleeps ``step_sleep_s`` seconds."""

    def __init__(self, step_sleep_s: float = STEP_SLEEP_S, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if not step_sleep_s >= 0.0:
            raise ValueError(f"step_sleep_s must be >= 0, got {step_sleep_s}")
        self.step_sleep_s = float(step_sleep_s)

    def step(self, u: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.step_sleep_s > 0.0:
            time.sleep(self.step_sleep_s)
        return super().step(u)


if SLOW_PENDULUM_ID not in gym.registry:
    gym.register(SLOW_PENDULUM_ID, entry_point=f"{__name__}:SlowPendulumEnv", max_episode_steps=200,
                 kwargs={"step_sleep_s": STEP_SLEEP_S})
