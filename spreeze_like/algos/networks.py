"""Actor and critic networks, and the flat-vector view of their parameters.

All actors act in ``[-1, 1]^act_dim``; the env wrapper (``envs.make_env``) rescales to the env's
bounds. The flat vectors (float32 numpy, ``parameters_to_vector`` order) are what the weight boards
carry between processes; ``get_flat``/``set_flat`` are the only two functions that touch that order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

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
        return in_fp32(lambda x: F.linear(x, self.weight, self.bias), x)


def in_fp32(compute: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``compute(x)`` in float32 even inside a bf16 autocast region (the output heads: see FP32Linear)."""
    if not torch.is_autocast_enabled(x.device.type):  # fp32 runs: no autocast context to enter and leave
        return compute(x)
    with torch.autocast(device_type=x.device.type, enabled=False):
        return compute(x.float())


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
    """The actor network of ``algo``: a squashed Gaussian for SAC and CrossQ, deterministic for TD3 and DDPG."""
    return SquashedGaussianActor if algo in ("sac", "crossq") else DeterministicActor


def critic_class(algo: str) -> type[nn.Module]:
    """The critic network of ``algo``: batch-renormalised for CrossQ, a plain MLP per Q for the others."""
    return CrossQCritic if algo == "crossq" else Critic


class EnsembleLinear(nn.Module):
    """``n`` linear layers of one shape applied together: ``[n, B, in] -> [n, B, out]`` in one batched matmul.

    Why: a twin-Q critic built as two MLPs issues every matmul, bias add and ReLU twice, forward and
    backward. At batch 256 on a GPU each of those is a kernel of a few microseconds whose latency, not
    its arithmetic, sets the update rate (a SAC critic step issued 114 such ops, counted on the CPU by
    tools/bench_critic_layout.py); stacked, each layer is one ``baddbmm`` whatever ``n`` is. An input
    ``[B, in]`` (the first layer's ``cat(obs, action)``) is shared by all ``n`` layers without a copy.

    ``weight[i]`` is ``layers[i].weight.T`` and ``bias[i, 0]`` is ``layers[i].bias``: built from
    ``nn.Linear`` modules, so the initial weights are torch's default init, drawn in the same order as
    ``n`` separate networks. ``fp32`` makes it an output head that computes in float32 inside a bf16
    autocast region, as :class:`FP32Linear` does.
    """

    def __init__(self, layers: Sequence[nn.Linear], fp32: bool = False) -> None:
        super().__init__()
        with torch.no_grad():
            self.weight = nn.Parameter(torch.stack([layer.weight.t() for layer in layers]).contiguous())
            self.bias = nn.Parameter(torch.stack([layer.bias for layer in layers]).unsqueeze(1).contiguous())
        self.fp32 = fp32

    def forward(self, x: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """Apply the first ``members`` layers (all by default) at once: ``[members, B, out]``."""
        weight, bias = (self.weight, self.bias) if members is None else (self.weight[:members], self.bias[:members])
        if x.dim() == 2:
            x = x.expand(weight.shape[0], *x.shape)
        if self.fp32:
            return in_fp32(lambda x: torch.baddbmm(bias, x, weight), x)
        return torch.baddbmm(bias, x, weight)

    def forward_each(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Apply the first ``len(xs)`` layers one by one, layer ``i`` to ``xs[i]`` (each ``[B, out]``).

        Each runs on views of its own slices: a squeeze (no kernel in the backward pass) for a stack of
        one, an unbind (one stack) for several; not ``weight[i]``, whose backward is a zero-filled
        tensor of the whole stack per layer.
        """
        if len(self.weight) == 1:
            weights, biases = [self.weight.squeeze(0)], [self.bias.squeeze(0)]
        else:
            weights, biases = self.weight.unbind(0), self.bias.unbind(0)
        if self.fp32:
            return [in_fp32(lambda x, w=w, b=b: torch.addmm(b, x, w), x) for x, w, b in zip(xs, weights, biases)]
        return [torch.addmm(b, x, w) for x, w, b in zip(xs, weights, biases)]


class Critic(nn.Module):
    """``n_q`` independent Q networks Q(s, a) -> [B] (twin for SAC/TD3, single for DDPG), computed as
    one stack of :class:`EnsembleLinear` layers: ReLU hidden layers, a float32 head.

    The Q networks share nothing but the kernels: each has its own weights, initialised as
    ``n_q`` separate ``mlp(obs_dim + act_dim, hidden, 1)`` built one after the other would be
    (checkpoints of format 1 held those separate networks; ``algos/layout_v1.py`` converts them).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        per_q = [[m for m in mlp(obs_dim + act_dim, hidden, 1) if isinstance(m, nn.Linear)] for _ in range(n_q)]
        last = len(hidden)
        self.layers = nn.ModuleList(
            EnsembleLinear([q[k] for q in per_q], fp32=k == last) for k in range(last + 1)
        )

    def forward(self, obs: torch.Tensor, action: torch.Tensor, members: int | None = None) -> list[torch.Tensor]:
        """The Q values ``[B]`` of every network, or of the first ``members`` (TD3's actor loss reads Q1
        only: computing Q2 too would double its backward pass for a gradient of zero)."""
        h = torch.cat([obs, action], dim=-1)
        n = len(self.layers[0].weight) if members is None else members
        if n == 1 or (h.device.type == "cpu" and not self.batched_on_cpu):
            return self._one_by_one(h, n)
        for layer in self.layers[:-1]:
            h = F.relu(layer(h, members))
        return list(self.layers[-1](h, members).squeeze(-1).unbind(0))

    # On the CPU the matmuls are compute-bound and the batched kernels lose: a SAC step at HalfCheetah
    # sizes, batch 1024, took ~10% longer with baddbmm/bmm than with one GEMM per network (an ad-hoc
    # A/B on EPYC-3-2, two runs). There, and for a single network (DDPG, TD3's Q1: a batch of one saves
    # nothing), each network runs on its own slices of the same parameters, as separate MLPs did
    # (EnsembleLinear.forward_each). Tests set ``batched_on_cpu`` to run the GPU's path on the CPU.
    batched_on_cpu = False

    def _one_by_one(self, x: torch.Tensor, n: int) -> list[torch.Tensor]:
        hs = [x] * n
        for layer in self.layers[:-1]:
            hs = [F.relu(h) for h in layer.forward_each(hs)]
        return [h.squeeze(-1) for h in self.layers[-1].forward_each(hs)]


class BatchRenorm(nn.Module):
    """Batch Renormalization (Ioffe 2017) over the features of ``[B, F]`` inputs, for CrossQ's critic.

    Train mode normalises with the batch's mean and standard deviation, corrected towards the
    running statistics by ``r = clip(sigma_B / sigma, 1/r_max, r_max)`` and
    ``d = clip((mu_B - mu) / sigma, -d_max, d_max)`` (both without gradient): ``y = gamma *
    ((x - mu_B) / sigma_B * r + d) + beta``. For the first ``warmup`` updates ``r = 1, d = 0``, i.e.
    plain batch normalisation, so the running statistics settle before they steer anything (the
    CrossQ authors' warm-up of 100,000 updates, then r_max 3 and d_max 5). Eval mode uses the
    running statistics: ``y = gamma * (x - mu) / sigma + beta``, an affine map.

    The statistics are computed in float32 even inside a bf16 autocast region (a batch mean of
    bf16 values keeps 8 bits). Variances are the batch's population variance, for normalising and
    for the running estimate alike.

    The running statistics are not updated by ``forward``: a train-mode forward keeps the batch's
    mean and variance, and :meth:`commit` folds them in after the optimiser step, unless that step
    was skipped for non-finite gradients (``roles/nonfinite.py``). A NaN batch would otherwise leave
    NaN running statistics behind for good, although the guard kept every weight unchanged.
    ``running_mean`` and ``running_var`` are updated in place: the weight boards hold references.
    """

    def __init__(self, features: int, momentum: float = 0.01, eps: float = 1e-3, warmup: int = 100_000,
                 r_max: float = 3.0, d_max: float = 5.0) -> None:
        super().__init__()
        self.momentum, self.eps, self.warmup, self.r_max, self.d_max = momentum, eps, warmup, r_max, d_max
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))  # committed train-mode updates
        self._batch_stats: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        if x.device.type == "cpu" and int(self.steps) < self.warmup:
            # Warm-up on the CPU: r = 1 and d = 0, so this is plain batch norm with the affine part fused into
            # the kernel, without the elementwise ops of r, d and the addcmul below (forward and backward).
            # A CrossQ 256x256 critic step at HalfCheetah sizes: 13.5 -> 12.1 ms (ad-hoc A/B, quiet machine).
            # The step count is a host read, free on the CPU; a CUDA graph cannot branch on it.
            y, mean, invstd = torch.native_batch_norm(x, self.weight, self.bias, None, None, True, 0.0, self.eps)
        else:
            # torch's batch-norm kernel normalises and returns the batch mean and 1/sigma_B; the affine
            # part with r and d is one addcmul. Measured on this CPU (fwd + bwd, [512, 256]): 0.6 ms, against
            # 1.6 ms for the same formula in elementwise torch ops.
            x_hat, mean, invstd = torch.native_batch_norm(x, None, None, None, None, True, 0.0, self.eps)
            with torch.no_grad():
                running_std = (self.running_var + self.eps).sqrt()
                warm = self.steps >= self.warmup
                r = torch.where(warm, (invstd.reciprocal() / running_std).clamp(1.0 / self.r_max, self.r_max), 1.0)
                d = torch.where(warm, ((mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max), 0.0)
            y = torch.addcmul(self.bias + self.weight * d, x_hat, self.weight * r)
        with torch.no_grad():
            self._batch_stats = (mean, (invstd.pow(-2) - self.eps).clamp_min(0.0))  # the population variance
        return y

    @torch.no_grad()
    def commit(self, keep: torch.Tensor | None = None) -> None:
        """Fold the last train-mode batch into the running statistics; ``keep`` (0-dim bool) False skips it."""
        if self._batch_stats is None:
            return
        mean, var = self._batch_stats
        self._batch_stats = None
        new_mean = self.running_mean.lerp(mean, self.momentum)
        new_var = self.running_var.lerp(var, self.momentum)
        if keep is None:
            self.running_mean.copy_(new_mean)
            self.running_var.copy_(new_var)
            self.steps.add_(1)
        else:  # where, not a 0-weight lerp: 0 * NaN is NaN
            self.running_mean.copy_(torch.where(keep, new_mean, self.running_mean))
            self.running_var.copy_(torch.where(keep, new_var, self.running_var))
            self.steps.add_(keep.to(torch.int64))


class CrossQCritic(nn.Module):
    """CrossQ's ``n_q`` Q networks (Bhatt et al. 2024): Batch Renormalization on the input and after
    every hidden activation, ``BRN -> [Linear -> ReLU -> BRN] x len(hidden) -> Linear`` per Q, and no
    target copy anywhere. Same call as :class:`Critic`; :meth:`commit_statistics` after each update.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        self.qs = nn.ModuleList(self._q(obs_dim + act_dim, hidden) for _ in range(n_q))

    @staticmethod
    def _q(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
        layers: list[nn.Module] = [BatchRenorm(in_dim)]
        for width in hidden:
            layers += [nn.Linear(in_dim, width), nn.ReLU(), BatchRenorm(width)]
            in_dim = width
        layers.append(FP32Linear(in_dim, 1))
        return nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return [q(x).squeeze(-1) for q in self.qs]

    def commit_statistics(self, keep: torch.Tensor | None = None) -> None:
        """Fold the last train-mode batch into every layer's running statistics (see :meth:`BatchRenorm.commit`)."""
        for m in self.modules():
            if isinstance(m, BatchRenorm):
                m.commit(keep)


def running_statistics(module: nn.Module) -> list[torch.Tensor]:
    """The running means and variances of ``module``'s Batch Renormalization layers, in module order
    (what travels in the critic vector after the parameters); empty for networks without them."""
    return [t for m in module.modules() if isinstance(m, BatchRenorm) for t in (m.running_mean, m.running_var)]


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
