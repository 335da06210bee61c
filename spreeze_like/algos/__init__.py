"""Algorithms: SAC (default), TD3, DDPG, CrossQ, each split into a critic half and an actor half.

``make_critic_part(spec, device)`` / ``make_actor_part(spec, device)`` build the halves that the
critic learner and the actor learner hold; ``make_policy(spec)`` builds the bare policy network
that samplers and the evaluator load actor vectors into. See :mod:`spreeze_like.algos.base` for the
vector layouts and why each half owns what it owns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from spreeze_like.algos.base import ActorPart, AlgoSpec, CriticPart


def _classes(algo: str) -> tuple[type, type]:
    if algo == "sac":
        from spreeze_like.algos.sac import SACActor, SACCritic

        return SACCritic, SACActor
    if algo == "td3":
        from spreeze_like.algos.td3 import TD3Actor, TD3Critic

        return TD3Critic, TD3Actor
    if algo == "ddpg":
        from spreeze_like.algos.ddpg import DDPGActor, DDPGCritic

        return DDPGCritic, DDPGActor
    if algo == "crossq":
        from spreeze_like.algos.crossq import CrossQActor, CrossQCritic

        return CrossQCritic, CrossQActor
    raise ValueError(f"unknown algorithm {algo!r}")


def actor_class(algo: str) -> type:
    from spreeze_like.algos import networks  # the submodules never import this package back

    return networks.actor_class(algo)


def make_critic_part(spec: AlgoSpec, device: str) -> CriticPart:
    return _classes(spec.algo)[0](spec, device)


def make_actor_part(spec: AlgoSpec, device: str) -> ActorPart:
    return _classes(spec.algo)[1](spec, device)


def make_policy(spec: AlgoSpec) -> nn.Module:
    """The policy network alone, on the CPU, initialised like the actor learner's (for samplers/evaluator)."""
    from spreeze_like.algos.base import seeded_build
    from spreeze_like.seeding import derive_seed

    cls = actor_class(spec.algo)
    policy = seeded_build(
        lambda: cls(spec.obs_dim, spec.act_dim, spec.hidden_sizes), derive_seed(spec.seed, "actor/init")
    )
    return policy.requires_grad_(False)
