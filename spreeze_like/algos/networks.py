"""Actor and critic networks, and the flat-vector view of their parameters.

All actors act in ``[-1, 1]^act_dim``; the env wrapper (``envs.make_env``) rescales to the env's
bounds. The flat vectors (float32 numpy, ``parameters_to_vector`` order) are what the weight boards
carry between processes; ``get_flat``/``set_flat`` are the only two functions that touch that order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from spreeze_like.algos.spec import LOG_STD_MAX, LOG_STD_MIN

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class FP32Linear(nn.Linear):
    """A linear layer that always computes in float32, even inside a bfloat16 autocast region.

    Used for the output heads. With bf16 mixed precision (``precision`` in the config) the wide
    hidden layers run in bf16, but a Q value of -1000 in bf16 is only resolved to steps of 4, about
    the size of the TD errors the critic learns from; the heads are a tiny share of the FLOPs, so
    they keep float32 and Q values, log-probabilities and actions keep full precision.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.linear(x.float(), self.weight, self.bias)


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, fp32_out: bool = True) -> nn.Sequential:
    """ReLU MLP; its output layer is an :class:`FP32Linear` head unless ``fp32_out`` is False."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    layers.append(FP32Linear(in_dim, out_dim) if fp32_out else nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class SquashedGaussianActor(nn.Module):
    """SAC policy: a Gaussian over pre-tanh actions, squashed into [-1, 1] by tanh."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        trunk_out = hidden[-1]
        if len(hidden) > 1:
            self.trunk: nn.Module = mlp(obs_dim, hidden[:-1], trunk_out, fp32_out=False)
        else:
            self.trunk = nn.Linear(obs_dim, trunk_out)
        self.mean = FP32Linear(trunk_out, act_dim)
        self.log_std = FP32Linear(trunk_out, act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.trunk(obs))
        log_std = torch.tanh(self.log_std(h))  # soft clamp into [LOG_STD_MIN, LOG_STD_MAX], as CleanRL does
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(h), log_std

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action and its log-probability ``[B]`` (tanh correction included)."""
        mean, log_std = self(obs)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        x = mean + log_std.exp() * eps
        log_prob = (-0.5 * eps.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        # log(1 - tanh(x)^2) written stably as 2 * (log 2 - x - softplus(-2x))
        log_prob = log_prob - (2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))).sum(-1)
        return torch.tanh(x), log_prob

    def explore(self, obs: torch.Tensor, generator: torch.Generator | None, noise_std: float) -> torch.Tensor:
        """Sampling-time action: a draw from the policy (``noise_std`` is a TD3/DDPG knob, unused)."""
        return self.sample(obs, generator)[0]

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


class DeterministicActor(nn.Module):
    """TD3/DDPG policy: tanh of an MLP."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))

    def explore(self, obs: torch.Tensor, generator: torch.Generator | None, noise_std: float) -> torch.Tensor:
        """Sampling-time action: the policy plus Gaussian noise, clipped back into [-1, 1]."""
        action = self(obs)
        noise = torch.randn(action.shape, generator=generator, device=action.device, dtype=action.dtype)
        return (action + noise_std * noise).clamp(-1.0, 1.0)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return self(obs)


def actor_class(algo: str) -> type[nn.Module]:
    """The actor network of ``algo``: a squashed Gaussian for SAC, deterministic for TD3 and DDPG."""
    return SquashedGaussianActor if algo == "sac" else DeterministicActor


class Critic(nn.Module):
    """``n_q`` independent Q networks Q(s, a) -> [B] (twin for SAC/TD3, single for DDPG)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        self.qs = nn.ModuleList(mlp(obs_dim + act_dim, hidden, 1) for _ in range(n_q))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return [q(x).squeeze(-1) for q in self.qs]


# --- flat parameter vectors (the weight-board format) ------------------------------------------------
# Callers on a hot path pass cached parameter lists: walking nn.Module trees every update costs more
# than copying the numbers of a small MLP.
def numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def params_of(modules: Iterable[nn.Module]) -> list[torch.Tensor]:
    return [p for m in modules for p in m.parameters()]


def get_flat(modules: Iterable[nn.Module] | list[torch.Tensor]) -> np.ndarray:
    """All parameters (of modules, or a parameter list) as one float32 numpy vector (a copy, on the CPU)."""
    params = _as_params(modules)
    with torch.no_grad():
        # cat always allocates, so the numpy array never aliases a live parameter
        return torch.cat([p.reshape(-1) for p in params]).to("cpu", torch.float32).numpy()


def set_flat(modules: Iterable[nn.Module] | list[torch.Tensor], vec: np.ndarray) -> None:
    """Load a vector made by :func:`get_flat` (same modules, same order) into ``modules``."""
    params = _as_params(modules)
    total = sum(p.numel() for p in params)
    if vec.shape != (total,):
        raise ValueError(f"weight vector has shape {vec.shape}, the networks need ({total},)")
    # Copy into the existing storage (never alias ``vec``: it may be a view of a shared board).
    source = torch.as_tensor(vec).to(device=params[0].device, dtype=params[0].dtype)
    with torch.no_grad():
        offset = 0
        for p in params:
            p.copy_(source[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


def _as_params(modules: Iterable[nn.Module] | list[torch.Tensor]) -> list[torch.Tensor]:
    items = list(modules)
    return items if items and isinstance(items[0], torch.Tensor) else params_of(items)


@torch.no_grad()
def soft_update(target: list[torch.Tensor], source: list[torch.Tensor], tau: float) -> None:
    """Polyak averaging over parameter lists: target <- tau * source + (1 - tau) * target."""
    torch._foreach_lerp_(target, source, tau)
