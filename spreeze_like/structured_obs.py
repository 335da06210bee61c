"""Dict and Tuple observations: flattened into one vector by :func:`~spreeze_like.envs.make_env`.

Goal-conditioned envs (gymnasium-robotics' mazes: ``observation``, ``achieved_goal``, ``desired_goal``)
and many hand-written simulators observe a Dict. Our agents are MLPs over one float32 vector and replay
stores fixed-width rows, so an env whose observation space is a Dict or a Tuple (nested as deep as it
likes) is wrapped in :class:`FlatObservation`: every part is flattened and the parts are concatenated, in
the order the space lists them (a Dict space sorts its keys unless built from an OrderedDict), which is
``gymnasium.spaces.flatten``'s order. For an MLP that is what SB3's ``MultiInputPolicy`` does with
vector parts (flatten each, concatenate) before its first layer.

Decisions:

* **Parts that flatten to a fixed size are accepted**: a Box of real numbers (bool, int, float), and
  Discrete, MultiDiscrete and MultiBinary (one-hot and 0/1 entries, as gymnasium flattens them). A
  top-level Discrete, MultiDiscrete or MultiBinary space is flattened the same way. Text, Graph,
  Sequence and OneOf parts have no fixed size and are refused when the env is made, naming the part.
* **Every observation is checked against its space before it is flattened**, at ``reset`` and ``step``:
  a Dict with a missing or an extra key, a Tuple of another length, a Box part of another shape or a
  non-real dtype, a Discrete value out of range. Flattening would otherwise raise a KeyError deep in
  gymnasium, or worse, one-hot an out-of-range value into the wrong slot without a word (numpy's negative
  indexing). The check raises :class:`~spreeze_like.errors.EnvError` (one line, exit status 2, naming the
  part, e.g. ``observation['desired_goal']``), as :func:`~spreeze_like.envs.obs_vector` does for a Box.
  Box bounds are not checked, as for a plain Box observation: envs exceed declared bounds routinely.
* **Goal relabelling (HER)** is the samplers' (``--her-goals``, :mod:`spreeze_like.roles.her`): it finds
  ``achieved_goal`` and ``desired_goal`` in the flattened vector by this order.

Cost, on the hot path of every sampler step (measured on PointMaze_UMazeDense-v3's observation, 2-core
EPYC, 2026-11-29): 7 us for a Dict or Tuple of Boxes, checked and joined by :func:`_join_box_parts`; 16-18 us
through the general :func:`check_observation` walk and gymnasium's ``flatten`` (other part kinds, and every
observation that does not fit, to name the part). The env's own step there takes 54 us.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from spreeze_like.errors import EnvError

REAL_KINDS = "biuf"  # numpy dtype kinds a float32 row can hold: bool, signed and unsigned int, float
_INDEXED = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
_NESTED = (gym.spaces.Dict, gym.spaces.Tuple)


def needs_flattening(space: gym.Space) -> bool:
    """True for an observation space that is not a Box and that :class:`FlatObservation` takes."""
    return isinstance(space, _NESTED + _INDEXED)


def unflattenable_part(space: gym.Space, where: str = "observation") -> str | None:
    """The first part of ``space`` that cannot be flattened to a fixed size, as ``"<where> (<why>)"``;
    None when every part can."""
    if isinstance(space, gym.spaces.Dict):
        parts = ((f"{where}[{key!r}]", sub) for key, sub in space.spaces.items())
    elif isinstance(space, gym.spaces.Tuple):
        parts = ((f"{where}[{i}]", sub) for i, sub in enumerate(space.spaces))
    elif isinstance(space, (gym.spaces.Box, *_INDEXED)):  # gymnasium allows a Box of real dtypes only
        return None
    else:
        return f"{where} (a {type(space).__name__} space has no fixed size)"
    for part_where, sub in parts:
        found = unflattenable_part(sub, part_where)
        if found:
            return found
    return None


def describe(space: gym.Space) -> str:
    """A short text of a space's structure, e.g. ``Dict(achieved_goal: Box(2), observation: Box(4))``."""
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{key}: {describe(sub)}" for key, sub in space.spaces.items()) + ")"
    if isinstance(space, gym.spaces.Tuple):
        return "Tuple(" + ", ".join(describe(sub) for sub in space.spaces) + ")"
    if isinstance(space, gym.spaces.Box):
        return f"Box({', '.join(str(n) for n in space.shape)})"
    if isinstance(space, _INDEXED):
        return str(space)
    return type(space).__name__  # Text(...) lists its whole charset


def check_observation(space: gym.Space, obs: Any, where: str = "observation") -> str | None:
    """What is wrong with ``obs`` as a member of ``space`` (ignoring Box bounds), or None if nothing is."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            return f"{where} is a {type(obs).__name__}, not a dict"
        if set(obs) != set(space.spaces):
            missing, extra = sorted(set(space.spaces) - set(obs)), sorted(set(obs) - set(space.spaces))
            return f"{where} has keys {sorted(obs)} (missing {missing}, extra {extra})"
        for key, sub in space.spaces.items():
            found = check_observation(sub, obs[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, (tuple, list)) or len(obs) != len(space.spaces):
            size = len(obs) if isinstance(obs, (tuple, list)) else type(obs).__name__
            return f"{where} is {size!r} instead of a tuple of {len(space.spaces)}"
        for i, (sub, part) in enumerate(zip(space.spaces, obs)):
            found = check_observation(sub, part, f"{where}[{i}]")
            if found:
                return found
        return None
    try:
        array = np.asarray(obs)
    except ValueError:  # a ragged sequence
        return f"{where} is a ragged sequence"
    if isinstance(space, gym.spaces.Box):
        if array.shape != space.shape or array.dtype.kind not in REAL_KINDS:
            return f"{where} has shape {array.shape} and dtype {array.dtype} (declared: {space})"
        return None
    if not space.contains(obs if isinstance(space, gym.spaces.Discrete) else array):
        return f"{where} is {obs!r}, not a member of {space}"
    return None


class FlatObservation(gym.Wrapper):
    """Observations of a Dict, Tuple, Discrete, MultiDiscrete or MultiBinary space as one flat vector,
    each checked first (see the module docstring). ``structured_space`` is the env's own space."""

    def __init__(self, env: gym.Env, name: str) -> None:
        super().__init__(env)
        self.structured_space = env.observation_space
        self.observation_space = gym.spaces.flatten_space(self.structured_space)
        self.name = name
        self._box_parts = _box_parts(self.structured_space)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        return self.flat(obs, "reset"), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.flat(obs, "step"), reward, terminated, truncated, info

    def flat(self, obs: Any, method: str) -> np.ndarray:
        if self._box_parts is not None:  # the common case (a goal env's Dict of Boxes): checked and joined here
            joined = _join_box_parts(self._box_parts, obs, isinstance(self.structured_space, gym.spaces.Dict))
            if joined is not None:
                return joined
        return flatten_observation(self.structured_space, obs, self.name, method)  # also names what does not fit


def _box_parts(space: gym.Space) -> list[tuple[Any, gym.spaces.Box]] | None:
    """``[(key or index, Box)]`` of a Dict or Tuple whose parts are all Boxes, in flattening order; else None."""
    if not isinstance(space, _NESTED):
        return None
    items = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space.spaces)
    parts = [(key, sub) for key, sub in items if isinstance(sub, gym.spaces.Box)]
    return parts if len(parts) == len(space.spaces) else None


def _join_box_parts(parts: list[tuple[Any, gym.spaces.Box]], obs: Any, is_dict: bool) -> np.ndarray | None:
    """The parts of ``obs`` joined as ``gymnasium.spaces.flatten`` joins them (each cast to its Box's dtype first),
    or None where anything does not fit, for :func:`flatten_observation` to say what: the same checks as
    :func:`check_observation`, without its walk (7 us against 16-18 us: the module docstring)."""
    if not isinstance(obs, Mapping if is_dict else (tuple, list)) or len(obs) != len(parts):
        return None
    try:
        arrays = [np.asarray(obs[key]) for key, _ in parts]
    except (KeyError, IndexError, TypeError, ValueError):  # a missing key; a ragged part
        return None
    for array, (_, box) in zip(arrays, parts):
        if array.shape != box.shape or array.dtype.kind not in REAL_KINDS:
            return None
    return np.concatenate([array.astype(box.dtype, copy=False).reshape(-1) for array, (_, box) in zip(arrays, parts)])


def flatten_observation(space: gym.Space, obs: Any, name: str, method: str) -> np.ndarray:
    """``obs`` of ``space`` as one flat vector; an EnvError names the part that does not fit the space."""
    problem = check_observation(space, obs)
    if problem:
        raise EnvError(f"env {name!r} returned an observation from {method}() whose {problem}; its observation_space "
                       f"is {describe(space)}: fix the env so that the two agree")
    return np.asarray(gym.spaces.flatten(space, obs))


def structured_space_of(env: gym.Env) -> gym.Space | None:
    """The env's own observation space if :func:`~spreeze_like.envs.make_env` flattened it, else None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, FlatObservation):
            return env.structured_space
        env = env.env
    return None
