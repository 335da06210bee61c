"""TD3 (Fujimoto et al. 2018): twin critics, target policy smoothing, delayed policy updates.

Reads like CleanRL's ``td3_continuous_action.py``. The split across learners: the critic learner
owns the critics, their targets and the *target actor*, which it soft-updates from its copy of the
actor every ``policy_delay`` critic updates (together with the target critics, as TD3 does). The
target actor lives there because only the Q target uses it, so the weight board carries just the
policy. The actor learner updates the policy once per ``policy_delay`` critic updates (paced by
``ActorLearner.updates_due``).
"""

from __future__ import annotations

import torch

from spreeze_like.algos.base import ActorPart, Batch, TargetActorCriticPart, q_report, weighted_mse


class TD3Critic(TargetActorCriticPart):
    def step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        s = self.spec
        with torch.no_grad():
            noise = torch.randn(b.action.shape, generator=self.generator, device=self.device)
            clipped_noise = (noise * s.policy_noise).clamp(-s.noise_clip, s.noise_clip)
            next_state_actions = (self.actor_target(b.next_obs) + clipped_noise).clamp(-1.0, 1.0)
            min_qf_next_target = self.critic_target(b.next_obs, next_state_actions).amin(0)  # min(Q1, Q2)
            next_q_value = b.reward + (1.0 - b.terminated) * s.bootstrap_gamma * min_qf_next_target

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
