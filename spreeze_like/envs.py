"""Making and checking gymnasium envs.

``make_env("Pendulum-v1")`` or ``make_env("my_pkg.envs:MyEnv-v0")`` (import ``my_pkg.envs`` first,
so that its ``gymnasium.register`` calls run, then make ``MyEnv-v0``). Every way an env can be
unusable for this trainer becomes one :class:`~spreeze_like.errors.EnvError` line that says what to
do: an unknown id, a missing module or dependency, a non-Box action space (we train
continuous-action agents only), unbounded action bounds, a non-Box observation space, an env that
raises on reset.

Actions: every agent acts in ``[-1, 1]^act_dim`` (tanh-squashed or clipped) and the env is wrapped
in ``RescaleAction`` so the env sees its own bounds. Replay therefore stores normalised actions,
which keeps the learning rates meaningful across envs.

Observations: a Box of any shape; samplers flatten it to ``obs_dim = prod(shape)`` float32.

Episodes are stepped one env at a time, never through a vector env: samplers reset an env
themselves after ``terminated or truncated``, so the transition's ``next_obs`` is always the true
final observation (gymnasium 1.x vector autoreset would hand back the reset observation or need
``final_obs`` bookkeeping).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from spreeze_like.errors import EnvError


@dataclass(frozen=True)
class EnvInfo:
    """What the trainer needs to know about an env: sizes and the episode time limit."""

    env_id: str
    obs_dim: int
    act_dim: int
    max_episode_steps: int | None


def _split_entry_point(env: str) -> tuple[str | None, str]:
    if ":" in env:
        module, env_id = env.split(":", 1)
        return module.strip() or None, env_id.strip()
    return None, env.strip()


def _import_module(module: str, env: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise EnvError(
            f"cannot import module {module!r} for env {env!r} ({exc}); check that it is installed and on PYTHONPATH"
        ) from None


def make_env(env: str, render_mode: str | None = None) -> gym.Env:
    """Make a checked env with actions rescaled to [-1, 1]. Raises EnvError for any unusable env."""
    module, env_id = _split_entry_point(env)
    if module:
        _import_module(module, env)
    kwargs: dict[str, Any] = {} if render_mode is None else {"render_mode": render_mode}
    try:
        instance = gym.make(env_id, **kwargs)
    except gym.error.Error as exc:  # NameNotFound, VersionNotFound, NamespaceNotFound, DependencyNotInstalled
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EnvError(
            f"cannot make env {env!r}: {first} (for your own env pass module:EnvId, e.g. my_pkg.envs:MyEnv-v0)"
        ) from None
    except ImportError as exc:
        raise EnvError(f"cannot make env {env!r}: a dependency is missing ({exc}); install it and retry") from None
    try:
        check_spaces(instance, env)
    except EnvError:
        instance.close()
        raise
    low, high = instance.action_space.low, instance.action_space.high
    if not (np.all(low == -1.0) and np.all(high == 1.0)):
        shape = instance.action_space.shape
        ones = np.ones(shape, dtype=instance.action_space.dtype)  # same dtype as the env's Box: no precision warning
        instance = gym.wrappers.RescaleAction(instance, -ones, ones)
    return instance


def check_spaces(env: gym.Env, name: str) -> None:
    """Reject action/observation spaces the trainer cannot handle, with a one-line EnvError."""
    act = env.action_space
    if not isinstance(act, gym.spaces.Box):
        raise EnvError(
            f"spreeze_like trains continuous-action agents; {name} has a {type(act).__name__} action space "
            f"({act}); use an env with a Box action space (e.g. Pendulum-v1, HalfCheetah-v5)"
        )
    if not (np.all(np.isfinite(act.low)) and np.all(np.isfinite(act.high))):
        raise EnvError(f"{name} has unbounded action bounds ({act}); wrap it so that its Box has finite low/high")
    if act.shape is None or len(act.shape) != 1:
        raise EnvError(f"{name} has a {act.shape}-shaped action Box; spreeze_like needs a 1-D action vector")
    obs = env.observation_space
    if not isinstance(obs, gym.spaces.Box):
        raise EnvError(
            f"{name} has a {type(obs).__name__} observation space; wrap it in "
            "gymnasium.wrappers.FlattenObservation (or register a flattened variant) and pass that id"
        )


def env_info(env: str) -> EnvInfo:
    """Make one env to read its sizes, then close it. Raises EnvError if the env is unusable."""
    instance = make_env(env)
    try:
        limit = instance.spec.max_episode_steps if instance.spec is not None else None
        return EnvInfo(
            env_id=env,
            obs_dim=int(np.prod(instance.observation_space.shape)),
            act_dim=int(instance.action_space.shape[0]),
            max_episode_steps=limit,
        )
    finally:
        instance.close()


def reset_env(env: gym.Env, name: str, seed: int | None = None) -> np.ndarray:
    """``env.reset`` as a flat float32 vector; an env that raises becomes an EnvError."""
    try:
        obs, _ = env.reset(seed=seed)
    except Exception as exc:  # noqa: BLE001 - any failure of user env code is reported the same way
        raise EnvError(
            f"env {name!r} raised {type(exc).__name__} on reset: {exc}; fix the env or pick another"
        ) from None
    return flat_obs(obs)


def flat_obs(obs: Any) -> np.ndarray:
    return np.asarray(obs, dtype=np.float32).reshape(-1)
