"""TD3 (Fujimoto et al. 2018): twin critics, target policy smoothing, delayed policy updates.

Reads like CleanRL's ``td3_continuous_action.py``. The split across learners: the critic learner
owns the critics, their targets and the *target actor*, which it soft-updates from its copy of the
actor every ``policy_delay`` critic updates (together with the target critics, as TD3 does). The
target actor lives there because only the Q target uses it, so the weight board carries just the
policy. The actor learner updates the policy once per ``policy_delay`` critic updates (paced by
``ActorLearner.updates_due``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch

from spreeze_like.algos.base import ActorPart, Batch, TargetActorCriticPart, q_report, weighted_mse
from spreeze_like.algos.explicit_grad import Chain, linear_layers, q_action_grad, q_forward


class TD3Critic(TargetActorCriticPart):
    @torch.no_grad()
    def q_target(self, b: Batch, draw: torch.Tensor | None,
                 critic_target: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        """The Q target ``[B]``: the smaller target Q of the target policy's smoothed action. ``draw``: the
        smoothing's standard normal noise, from :meth:`target_draw`."""
        s, critic_target = self.spec, critic_target or self.critic_target
        assert draw is not None, "TD3's target needs its smoothing noise (target_draw)"
        clipped_noise = (draw * s.policy_noise).clamp(-s.noise_clip, s.noise_clip)
        next_state_actions = (self.actor_target(b.next_obs) + clipped_noise).clamp(-1.0, 1.0)
        min_qf_next_target = critic_target(b.next_obs, next_state_actions).amin(0)  # min(Q1, Q2)
        return b.reward + (1.0 - b.terminated) * s.bootstrap_gamma * min_qf_next_target

    def target_draw(self, b: Batch) -> torch.Tensor:
        """The smoothing's standard normal noise, one per action entry (see ``CriticPart.target_draw``)."""
        return torch.randn(b.action.shape, generator=self.generator, device=self.device)

    def step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        next_q_value = self.q_target(b, self.target_draw(b))  # drawn in this frame: see target_draw
        qf_a_values = self.critic(b.obs, b.action)  # [2, B]
        qf_losses = weighted_mse(qf_a_values, next_q_value, b.weights)  # [2]: qf1_loss, qf2_loss
        self.q_optimizer.zero_grad(set_to_none=True)
        qf_losses.sum().backward()
        self.q_optimizer.step()

        self.update_targets()  # every policy_delay updates, with the delayed policy update
        return q_report(qf_a_values, next_q_value, qf_losses)


class TD3Actor(ActorPart):
    def step(self, b: Batch) -> dict[str, torch.Tensor]:
        qf1_pi = self.critic(b.obs, self.actor(b.obs), members=1)  # Q1 only ([1, B]), as in the paper
        actor_loss = -qf1_pi.mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.updates += 1
        return {"actor_loss": actor_loss.detach()}

    @torch.no_grad()
    def explicit_step(self, b: Batch) -> dict[str, torch.Tensor]:
        """:meth:`step` with its gradients written out (``explicit_grad.py``): the same update on the CPU.

        ``L = -mean(Q1(s, tanh(net(s))))`` over B rows: ``dL/dQ1 = -1/B``, then back through Q1 to the
        action, through tanh (``1 - pi^2``) and the policy's layers.
        """
        net = self.explicit_policy
        acts = net.forward(b.obs)
        pi = torch.tanh(acts[-1])
        q1 = self.explicit_critic[:1]
        qf1_pi, q_acts = q_forward(q1, b.obs, pi)
        actor_loss = qf1_pi.mean().neg()
        g_pi = q_action_grad(q1, q_acts, torch.full_like(qf1_pi, -1.0 / len(pi)), self.spec.obs_dim)
        net.backward(acts, g_pi.mul_(1.0 - pi * pi))
        self.actor_optimizer.step()
        self.updates += 1
        return {"actor_loss": actor_loss}

    @cached_property
    def explicit_policy(self) -> Chain:
        return Chain(linear_layers(self.actor.net))
