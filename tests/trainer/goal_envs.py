"""Tiny goal-reaching envs with Dict and Tuple observation spaces (registered on import).

Used as ``trainer.goal_envs:TinyGoal-v0`` (``tests/`` on the path).

* ``TinyGoal-v0``: a point on a line starts at 0 and moves by ``0.25 * action`` (clipped to [-1, 1]) toward
  a goal drawn uniformly in [-1, 1] at each reset; reward ``-|position - goal|``; 8 steps per episode.
  Observation ``Dict(observation: Box(2) [position, t / 8], desired_goal: Box(1), phase: Discrete(3))``
  (``phase`` is ``t mod 3``). A policy that does not see ``desired_goal`` cannot score better than
  about -4 per episode (staying at 0: ``E|goal| = 0.5`` a step); one that moves to the goal scores
  about -0.6. Each step's ``info["is_success"]`` says whether the point is within 0.1 of the goal.
* ``TinyGoalTuple-v0``: the same observation as a ``Tuple(Box(2), Box(1), Discrete(3))``.
* ``TinyReach-v0``: the same line and moves, with gymnasium-robotics' goal API for HER: observation
  ``Dict(achieved_goal: Box(1) [position], desired_goal: Box(1), observation: Box(2) [position, t / 8])`` and a
  sparse reward from ``compute_reward(achieved, desired, info)``: 0 within 0.1 of the goal, else -1 (vectorised,
  as gymnasium-robotics' are). ``TinyReachOneGoal-v0``: a ``compute_reward`` that takes one goal at a time (it
  raises on a batch). ``TinyReachEnds-v0``: the episode terminates on success and ``compute_terminated`` says so.
  ``TinyReachBadReward-v0``: ``compute_reward`` raises (a step's own reward does not use it).
  ``TinyReachNaN-v0``: ``compute_reward`` is NaN for every goal above 0.

Observations that do not fit their space, to be refused with one ``error:`` line:

* ``TinyGoalMissingKey-v0``: from ``t == 2`` on, the dict has no ``desired_goal``.
* ``TinyGoalBadPhase-v0``: from ``t == 2`` on, ``phase`` is 3 (Discrete(3) holds 0, 1, 2; one-hot encoding
  of 3 would index past the part, and of -1 would write into the last slot without a word).
* ``TinyGoalBadShape-v0``: ``desired_goal`` from ``reset`` has shape (2,).
* ``TinyGoalText-v0``: declares a Text part (no fixed size: refused when made).
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

EPISODE = 8


class TinyGoal(gym.Env):
    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, structure: str = "dict", odd: str | None = None) -> None:
        parts = {"observation": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                 "desired_goal": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
                 "phase": gym.spaces.Discrete(3)}
        if odd == "text":
            parts["note"] = gym.spaces.Text(8)
        self.observation_space = (gym.spaces.Dict(parts) if structure == "dict"
                                  else gym.spaces.Tuple(tuple(parts.values())))
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.structure, self.odd = structure, odd
        self.position, self.goal, self.t = 0.0, 0.0, 0

    def _obs(self, method: str):
        parts = {"observation": np.array([self.position, self.t / EPISODE], np.float32),
                 "desired_goal": np.array([self.goal], np.float32),
                 "phase": self.t % 3}
        late = method == "step" and self.t >= 2
        if self.odd == "missing_key" and late:
            del parts["desired_goal"]
        if self.odd == "bad_phase" and late:
            parts["phase"] = 3
        if self.odd == "bad_shape" and method == "reset":
            parts["desired_goal"] = np.array([self.goal, self.goal], np.float32)
        return parts if self.structure == "dict" else tuple(parts.values())

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position, self.goal, self.t = 0.0, float(self.np_random.uniform(-1.0, 1.0)), 0
        return self._obs("reset"), {}

    def step(self, action):
        self.t += 1
        self.position = float(np.clip(self.position + 0.25 * float(np.asarray(action).reshape(-1)[0]), -1.0, 1.0))
        distance = abs(self.position - self.goal)
        return self._obs("step"), -distance, False, False, {"is_success": distance < 0.1}


class TinyReach(gym.Env):
    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, odd: str | None = None) -> None:
        line = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                                                  "achieved_goal": line, "desired_goal": line})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.odd = odd
        self.position, self.goal, self.t = 0.0, 0.0, 0

    def _obs(self):
        return {"observation": np.array([self.position, self.t / EPISODE], np.float32),
                "achieved_goal": np.array([self.position], np.float32),
                "desired_goal": np.array([self.goal], np.float32)}

    def compute_reward(self, achieved_goal, desired_goal, info):
        if self.odd == "bad_reward":
            raise ZeroDivisionError("no reward today")
        if self.odd == "nan_reward":  # NaN for goals above 0: about half of the relabels
            missed = np.abs(achieved_goal - desired_goal)[..., 0] > 0.1
            return np.where(desired_goal[..., 0] > 0, np.nan, -1.0 * missed)
        if self.odd == "one_goal":
            return -float(abs(float(achieved_goal[0]) - float(desired_goal[0])) > 0.1)  # float() of a row raises
        return -(np.abs(achieved_goal - desired_goal)[..., 0] > 0.1).astype(np.float32)

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return self.odd == "ends" and bool(abs(float(achieved_goal[0]) - float(desired_goal[0])) <= 0.1)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position, self.goal, self.t = 0.0, float(self.np_random.uniform(-1.0, 1.0)), 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.position = float(np.clip(self.position + 0.25 * float(np.asarray(action).reshape(-1)[0]), -1.0, 1.0))
        success = abs(self.position - self.goal) <= 0.1
        reward = 0.0 if success else -1.0  # compute_reward's value, without calling it (bad_reward's raises)
        return self._obs(), reward, self.odd == "ends" and success, False, {"is_success": success}


def _register(env_id: str, entry: str = "TinyGoal", **kwargs) -> None:
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=f"{__name__}:{entry}", max_episode_steps=EPISODE, kwargs=kwargs)


_register("TinyGoal-v0")
_register("TinyGoalTuple-v0", structure="tuple")
_register("TinyGoalMissingKey-v0", odd="missing_key")
_register("TinyGoalBadPhase-v0", odd="bad_phase")
_register("TinyGoalBadShape-v0", odd="bad_shape")
_register("TinyGoalText-v0", odd="text")
_register("TinyReach-v0", "TinyReach")
_register("TinyReachOneGoal-v0", "TinyReach", odd="one_goal")
_register("TinyReachEnds-v0", "TinyReach", odd="ends")
_register("TinyReachBadReward-v0", "TinyReach", odd="bad_reward")
_register("TinyReachNaN-v0", "TinyReach", odd="nan_reward")
