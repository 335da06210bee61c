"""An eager, single-process PyTorch SAC update: the in-run peer for issue 15's critic-rate acceptance.

Issue 15 asks that our CUDA critic update at batch 256 runs >= 3x "a CleanRL-style eager
single-process SAC update". This module is that peer, written from the algorithm (Haarnoja et al.
2018, "Soft Actor-Critic Algorithms and Applications": twin soft Q functions, a tanh-squashed
Gaussian policy, automatic entropy tuning towards ``-act_dim``), the way a typical single-file
script writes it:

- two separate Q MLPs (256-256, ReLU) and their target copies, Polyak-averaged with tau 0.005
  after every Q step; one ``torch.optim.Adam`` over both Q nets (lr 1e-3), one for the actor
  (lr 3e-4) and one for ``log_alpha`` (lr 1e-3), all with torch's defaults (not fused, not
  ``foreach``-forced, no capturable state): what a script gets from ``Adam(params, lr=...)``;
- the policy (and alpha) update every step, after the Q update, on the same batch;
- fp32 with torch's default matmul precision (no TF32) unless ``--tf32`` is given; no
  ``torch.compile``, no CUDA graphs, no autocast: the point of the peer is plain eager PyTorch.

Host syncs, as a typical script has them: losses are read with ``.item()`` every ``log_every``
(100) updates only, as a script does to write them to TensorBoard. One place where we spare the
peer a sync that CleanRL's script has: alpha stays a detached device tensor
(``log_alpha.exp().detach()``) instead of a Python float from ``.item()`` after every alpha step.
That is in the peer's favour, and is a one-line choice any careful script makes.

The peer does no replay sampling: ``measure`` times updates on one fixed batch that is already on
the device, so what is compared is the update itself. On a busy 2-core machine give ``--threads 1``:
torch's two threads there fell to 62 critic updates/s at batch 64 against 460 with one (one run, load 2).

    python tools/eager_sac_peer.py --device cpu --batch 256 --seconds 3      # HalfCheetah sizes: obs 17, act 6
    python tools/eager_sac_peer.py --device cuda --batch 256 --seconds 10 --json peer.json

Owns nothing outside its own process: no files, no shared memory, no child processes.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
HALF_CHEETAH_OBS, HALF_CHEETAH_ACT = 17, 6


class SACBatch(NamedTuple):
    """One replay batch on the peer's device; rewards and dones are (batch, 1)."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    dones: torch.Tensor  # 1.0 where the episode terminated (no bootstrap), 0.0 otherwise


def mlp(in_dim: int, out_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def polyak(net: nn.Module, target: nn.Module, tau: float) -> None:
    """target <- (1 - tau) target + tau net, parameter by parameter."""
    with torch.no_grad():
        for p, tp in zip(net.parameters(), target.parameters()):
            tp.lerp_(p, tau)


class QNetwork(nn.Module):
    """Q(s, a): the MLP over the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(obs_dim + act_dim, 1, hidden)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], dim=1))


class SquashedGaussianActor(nn.Module):
    """pi(a|s) = tanh(u), u ~ N(mean(s), std(s)); log-std squashed smoothly into [LOG_STD_MIN, LOG_STD_MAX].

    Actions are in [-1, 1] (HalfCheetah's bounds), so there is no action scale or bias; the training loop of
    tools/peers_script.py maps them to an env's bounds outside the network, as SB3 does.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.trunk = mlp(obs_dim, hidden[-1], hidden[:-1])
        self.mean = nn.Linear(hidden[-1], act_dim)
        self.log_std = nn.Linear(hidden[-1], act_dim)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action tanh(mean(s)): what an evaluation plays."""
        return torch.tanh(self.mean(F.relu(self.trunk(obs))))

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log pi(action|obs) summed over action dims, shape (batch, 1)); reparameterised."""
        h = F.relu(self.trunk(obs))
        mean = self.mean(h)
        log_std = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        action = torch.tanh(u)
        # Gaussian log-density of u, then the change of variables through tanh (1e-6 keeps log finite)
        log_prob = -0.5 * ((u - mean) / std).pow(2) - log_std - HALF_LOG_2PI
        log_prob = log_prob - torch.log(1.0 - action.pow(2) + 1e-6)
        return action, log_prob.sum(dim=1, keepdim=True)


class EagerSACPeer:
    """SAC's networks, optimisers and the two halves of one update, as a single-file script holds them."""

    def __init__(self, obs_dim: int, act_dim: int, device: str, batch_size: int, seed: int = 0,
                 hidden: Sequence[int] = (256, 256), gamma: float = 0.99, tau: float = 0.005,
                 q_lr: float = 1e-3, policy_lr: float = 3e-4, alpha_lr: float = 1e-3, log_every: int = 100) -> None:
        torch.manual_seed(seed)  # a script seeds the global generators once, so do we
        self.device = torch.device(device)
        self.batch_size, self.gamma, self.tau, self.log_every = batch_size, gamma, tau, log_every
        self.qf1 = QNetwork(obs_dim, act_dim, hidden).to(self.device)
        self.qf2 = QNetwork(obs_dim, act_dim, hidden).to(self.device)
        self.qf1_target = QNetwork(obs_dim, act_dim, hidden).to(self.device)
        self.qf2_target = QNetwork(obs_dim, act_dim, hidden).to(self.device)
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.actor = SquashedGaussianActor(obs_dim, act_dim, hidden).to(self.device)
        self.q_optimizer = torch.optim.Adam(list(self.qf1.parameters()) + list(self.qf2.parameters()), lr=q_lr)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=policy_lr)
        self.target_entropy = -float(act_dim)
        self.log_alpha = torch.zeros(1, device=self.device, requires_grad=True)  # alpha starts at 1
        self.alpha = self.log_alpha.exp().detach()
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=alpha_lr)
        self.critic_updates = 0
        self.actor_updates = 0
        self.logged: dict[str, float] = {}  # the losses as last read every ``log_every`` updates

    def critic_loss(self, batch: SACBatch) -> torch.Tensor:
        """Soft TD loss of both Q nets against the target nets' soft value (alpha a constant here)."""
        with torch.no_grad():
            next_actions, next_log_pi = self.actor.sample(batch.next_obs)
            min_q_next = torch.min(self.qf1_target(batch.next_obs, next_actions),
                                   self.qf2_target(batch.next_obs, next_actions))
            soft_value = min_q_next - self.alpha * next_log_pi
            target = batch.rewards + (1.0 - batch.dones) * self.gamma * soft_value
        qf1_loss = F.mse_loss(self.qf1(batch.obs, batch.actions), target)
        qf2_loss = F.mse_loss(self.qf2(batch.obs, batch.actions), target)
        return qf1_loss + qf2_loss

    def critic_update(self, batch: SACBatch) -> None:
        """One Q optimiser step on both Q nets, then the Polyak update of both target nets."""
        qf_loss = self.critic_loss(batch)
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        polyak(self.qf1, self.qf1_target, self.tau)
        polyak(self.qf2, self.qf2_target, self.tau)
        self.critic_updates += 1
        if self.critic_updates % self.log_every == 0:
            self.logged["qf_loss"] = qf_loss.item()

    def actor_update(self, batch: SACBatch) -> None:
        """One policy step (maximise min Q - alpha log pi), then one step of alpha towards the target entropy."""
        actions, log_pi = self.actor.sample(batch.obs)
        min_q = torch.min(self.qf1(batch.obs, actions), self.qf2(batch.obs, actions))
        actor_loss = (self.alpha * log_pi - min_q).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()  # also leaves gradients in the Q nets; the next Q step's zero_grad drops them
        self.actor_optimizer.step()

        # J(alpha) = E[-alpha (log pi + target entropy)]: alpha grows when the entropy is below target
        alpha_loss = (-self.log_alpha.exp() * (log_pi.detach() + self.target_entropy)).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        self.alpha = self.log_alpha.exp().detach()
        self.actor_updates += 1
        if self.actor_updates % self.log_every == 0:
            self.logged.update(actor_loss=actor_loss.item(), alpha_loss=alpha_loss.item(), alpha=self.alpha.item())

    def update(self, batch: SACBatch) -> None:
        """One full SAC step at UTD 1 with the policy updated every step."""
        self.critic_update(batch)
        self.actor_update(batch)


def random_batch(obs_dim: int, act_dim: int, batch_size: int, device: str, seed: int = 0) -> SACBatch:
    """A synthetic batch: normal observations, uniform actions in [-1, 1], rewards a fixed smooth function
    of (obs, action) so that Q has something learnable, 5 % terminal transitions."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(batch_size, obs_dim, generator=g)
    actions = torch.rand(batch_size, act_dim, generator=g) * 2.0 - 1.0
    next_obs = obs + 0.1 * torch.randn(batch_size, obs_dim, generator=g)
    rewards = torch.tanh(obs[:, :1]) - 0.1 * actions.pow(2).sum(dim=1, keepdim=True)
    dones = (torch.rand(batch_size, 1, generator=g) < 0.05).float()
    return SACBatch(*(t.to(device) for t in (obs, actions, rewards, next_obs, dones)))


def _sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure(peer_fn: Callable[[SACBatch], None], batch: SACBatch, seconds: float, device: str | torch.device,
            warmup: int = 20) -> float:
    """Calls of ``peer_fn(batch)`` per second over at least ``seconds`` of wall time.

    ``warmup`` calls first are not timed (kernel selection, Adam's state allocation). On CUDA the
    device is synchronised before the clock starts and before it stops, so queued work counts.
    """
    for _ in range(warmup):
        peer_fn(batch)
    _sync(device)
    calls, t0 = 0, time.perf_counter()
    while True:
        peer_fn(batch)
        calls += 1
        if time.perf_counter() - t0 >= seconds:
            break
    _sync(device)
    return calls / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per measurement")
    parser.add_argument("--obs-dim", type=int, default=HALF_CHEETAH_OBS)
    parser.add_argument("--act-dim", type=int, default=HALF_CHEETAH_ACT)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (torch's default is not to)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tf32:
        torch.set_float32_matmul_precision("high")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.exit(2, f"error: --device {args.device}: CUDA is not available on this machine\n")
    batch = random_batch(args.obs_dim, args.act_dim, args.batch, args.device, args.seed)
    figures: dict = {"device": args.device, "batch": args.batch, "obs_dim": args.obs_dim, "act_dim": args.act_dim,
                     "torch": torch.__version__, "threads": torch.get_num_threads(), "tf32": args.tf32}
    if torch.device(args.device).type == "cuda":
        figures["gpu"] = torch.cuda.get_device_name(args.device)
    # a fresh peer per measurement: the critic-only loop does not feed the full loop's Adam states
    for name, part in (("critic", "critic_update"), ("full", "update")):
        peer = EagerSACPeer(args.obs_dim, args.act_dim, args.device, args.batch, seed=args.seed)
        rate = measure(getattr(peer, part), batch, args.seconds, args.device)
        figures[f"{name}_updates_per_s"] = rate
        figures[f"{name}_frames_per_s"] = rate * args.batch
    print(f"eager SAC peer on {args.device} (torch {torch.__version__}, {figures['threads']} threads"
          f"{', TF32' if args.tf32 else ''}), obs {args.obs_dim}, act {args.act_dim}, batch {args.batch}:")
    for name, label in (("critic", "critic updates/s"), ("full", "full updates/s  ")):
        print(f"  {label} {figures[f'{name}_updates_per_s']:10.1f}   frames/s {figures[f'{name}_frames_per_s']:12.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
