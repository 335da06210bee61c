"""CrossQ's critic differentiated by hand: the batch-renormalised Q networks as chains.

Why: a CrossQ update on the CPU is bound by per-op cost as SAC's is (``explicit_grad.py``), more so:
every layer adds a Batch Renormalization, whose autograd backward is several nodes (the normalisation,
the ``r``/``d`` affine, the views of the stacked parameters). Here each network of a
:class:`~spreeze_like.algos.crossq_critic.CrossQCritic` is one :class:`RenormChain`, with the API of
:class:`~spreeze_like.algos.explicit_grad.Chain` (``forward`` keeps the activations, ``backward`` writes
the parameters' gradients and returns the input's), so ``q_forward``, ``q_regression_grads`` and
``q_action_grad`` serve CrossQ as they serve SAC.

Per layer ``k`` a network computes ``y = gamma * (r * x_hat + d) + beta`` from its input ``x`` (train mode:
``x_hat`` normalised with the batch's mean and ``1/sigma_B``, ``r`` and ``d`` without gradient, ``r = 1,
d = 0`` in the warm-up; eval mode: the running statistics, ``r = 1, d = 0``), then ``z = y @ W.T + b``
and a ReLU for the hidden layers. With ``g = dL/dy``:

    dL/dbeta = sum(g)     dL/dgamma = r * sum(g * x_hat) + d * sum(g)
    dL/dx    = torch's batch-norm backward of ``g`` with the scale ``gamma * r`` (train: through the
               batch's mean and sigma; eval: ``g * gamma / sigma``)

``torch.ops.aten.native_batch_norm_backward`` computes the train-mode ``dL/dx``, ``sum(g * x_hat)`` and
``sum(g)`` in one call: the kernel autograd itself runs for ``native_batch_norm``.

Same updates: ``tests/trainer/test_explicit_renorm.py`` compares the parameters, Adam moments and running
statistics after several steps of both CrossQ halves, in the warm-up and after it, with and without
importance weights. The GPU's path (stacked, CUDA graphs) and bf16 keep autograd's step. Owns no process or
shared resource.
"""

from __future__ import annotations

import torch

from spreeze_like.algos.crossq_critic import BatchRenorm, CrossQCritic
from spreeze_like.algos.explicit_grad import _relu_backward, grads_replaced

_bn_backward = torch.ops.aten.native_batch_norm_backward


class RenormChain:
    """Network ``q`` of a :class:`CrossQCritic`, ``[BRN -> Linear -> ReLU] x hidden, BRN -> Linear``, as a chain.

    Reads the critic's stacked parameters and statistics through views made once (loads copy into the same
    storage) and writes gradients into views of their ``.grad`` (looked up again when a ``.grad`` is
    replaced). The module's ``training`` flag picks the batch's statistics or the running ones, as
    ``CrossQCritic.forward`` does. A train-mode ``forward`` leaves the batch's mean and variance for
    :func:`stash_batch_statistics`.
    """

    def __init__(self, critic: CrossQCritic, q: int) -> None:
        n = critic.n_q
        self.critic, self.q = critic, q
        self.norms: list[BatchRenorm] = list(critic.norms)
        self.norm_params = [(m.weight, m.bias) for m in self.norms]
        self.layer_params = [(layer.weight, layer.bias) for layer in critic.layers]
        self.gammas = [m.weight.view(n, -1)[q] for m in self.norms]
        self.betas = [m.bias.view(n, -1)[q] for m in self.norms]
        self.means = [m.running_mean.view(n, -1)[q] for m in self.norms]
        self.vars = [m.running_var.view(n, -1)[q] for m in self.norms]
        self.weights = [layer.weight[q].t() for layer in critic.layers]  # addmm's mat2: [in, out]
        self.biases = [layer.bias[q].view(-1) for layer in critic.layers]
        # per layer: the batch norm's input, mean, 1/sigma, its scale, r, d (train mode; eval keeps the scale only)
        self.saved: list[tuple] = []
        self._grads: list[torch.Tensor] = []
        self._grads_of: list[torch.Tensor | None] = []

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``[x, y_0, z_0, y_1, z_1, ...]``: the input, then per layer the normalised input and its output
        (after the ReLU for hidden layers). ``acts[-1]`` is the Q value ``[rows, 1]``."""
        train = self.critic.training
        warming_up = train and int(self.norms[0].steps) < self.norms[0].warmup  # every layer commits together
        acts, saved = [x], []
        last = len(self.weights) - 1
        for k, norm in enumerate(self.norms):
            h, gamma, beta = acts[-1], self.gammas[k], self.betas[k]
            if not train:  # eval: the running statistics, an affine map with the scale gamma / sigma
                scale = gamma * (self.vars[k] + norm.eps).rsqrt()
                y = torch.addcmul(beta, h - self.means[k], scale)
                saved.append((None, None, None, scale, None, None))
            elif warming_up:  # plain batch norm, the affine part in the kernel (as BatchRenorm._train)
                y, mean, invstd = torch.native_batch_norm(h, gamma, beta, None, None, True, 0.0, norm.eps)
                saved.append((h, mean, invstd, gamma, None, None))
            else:
                x_hat, mean, invstd = torch.native_batch_norm(h, None, None, None, None, True, 0.0, norm.eps)
                r, d = norm.renorm_factors(mean, invstd, self.means[k], self.vars[k])
                scale = gamma * r
                y = torch.addcmul(beta + gamma * d, x_hat, scale)
                saved.append((h, mean, invstd, scale, r, d))
            z = torch.addmm(self.biases[k], y, self.weights[k])
            acts += [y, z.relu_() if k < last else z]
        self.saved = saved
        return acts

    def batch_statistics(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the last train-mode forward's batch mean and population variance (as ``BatchRenorm``
        keeps them for ``commit``)."""
        return [(mean, (invstd.pow(-2) - norm.eps).clamp_min(0.0))
                for (_, mean, invstd, *_), norm in zip(self.saved, self.norms)]

    def backward(self, acts: list[torch.Tensor], g: torch.Tensor, param_grads: bool = True,
                 input_rows: slice | None = None) -> torch.Tensor | None:
        """Back from ``g`` = dL/dQ ``[rows, 1]``: the parameters' gradients written into their ``.grad``
        (unless ``param_grads`` is False: a frozen copy), and dL/d(input) of the features ``input_rows``
        returned (None: not computed). As ``Chain.backward``."""
        grads = self._grad_views() if param_grads else None
        last = len(self.weights) - 1
        for k in range(last, -1, -1):
            y, z = acts[2 * k + 1], acts[2 * k + 2]
            if k < last:
                g = _relu_backward(g, z, 0)
            if grads is not None:
                grad_w, grad_b = grads[k][2:]
                torch.mm(g.t(), y, out=grad_w)
                torch.sum(g, 0, out=grad_b)
            g = torch.mm(g, self.weights[k].t())  # dL/dy
            h, mean, invstd, scale, r, d = self.saved[k]
            need_input = k > 0 or input_rows is not None
            if h is None:  # eval mode: y = (h - mean) * scale + beta
                if grads is not None:
                    raise RuntimeError("an eval-mode RenormChain is a frozen copy: backward(param_grads=False)")
                g = g * scale if need_input else None
            else:
                g_in, g_xhat, g_sum = _bn_backward(g, h, scale, None, None, mean, invstd, True, self.norms[k].eps,
                                                   [need_input, grads is not None, grads is not None])
                if grads is not None:
                    grad_gamma, grad_beta = grads[k][:2]
                    if r is None:
                        grad_gamma.copy_(g_xhat)
                    else:
                        torch.addcmul(g_sum * d, g_xhat, r, out=grad_gamma)
                    grad_beta.copy_(g_sum)
                g = g_in
            if g is None:
                return None
        return g[:, input_rows] if input_rows is not None else None

    def _grad_views(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per layer ``(dgamma, dbeta, dW, db)``: views of network ``q``'s slices of the parameters' ``.grad``."""
        params = [p for pair in self.norm_params + self.layer_params for p in pair]
        if grads_replaced(params, self._grads_of):
            n = self.critic.n_q
            self._grads = [(gw.grad.view(n, -1)[self.q], gb.grad.view(n, -1)[self.q], w.grad[self.q],
                            b.grad[self.q].view(-1))
                           for (gw, gb), (w, b) in zip(self.norm_params, self.layer_params)]
            self._grads_of = [p.grad for p in params]
        return self._grads


def renorm_chains(critic: CrossQCritic) -> list[RenormChain]:
    """One :class:`RenormChain` per Q network of ``critic``."""
    return [RenormChain(critic, q) for q in range(critic.n_q)]


def stash_batch_statistics(chains: list[RenormChain]) -> None:
    """Hand the chains' last train-mode batch statistics to the critic's layers, as a train-mode
    ``CrossQCritic.forward`` leaves them, so that ``commit_statistics`` folds them in."""
    per_network = [chain.batch_statistics() for chain in chains]
    for k, norm in enumerate(chains[0].norms):
        norm.hold([stats[k] for stats in per_network])
