"""Hindsight experience replay (HER): goals relabelled where the episodes are, in the sampler.

With ``--her-goals K`` (K >= 1) on a goal env, each sampler keeps the steps of every env's episode in
progress. Every step is stored at once as usual (its real goal, its real reward); when the episode ends,
each of its steps is stored K times more, each copy with a goal the episode achieved later:

    obs_t[desired := g] | action_t | compute_reward(achieved_{t+1}, g, info_t) | next_obs_t[desired := g] | ...

where ``g`` is ``achieved_goal`` of ``next_obs_{t'}``, ``t'`` drawn uniformly from ``t .. T-1`` (the
"future" strategy of Andrychowicz et al. 2017, their best; ``t' = t`` is the goal this very step reached;
the default). ``--her-strategy final`` takes ``t' = T-1`` (the K copies then share one goal), ``episode`` draws
``t'`` from the whole episode, ``0 .. T-1``: SB3's three strategies, by its names.
This is the paper's Algorithm 1: relabelled transitions are stored in replay at the episode's end. SB3's
``HerReplayBuffer`` relabels at sampling time instead, which needs episode boundaries in replay; here the
row layout, replay, the device mirror and the rings stay those of plain transitions, as for ``--n-step``.
The cost is memory: replay holds 1 + K rows per env step, so the same ``--buffer-size`` covers 1 / (1 + K)
of the env steps; and each relabelled goal is drawn once, when stored.

What a goal env must have (:func:`check_her` says what is missing, one line before a run starts):
a Dict observation whose ``achieved_goal`` and ``desired_goal`` are Boxes of one shape (the other parts
may be anything :mod:`spreeze_like.structured_obs` flattens), and ``env.unwrapped.compute_reward(achieved,
desired, info)``, gymnasium-robotics' ``GoalEnv`` API. Relabelled rows:

* **reward**: ``compute_reward``, called once per episode on the batch of its relabels (gymnasium-robotics
  computes it vectorised, with an array of infos as SB3 passes them); where the env's function takes one
  goal at a time (it raises, or returns another shape), it is called per row.
* **terminated**: ``env.unwrapped.compute_terminated(achieved, g, info)`` per row where the env has it
  (gymnasium-robotics' envs do; a maze with ``continuing_task=False`` ends on reaching its goal), else the
  step's own flag, as SB3 does.
* **truncated**: the step's own flag (learners bootstrap on ``terminated`` only).
* A relabelled row with a NaN or inf is dropped and counted as ``nonfinite_dropped`` (and in ``her_rows``,
  which counts the rows made, as ``env_steps`` counts steps); a step that was not finite drops its episode's
  steps held so far (the sampler resets that env).

Counting (``procs/pacing.py``): a relabelled row is counted as it is made (``her_rows``); held steps are
not promised rows, so an episode that a run's end or a crash cuts off loses its relabels and nothing
waits for them. ``--utd`` stays critic updates per env step: the learners count ``utd / (1 + K)`` per
stored row (:attr:`~spreeze_like.config.TrainConfig.utd_per_row`). Not combined with ``--n-step`` (a
relabelled n-step row needs every one of its N rewards recomputed) or with remote samplers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from spreeze_like.config import HER_STRATEGIES
from spreeze_like.envs import EnvInfo, check_first_step, env_info, make_env
from spreeze_like.errors import EnvError
from spreeze_like.structured_obs import structured_space_of

ACHIEVED, DESIRED = "achieved_goal", "desired_goal"


@dataclass(frozen=True)
class GoalSlices:
    """Where the two goals sit in a flattened observation (``FlatObservation``'s order)."""

    achieved: slice
    desired: slice


def goal_slices(space: gym.Space | None) -> GoalSlices | None:
    """The goals' places in the flattened observation of ``space`` (the env's own, structured space), or None
    when it is not a Dict with ``achieved_goal`` and ``desired_goal`` Boxes of one shape."""
    if not isinstance(space, gym.spaces.Dict):
        return None
    parts = space.spaces
    if not all(isinstance(parts.get(key), gym.spaces.Box) for key in (ACHIEVED, DESIRED)):
        return None
    if parts[ACHIEVED].shape != parts[DESIRED].shape:
        return None
    places, offset = {}, 0
    for key, sub in parts.items():  # the order FlatObservation joins them in (gymnasium.spaces.flatten's)
        size = gym.spaces.flatdim(sub)
        places[key] = slice(offset, offset + size)
        offset += size
    return GoalSlices(places[ACHIEVED], places[DESIRED])


def goal_env_problem(env: gym.Env) -> str | None:
    """Why ``env`` (made by :func:`~spreeze_like.envs.make_env`) cannot be relabelled, or None if it can."""
    space = structured_space_of(env)
    if not isinstance(space, gym.spaces.Dict):
        return (f"its observation is {'a ' + type(space).__name__ if space is not None else 'a Box'}, not a Dict "
                f"with {ACHIEVED!r} and {DESIRED!r}")
    if goal_slices(space) is None:
        return f"its observation Dict has no {ACHIEVED!r} and {DESIRED!r} Boxes of one shape (keys: {sorted(space)})"
    if not callable(getattr(env.unwrapped, "compute_reward", None)):
        return "it has no compute_reward(achieved_goal, desired_goal, info) (gymnasium-robotics' GoalEnv API)"
    return None


class HerEpisodes:
    """Each env's episode in progress, and its relabelled rows when it ends (see the module docstring).

    Args:
        n_envs: envs of the sampler, one episode each.
        k: relabelled copies of every step (>= 1).
        slices: where the goals sit in an observation row.
        env: one of the sampler's envs (its ``unwrapped`` gives ``compute_reward`` and ``compute_terminated``;
            they depend on the env's settings, not on its state, as in gymnasium-robotics).
        rng: draws the goals' steps; part of the sampler's checkpointed state.
        name: the env id, for errors.
        strategy: ``future``, ``final`` or ``episode`` (the module docstring).
    """

    def __init__(self, n_envs: int, k: int, slices: GoalSlices, env: gym.Env, rng: np.random.Generator,
                 name: str, strategy: str = "future") -> None:
        if k < 1:
            raise ValueError(f"HER needs k >= 1 relabelled goals, got {k}")
        if strategy not in HER_STRATEGIES:
            raise ValueError(f"HER strategy {strategy!r}: choose one of {', '.join(HER_STRATEGIES)}")
        self.k, self.slices, self.rng, self.name, self.strategy = k, slices, rng, name, strategy
        self.compute_reward: Callable[..., Any] = env.unwrapped.compute_reward
        self.compute_terminated: Callable[..., Any] | None = getattr(env.unwrapped, "compute_terminated", None)
        self.batched = True  # False once compute_reward showed it takes one goal at a time
        self.steps: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, float, float, Any]]] = [
            [] for _ in range(n_envs)]

    @property
    def pending(self) -> int:
        """Steps held for relabelling now (their real rows are already stored)."""
        return sum(len(s) for s in self.steps)

    def add(self, j: int, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray, terminated: float,
            truncated: float, info: Any) -> None:
        """Env ``j``'s finite step (arrays the caller will not write over before this episode ends)."""
        self.steps[j].append((obs, action, next_obs, terminated, truncated, info))

    def drop(self, j: int) -> int:
        """Forget env ``j``'s episode (a step that was not finite); how many steps it held."""
        held = len(self.steps[j])
        self.steps[j] = []
        return held

    def end(self, j: int) -> tuple[np.ndarray, ...] | None:
        """Env ``j``'s episode ended: its relabelled rows as (obs, action, reward, next_obs, terminated, truncated)
        arrays of ``k * T`` rows, or None for an empty episode. Forgets the episode."""
        steps, self.steps[j] = self.steps[j], []
        if not steps:
            return None
        obs, action, next_obs, terminated, truncated, infos = zip(*steps)
        count = len(steps)
        first = np.repeat(np.arange(count), self.k)  # row i relabels step first[i] with the goal step t' achieved
        if self.strategy == "future":  # t' in [t, T)
            source = self.rng.integers(first, count)
        elif self.strategy == "final":
            source = np.full(len(first), count - 1)
        else:  # episode: t' in [0, T)
            source = self.rng.integers(0, count, size=len(first))
        next_obs = np.stack(next_obs)
        goals = next_obs[source, self.slices.achieved]
        new_obs, new_next = np.stack(obs)[first], next_obs[first]
        new_obs[:, self.slices.desired] = goals
        new_next[:, self.slices.desired] = goals
        achieved = new_next[:, self.slices.achieved]
        row_infos = [infos[t] for t in first]
        rewards = self._rewards(achieved, goals, row_infos)
        if self.compute_terminated is not None:
            done = np.array([self._call(self.compute_terminated, "compute_terminated", a, g, i)
                             for a, g, i in zip(achieved, goals, row_infos)], dtype=np.float32)
        else:
            done = np.asarray(terminated, dtype=np.float32)[first]
        return (new_obs, np.stack(action)[first], rewards, new_next, done,
                np.asarray(truncated, dtype=np.float32)[first])

    def _rewards(self, achieved: np.ndarray, goals: np.ndarray, infos: list) -> np.ndarray:
        n = len(goals)
        if self.batched:
            try:
                rewards = np.asarray(self.compute_reward(achieved, goals, np.array(infos, dtype=object)),
                                     dtype=np.float32)
            except Exception:  # noqa: BLE001 - a compute_reward written for one goal: it is called per row below
                rewards = None
            if rewards is not None and rewards.shape == (n,):
                return rewards
            self.batched = False
        return np.array([self._call(self.compute_reward, "compute_reward", a, g, i)
                         for a, g, i in zip(achieved, goals, infos)], dtype=np.float32)

    def _call(self, fn: Callable[..., Any], what: str, achieved: np.ndarray, goal: np.ndarray, info: Any) -> float:
        try:
            value = fn(achieved, goal, info)
            if isinstance(value, (bool, int, float, np.bool_, np.number)):  # the usual one number, without asarray:
                return float(value)  # with the terminated calls' share, HER's work fell 5.6 -> 3.5 us a PointMaze step
            value = np.asarray(value, dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - user env code: one line, whatever it raised
            raise EnvError(f"env {self.name!r}: {what}(achieved_goal, desired_goal, info) raised "
                           f"{type(exc).__name__}: {exc}; --her-goals relabels with it: fix the env or run without "
                           "--her-goals") from None
        if value.size != 1:
            raise EnvError(f"env {self.name!r}: {what} of one goal returned {value.size} values; --her-goals needs "
                           "one number per goal: fix the env or run without --her-goals")
        return float(value.reshape(-1)[0])


def require_goal_slices(env: gym.Env, name: str, k: int) -> GoalSlices:
    """Where the goals sit in ``env``'s rows; an EnvError (one line) if it cannot be relabelled."""
    problem = goal_env_problem(env)
    slices = None if problem else goal_slices(structured_space_of(env))
    if slices is None:
        raise EnvError(f"--her-goals {k} needs a goal env, and {name!r} is not one: {problem}; run it without "
                       "--her-goals, or pick a goal env (PointMaze_UMaze-v3, FetchReach-v4: gymnasium-robotics)")
    return slices


def check_her(name: str, env_kwargs: Mapping[str, Any] | None, k: int) -> None:
    """``--her-goals``, before a run starts: refuse an env that cannot be relabelled, and relabel its first step
    (:func:`~spreeze_like.envs.check_first_step`'s) so that a ``compute_reward`` that fails does so here, as one
    line, not in every sampler at its first episode's end."""
    env = make_env(name, env_kwargs=env_kwargs)
    try:
        slices = require_goal_slices(env, name, k)
        first = check_first_step(env, name, env_kwargs)
        episodes = HerEpisodes(1, k, slices, env, np.random.default_rng(0), name)
        episodes.add(0, *first)
        episodes.end(0)
    finally:
        env.close()


def checked_env_info(name: str, env_kwargs: Mapping[str, Any] | None, her_goals: int) -> EnvInfo:
    """The env's facts, its first step checked once: by :func:`check_her`, which relabels that step, with
    ``--her-goals``; by :func:`~spreeze_like.envs.env_info` otherwise. A bad env fails here, in one line."""
    info = env_info(name, env_kwargs, first_step=not her_goals)
    if her_goals:
        check_her(name, env_kwargs, her_goals)
    return info
