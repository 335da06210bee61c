"""The eager TD3 and DDPG update of the script peers (tools/eager_td3_peer.py) is the algorithm it says it is.

A peer that did not learn, or that ran some other algorithm, would make a ratio against it meaningless: its critic
loss must fall on a fixed batch, TD3's target must take the smaller of its twin targets at a smoothed, clipped
target action (DDPG's at the target action itself, from its one Q net), and the actor and the targets must move
every ``policy_delay`` critic updates, by Polyak's tau.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

from eager_sac_peer import HALF_CHEETAH_ACT, HALF_CHEETAH_OBS, random_batch
from eager_td3_peer import EagerTD3Peer

from .test_eager_sac_peer import one_thread  # noqa: F401  (autouse: one torch thread here too)

OBS, ACT = HALF_CHEETAH_OBS, HALF_CHEETAH_ACT


def td3(**kwargs) -> EagerTD3Peer:
    return EagerTD3Peer(OBS, ACT, "cpu", seed=1, hidden=(32, 32), **kwargs)


def ddpg(**kwargs) -> EagerTD3Peer:
    return td3(twin=False, policy_delay=1, target_noise=0.0, **kwargs)


def target_actions(peer: EagerTD3Peer, batch) -> list[torch.Tensor]:
    """The actions every target Q net is asked about by one ``q_target``."""
    seen: list[torch.Tensor] = []
    hooks = [qf.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[1].clone()))
             for qf in peer.qf_targets]
    peer.q_target(batch)
    for hook in hooks:
        hook.remove()
    return seen


@pytest.mark.parametrize("make", [td3, ddpg], ids=["td3", "ddpg"])
def test_the_critic_loss_falls_on_a_fixed_batch(make) -> None:
    batch = random_batch(OBS, ACT, 256, "cpu", seed=1)
    peer = make(lr=1e-3)

    def loss() -> float:
        with torch.no_grad():
            target = peer.q_target(batch)
            return sum(torch.nn.functional.mse_loss(qf(batch.obs, batch.actions), target).item() for qf in peer.qfs)

    before = loss()
    for _ in range(200):
        peer.update(batch)
    after = loss()
    assert math.isfinite(after) and after < 0.25 * before, (before, after)
    assert peer.critic_updates == 200 and peer.actor_updates == 200 // peer.policy_delay
    assert set(peer.logged) == {"qf_loss", "actor_loss"}


def test_td3s_target_action_is_smoothed_by_clipped_noise_inside_the_bounds() -> None:
    batch = random_batch(OBS, ACT, 512, "cpu", seed=2)
    peer = td3(target_noise=5.0, noise_clip=0.8)  # noise this wide is clipped nearly everywhere
    first, second = target_actions(peer, batch)
    torch.testing.assert_close(first, second)  # both twins judge one action
    with torch.no_grad():
        mu = peer.actor_target(batch.next_obs)
    assert mu.abs().max() < 0.5 and first.abs().max() == 1.0  # mu + 0.8 leaves [-1, 1]: the clip holds it
    shift = (first - mu)[first.abs() < 1.0]  # where the [-1, 1] clip did not cut the shift
    assert 0.79 < shift.abs().max() <= 0.8 + 1e-6
    assert (shift > 0.79).any() and (shift < -0.79).any()


def test_the_targets_use_the_generators_draw_and_the_min_of_the_twins() -> None:
    batch = random_batch(OBS, ACT, 64, "cpu", seed=3)
    peer = td3()
    torch.manual_seed(7)
    actions = target_actions(peer, batch)[0]
    torch.manual_seed(7)
    got = peer.q_target(batch)
    with torch.no_grad():
        q1, q2 = (qf(batch.next_obs, actions) for qf in peer.qf_targets)
    torch.testing.assert_close(got, batch.rewards + (1.0 - batch.dones) * peer.gamma * torch.min(q1, q2))
    assert (q1 < q2).any() and (q2 < q1).any()


def test_ddpgs_target_is_its_one_target_q_at_the_target_action() -> None:
    batch = random_batch(OBS, ACT, 64, "cpu", seed=4)
    peer = ddpg()
    assert len(peer.qfs) == len(peer.qf_targets) == 1
    (actions,) = target_actions(peer, batch)
    with torch.no_grad():
        torch.testing.assert_close(actions, peer.actor_target(batch.next_obs))  # no smoothing
        want = batch.rewards + (1.0 - batch.dones) * peer.gamma * peer.qf_targets[0](batch.next_obs, actions)
    torch.testing.assert_close(peer.q_target(batch), want)


@pytest.mark.parametrize("make", [td3, ddpg], ids=["td3", "ddpg"])
def test_the_actor_and_the_targets_move_every_policy_delay_by_tau(make) -> None:
    batch = random_batch(OBS, ACT, 32, "cpu", seed=5)
    peer = make()
    nets = (peer.actor, *peer.qfs)
    targets = (peer.actor_target, *peer.qf_targets)
    for n in range(1, 5):
        before = [[p.detach().clone() for p in t.parameters()] for t in targets]
        actor_before = [p.detach().clone() for p in peer.actor.parameters()]
        peer.update(batch)
        due = n % peer.policy_delay == 0
        moved_actor = any(not torch.equal(a, p) for a, p in zip(actor_before, peer.actor.parameters()))
        assert moved_actor == due, n
        for old, net, target in zip(before, nets, targets):
            for b, online, t in zip(old, net.parameters(), target.parameters()):
                torch.testing.assert_close(t, b + peer.tau * (online.detach() - b) if due else b)
    assert peer.actor_updates == 4 // peer.policy_delay
