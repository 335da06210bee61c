"""Soft Actor-Critic with automatic entropy tuning (Haarnoja et al. 2018), split in two halves.

The math reads like CleanRL's ``sac_continuous_action.py``; the only structural change is that
the critic update (with the entropy coefficient) and the actor update live in different learners,
each holding a copy of the other's network. Two deliberate differences in the alpha loss:

* it uses the log-probabilities of the policy's actions at ``next_obs`` that the Q target already
  computed. Those are replay states too, so the gradient is the same in expectation and the critic
  learner saves one actor forward pass per update;
* it is linear in ``log_alpha`` (``-log_alpha * (log_pi + target)``), as in the authors' softlearning
  code and in SB3, not in ``alpha`` as in CleanRL. The fixed point is the same; CleanRL's gradient is
  scaled by ``alpha`` itself, so once alpha has fallen (Pendulum: 1 -> ~0.05) Adam's long-memory
  second moment likely makes its steps small (a reading, not measured). Measured in serial mode on
  Pendulum-v1, seeds 1-6: env steps until the training return reaches -250 went from
  5,400 / 4,200 / 4,400 / 4,400 / 4,200 / 4,600 to 4,400 / 4,200 / 4,200 / 4,400 / 4,200 / 4,600.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property

import torch

from spreeze_like.algos.base import ActorPart, AlgoSpec, Batch, CriticPart, q_report, weighted_mse
from spreeze_like.algos.explicit_grad import (
    Chain,
    linear_layers,
    min_share,
    q_action_grad,
    q_forward,
    q_regression_grads,
)
from spreeze_like.algos.networks import LOG_STD_HALF_RANGE, LOG_STD_MID, soft_update, squashed_sample


class SACCritic(CriticPart):
    """Twin Q networks, their targets, and the entropy coefficient ``alpha = exp(log_alpha)``."""

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device)
        self.target_entropy = -float(spec.act_dim) if spec.target_entropy is None else spec.target_entropy
        self.log_alpha = torch.tensor([math.log(spec.alpha_init)], device=self.device, requires_grad=True)
        # log_alpha is a second parameter group of the Q optimiser (its own learning rate), not an
        # optimiser of its own: one backward and one optimiser step per update instead of two. The
        # gradients are the same: the Q loss sees alpha detached, the alpha loss sees log-probs
        # computed without grad. Adam's moments are per parameter, so the update is identical too.
        self.q_optimizer.add_param_group({"params": [self.log_alpha], "lr": spec.alpha_lr})
        self.tensors["log_alpha"] = self.log_alpha

    @torch.no_grad()
    def q_target(self, b: Batch, alpha: torch.Tensor, next_sample: tuple[torch.Tensor, torch.Tensor],
                 critic_target: Callable[..., torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The soft Q target ``[B]`` and the log-probabilities of the policy's actions at ``next_obs``
        (``next_sample``: those actions and log-probabilities, from :meth:`target_draw`); the
        target critic's values from ``critic_target`` (default: the module)."""
        next_actions, next_log_pi = next_sample
        qf_next_target = (critic_target or self.critic_target)(b.next_obs, next_actions)  # [2, B]: Q1 and Q2
        min_qf_next_target = qf_next_target.amin(0) - alpha * next_log_pi
        next_q_value = b.reward + (1.0 - b.terminated) * self.spec.bootstrap_gamma * min_qf_next_target
        return next_q_value, next_log_pi

    @torch.no_grad()
    def target_draw(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's actions at ``next_obs`` and their log-probabilities (see ``CriticPart.target_draw``)."""
        return self.actor.sample(b.next_obs, self.generator)

    def step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        alpha = self.log_alpha.detach().exp()
        next_q_value, next_log_pi = self.q_target(b, alpha, self.target_draw(b))  # drawn in this frame

        qf_a_values = self.critic(b.obs, b.action)  # [2, B]
        qf_losses = weighted_mse(qf_a_values, next_q_value, b.weights)  # [2]: qf1_loss, qf2_loss
        alpha_loss = (-self.log_alpha * (next_log_pi + self.target_entropy)).mean()
        self.q_optimizer.zero_grad(set_to_none=True)
        (qf_losses.sum() + alpha_loss).backward()  # disjoint graphs: each loss reaches only its own parameters
        self.q_optimizer.step()
        return self._after_step(qf_a_values, next_q_value, qf_losses, alpha, alpha_loss.detach())

    @torch.no_grad()
    def explicit_step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`step` with its gradients written out (``explicit_grad.py``): the same update on the CPU."""
        alpha = self.log_alpha.exp()
        next_q_value, next_log_pi = self.q_target(b, alpha, self.target_draw(b), self.explicit_target_q)

        chains = self.explicit_critic
        qf_a_values, acts = q_forward(chains, b.obs, b.action)
        qf_losses = q_regression_grads(chains, acts, qf_a_values, next_q_value, b.weights)
        alpha_loss = self.explicit_alpha_grad(next_log_pi)
        self.q_optimizer.step()
        return self._after_step(qf_a_values, next_q_value, qf_losses, alpha, alpha_loss)

    def explicit_alpha_grad(self, next_log_pi: torch.Tensor) -> torch.Tensor:
        """The alpha loss's gradient written into ``log_alpha.grad`` (``d/dlog_alpha = -mean(next_log_pi +
        target_entropy)``); returns the loss."""
        self.log_alpha.grad = next_log_pi.mean().add_(self.target_entropy).neg().reshape(1)
        return self.log_alpha[0] * self.log_alpha.grad[0]

    def _after_step(self, qf_a_values: torch.Tensor, next_q_value: torch.Tensor, qf_losses: torch.Tensor,
                    alpha: torch.Tensor, alpha_loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        soft_update(self.critic_target_params, self.critic_params, self.spec.tau)
        self.updates += 1
        td_errors, metrics = q_report(qf_a_values, next_q_value, qf_losses)
        metrics.update(alpha=alpha, alpha_loss=alpha_loss)
        return td_errors, metrics

    def extra_critic_state(self) -> list[torch.Tensor]:
        return [self.log_alpha.detach()[0]]


class SACActor(ActorPart):
    """The squashed-Gaussian policy; reads alpha from the critic vector it copies."""

    n_extra_critic_state = 1

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device)
        self.log_alpha = torch.tensor([math.log(spec.alpha_init)], device=self.device)
        self.tensors["log_alpha_copy"] = self.log_alpha

    def extra_copy_tensors(self) -> list[torch.Tensor]:
        return [self.log_alpha]

    def step(self, b: Batch) -> dict[str, torch.Tensor]:
        alpha = self.log_alpha.exp()
        pi, log_pi = self.actor.sample(b.obs, self.generator)
        min_qf_pi = self.critic(b.obs, pi).amin(0)  # the smaller of Q1 and Q2
        actor_loss = (alpha * log_pi - min_qf_pi).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.updates += 1
        return {"actor_loss": actor_loss.detach(), "entropy": -log_pi.detach().mean()}

    @torch.no_grad()
    def explicit_step(self, b: Batch) -> dict[str, torch.Tensor]:
        """:meth:`step` with its gradients written out (``explicit_grad.py``): the same update on the CPU.

        With ``x = mean + std * eps`` (``eps`` drawn as ``sample`` draws it), ``pi = tanh(x)`` and
        ``L = mean(alpha * log_pi - min_i Q_i(s, pi))`` over B rows, per row and action dimension:
        ``dlog_pi/dx = 2 tanh(x)`` (from the ``x + softplus(-2x)`` term), ``dlog_pi/dlog_std = -1``,
        ``dx/dmean = 1``, ``dx/dlog_std = std * eps``, and ``log_std`` is a soft clamp of the head's
        output ``z``: ``tanh(z) * HALF + MID``.
        """
        trunk, mean_head, log_std_head = self.explicit_actor
        alpha = self.log_alpha.exp()
        trunk_acts = trunk.forward(b.obs)
        h = trunk_acts[-1]
        mean_acts, std_acts = mean_head.forward(h), log_std_head.forward(h)
        squash = torch.tanh(std_acts[-1])
        log_std = squash * LOG_STD_HALF_RANGE + LOG_STD_MID
        pi, log_pi, eps = squashed_sample(mean_acts[-1], log_std, self.generator)
        qf_pi, q_acts = q_forward(self.explicit_critic, b.obs, pi)
        min_qf_pi = qf_pi.amin(0)
        actor_loss = (alpha * log_pi - min_qf_pi).mean()

        rows = len(pi)
        g_pi = q_action_grad(self.explicit_critic, q_acts, min_share(qf_pi).mul_(-1.0 / rows), self.spec.obs_dim)
        g_x = torch.addcmul(g_pi * (1.0 - pi * pi), pi, alpha, value=2.0 / rows)
        g_log_std = (g_x * log_std.exp() * eps).sub_(alpha / rows)
        g_z = g_log_std.mul_(LOG_STD_HALF_RANGE).mul_(1.0 - squash * squash)
        everything = slice(None)
        g_h = mean_head.backward(mean_acts, g_x, input_rows=everything)
        g_h += log_std_head.backward(std_acts, g_z, input_rows=everything)
        trunk.backward(trunk_acts, g_h)
        self.actor_optimizer.step()
        self.updates += 1
        return {"actor_loss": actor_loss, "entropy": -log_pi.mean()}

    @cached_property
    def explicit_actor(self) -> tuple[Chain, Chain, Chain]:
        """The policy's trunk (a ReLU after each layer) and its two heads, as chains."""
        actor = self.actor
        return (Chain(linear_layers(actor.trunk), relu_last=True), Chain(linear_layers(actor.mean)),
                Chain(linear_layers(actor.log_std)))
