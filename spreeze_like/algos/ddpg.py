"""DDPG (Lillicrap et al. 2016): one critic, target actor and target critic, Gaussian exploration.

Reads like CleanRL's ``ddpg_continuous_action.py``. As in TD3, the target actor lives in the
critic learner (soft-updated from its copy of the actor every ``policy_delay`` critic updates,
default every update) because only the Q target uses it.
"""

from __future__ import annotations

import torch

from spreeze_like.algos.base import ActorPart, Batch, TargetActorCriticPart, q_report, weighted_mse


class DDPGCritic(TargetActorCriticPart):
    def step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        s = self.spec
        with torch.no_grad():
            next_state_actions = self.actor_target(b.next_obs)
            qf1_next_target = self.critic_target(b.next_obs, next_state_actions)[0]
            next_q_value = b.reward + (1.0 - b.terminated) * s.bootstrap_gamma * qf1_next_target

        qf1_a_values = self.critic(b.obs, b.action)  # [1, B]
        qf1_loss = weighted_mse(qf1_a_values, next_q_value, b.weights)  # [1]
        self.q_optimizer.zero_grad(set_to_none=True)
        qf1_loss.squeeze(0).backward()  # [1] -> a scalar view
        self.q_optimizer.step()

        self.update_targets()
        return q_report(qf1_a_values, next_q_value, qf1_loss)


class DDPGActor(ActorPart):
    def step(self, b: Batch) -> dict[str, torch.Tensor]:
        actor_loss = -self.critic(b.obs, self.actor(b.obs)).mean()  # [1, B]: the one Q network
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.updates += 1
        return {"actor_loss": actor_loss.detach()}
