"""A trained policy outside the trainer: :func:`load_policy` of a run folder or a checkpoint file.

What a user of a trainer does after training: act with the policy in a script, a notebook or a robot
loop (SB3's ``load`` + ``predict``), and watch or score it (``python -m spreeze_like.evaluate``).

The policy is the deterministic actor the evaluator scores (``tanh(mean)`` for SAC and CrossQ, the
policy itself for TD3 and DDPG), in numpy (:class:`~spreeze_like.algos.numpy_policy.NumpyPolicy`): no
torch after loading, a few BLAS calls per action. It takes observations as the env of
:func:`~spreeze_like.envs.make_env` gives them and returns actions in that env's box, ``[-1, 1]`` per
dimension (make_env rescales every Box action space to it, so replay and the networks never see an
env's own bounds); :meth:`Policy.make_env` makes that env, and :meth:`Policy.env_action` maps an action
to the env's own bounds for a script that steps the unwrapped env. Such a script may hand the policy
the unwrapped env's Dict or Tuple observations too: it flattens them as make_env does.

Which weights: the actor learner's part of the checkpoint (``roles["actor-learner"]``), the same in
both modes. A run folder gives its newest checkpoint. Everything that makes a path unusable is a
one-line :class:`~spreeze_like.errors.CheckpointError` (no checkpoint, corrupt, not ours, a format
this version cannot read); an env that cannot be made is the trainer's one-line error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spreeze_like.algos.numpy_policy import NumpyPolicy
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.checkpoint import list_checkpoints, load_checkpoint
from spreeze_like.errors import CheckpointError, EnvError

ACTOR_ROLE = "actor-learner"


@dataclass
class Policy:
    """A loaded deterministic policy: ``policy(obs) -> action`` for one observation or a batch."""

    env_id: str
    algo: str
    seed: int  # the run's seed: :func:`~spreeze_like.seeding.eval_seed` of it gives the evaluator's start states
    env_steps: int  # how far the run had trained when the checkpoint was written
    checkpoint: Path
    actor: NumpyPolicy
    obs_dim: int
    act_dim: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # the run's --env-kwargs
    structured_obs_space: Any = None  # the env's own Dict/Tuple space that make_env flattens; None for a Box

    def __call__(self, obs: Any) -> np.ndarray:
        """The action ``[act_dim]`` for one observation ``[obs_dim]``, or ``[B, act_dim]`` for ``[B, obs_dim]``.

        An env whose observations make_env flattens (a Dict or Tuple space) may also be stepped unwrapped:
        one observation of its own space (a dict or a tuple) is checked and flattened as make_env's wrapper does."""
        if self.structured_obs_space is not None and isinstance(obs, (Mapping, tuple)):
            from spreeze_like.structured_obs import flatten_observation

            try:
                obs = flatten_observation(self.structured_obs_space, obs, self.env_id, "step")
            except EnvError as exc:
                raise ValueError(str(exc)) from None
        x = np.asarray(obs, dtype=np.float32)
        if x.shape[-1:] != (self.obs_dim,) or x.ndim > 2:
            raise ValueError(f"observation of shape {x.shape}; this policy takes ({self.obs_dim},) or (B, {self.obs_dim})")
        action = self.actor.act_deterministic(x.reshape(-1, self.obs_dim))
        return action[0] if x.ndim == 1 else action

    def make_env(self, render_mode: str | None = None) -> Any:
        """The env this policy acts in, as the trainer makes it (actions in ``[-1, 1]``)."""
        from spreeze_like.envs import make_env

        return make_env(self.env_id, render_mode=render_mode, env_kwargs=self.env_kwargs)

    @staticmethod
    def env_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """An action of this policy in an env's own bounds (what ``RescaleAction`` does inside make_env)."""
        return low + (np.asarray(action) + 1.0) * 0.5 * (high - low)


def checkpoint_of(path: str | Path) -> Path:
    """The checkpoint file a path names: itself, or a run folder's newest."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path} does not exist; give a run folder (runs/...) or a checkpoint file (.pt)")
    found = list_checkpoints(path)
    if not found:
        raise CheckpointError(f"no checkpoint in {path / 'checkpoints'}: the run wrote none yet (it writes one at its "
                              "end, on Ctrl-C and every --checkpoint-every steps); give another run folder")
    return found[-1]


def load_policy(path: str | Path, env: str | None = None) -> Policy:
    """The deterministic policy of a run folder (its newest checkpoint) or of a checkpoint file.

    ``env``: the env it was trained on, as the run's ``--env`` named it. Needed only where that is your own
    ``module:EnvId``: a checkpoint is data, and its env's module is imported only if you name it (a ``module.py``
    beside a downloaded run would run otherwise; review finding 4, as for ``--resume``)."""
    from spreeze_like.envs import env_info
    from spreeze_like.rundir import refuse_unnamed_env_module

    file = checkpoint_of(path)
    payload = load_checkpoint(file)
    config = payload.get("config", {})
    try:
        algo, env_id, hidden = str(config["algo"]), str(config["env"]), tuple(int(h) for h in config["hidden_sizes"])
        state = payload["roles"][ACTOR_ROLE]["part"]["modules"]["actor"]
        env_kwargs = dict(config.get("env_kwargs") or {})  # a checkpoint from before --env-kwargs: none
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{file} holds no actor ({type(exc).__name__}: {exc}); it is not a checkpoint of a "
                              "training run") from None
    if env is not None and env != env_id:
        raise CheckpointError(f"{file} is a policy for env {env_id!r}, not {env!r}; name the env it was trained on "
                              "(or none, for a gymnasium id)")
    refuse_unnamed_env_module(env_id, env, str(file), f"add --env {env_id} (in Python: load_policy(path, "
                                                      f"env={env_id!r}))")
    info = env_info(env_id, env_kwargs)
    spec = AlgoSpec(algo=algo, obs_dim=info.obs_dim, act_dim=info.act_dim, hidden_sizes=hidden)
    actor = NumpyPolicy(spec)
    vector = np.concatenate([np.asarray(t, dtype=np.float32).reshape(-1) for t in state.values()])
    try:
        actor.load(vector)  # the state dict's order is the parameters' order: the published vector's
    except ValueError as exc:
        raise CheckpointError(f"{file}: its actor does not fit {env_id} with hidden sizes {hidden} ({exc})") from None
    return Policy(env_id=env_id, algo=algo, seed=int(config.get("seed", 1)), env_steps=int(payload.get("env_steps", 0)),
                  checkpoint=file, actor=actor, obs_dim=info.obs_dim, act_dim=info.act_dim, env_kwargs=env_kwargs,
                  structured_obs_space=info.structured_obs_space)
