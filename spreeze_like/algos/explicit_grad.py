"""Learner steps with the backward pass written out by hand: the CPU's fast path for SAC, TD3, DDPG and CrossQ.

Why: on the CPU a small update is bound by per-op cost, not arithmetic. The autograd step of a SAC
critic at Pendulum's preset (96x96, batch 256, fp32, one thread) issued ~150 ops; autograd records a
node for each one on the way forward and walks them all again on the way back, and the matmuls were
only a quarter of its time at 64x64 (BENCHMARKS.md, "where the 64-64 CPU critic step goes"). Here the
gradients of each MLP are written out: for a layer ``y = relu(x @ W + b)`` with ``g = dL/dy``,

    g_pre = g * (y > 0)          dL/dW = x.T @ g_pre          dL/db = g_pre.sum(0)          dL/dx = g_pre @ W.T

computed straight into the parameters' ``.grad`` (``out=``), with no graph recorded. The losses are
the algorithms' own (``sac.py``, ``td3.py``, ``ddpg.py``), differentiated by hand in their
``explicit_step``; this module holds what they share: :class:`Chain` (one MLP's forward pass that keeps
its activations, and its backward pass) and the networks' chains.

Same updates: an ``explicit_step`` computes the gradients its algorithm's autograd ``step`` computes (to
float rounding; the optimiser, the non-finite guard and the target updates are the same calls), and
``tests/trainer/test_explicit_grad.py`` compares the parameters of both after several steps of every
algorithm, with and without importance weights. The autograd ``step`` stays the reference and runs
wherever this path does not: on a GPU (whose CUDA graphs already remove the per-op cost) and in bf16
(autocast). CrossQ's batch-renormalised critic has chains of its own with this API (``explicit_renorm.py``),
so the helpers below serve it too. ``--learner-step`` chooses (``auto``: this path on
a CPU learner that can take it). Owns no process or shared resource.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

_relu_backward = torch.ops.aten.threshold_backward  # what autograd runs for relu: g where y > 0, else 0


class Chain:
    """One MLP of linear layers, ReLU after each but (unless ``relu_last``) the last, differentiated by hand.

    Args:
        layers: ``(weight, bias, index)`` per layer: an ``nn.Linear``'s parameters (``index`` None; the
            weight is ``[out, in]``), or a stacked :class:`~spreeze_like.algos.networks.EnsembleLinear`'s
            and the network's place in the stack (its weight ``[n, in, out]``, its bias ``[n, 1, out]``).
        relu_last: a ReLU after the last layer too (the Gaussian actor's trunk).

    The parameters are read through views made once here: loads (``set_flat``, ``load_state_dict``)
    copy into the same storage, so the views stay current. Gradients are written into views of each
    parameter's ``.grad``, allocated on first use and looked up again whenever a ``.grad`` is replaced.
    """

    def __init__(self, layers: Sequence[tuple[torch.Tensor, torch.Tensor, int | None]], relu_last: bool = False) -> None:
        self.params = list(layers)
        # the forward pass's [in, out] matrices (addmm's mat2) and [out] biases
        self.weights = [w.t() if i is None else w[i] for w, _, i in layers]
        self.biases = [b if i is None else b[i].view(-1) for _, b, i in layers]
        self.relu = [k < len(layers) - 1 or relu_last for k in range(len(layers))]
        self._grads: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._grads_of: list[torch.Tensor | None] = []

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The activations ``[x, y_1, ..., y_L]``: the input, then each layer's output (after its ReLU)."""
        acts = [x]
        for w, b, relu in zip(self.weights, self.biases, self.relu):
            y = torch.addmm(b, acts[-1], w)
            acts.append(y.relu_() if relu else y)
        return acts

    def backward(self, acts: list[torch.Tensor], g: torch.Tensor, param_grads: bool = True,
                 input_rows: slice | None = None) -> torch.Tensor | None:
        """Back from ``g`` = dL/d(output) ``[B, out]``: each parameter's gradient written into its ``.grad``
        (unless ``param_grads`` is False: a frozen copy differentiated for its input only), and dL/d(input)
        restricted to the input features ``input_rows`` returned (None: not computed)."""
        grads = self._grad_views() if param_grads else None
        for k in range(len(self.weights) - 1, -1, -1):
            if self.relu[k]:
                g = _relu_backward(g, acts[k + 1], 0)
            if grads is not None:
                self._write(k, acts[k], g, grads[k])
            if k > 0:
                g = torch.mm(g, self.weights[k].t())
            elif input_rows is not None:
                return torch.mm(g, self.weights[0][input_rows].t())
        return None

    def _write(self, k: int, x: torch.Tensor, g: torch.Tensor, grads: tuple[torch.Tensor, torch.Tensor]) -> None:
        grad_w, grad_b = grads
        if self.params[k][2] is None:  # nn.Linear: [out, in]
            torch.mm(g.t(), x, out=grad_w)
        else:  # a stack's slice: [in, out]
            torch.mm(x.t(), g, out=grad_w)
        torch.sum(g, 0, out=grad_b)

    def _grad_views(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Where each layer's gradients go (views of the parameters' ``.grad``, which every step overwrites)."""
        params = [p for w, b, _ in self.params for p in (w, b)]
        if grads_replaced(params, self._grads_of):
            self._grads = [(w.grad, b.grad) if i is None else (w.grad[i], b.grad[i].view(-1))
                           for w, b, i in self.params]
            self._grads_of = [p.grad for p in params]
        return self._grads


def grads_replaced(params: Sequence[torch.Tensor], seen: Sequence[torch.Tensor | None]) -> bool:
    """Whether any parameter's ``.grad`` is not the tensor ``seen`` recorded for it (dropped by a
    ``zero_grad(set_to_none=True)`` or a checkpoint load, or never made): then the missing ones are allocated
    and the caller makes its gradient views again."""
    if len(params) == len(seen) and all(p.grad is not None and p.grad is o for p, o in zip(params, seen)):
        return False
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return True


def linear_layers(module: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor, None]]:
    """The ``nn.Linear`` layers of ``module`` (itself, or a Sequential's), in order."""
    found = [module] if isinstance(module, nn.Linear) else [m for m in module.modules() if isinstance(m, nn.Linear)]
    return [(m.weight, m.bias, None) for m in found]


def q_chains(critic: nn.Module) -> list[Chain]:
    """One chain per Q network of a stacked :class:`~spreeze_like.algos.networks.Critic`."""
    stack = list(critic.layers)
    return [Chain([(layer.weight, layer.bias, i) for layer in stack]) for i in range(critic.n_q)]


def q_forward(chains: Sequence[Chain], obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Q values ``[n, B]`` of the chains' networks, and each network's activations."""
    x = torch.cat([obs, action], dim=-1)
    acts = [chain.forward(x) for chain in chains]
    q = acts[0][-1].t() if len(acts) == 1 else torch.cat([a[-1] for a in acts], dim=1).t()
    return q, acts


def q_regression_grads(chains: Sequence[Chain], acts: list, q: torch.Tensor, target: torch.Tensor,
                       weights: torch.Tensor | None, extra_rows: int = 0) -> torch.Tensor:
    """Gradients of ``sum_i weighted_mse(Q_i, target)`` (``base.weighted_mse``) written into the critic's
    ``.grad``; returns the losses ``[n]``. ``d/dQ_i = 2 w (Q_i - target) / B`` per row. ``extra_rows``: the
    chains ran ``B + extra_rows`` rows, the loss reads the first ``B`` (CrossQ's joint batch)."""
    diff = q - target
    n_rows = q.shape[-1]
    # 2 * diff first, as autograd's pow backward takes it: a diff past float32's max / 2 (diverged learning)
    # then overflows to inf here too, and the non-finite guard skips the step as it skips autograd's
    g = diff.mul(2.0)
    if weights is None:
        losses = diff.square().mean(-1)
        g.div_(n_rows)
    else:
        losses = (weights * diff.square()).mean(-1)
        g.mul_(weights / n_rows)
    if extra_rows:
        g = torch.cat([g, g.new_zeros(len(g), extra_rows)], dim=1)
    for chain, a, g_i in zip(chains, acts, g):
        chain.backward(a, g_i.unsqueeze(-1))
    return losses


def q_action_grad(chains: Sequence[Chain], acts: list, g_q: torch.Tensor, obs_dim: int) -> torch.Tensor:
    """dL/d(action) ``[B, act]`` through frozen Q networks, from ``g_q`` = dL/dQ ``[n, B]``."""
    rows = slice(obs_dim, None)
    grads = [chain.backward(a, g_i.unsqueeze(-1), param_grads=False, input_rows=rows)
             for chain, a, g_i in zip(chains, acts, g_q)]
    total = grads[0]
    for more in grads[1:]:
        total = total + more
    return total


def min_share(q: torch.Tensor) -> torch.Tensor:
    """d min_i(Q_i) / dQ ``[n, B]``: 1 for the smallest network of each row, shared out over ties, as
    autograd's ``amin`` backward shares it."""
    is_min = q == q.amin(0)
    return is_min / is_min.sum(0)
