"""CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, with a batch-renormalised critic.

Written from the paper; the hyperparameters the paper leaves to its code were read in the authors'
repository (adityab/CrossQ, ``train.py`` with ``-algo crossq``), not copied from it. What CrossQ
changes in SAC, and how each change sits in our actor/critic split:

* **No target networks.** The Q target is computed by the live critic. The critic half builds no
  target copy (``has_critic_target = False``) and does no soft update.
* **Batch Renormalization in the critic** (:class:`~spreeze_like.algos.crossq_critic.CrossQCritic`):
  on the input and after every hidden activation. The paper's first version used plain
  BatchNorm; its final version and the authors' code use Batch Renormalization (Ioffe 2017) with
  a warm-up (plain BatchNorm for 100,000 updates, then r_max 3, d_max 5), momentum 0.01 in
  torch's convention (their 0.99) and eps 1e-3. We follow the final version: during the warm-up it
  *is* BatchNorm, so a short run (Pendulum) trains exactly as with plain BatchNorm, and a long one
  gets the correction towards the running statistics that the actor's eval-mode critic uses.
* **One joint forward pass.** ``(s, a)`` and ``(s', a' ~ pi(s'))`` are concatenated into one batch
  of ``2B`` rows through the critic in train mode, so each layer's batch statistics mix current
  and next state-actions; the output is split, the target is built from the next half with the
  gradient stopped, and the loss reads the current half. The gradient still reaches the weights
  through the shared batch statistics, as in the paper's JAX listing (``stop_gradient`` on the
  target only).
* **The actor loss uses the critic in eval mode** (running statistics), as the authors' code does
  (``train=False`` in the actor update): the actor learner's critic copy is put in eval mode once
  and never leaves it. It therefore needs the running means and variances, which travel in the
  critic vector after the parameters (``algos/base.py``; the supervisor sizes the board with them,
  ``procs/segments.vector_sizes``). The warm-up counter does not travel: only train mode reads it.
* **Adam beta1 = 0.5** for actor and critic (``adam_betas``); the entropy coefficient keeps
  Adam's default (0.9, 0.999), as in the authors' code, which gives it an optimiser of its own.
* **Policy delay 3**: one actor update per three critic updates (``--policy-delay 0`` resolves to
  3 for crossq, ``config.default_policy_delay``); the actor learner's pacing applies it.
* Learning rate 1e-3 for actor, critic and alpha (``presets/crossq.toml``; the critic's and
  alpha's built-in rates are 1e-3 already). UTD 1 and batch 256 are our defaults already.

Deliberate differences from the authors' code, each a choice of this split:

* **Critic width.** The paper's critic is 2048 units wide (its third design choice), the actor 256.
  ``--hidden-sizes`` sets both networks here, so the default is 256 x 256 for both: on a CPU
  learner a 2048-wide critic costs about 60x the hidden-layer FLOPs per update. On a GPU,
  ``--hidden-sizes 2048 2048`` widens the actor too.
* **The actor has no normalisation layers.** The authors' default (``bn_mode brn_actor``) also puts
  Batch Renormalization into the actor; the paper's design choices concern the critic, and keeping
  SAC's actor keeps the actor vector, the samplers' numpy policy and the evaluator unchanged.
* **Alpha is updated with every critic update**, as our SAC does (the critic half owns it and
  reads the next-state log-probabilities it already computed), not with every third.
* The squared TD error is averaged without the factor 0.5 (Adam makes a constant loss scale
  irrelevant), and the actor's log-std keeps SAC's soft clamp into [-5, 2].

Mixed precision: with ``--precision bf16`` the hidden linear layers run in bf16 as for SAC; the
Batch Renormalization statistics and the Q heads are computed in float32
(``crossq_critic.BatchRenorm``). Not measured for CrossQ yet.

Non-finite steps (``roles/nonfinite.py``): the running statistics are folded in after the optimiser
step, masked by its ``found_inf``, so a skipped step changes no parameter, no Adam moment and no
running statistic. CUDA graphs (``algos/graphed.py``): no targets, so one variant; the step has no
host-side branch and advances ``updates`` by one. Owns no process or shared resource.
"""

from __future__ import annotations

from functools import cached_property

import torch

from spreeze_like.algos.base import AlgoSpec, Batch, q_report, weighted_mse
from spreeze_like.algos.explicit_grad import q_forward, q_regression_grads
from spreeze_like.algos.explicit_renorm import RenormChain, renorm_chains, stash_batch_statistics
from spreeze_like.algos.sac import SACActor, SACCritic

CROSSQ_BETAS = (0.5, 0.999)
ALPHA_BETAS = (0.9, 0.999)  # Adam's defaults: the entropy coefficient's optimiser in the authors' code


class CrossQCritic(SACCritic):
    """Twin batch-renormalised Q networks without targets, and the entropy coefficient."""

    has_critic_target = False
    adam_betas = CROSSQ_BETAS

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device)
        for group in self.q_optimizer.param_groups:  # SACCritic added log_alpha as a group of its own
            if any(p is self.log_alpha for p in group["params"]):
                group["betas"] = ALPHA_BETAS

    def step_variant(self) -> int:
        """0 while this half has made fewer than the batch renormalisation's ``warmup`` updates, then 1.

        A CUDA graph cannot read the layers' committed-update count, so on the GPU's path the host's own
        count says when the warm-up ends (one graph per phase, as TD3's delayed update has). It is exact:
        the layers commit at most once per update (none for a skipped step), so while this count is
        under ``warmup`` theirs is too, and the warm-up's shortcut (``r = 1, d = 0``) is what they would
        compute; after it, the device computes ``r`` and ``d`` from its own count.
        """
        return int(self.updates >= self.critic.warmup)

    def step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        alpha = self.log_alpha.detach().exp()
        n = b.obs.shape[0]
        # the CPU reads the layers' own count instead (free there): None
        warming_up = self.step_variant() == 0 if self.critic.batched(self.device) else None
        next_actions, next_log_pi = self.target_draw(b)

        # The joint forward pass: current and next state-actions in one train-mode batch.
        qf_all = self.critic(torch.cat([b.obs, b.next_obs]), torch.cat([b.action, next_actions]), warming_up)  # [2, 2B]
        qf_a_values = qf_all[:, :n]
        next_q_value = self.joint_target(b, qf_all, alpha, next_log_pi)

        qf_losses = weighted_mse(qf_a_values, next_q_value, b.weights)  # [2]: qf1_loss, qf2_loss
        alpha_loss = (-self.log_alpha * (next_log_pi + self.target_entropy)).mean()
        self.q_optimizer.zero_grad(set_to_none=True)
        (qf_losses.sum() + alpha_loss).backward()
        self.q_optimizer.step()
        # The running statistics take this batch only if the step was applied (found_inf: the guard's flag).
        found = self.q_optimizer.found_inf
        self.critic.commit_statistics(None if found is None else found == 0)

        self.updates += 1
        td_errors, metrics = q_report(qf_a_values, next_q_value, qf_losses)
        metrics.update(alpha=alpha, alpha_loss=alpha_loss.detach())
        return td_errors, metrics

    @torch.no_grad()
    def joint_target(self, b: Batch, qf_all: torch.Tensor, alpha: torch.Tensor, next_log_pi: torch.Tensor) -> torch.Tensor:
        """The soft Q target ``[B]`` from the next half of the joint pass's Q values ``[n_q, 2B]``, gradient stopped."""
        min_qf_next = qf_all[:, len(next_log_pi):].amin(0) - alpha * next_log_pi
        return b.reward + (1.0 - b.terminated) * self.spec.bootstrap_gamma * min_qf_next

    @torch.no_grad()
    def explicit_step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`step` with its gradients written out (``explicit_renorm.py``): the same update on the CPU.
        The loss reads the current half of the joint batch, so dL/dQ of the next half's rows is zero; their
        gradient still reaches the weights through the batch statistics (the batch norm's backward)."""
        alpha = self.log_alpha.exp()
        n = b.obs.shape[0]
        next_actions, next_log_pi = self.target_draw(b)
        chains = self.explicit_critic
        qf_all, acts = q_forward(chains, torch.cat([b.obs, b.next_obs]), torch.cat([b.action, next_actions]))
        qf_a_values = qf_all[:, :n]
        next_q_value = self.joint_target(b, qf_all, alpha, next_log_pi)
        qf_losses = q_regression_grads(chains, acts, qf_a_values, next_q_value, b.weights, extra_rows=n)
        stash_batch_statistics(chains)
        alpha_loss = self.explicit_alpha_grad(next_log_pi)
        self.q_optimizer.step()
        found = self.q_optimizer.found_inf
        self.critic.commit_statistics(None if found is None else found == 0)
        self.updates += 1
        td_errors, metrics = q_report(qf_a_values, next_q_value, qf_losses)
        metrics.update(alpha=alpha, alpha_loss=alpha_loss)
        return td_errors, metrics

    @cached_property
    def explicit_critic(self) -> list[RenormChain]:
        return renorm_chains(self.critic)


class CrossQActor(SACActor):
    """SAC's squashed-Gaussian policy, trained against an eval-mode copy of the CrossQ critic. SAC's
    ``explicit_step`` serves it: its critic chains are this copy's, in eval mode (``explicit_renorm.py``)."""

    adam_betas = CROSSQ_BETAS

    @cached_property
    def explicit_critic(self) -> list[RenormChain]:
        return renorm_chains(self.critic)

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device)
        self.critic.eval()  # running statistics, never the actor batch's own: see the module docstring
