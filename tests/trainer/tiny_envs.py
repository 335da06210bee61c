"""Tiny gymnasium envs with known dynamics for the trainer tests (registered on import).

Used as ``trainer.tiny_envs:TinyWalk-v0`` (the ``module:EnvId`` form; ``tests/`` on the path).

* ``TinyWalk-v0``: obs = [t, 10 + t]; reward = the action the env receives (so a test can see the
  rescaling to the env's bounds [-2, 2]); never terminates; time limit 5 steps -> truncation.
* ``TinyTerminate-v0``: like TinyWalk but terminates at t == 3 (time limit 10).
* ``TinyNaN-v0``: like TinyWalk but the observation at t == 2 is NaN.
* ``TinyDiscrete-v0``: a Discrete(3) action space (must be refused).
* ``TinyBadReset-v0``: raises on reset (must be refused with EnvError).
* ``TinyHuge-v0``: like TinyWalk, but once this process has made ``SPZ_TEST_HUGE_AFTER`` steps
  (default 0) every reward is 3e38: finite, so samplers keep it, but the squared TD error
  overflows, so every learner step that samples it has inf gradients.
* ``TinyFlaky-v0``: like TinyWalk, but in a sampler process (named ``sampler-<i>``) every other
  episode has a NaN observation at t == 2 (the sampler drops that transition; the evaluator's
  episodes stay finite), and ``step`` raises RuntimeError in the process named ``SPZ_TEST_RAISE_ROLE`` (a parallel role
  process is named after its role, e.g. ``sampler-1``) once that process has made
  ``SPZ_TEST_RAISE_AFTER`` steps, but only while the file ``SPZ_TEST_RAISE_ONCE`` exists (the
  raising process deletes it first: one crash), or every time if ``SPZ_TEST_RAISE_ONCE`` is unset.

Odd envs that must be refused with one ``error:`` line (audit findings 10, 11, 17):

* ``TinyIntAction-v0`` / ``TinyBoolAction-v0``: an int64 Box(-2, 2) / a bool Box action space.
* ``TinyFixedDim-v0``: a 2-D action Box whose second dimension has low == high == 0.
* ``TinyMaxBounds-v0``: action bounds of +-3e38 (finite, but rescaled action 0 arrives as 1.8e31);
  ``TinyHugeBounds-v0``: +-1e7 (past the 1e6 limit); ``TinyWideBounds-v0``: +-1e6 (at the limit: accepted).
* ``TinyObsShape-v0``: its observation from ``step`` at t >= 2 has shape (1,) instead of (2,) (numpy would
  broadcast it into a 2-wide row); ``TinyObsShapeReset-v0``: the one from ``reset`` has shape (3,).
* ``TinyObsComplex-v0``: observations from ``step`` are complex64 (casting drops the imaginary part).
* ``TinyObsFloat64-v0``: declares float32 but returns float64 from reset and step (accepted: see test_envs).
* ``TinyCtorRaises-v0``: the constructor raises RuntimeError.
* ``TinyRender-v0``: TinyWalk that renders ``rgb_array`` frames of 16 x 24 pixels at 10 fps, frame ``t`` all
  grey level ``20 * t`` (each differs from the one before: a GIF keeps them all), for ``evaluate --video``.
* ``TinyRenderBroken-v0``: declares ``rgb_array`` but its ``render`` raises RuntimeError (a GL context that cannot
  be made), for ``--video-every``'s check at a run's start.
* ``TinyOddStep-v0`` with ``--env-kwargs {"mode": ...}``: a constructor argument that only ``step`` uses, as
  Pendulum-v1's ``g``: ``"raise"`` raises TypeError on every step (a kwarg value the step cannot use),
  ``"old_api"`` returns old gym's 4-tuple, ``"no_reward"`` a reward of None, ``"two_rewards"`` a reward of 2
  values; ``"ok"`` (the default) steps as TinyWalk.

Every Tiny* env, when ``SPZ_TEST_ENV_MAKERS`` names a folder, leaves an empty file
``<process name>.<pid>`` there as it is made: a test can see which roles make envs.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import ClassVar

import gymnasium as gym
import numpy as np


class TinyWalk(gym.Env):
    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, terminate_at: int | None = None, nan_at: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.terminate_at, self.nan_at = terminate_at, nan_at
        self.t = 0
        makers = os.environ.get("SPZ_TEST_ENV_MAKERS")
        if makers:
            open(os.path.join(makers, f"{multiprocessing.current_process().name}.{os.getpid()}"), "a").close()

    def _obs(self) -> np.ndarray:
        if self.nan_at is not None and self.t == self.nan_at:
            return np.array([np.nan, np.nan], np.float32)
        return np.array([self.t, 10 + self.t], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), float(np.asarray(action).reshape(-1)[0]), terminated, False, {}


class TinyDiscrete(TinyWalk):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Discrete(3)


class TinyBadReset(TinyWalk):
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise RuntimeError("simulator failed to start")


class TinyOddAction(TinyWalk):
    """TinyWalk with the action Box ``Box(low, high, dtype=dtype)``; reward = the first action entry."""

    def __init__(self, low: list, high: list, dtype: str = "float32") -> None:
        super().__init__()
        self.action_space = gym.spaces.Box(np.array(low, dtype), np.array(high, dtype), dtype=np.dtype(dtype))


class TinyOddObs(TinyWalk):
    """TinyWalk whose observation from ``t >= at`` on (0: from reset) is resized to ``shape``, cast to ``dtype``."""

    def __init__(self, shape: tuple[int, ...] = (2,), dtype: str = "float32", at: int = 0) -> None:
        super().__init__()
        self.odd_shape, self.odd_dtype, self.at = tuple(shape), np.dtype(dtype), at

    def _obs(self) -> np.ndarray:
        obs = super()._obs()
        if self.t >= self.at:
            return np.resize(obs, self.odd_shape).astype(self.odd_dtype)
        return obs


class TinyCtorRaises(TinyWalk):
    def __init__(self) -> None:
        raise RuntimeError("simulator licence not found")


class TinyRender(TinyWalk):
    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        self.render_mode = render_mode

    def render(self):
        return np.full((16, 24, 3), 20 * self.t, dtype=np.uint8)


class TinyRenderBroken(TinyRender):
    def render(self):
        raise RuntimeError("cannot make an OpenGL context")


class TinyOddStep(TinyWalk):
    def __init__(self, mode: str = "ok") -> None:
        super().__init__()
        self.mode = mode

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.mode == "raise":
            return obs, reward / self.mode, terminated, truncated, info  # TypeError, as a bad kwarg value gives
        if self.mode == "old_api":
            return obs, reward, terminated or truncated, info
        if self.mode == "no_reward":
            return obs, None, terminated, truncated, info
        if self.mode == "two_rewards":
            return obs, np.array([reward, reward]), terminated, truncated, info
        return obs, reward, terminated, truncated, info


_steps_in_process = 0  # env steps made by every Tiny* env of this process


class TinyHuge(TinyWalk):
    def step(self, action):
        global _steps_in_process
        _steps_in_process += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if _steps_in_process > int(os.environ.get("SPZ_TEST_HUGE_AFTER", "0")):
            reward = 3e38
        return obs, reward, terminated, truncated, info


class TinyFlaky(TinyWalk):
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.episode = getattr(self, "episode", -1) + 1
        in_sampler = multiprocessing.current_process().name.startswith("sampler")
        self.nan_at = 2 if in_sampler and self.episode % 2 == 1 else None
        return super().reset(seed=seed, options=options)

    def step(self, action):
        global _steps_in_process
        _steps_in_process += 1
        role = os.environ.get("SPZ_TEST_RAISE_ROLE")
        if role == multiprocessing.current_process().name and _steps_in_process > int(
            os.environ.get("SPZ_TEST_RAISE_AFTER", "0")
        ):
            once = os.environ.get("SPZ_TEST_RAISE_ONCE")
            if once is None:
                raise RuntimeError("simulated simulator crash (every time)")
            try:
                os.unlink(once)
            except FileNotFoundError:
                pass
            else:
                raise RuntimeError("simulated simulator crash (once)")
        return super().step(action)


def _register(env_id: str, entry: str, **kwargs) -> None:
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=f"{__name__}:{entry}", **kwargs)


_register("TinyWalk-v0", "TinyWalk", max_episode_steps=5)
_register("TinyTerminate-v0", "TinyWalk", max_episode_steps=10, kwargs={"terminate_at": 3})
_register("TinyNaN-v0", "TinyWalk", max_episode_steps=5, kwargs={"nan_at": 2})
_register("TinyDiscrete-v0", "TinyDiscrete", max_episode_steps=5)
_register("TinyBadReset-v0", "TinyBadReset", max_episode_steps=5)
_register("TinyHuge-v0", "TinyHuge", max_episode_steps=5)
_register("TinyFlaky-v0", "TinyFlaky", max_episode_steps=5)
_register("TinyIntAction-v0", "TinyOddAction", max_episode_steps=5, kwargs={"low": [-2], "high": [2], "dtype": "int64"})
_register("TinyBoolAction-v0", "TinyOddAction", max_episode_steps=5, kwargs={"low": [0], "high": [1], "dtype": "bool"})
_register("TinyFixedDim-v0", "TinyOddAction", max_episode_steps=5, kwargs={"low": [-2, 0], "high": [2, 0]})
_register("TinyMaxBounds-v0", "TinyOddAction", max_episode_steps=5, kwargs={"low": [-3e38], "high": [3e38]})
_register("TinyHugeBounds-v0", "TinyOddAction", max_episode_steps=5, kwargs={"low": [-1e7], "high": [1e7]})
_register("TinyWideBounds-v0", "TinyOddAction", max_episode_steps=5, kwargs={"low": [-1e6], "high": [1e6]})
_register("TinyObsShape-v0", "TinyOddObs", max_episode_steps=5, kwargs={"shape": (1,), "at": 2})
_register("TinyObsShapeReset-v0", "TinyOddObs", max_episode_steps=5, kwargs={"shape": (3,)})
_register("TinyObsComplex-v0", "TinyOddObs", max_episode_steps=5, kwargs={"dtype": "complex64", "at": 1})
_register("TinyObsFloat64-v0", "TinyOddObs", max_episode_steps=5, kwargs={"dtype": "float64"})
_register("TinyCtorRaises-v0", "TinyCtorRaises", max_episode_steps=5)
_register("TinyOddStep-v0", "TinyOddStep", max_episode_steps=5)
_register("TinyRender-v0", "TinyRender", max_episode_steps=5)
_register("TinyRenderBroken-v0", "TinyRenderBroken", max_episode_steps=5)


# --- Supervision findings 8, 9 and 18 (tests/parallel/test_supervision_findings.py) ----------------
#
# * ``TinySlow-v0``: TinyWalk with 40-step episodes whose ``step`` sleeps ``SPZ_TEST_SLOW_S`` seconds in
#   the processes whose name starts with ``SPZ_TEST_SLOW_ROLE`` (a slow simulator), and which, in the
#   process named ``SPZ_TEST_HANG_ROLE``, once that process has made ``SPZ_TEST_HANG_AFTER`` steps and
#   while the file ``SPZ_TEST_HANG_ONCE`` exists (deleted first: one hang), sleeps for good (a hung simulator).
# * ``TinySpawn-v0``: TinyWalk whose constructor starts a ``sleep 1000`` subprocess (a simulator server)
#   and records it as an empty file ``<process name>.<pid>.<sleep pid>`` in ``SPZ_TEST_SPAWN_DIR``;
#   ``close`` ends it, as a well-behaved env does; a SIGKILLed owner never calls it.

_slow_steps = 0  # TinySlow steps made in this process


class TinySlow(TinyWalk):
    def step(self, action):
        global _slow_steps
        import time

        _slow_steps += 1
        name = multiprocessing.current_process().name
        if name.startswith(os.environ.get("SPZ_TEST_SLOW_ROLE", "\0")):
            time.sleep(float(os.environ.get("SPZ_TEST_SLOW_S", "0")))
        once = os.environ.get("SPZ_TEST_HANG_ONCE")
        if (name == os.environ.get("SPZ_TEST_HANG_ROLE") and once is not None
                and _slow_steps > int(os.environ.get("SPZ_TEST_HANG_AFTER", "0"))):
            try:
                os.unlink(once)
            except FileNotFoundError:
                pass
            else:
                time.sleep(1e6)  # hung inside the simulator: no exception, no heartbeat
        return super().step(action)


class TinySpawn(TinyWalk):
    def __init__(self) -> None:
        import subprocess

        super().__init__()
        self.server = subprocess.Popen(["sleep", "1000"])
        where = os.environ.get("SPZ_TEST_SPAWN_DIR")
        if where:
            name = f"{multiprocessing.current_process().name}.{os.getpid()}.{self.server.pid}"
            open(os.path.join(where, name), "a").close()

    def close(self) -> None:
        self.server.kill()
        self.server.wait()
        super().close()


_register("TinySlow-v0", "TinySlow", max_episode_steps=40)
_register("TinySpawn-v0", "TinySpawn", max_episode_steps=5)
