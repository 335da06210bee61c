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

_LOG_PROB_CONSTANT = 0.5 * math.log(2.0 * math.pi) + 2.0 * math.log(2.0)  # per action dim: Gaussian + tanh terms
LOG_STD_MID, LOG_STD_HALF_RANGE = (LOG_STD_MAX + LOG_STD_MIN) / 2.0, (LOG_STD_MAX - LOG_STD_MIN) / 2.0


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
        # soft clamp into [LOG_STD_MIN, LOG_STD_MAX], as CleanRL does: MIN + (MAX - MIN) * (tanh + 1) / 2
        log_std = torch.tanh(self.log_std(h)) * LOG_STD_HALF_RANGE + LOG_STD_MID
        return self.mean(h), log_std

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action ``tanh(x)``, ``x = mean + std * eps``, and its log-probability ``[B]``.

        Per action dimension, ``log N(x; mean, std) = -eps^2 / 2 - log_std - log(2 pi) / 2`` and the tanh
        correction ``-log(1 - tanh(x)^2) = -2 * (log 2 - x - softplus(-2x))`` (the stable form); summed:
        ``log_prob = -sum(log_std + eps^2 / 2 - 2 * (x + softplus(-2x))) - dims * (log(2 pi) / 2 + 2 log 2)``.
        Written in that order because each op is a kernel of a GPU update (7 here against 12 for the
        two terms written apart); ``tests/trainer/test_algos.py`` checks it against torch.distributions.
        """
        pi, log_prob, _ = squashed_sample(*self(obs), generator)
        return pi, log_prob

    def explore(self, obs: torch.Tensor, generator: torch.Generator | None, noise_std: float) -> torch.Tensor:
        """Sampling-time action: a draw from the policy (``noise_std`` is a TD3/DDPG knob, unused)."""
        return self.sample(obs, generator)[0]

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor,
                    generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:meth:`SquashedGaussianActor.sample` from the Gaussian's parameters: the action, its
    log-probability and the standard normal draw ``eps`` (which a hand-written backward pass needs)."""
    eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    x = torch.addcmul(mean, log_std.exp(), eps)
    per_dim = torch.addcmul(log_std, eps, eps, value=0.5).add(x + F.softplus(-2.0 * x), alpha=-2.0)
    log_prob = (-mean.shape[-1] * _LOG_PROB_CONSTANT) - per_dim.sum(-1)
    return torch.tanh(x), log_prob, eps


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

    ``channels_first`` is the transposed layout, ``[n, in, B] -> [n, out, B]`` with ``weight[i]`` =
    ``layers[i].weight`` and ``bias[i, :, 0]`` = ``layers[i].bias``, for CrossQ's critic: its Batch
    Renormalization reduces over the rows, and with the features first the stacked activations are
    already the ``[1, n * features, B]`` tensor torch's batch-norm kernel takes, without a copy.
    """

    def __init__(self, layers: Sequence[nn.Linear], fp32: bool = False, channels_first: bool = False) -> None:
        super().__init__()
        with torch.no_grad():
            if channels_first:
                self.weight = nn.Parameter(torch.stack([layer.weight for layer in layers]).contiguous())
                self.bias = nn.Parameter(torch.stack([layer.bias for layer in layers]).unsqueeze(-1).contiguous())
            else:
                self.weight = nn.Parameter(torch.stack([layer.weight.t() for layer in layers]).contiguous())
                self.bias = nn.Parameter(torch.stack([layer.bias for layer in layers]).unsqueeze(1).contiguous())
        self.fp32, self.channels_first = fp32, channels_first

    def _operands(self, x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The two matrices of ``bias + mat1 @ mat2`` in this layer's layout."""
        return (weight, x) if self.channels_first else (x, weight)

    def forward(self, x: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """Apply the first ``members`` layers (all by default) at once: ``[members, B, out]``."""
        weight, bias = (self.weight, self.bias) if members is None else (self.weight[:members], self.bias[:members])
        if x.dim() == 2:
            x = x.expand(weight.shape[0], *x.shape)
        if self.fp32:
            return in_fp32(lambda x: torch.baddbmm(bias, *self._operands(x, weight)), x)
        return torch.baddbmm(bias, *self._operands(x, weight))

    def forward_each(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Apply the first ``len(xs)`` layers one by one, layer ``i`` to the rows ``xs[i]`` ``[B, in]``
        (each ``[B, out]``, in either layout: the CPU's GEMMs take the rows).

        Each runs on views of its own slices: a squeeze (no kernel in the backward pass) for a stack of
        one, an unbind (one stack) for several; not ``weight[i]``, whose backward is a zero-filled
        tensor of the whole stack per layer.
        """
        bias = self.bias.squeeze(-1 if self.channels_first else 1)  # [n, out]
        if len(self.weight) == 1:
            weights, biases = [self.weight.squeeze(0)], [bias.squeeze(0)]
        else:
            weights, biases = self.weight.unbind(0), bias.unbind(0)
        if self.channels_first:  # nn.Linear's [out, in]: the rows' GEMM reads it transposed (a view)
            weights = [w.t() for w in weights]
        if self.fp32:
            return [in_fp32(lambda x, w=w, b=b: torch.addmm(b, x, w), x) for x, w, b in zip(xs, weights, biases)]
        return [torch.addmm(b, x, w) for x, w, b in zip(xs, weights, biases)]


class StackedQ(nn.Module):
    """What the stacked critics (:class:`Critic`, ``crossq_critic.CrossQCritic``) share: where the
    batched layers run.

    On the CPU the matmuls are compute-bound and the batched kernels lose: a SAC step at HalfCheetah
    sizes, batch 1024, took ~10% longer with baddbmm/bmm than with one GEMM per network (an ad-hoc A/B
    on EPYC-3-2, two runs). There each network runs on its own slices of the same parameters, as
    separate networks did (EnsembleLinear.forward_each). Tests and tools/bench_critic_layout.py set
    ``StackedQ.batched_on_cpu`` to run the GPU's path on the CPU.
    """

    batched_on_cpu = False
    # Rows at and above which a GPU runs the networks one by one too; None: batched at any size.
    batched_max_rows: int | None = None
    layers: nn.ModuleList  # of EnsembleLinear, each holding the weights of every network

    @property
    def n_q(self) -> int:
        """How many Q networks: the stack's depth (no second record that could disagree with it)."""
        return len(self.layers[0].weight)

    def batched(self, device: torch.device, rows: int = 0) -> bool:
        """Whether ``rows`` rows run through the batched layers (the GPU's rule; the CPU's with
        ``batched_on_cpu``) or one network at a time on its own slices (the CPU). A shape, not a value:
        a captured graph takes one branch for its fixed batch."""
        if device.type == "cpu" and not self.batched_on_cpu:
            return False
        return self.batched_max_rows is None or rows < self.batched_max_rows


class Critic(StackedQ):
    """``n_q`` independent Q networks Q(s, a) -> [B] (twin for SAC/TD3, single for DDPG), computed as
    one stack of :class:`EnsembleLinear` layers: ReLU hidden layers, a float32 head.

    The Q networks share nothing but the kernels: each has its own weights, initialised as
    ``n_q`` separate ``mlp(obs_dim + act_dim, hidden, 1)`` built one after the other would be
    (checkpoints of format 1 held those separate networks; ``algos/layout_v1.py`` converts them).
    """

    # The batched layers lose at large batches on a GPU. One H200 call (2026-11-27, 21:13 UTC) timed the
    # whole update at each side of the old limit of 16,384: one by one / batched was 1.00x at 4096,
    # 1.11x at 8192, 1.31x at 16384 and 1.62x at 65536 (29.4 M against 18.1 M frames/s; two separate
    # networks 29.9 M); the stack wins at 256 (1.05x separate). So a GPU runs the networks one by one from
    # 8,192 rows (docs/gpu.md); tools/bench_gpu.py times both sides of the limit each call.
    batched_max_rows = 8192

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        per_q = [[m for m in mlp(obs_dim + act_dim, hidden, 1) if isinstance(m, nn.Linear)] for _ in range(n_q)]
        last = len(hidden)
        self.layers = nn.ModuleList(
            EnsembleLinear([q[k] for q in per_q], fp32=k == last) for k in range(last + 1)
        )

    def forward(self, obs: torch.Tensor, action: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """The Q values ``[n_q, B]`` of every network, or ``[members, B]`` of the first ``members`` (TD3's
        actor loss reads Q1 only: computing Q2 too would double its backward pass for a gradient of zero).

        One tensor, not one per network: the losses and the TD errors of all networks are then one op
        each (``base.weighted_mse``, ``base.q_report``), and on the GPU's path it is the head's
        output itself, without a copy."""
        h = torch.cat([obs, action], dim=-1)
        n = self.n_q if members is None else members
        if n == 1 or not self.batched(h.device, len(h)):  # a stack of one saves nothing (DDPG, TD3's Q1)
            return self._one_by_one(h, n)
        for layer in self.layers[:-1]:
            h = F.relu(layer(h, members))
        return self.layers[-1](h, members).squeeze(-1)

    def _one_by_one(self, x: torch.Tensor, n: int) -> torch.Tensor:
        hs = [x] * n
        for layer in self.layers[:-1]:
            hs = [F.relu(h) for h in layer.forward_each(hs)]
        qs = [h.squeeze(-1) for h in self.layers[-1].forward_each(hs)]
        return qs[0].unsqueeze(0) if n == 1 else torch.stack(qs)  # [n, B] (one network: a view, no copy)


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
