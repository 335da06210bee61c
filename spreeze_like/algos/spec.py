"""The algorithm spec: sizes and hyperparameters of one algorithm instance.

A module of its own, without torch, so that the roles that never train (samplers, the evaluator)
can describe their policy without importing torch (a second of CPU per process at start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The SAC actor's log-std range (CleanRL's soft clamp), shared by the torch actor (algos/networks.py)
# and the numpy one of samplers and the evaluator (algos/numpy_policy.py).
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclass(frozen=True)
class AlgoSpec:
    """Sizes and hyperparameters of one algorithm instance (picklable: sent to learner processes)."""

    algo: str
    obs_dim: int
    act_dim: int
    hidden_sizes: tuple[int, ...] = (256, 256)  # the actor's (and the critic's, without critic_hidden_sizes)
    critic_hidden_sizes: tuple[int, ...] = ()  # each Q network's; () = hidden_sizes
    gamma: float = 0.99
    n_step: int = 1  # rows hold n-step returns (roles/nstep.py); targets bootstrap with gamma ** n_step
    her_goals: int = 0  # samplers store each step this many times more with relabelled goals (roles/her.py)
    her_strategy: str = "future"  # where those goals come from (roles/her.py)
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 1e-3
    alpha_lr: float = 1e-3
    alpha_init: float = 1.0
    target_entropy: float | None = None
    policy_delay: int = 1
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    exploration_noise: float = 0.1
    precision: str = "fp32"  # resolved: "fp32" or "bf16" (autocast of the hidden layers)
    seed: int = 1

    @classmethod
    def from_config(cls, config: Any, obs_dim: int, act_dim: int) -> AlgoSpec:
        """From a resolved :class:`~spreeze_like.config.TrainConfig` and the env's sizes."""
        names = [f for f in cls.__dataclass_fields__ if f not in ("algo", "obs_dim", "act_dim")]
        values = {n: getattr(config, n) for n in names}
        values["hidden_sizes"] = tuple(values["hidden_sizes"])
        values["critic_hidden_sizes"] = tuple(values["critic_hidden_sizes"])
        if values["actor_lr"] is None:  # an unresolved config: what resolve() would fill in
            from spreeze_like.config import auto_actor_lr

            values["actor_lr"] = auto_actor_lr(config.env, config.algo, config.presets)
        return cls(algo=config.algo, obs_dim=obs_dim, act_dim=act_dim, **values)

    @property
    def critic_widths(self) -> tuple[int, ...]:
        """Hidden layer widths of each Q network."""
        return self.critic_hidden_sizes or self.hidden_sizes

    @property
    def bootstrap_gamma(self) -> float:
        """The discount of a row's bootstrap value: ``gamma`` for one-step rows, ``gamma ** n_step`` for n-step."""
        return self.gamma**self.n_step

    @property
    def n_q(self) -> int:
        return 1 if self.algo == "ddpg" else 2

