"""An eager, single-process PyTorch TD3 and DDPG update, as a single-file script writes them.

The update of ``tools/peers_script.py``'s ``script-td3`` and ``script-ddpg`` peers (``tools/bench_vs_sb3.py``):
the README promises runs that finish sooner than "a CleanRL script", and ours trains TD3 and DDPG as well as SAC.
Written from the algorithms, not copied:

- **TD3** (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods"): twin Q MLPs
  and the minimum of their targets; target policy smoothing (the target actor's action plus Gaussian noise of std
  0.2 clipped at 0.5, then clipped to [-1, 1]); the actor and every target network updated every second critic
  update (policy delay 2).
- **DDPG** (Lillicrap et al. 2016): one Q MLP, no smoothing, the actor and the targets updated after every critic
  update. That is SB3's DDPG (TD3 with one critic, delay 1 and no target noise), which the other DDPG peers run;
  CleanRL's DDPG script delays its policy by 2 (its own default, not the algorithm's).

As in ``eager_sac_peer``: MLPs 256-256 with ReLU (``mlp``, ``QNetwork``: one copy of the networks), a tanh
deterministic actor with actions in [-1, 1] (mapped to an env's bounds outside the network), torch's default
``Adam`` (one over the Q nets, one for the actor), Polyak targets with ``tau``, fp32 eager PyTorch, the losses read
with ``.item()`` every ``log_every`` updates only.

Owns nothing outside its own process.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from eager_sac_peer import QNetwork, SACBatch, mlp, polyak
from torch import nn


class DeterministicActor(nn.Module):
    """mu(s) = tanh(MLP(s)): one action in [-1, 1] per observation."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, act_dim, hidden)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class EagerTD3Peer:
    """TD3's (``twin=True``) or DDPG's (``twin=False``) networks, optimisers and update, as a script holds them."""

    def __init__(self, obs_dim: int, act_dim: int, device: str, seed: int = 0, hidden: Sequence[int] = (256, 256),
                 gamma: float = 0.99, tau: float = 0.005, lr: float = 1e-3, twin: bool = True, policy_delay: int = 2,
                 target_noise: float = 0.2, noise_clip: float = 0.5, log_every: int = 100) -> None:
        torch.manual_seed(seed)  # a script seeds the global generators once, so do we
        self.device = torch.device(device)
        self.gamma, self.tau, self.log_every = gamma, tau, log_every
        self.policy_delay, self.target_noise, self.noise_clip = policy_delay, target_noise, noise_clip
        self.qfs = nn.ModuleList(QNetwork(obs_dim, act_dim, hidden) for _ in range(2 if twin else 1)).to(self.device)
        self.qf_targets = copy.deepcopy(self.qfs)
        self.actor = DeterministicActor(obs_dim, act_dim, hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor)
        self.q_optimizer = torch.optim.Adam(self.qfs.parameters(), lr=lr)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_updates = 0
        self.actor_updates = 0
        self.logged: dict[str, float] = {}  # the losses as last read every ``log_every`` updates

    def q_target(self, batch: SACBatch) -> torch.Tensor:
        """r + gamma (1 - done) min_i Q'_i(s', a'), with a' the target actor's action (smoothed for TD3)."""
        with torch.no_grad():
            next_actions = self.actor_target(batch.next_obs)
            if self.target_noise:
                noise = (torch.randn_like(next_actions) * self.target_noise).clamp(-self.noise_clip, self.noise_clip)
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            q_next = torch.stack([qf(batch.next_obs, next_actions) for qf in self.qf_targets]).min(dim=0).values
            return batch.rewards + (1.0 - batch.dones) * self.gamma * q_next

    def critic_update(self, batch: SACBatch) -> None:
        """One Q optimiser step: every Q net regresses on the one target."""
        target = self.q_target(batch)
        qf_loss = sum(F.mse_loss(qf(batch.obs, batch.actions), target) for qf in self.qfs)
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        self.critic_updates += 1
        if self.critic_updates % self.log_every == 0:
            self.logged["qf_loss"] = qf_loss.item()

    def actor_update(self, batch: SACBatch) -> None:
        """One policy step up the first Q net's gradient, then the Polyak update of every target network."""
        actor_loss = -self.qfs[0](batch.obs, self.actor(batch.obs)).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()  # also leaves gradients in Q1; the next Q step's zero_grad drops them
        self.actor_optimizer.step()
        polyak(self.actor, self.actor_target, self.tau)
        polyak(self.qfs, self.qf_targets, self.tau)
        self.actor_updates += 1
        if self.actor_updates % self.log_every == 0:
            self.logged["actor_loss"] = actor_loss.item()

    def update(self, batch: SACBatch) -> None:
        """One critic step; the actor's and the targets' every ``policy_delay`` critic steps."""
        self.critic_update(batch)
        if self.critic_updates % self.policy_delay == 0:
            self.actor_update(batch)
