"""DDPG (Lillicrap et al. 2016): one critic, target actor and target critic, Gaussian exploration.

Reads like CleanRL's ``ddpg_continuous_action.py``. As in TD3, the target actor lives in the
critic learner (soft-updated from its copy of the actor every ``policy_delay`` critic updates,
default every update) because only the Q target uses it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from spreeze_like.algos.base import ActorPart, Batch, TargetActorCriticPart, q_report, weighted_mse
from spreeze_like.algos.td3 import TD3Actor


class DDPGCritic(TargetActorCriticPart):
    @torch.no_grad()
    def q_target(self, b: Batch, draw: torch.Tensor | None,
                 critic_target: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        """The Q target ``[B]``: the target Q of the target policy's action (deterministic: no ``draw``)."""
        critic_target = critic_target or self.critic_target
        next_state_actions = self.actor_target(b.next_obs)
        qf1_next_target = critic_target(b.next_obs, next_state_actions)[0]
        return b.reward + (1.0 - b.terminated) * self.spec.bootstrap_gamma * qf1_next_target

    def step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        next_q_value = self.q_target(b, None)
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

    # TD3's, by hand: its loss is this one (its Q1 is DDPG's one Q network)
    explicit_step = TD3Actor.explicit_step
    explicit_policy = TD3Actor.explicit_policy
