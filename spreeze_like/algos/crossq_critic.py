"""CrossQ's critic: twin Q networks with Batch Renormalization, stacked as the plain critic's are.

What sits here: :class:`BatchRenorm` (the normalisation layer, with its running statistics) and
:class:`CrossQCritic` (the ``n_q`` networks as one stack of layers). The algorithm that trains them is
``algos/crossq.py``. Owns no process or shared resource.

Why stacked (checkpoint format 3; formats 1 and 2 held one ``nn.Sequential`` per network and are
converted as they load, ``algos/layout_v2.py``): at batch 256 on a GPU a CrossQ critic step is a chain
of small kernels whose count sets its rate, and two separate networks issue every matmul, ReLU and
batch-renorm op twice. Stacked, the activations of all networks are one ``[n_q, features, rows]``
tensor (features first): a layer is one ``baddbmm`` (``EnsembleLinear`` with ``channels_first``), and
the same tensor viewed as ``[1, n_q * features, rows]`` is what torch's batch-norm kernel normalises
per channel over the rows, so one :class:`BatchRenorm` of ``n_q * features`` channels holds every
network's statistics and affine parameters for that layer, with no copy in between. Channel
``q * features + f`` is feature ``f`` of network ``q``: the networks still share nothing but kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from spreeze_like.algos.networks import EnsembleLinear, StackedQ, mlp


class BatchRenorm(nn.Module):
    """Batch Renormalization (Ioffe 2017) per channel of ``[B, C]`` or ``[1, C, B]`` inputs, for CrossQ's critic.

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

    def forward(self, x: torch.Tensor, warming_up: bool | None = None) -> torch.Tensor:
        """Normalise ``x``. ``warming_up``: True when the caller knows that fewer than ``warmup`` updates
        were committed (then ``r = 1, d = 0``, and the batch norm takes the shortcut below); False computes
        ``r`` and ``d`` on the device, right in both phases; None reads ``steps`` on the CPU (free there)
        and is False elsewhere (a CUDA graph cannot branch on a device value)."""
        if not self.training:
            return F.batch_norm(x.float(), self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        y, mean, var = self._train(x, self.weight, self.bias, self.running_mean, self.running_var, warming_up)
        self._batch_stats = (mean, var)
        return y

    def forward_each(self, xs: list[torch.Tensor], warming_up: bool | None = None) -> list[torch.Tensor]:
        """Normalise ``len(xs)`` networks' rows ``[B, F]`` one by one, network ``q`` with channels
        ``q * F ... (q + 1) * F - 1`` (the CPU's path: two narrow calls beat one wide one there)."""
        n = len(xs)
        slices = [t.view(n, -1).unbind(0) for t in (self.weight, self.bias, self.running_mean, self.running_var)]
        if not self.training:
            return [F.batch_norm(x.float(), m, v, w, b, False, 0.0, self.eps) for x, w, b, m, v in zip(xs, *slices)]
        outs = [self._train(x, w, b, m, v, warming_up) for x, w, b, m, v in zip(xs, *slices)]
        self.hold([(mean, var) for _, mean, var in outs])
        return [y for y, _, _ in outs]

    @torch.no_grad()
    def hold(self, per_network: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep the batch's ``(mean, variance)`` of each network's channels, in order, for :meth:`commit`."""
        self._batch_stats = (torch.cat([mean for mean, _ in per_network]), torch.cat([var for _, var in per_network]))

    def _train(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor,
               running_var: torch.Tensor, warming_up: bool | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Train mode over the channels these parameters and statistics belong to: ``(y, mean, var)``
        with the batch's mean and population variance (no gradient)."""
        x = x.float()
        if warming_up is None:  # the step count is a host read, free on the CPU; a CUDA graph cannot branch on it
            warming_up = x.device.type == "cpu" and int(self.steps) < self.warmup
        if warming_up:
            # Warm-up: r = 1 and d = 0, so this is plain batch norm with the affine part fused into the
            # kernel, without the elementwise ops of r, d and the addcmul below (forward and backward).
            # A CrossQ 256x256 critic step at HalfCheetah sizes on the CPU: 13.5 -> 12.1 ms (ad-hoc A/B,
            # quiet machine); on a GPU's path, counted on the CPU, 179 -> 104 kernel ops per critic step.
            y, mean, invstd = torch.native_batch_norm(x, weight, bias, None, None, True, 0.0, self.eps)
        else:
            # torch's batch-norm kernel normalises and returns the batch mean and 1/sigma_B; the affine
            # part with r and d is one addcmul. Measured on this CPU (fwd + bwd, [512, 256]): 0.6 ms, against
            # 1.6 ms for the same formula in elementwise torch ops.
            x_hat, mean, invstd = torch.native_batch_norm(x, None, None, None, None, True, 0.0, self.eps)
            r, d = self.renorm_factors(mean, invstd, running_mean, running_var)
            per_channel = (-1,) + (1,) * (x.dim() - 2)  # [C] against [B, C], [C, 1] against [1, C, B]
            y = torch.addcmul((bias + weight * d).view(per_channel), x_hat, (weight * r).view(per_channel))
        with torch.no_grad():
            return y, mean, (invstd.pow(-2) - self.eps).clamp_min(0.0)  # the population variance

    @torch.no_grad()
    def renorm_factors(self, mean: torch.Tensor, invstd: torch.Tensor, running_mean: torch.Tensor,
                       running_var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r, d)`` of a batch with this ``mean`` and ``1/sigma_B``, against these running statistics: clipped
        once ``warmup`` updates are committed, ``(1, 0)`` before (computed on the device: no host branch)."""
        running_std = (running_var + self.eps).sqrt()
        warm = self.steps >= self.warmup
        r = torch.where(warm, (invstd.reciprocal() / running_std).clamp(1.0 / self.r_max, self.r_max), 1.0)
        d = torch.where(warm, ((mean - running_mean) / running_std).clamp(-self.d_max, self.d_max), 0.0)
        return r, d

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


class CrossQCritic(StackedQ):
    """CrossQ's ``n_q`` Q networks (Bhatt et al. 2024): Batch Renormalization on the input and after
    every hidden activation, ``BRN -> [Linear -> ReLU -> BRN] x len(hidden) -> Linear`` per Q, and no
    target copy anywhere. Same call as :class:`~spreeze_like.algos.networks.Critic`;
    :meth:`commit_statistics` after each update.

    ``norms[k]`` normalises the input of ``layers[k]`` for all networks at once (``n_q * width``
    channels, see the module docstring). The initial weights are those of ``n_q`` separate networks
    built one after the other, as format 2 built them: the same ``nn.Linear`` draws in the same order.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n_q: int = 2) -> None:
        super().__init__()
        widths = [obs_dim + act_dim, *hidden]
        per_q = [[m for m in mlp(widths[0], hidden, 1) if isinstance(m, nn.Linear)] for _ in range(n_q)]
        self.norms = nn.ModuleList(BatchRenorm(n_q * width) for width in widths)
        self.layers = nn.ModuleList(
            EnsembleLinear([q[k] for q in per_q], fp32=k == len(hidden), channels_first=True) for k in range(len(widths))
        )

    @property
    def warmup(self) -> int:
        """Updates of plain batch normalisation before the renormalisation corrects (every layer's)."""
        return self.norms[0].warmup

    def forward(self, obs: torch.Tensor, action: torch.Tensor, warming_up: bool | None = None) -> torch.Tensor:
        """The Q values ``[n_q, rows]`` of every network (one tensor: see ``networks.Critic.forward``);
        ``warming_up`` as :meth:`BatchRenorm.forward` takes it (the GPU's path: None is False)."""
        if not self.batched(obs.device):
            return self._one_by_one(obs, action, warming_up)
        n = self.n_q
        # every network's copy of the input, features first: [n, obs + act, rows] in one cat
        h = torch.cat([obs.t().expand(n, -1, -1), action.t().expand(n, -1, -1)], dim=1)
        for k, layer in enumerate(self.layers):
            rows = h.shape[-1]
            h = layer(self.norms[k](h.view(1, -1, rows), bool(warming_up)).view(n, -1, rows))
            if k < len(self.layers) - 1:
                h = F.relu(h)
        return h.squeeze(1)

    def _one_by_one(self, obs: torch.Tensor, action: torch.Tensor, warming_up: bool | None) -> torch.Tensor:
        """The CPU's path (StackedQ): each network on its own rows ``[B, features]`` and its own slices of
        the stacked parameters and statistics, as the separate networks ran.

        Why not one wide tensor on the CPU: elementwise kernels there slowed more than in proportion
        with the width (an ad-hoc timing on EPYC-3-2, one thread: a ReLU backward over [2048, 512]
        took 0.79 ms against 0.10 ms over [2048, 256]), and the features-first batch norm took 2.3 ms a
        call against 2 x 0.7 ms (an ad-hoc profile, CrossQ critic step, HalfCheetah sizes, batch 1024).
        """
        xs = [torch.cat([obs, action], dim=-1)] * self.n_q
        for k, layer in enumerate(self.layers):
            xs = layer.forward_each(self.norms[k].forward_each(xs, warming_up))
            if k < len(self.layers) - 1:
                xs = [F.relu(x) for x in xs]
        return torch.stack([x.squeeze(-1) for x in xs])  # [n_q, rows]

    def commit_statistics(self, keep: torch.Tensor | None = None) -> None:
        """Fold the last train-mode batch into every layer's running statistics (see :meth:`BatchRenorm.commit`)."""
        commit_statistics(self, keep)


def commit_statistics(module: nn.Module, keep: torch.Tensor | None = None) -> None:
    """:meth:`BatchRenorm.commit` for every Batch Renormalization layer of ``module``."""
    for m in module.modules():
        if isinstance(m, BatchRenorm):
            m.commit(keep)


def running_statistics(module: nn.Module) -> list[torch.Tensor]:
    """The running means and variances of ``module``'s Batch Renormalization layers, in module order
    (what travels in the critic vector after the parameters); empty for networks without them."""
    return [t for m in module.modules() if isinstance(m, BatchRenorm) for t in (m.running_mean, m.running_var)]


