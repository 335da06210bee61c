"""Making and checking gymnasium envs.

``make_env("Pendulum-v1")`` or ``make_env("my_pkg.envs:MyEnv-v0")`` (import ``my_pkg.envs`` first,
so that its ``gymnasium.register`` calls run, then make ``MyEnv-v0``). Every way an env can be
unusable for this trainer becomes one :class:`~spreeze_like.errors.EnvError` line that says what to
do: an unknown id (or a class name where a registered id belongs), a missing module or dependency, a
module that fails to import for any other reason (a SyntaxError, an exception at import), a constructor
that raises, a non-Box action space (we train continuous-action agents only), an action Box that cannot
be rescaled (integer or boolean dtype, low == high in a dimension, bounds non-finite or beyond
:data:`MAX_ACTION_BOUND`), an observation space that cannot be flattened to a fixed-size vector (a Text,
Graph or Sequence part), an env that raises on reset or on its first step, a first step that returns no
gymnasium 5-tuple or no single real reward, and an observation from ``reset`` or ``step`` whose shape is not
the declared one or whose dtype is not a real number.

Actions: every agent acts in ``[-1, 1]^act_dim`` (tanh-squashed or clipped) and the env is wrapped
in ``RescaleAction`` so the env sees its own bounds. Replay therefore stores normalised actions,
which keeps the learning rates meaningful across envs.

Observations: a Box of any shape; samplers flatten it to ``obs_dim = prod(shape)`` float32. A Dict or
Tuple space (goal-conditioned envs), or a Discrete-like one, is wrapped in
:class:`~spreeze_like.structured_obs.FlatObservation` here, so everything downstream sees a flat Box. Every
observation that enters a sampler or the evaluator goes through :func:`obs_vector`, which refuses one of
another shape: numpy would otherwise broadcast a size-1 observation across the whole row and store it in
replay. Its dtype only has to be a real number (bool, int, float): float32 is what is stored whatever the
Box declares, so a float64 observation in a float32 Box (common in hand-written envs) loses nothing that
its float32 twin would keep; complex, object or string observations are refused.

Episodes are stepped one env at a time, never through a vector env: samplers reset an env
themselves after ``terminated or truncated``, so the transition's ``next_obs`` is always the true
final observation (gymnasium 1.x vector autoreset would hand back the reset observation or need
``final_obs`` bookkeeping).
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from spreeze_like.errors import EnvError, describe_exception, first_line
from spreeze_like.structured_obs import (
    REAL_KINDS,
    FlatObservation,
    describe,
    needs_flattening,
    structured_space_of,
    unflattenable_part,
)

# Largest |low| or |high| of an action Box that the [-1, 1] rescaling accepts. Past it the scaling is
# meaningless: the float32 actions the agent can output land on the env's range in steps of about
# B * 2**-24 (measured through RescaleAction on a float32 Box: 0.03-0.06 at B = 1e6, 0.5-1 at 1e7), the
# exploration noise alone is 0.1 * B, and at B = 3e38 the rounding is so coarse that action 0 arrives as
# 1.8e31. Bounds this wide stand in for "unbounded" (gymnasium's own Box envs stay within +-3); the agent
# needs the real actuator range. docs/reliability.md, "Odd envs", has the measurement.
MAX_ACTION_BOUND = 1e6



@dataclass(frozen=True)
class EnvInfo:
    """What the trainer needs to know about an env: sizes and the episode time limit."""

    env_id: str
    obs_dim: int
    act_dim: int
    max_episode_steps: int | None
    structured_obs_space: gym.Space | None = None  # the env's own Dict, Tuple, ... space that make_env flattened


# gymnasium's errors for an id it does not know (a misspelt name, namespace or version)
_UNKNOWN_ID_ERRORS = (gym.error.NameNotFound, gym.error.NamespaceNotFound, gym.error.VersionNotFound)


def split_env_module(env: str) -> tuple[str | None, str]:
    """``module:EnvId`` -> (``module``, ``EnvId``); a plain gymnasium id -> (None, id). The one reading of the
    form: :func:`make_env` imports the module, :func:`spreeze_like.rundir.refuse_unnamed_env_module` refuses to."""
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
    except Exception as exc:  # noqa: BLE001 - a SyntaxError or any exception at import is the user's module to fix
        raise EnvError(
            f"importing module {module!r} for env {env!r} raised {describe_exception(exc)}; fix the module and retry"
        ) from None


def _unregistered_hint(module: str, env_id: str) -> str:
    """What to do when ``module`` imported fine but registers no ``env_id`` (often a class name was passed)."""
    mine = sorted(
        key for key, spec in gym.registry.items()
        if (spec.entry_point if isinstance(spec.entry_point, str) else getattr(spec.entry_point, "__module__", ""))
        .split(":")[0] == module
    )
    hint = (f"module {module!r} was imported but registers no env id {env_id!r}: the part after ':' must be an id "
            f"that the module registers with gymnasium.register")
    listed = ", ".join(mine[:8]) + (" ..." if len(mine) > 8 else "")
    hint += f" (it registers: {listed})" if mine else " (it registers none)"
    target = getattr(importlib.import_module(module), env_id, None)
    if isinstance(target, type) and issubclass(target, gym.Env):
        hint += (f"; {env_id} is a class there: add gymnasium.register('{env_id}-v0', "
                 f"entry_point='{module}:{env_id}') to the module and pass {module}:{env_id}-v0")
    return hint


# MuJoCo 4.0 warns, every time it compiles gymnasium's own HalfCheetah, Hopper, ... model files, that their
# compiler attribute 'settotalmass' is deprecated: gymnasium's assets, nothing a user can act on, and MuJoCo's
# default handler prints it to stderr and appends it to MUJOCO_LOG.TXT in the working directory, once per env
# made in every sampler and evaluator (a HalfCheetah benchmark run printed it 7 times, and the file grows by
# each run). Every other MuJoCo warning still reaches stderr, in MuJoCo's own words.
_KNOWN_MUJOCO_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


def _mujoco_warning(message: str) -> None:
    if not message.startswith(_KNOWN_MUJOCO_WARNINGS):
        print(f"WARNING: {message}", file=sys.stderr, flush=True)


def filter_known_mujoco_warnings(env_id: str) -> None:
    """Install :func:`_mujoco_warning` as MuJoCo's warning handler before a MuJoCo env is made, unless
    someone installed a handler of their own. Envs that are not MuJoCo's never import it here (0.45 s).
    An env whose entry point makes a MuJoCo env itself (a wrapper) calls this with the inner id."""
    try:
        entry_point = str(gym.spec(env_id).entry_point)
    except gym.error.Error:
        return  # an unknown id: gym.make says so next
    if "mujoco" not in entry_point and "mujoco" not in sys.modules:
        return
    try:
        import mujoco
    except ImportError:
        return  # gym.make names the missing dependency
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def _make_quietly_on_failure(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gym.make``, its warnings shown only if it succeeds: a failed make is our one error line alone.

    gymnasium warns before it raises (``Pendulum-v0``: a coloured DeprecationWarning of two lines, then
    DeprecationWarning: "version v0 ... is deprecated"), which put two lines above the ``error:`` line.
    """
    filter_known_mujoco_warnings(env_id)
    with warnings.catch_warnings(record=True) as caught:
        instance = gym.make(env_id, **kwargs)
    for w in caught:  # already filtered when recorded; shown as they would have been
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    return instance


def make_env(env: str, render_mode: str | None = None, env_kwargs: Mapping[str, Any] | None = None) -> gym.Env:
    """Make a checked env with actions rescaled to [-1, 1]. Raises EnvError for any unusable env.

    ``env_kwargs`` (the run's ``--env-kwargs``) go to ``gymnasium.make``: the env's constructor arguments
    (``ctrl_cost_weight``) and ``make``'s own (``max_episode_steps``). A name or value the constructor
    refuses is one line that names the flag."""
    module, env_id = split_env_module(env)
    if module:
        _import_module(module, env)
    kwargs: dict[str, Any] = dict(env_kwargs or {})
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        instance = _make_quietly_on_failure(env_id, kwargs)
    except gym.error.Error as exc:  # NameNotFound, VersionNotFound, NamespaceNotFound, DependencyNotInstalled
        first = first_line(exc)
        if env_id in gym.registry and isinstance(exc, _UNKNOWN_ID_ERRORS):
            # the id is registered, so the unknown id is one its constructor asked gymnasium for (a wrapper env
            # making its base env): saying the module registers no such id would contradict its own list
            raise EnvError(f"making env {env!r} raised gymnasium's {type(exc).__name__} for an env its constructor "
                           f"makes: {first.rstrip('.')}; fix that id (an env the wrapper is given) or pick another") from None
        if module and isinstance(exc, gym.error.NameNotFound):
            typo = f" (gymnasium: {first})" if "Did you mean" in first else ""
            raise EnvError(f"cannot make env {env!r}: {_unregistered_hint(module, env_id)}{typo}") from None
        raise EnvError(
            f"cannot make env {env!r}: {first} (for your own env pass module:EnvId, e.g. my_pkg.envs:MyEnv-v0)"
        ) from None
    except ImportError as exc:
        raise EnvError(f"cannot make env {env!r}: a dependency is missing ({exc}); install it and retry") from None
    except Exception as exc:  # noqa: BLE001 - the env's constructor (user code) raised: say so in one line
        if render_mode is not None and isinstance(exc, TypeError) and "render_mode" in str(exc):
            raise EnvError(f"env {env!r} renders nothing: its constructor takes no render_mode (asked for "
                           f"{render_mode!r}); evaluate --render and --video, and --video-every, need an env that "
                           "renders") from None
        if env_kwargs and isinstance(exc, (TypeError, ValueError)):  # most likely a name or value of the flag
            raise EnvError(f"making env {env!r} with --env-kwargs {json.dumps(dict(env_kwargs))} raised "
                           f"{describe_exception(exc)}; check the names and values against the env's "
                           "constructor") from None
        raise EnvError(f"making env {env!r} raised {describe_exception(exc)}; fix the env or pick another") from None
    try:
        check_spaces(instance, env)
    except EnvError:
        instance.close()
        raise
    if needs_flattening(instance.observation_space):
        instance = FlatObservation(instance, env)
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
    if not np.issubdtype(act.dtype, np.floating):  # [-1, 1] rescaled onto integer bounds gives NaN/inf actions
        raise EnvError(
            f"{name} has an {act.dtype} action Box ({act}); spreeze_like's agents output real-valued actions, which "
            "cannot be rescaled onto integer or boolean bounds: declare the Box with a float dtype (float32) and "
            "round inside the env, or use an agent for discrete actions"
        )
    if not (np.all(np.isfinite(act.low)) and np.all(np.isfinite(act.high))):
        raise EnvError(f"{name} has unbounded action bounds ({act}); wrap it so that its Box has finite low/high")
    if act.shape is None or len(act.shape) != 1:
        raise EnvError(f"{name} has a {act.shape}-shaped action Box; spreeze_like needs a 1-D action vector")
    fixed = np.flatnonzero(act.low == act.high)
    if fixed.size:  # the rescaling divides by high - low: NaN in that dimension
        raise EnvError(
            f"{name}'s action Box has low == high in dimension(s) {fixed.tolist()} ({act}); a fixed action cannot be "
            "learned or rescaled: remove it from the action space (set it inside the env) or give it a range"
        )
    largest = float(max(np.max(np.abs(act.low)), np.max(np.abs(act.high))))
    if largest > MAX_ACTION_BOUND:
        raise EnvError(
            f"{name}'s action Box has bounds up to {largest:.3g} in magnitude ({act}), more than {MAX_ACTION_BOUND:g}, "
            "where rescaling [-1, 1] onto them means nothing (float32 rounding of the actions is too coarse): declare "
            "the range the actuators really have, or rescale inside the env from a [-1, 1] Box"
        )
    obs = env.observation_space
    if isinstance(obs, gym.spaces.Box):
        return
    part = unflattenable_part(obs) if needs_flattening(obs) else f"observation (a {type(obs).__name__} space)"
    if part:
        raise EnvError(
            f"{name}'s observation space {describe(obs)} has a part that cannot be flattened into a fixed-size "
            f"vector: {part}; "
            "spreeze_like's agents take one vector: drop or encode that part in a wrapper (a Box of numbers) and "
            "register the wrapped env"
        )


def env_info(env: str, env_kwargs: Mapping[str, Any] | None = None, first_step: bool = False) -> EnvInfo:
    """Make one env to read its sizes, then close it. Raises EnvError if the env is unusable.

    ``first_step``: also reset it and take one step (:func:`check_first_step`), which the gates before a run
    or a benchmark spawns anything ask for; the roles that only need the sizes do not."""
    instance = make_env(env, env_kwargs=env_kwargs)
    try:
        if first_step:
            check_first_step(instance, env, env_kwargs)
        limit = instance.spec.max_episode_steps if instance.spec is not None else None
        return EnvInfo(
            env_id=env,
            obs_dim=int(np.prod(instance.observation_space.shape)),
            act_dim=int(instance.action_space.shape[0]),
            max_episode_steps=limit,
            structured_obs_space=structured_space_of(instance),
        )
    finally:
        instance.close()


def tool_env(parser: Any, env: str, env_kwargs: Mapping[str, Any] | None = None) -> EnvInfo:
    """A benchmark tool's ``--env``, checked (made, reset and stepped once) before the tool prints, spawns or makes
    a folder: an unusable env ends the tool with one ``error:`` line and exit status 2 (``parser.exit``, the tool's
    argparse parser), as :func:`spreeze_like.devices.tool_device` does for a device. Before, a misspelt id gave a
    traceback, and two tools then waited for a dead child's result (up to an hour)."""
    try:
        return env_info(env, env_kwargs, first_step=True)
    except EnvError as exc:
        parser.exit(2, f"error: {exc}\n")


def made_with_kwargs(env_kwargs: Mapping[str, Any] | None) -> str:
    """`` made with --env-kwargs {...}`` for a message about an env made with the flag, else ``""``."""
    return f" made with --env-kwargs {json.dumps(dict(env_kwargs))}" if env_kwargs else ""


def check_first_step(env: gym.Env, name: str, env_kwargs: Mapping[str, Any] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float, Any]:
    """Reset ``env`` and step it once with the zero action (the middle of every rescaled Box); raise EnvError if
    either raises or returns what a sampler cannot use. Returns that step as (obs, action, next_obs, terminated,
    truncated, info), flat observations as a sampler sees them (``--her-goals`` relabels it: roles/her.py).

    Why here: an env whose ``step`` always fails (a ``--env-kwargs`` value its constructor stores and its step
    cannot use, ``{"g": "x"}`` on Pendulum-v1; an old-gym 4-tuple; a reward of None) used to pass every check
    before the samplers started, then crash each sampler on its first step: a crash loop of 10 restarts with
    back-off, about 3 minutes, before the run failed with exit status 1 (measured 2026-11-29). One step in
    the planning process makes that the usual one ``error:`` line, exit status 2, before a run folder exists.
    An env that fails only later, or only at random, is still the supervisor's to restart."""
    made_with = made_with_kwargs(env_kwargs)
    fix = ("check the names and values against the env's constructor" if env_kwargs
           else "fix the env or pick another")
    old_api = EnvError(f"env {name!r}: its step() returns old gym's 4-tuple; gymnasium envs return (observation, "
                       "reward, terminated, truncated, info): port the env to the gymnasium API")
    # gymnasium's checker warns of what it finds on a first step (a None reward...): not above our one line,
    # and not twice either way, since every sampler's and the serial run's own env warns on its first step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first_obs = reset_env(env, name, seed=0)
        action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
        try:
            result = env.step(action)
        except EnvError:  # a structured observation that does not fit its space: already one line
            raise
        except Exception as exc:  # noqa: BLE001 - user env code: one line, whatever it raised
            if isinstance(exc, ValueError) and "(expected 5, got 4)" in str(exc):  # a gymnasium wrapper unpacked it
                raise old_api from None
            raise EnvError(f"env {name!r}{made_with} raised {describe_exception(exc)} on its first step() (the "
                           f"zero action after reset(seed=0)); {fix}") from None
    if not isinstance(result, tuple) or len(result) != 5:  # an env made without gymnasium's wrappers
        raise old_api
    obs, reward, terminated, truncated, info = result
    next_obs = obs_vector(obs, env.observation_space.shape, name, "step")
    value = np.asarray(reward)
    if value.size != 1 or value.dtype.kind not in REAL_KINDS:
        raise EnvError(f"env {name!r}{made_with} returned the reward {reward!r:.60} ({value.size} value(s) of dtype "
                       f"{value.dtype}) from step(); a reward must be one real number: {fix}")
    for flag, what in ((terminated, "terminated"), (truncated, "truncated")):
        if np.asarray(flag).size != 1:
            raise EnvError(f"env {name!r} returned {what}={flag!r:.60} from step(); it must be one bool: {fix}")
    return first_obs, action, next_obs, float(terminated), float(truncated), info


def reset_env(env: gym.Env, name: str, seed: int | None = None) -> np.ndarray:
    """``env.reset`` as a flat float32 vector; an env that raises, or resets to an observation that does not
    match its declared Box, becomes an EnvError."""
    try:
        obs, _ = env.reset(seed=seed)
    except EnvError:  # a structured observation that does not fit its space (structured_obs): already one line
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of user env code is reported the same way
        raise EnvError(
            f"env {name!r} raised {type(exc).__name__} on reset: {exc}; fix the env or pick another"
        ) from None
    return obs_vector(obs, env.observation_space.shape, name, "reset")


def obs_vector(obs: Any, shape: tuple[int, ...], name: str, method: str) -> np.ndarray:
    """One observation as a flat float32 vector, refused unless it has the declared ``shape`` and a real dtype.

    Cheap enough for every step: one tuple comparison and one dtype-kind test per env step (the cast to
    float32 was done before this check existed too).
    """
    try:
        array = np.asarray(obs)
    except ValueError:  # a ragged sequence
        array = np.asarray(obs, dtype=object)
    if array.shape != shape or array.dtype.kind not in REAL_KINDS:
        got = f"env {name!r} returned an observation of shape {array.shape} and dtype {array.dtype} from {method}()"
        if array.shape != shape:
            raise EnvError(f"{got}, but its observation_space is a Box of shape {shape}: fix the env so that the two "
                           "agree (or wrap it, e.g. in gymnasium.wrappers.ReshapeObservation)")
        raise EnvError(f"{got}; observations are stored as float32, so they must be real numbers (bool, int or "
                       "float): fix the env so that it returns its observation_space's dtype")
    return array.reshape(-1).astype(np.float32, copy=False)


# Keys of a step's ``info`` that say whether the episode reached its goal: SB3's and the Fetch envs'
# ``is_success``, gymnasium-robotics' mazes' ``success``. The first present is read.
SUCCESS_KEYS = ("is_success", "success")


def episode_success(info: Mapping[str, Any]) -> bool | None:
    """Whether the episode whose last step returned ``info`` succeeded; None when the env does not say."""
    for key in SUCCESS_KEYS:
        if key in info:
            return bool(np.asarray(info[key]).any())
    return None
