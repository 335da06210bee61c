"""What every algorithm shares: the spec, the batch, and the two halves of the learner.

The design splits each algorithm across two learner processes (possibly on two devices):

* a :class:`CriticPart` owns the critic, its targets (none for CrossQ) and optimiser (SAC and
  CrossQ: also the entropy coefficient), plus a *copy* of the actor (TD3/DDPG: also the target
  actor) used for Q targets.
  ``step(batch)`` does one critic update and returns per-sample TD errors (priorities).
* an :class:`ActorPart` owns the actor and its optimiser, plus a *copy* of the critic (SAC and
  CrossQ: also the entropy coefficient) used for the policy loss. ``step(batch)`` does one actor update.

Each half publishes its own networks as a flat float32 vector and loads the other's vector into
its copy; how the vectors travel (an in-process board in ``--serial`` mode, a shared-memory weight
board in the parallel mode) is not this module's business.

Vector layouts (all ``parameters_to_vector`` order, float32):

* actor vector  = actor parameters. Samplers and the evaluator load the same vector into a policy.
* critic vector = critic parameters, then the running means and variances of its Batch
  Renormalization layers (CrossQ only: the actor learner's copy evaluates with them), then
  SAC's and CrossQ's ``log_alpha`` (one float).

Initial weights are a pure function of the run seed (``build_*`` under a forked torch RNG), so the
two halves start with identical copies without exchanging anything.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from spreeze_like.algos.crossq_critic import CrossQCritic, running_statistics
from spreeze_like.algos.explicit_grad import Chain, q_chains, q_forward, q_regression_grads
from spreeze_like.algos.networks import Critic, actor_class, get_flat, numel, params_of, set_flat, soft_update
from spreeze_like.algos.optim import FusedAdam
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.seeding import derive_seed


class Batch(NamedTuple):
    """One training batch as tensors on the learner's device. ``weights`` is None for uniform replay."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    weights: torch.Tensor | None = None


def critic_class(algo: str) -> type[nn.Module]:
    """The critic network of ``algo``: batch-renormalised for CrossQ, a stack of plain MLPs for the others."""
    return CrossQCritic if algo == "crossq" else Critic


def seeded_build(factory: Any, seed: int) -> nn.Module:
    """Build a module with a fixed initialisation, leaving the global torch RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def weighted_mse(pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean squared error over the batch, the last dim, with importance weights when prioritized replay
    is used: for the Q values ``[n_q, B]`` of a critic, one loss per network ``[n_q]`` in one op chain."""
    sq = (pred - target).pow(2)
    return (sq if weights is None else weights * sq).mean(-1)


def q_report(q_values: torch.Tensor, target: torch.Tensor,
             losses: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """What a critic step returns, from its Q values ``[n_q, B]`` and losses ``[n_q]``: per-sample |TD
    error| (the largest over the networks) and the metrics ``qf<i>_loss``, ``qf<i>_values`` of each."""
    with torch.no_grad():
        errors = (q_values - target).abs()
        td_errors = errors[0] if len(errors) == 1 else errors.amax(0)
        means = q_values.mean(-1)
    n = range(len(q_values))
    metrics = {f"qf{i + 1}_loss": losses[i].detach() for i in n}
    metrics.update({f"qf{i + 1}_values": means[i] for i in n})
    return td_errors, metrics


class _Part:
    """Bookkeeping shared by both halves: devices, generator, state dicts."""

    adam_betas: tuple[float, float] = (0.9, 0.999)  # of both halves' optimisers (CrossQ: beta1 0.5)
    critic: nn.Module  # the critic half's own critic, or the actor half's copy of it

    def __init__(self, spec: AlgoSpec, device: str, role: str) -> None:
        self.spec = spec
        self.device = torch.device(device)
        if self.device.type == "cuda" and spec.precision == "fp32":
            # TF32 tensor cores for fp32 matmuls, as JAX (SBX) does by default on such GPUs: 10 mantissa
            # bits in the products, fp32 accumulation; torch's default leaves them off. The setting is
            # per process, and only learner processes (and the benchmarks of them) build parts.
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(derive_seed(spec.seed, role + "/noise"))
        self.modules: dict[str, nn.Module] = {}
        self.optimizers: dict[str, FusedAdam] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        if spec.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be resolved to fp32 or bf16, got {spec.precision!r}")
        self.bf16 = spec.precision == "bf16"

    def autocast(self, cache: bool = True) -> torch.autocast:
        """The arithmetic context of one ``step``: bf16 autocast of the hidden layers, or a no-op.

        Enter it around each step separately: autocast caches the bf16 casts of the weights until
        the region exits, so a region spanning several steps would keep using stale weights. A CUDA
        graph capture passes ``cache=False`` (the captured casts re-run on every replay).
        """
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=cache)

    # The update with its gradients written out by hand (algos/explicit_grad.py), where the algorithm has one:
    # a method ``explicit_step(batch)`` returning what ``step`` returns.
    explicit_step: Any = None

    def explicit_ok(self) -> bool:
        """Whether ``explicit_step`` can replace ``step`` here: the algorithm has one, on the CPU, in fp32, with
        the stacked critic whose layers the chains read (a benchmark may build another, e.g. by patching
        :func:`critic_class`: named here, not looked up through it)."""
        chained = CrossQCritic if self.spec.algo == "crossq" else Critic
        return (self.explicit_step is not None and self.device.type == "cpu" and not self.bf16
                and isinstance(self.critic, chained))

    @cached_property
    def explicit_critic(self) -> list[Chain]:
        """This half's critic (the critic half's own, the actor half's copy) as one chain per Q network."""
        return q_chains(self.critic)

    def step_variant(self) -> int:
        """Which host-side branch the next ``step`` takes (one CUDA graph per value; see algos/graphed.py)."""
        return 0

    def build_actor(self) -> nn.Module:
        cls = actor_class(self.spec.algo)
        s = self.spec
        return seeded_build(lambda: cls(s.obs_dim, s.act_dim, s.hidden_sizes), derive_seed(s.seed, "actor/init")).to(
            self.device
        )

    def build_critic(self) -> nn.Module:
        s = self.spec
        cls = critic_class(s.algo)
        return seeded_build(
            lambda: cls(s.obs_dim, s.act_dim, s.critic_widths, s.n_q), derive_seed(s.seed, "critic/init")
        ).to(self.device)

    @staticmethod
    def frozen_copy(module: nn.Module) -> nn.Module:
        """A copy that never receives gradients (targets and the other learner's networks)."""
        clone = copy.deepcopy(module)
        clone.requires_grad_(False)
        return clone

    def state_dict(self) -> dict[str, Any]:
        return {
            "modules": {k: m.state_dict() for k, m in self.modules.items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "tensors": {k: t.detach().cpu().clone() for k, t in self.tensors.items()},
            "generator": self.generator.get_state(),
            "generator_device": self.device.type,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, m in self.modules.items():
            m.load_state_dict(state["modules"][k])
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])  # copies the moments: never tied to the source's
        with torch.no_grad():
            for k, t in self.tensors.items():
                t.copy_(state["tensors"][k])
        self._load_generator(state["generator"], state.get("generator_device", self.device.type))

    def _load_generator(self, saved: torch.Tensor, saved_device: str) -> None:
        """Continue the saved noise stream; from another device type, seed a new one from it.

        A CUDA generator's state (Philox seed and offset, 16 bytes) cannot continue on the CPU's
        Mersenne Twister (5,056 bytes) or back: a checkpoint resumed on the other device type seeds
        its generator from a hash of the saved state, so that such a resume is still reproducible.
        """
        if saved_device == self.device.type and saved.numel() == self.generator.get_state().numel():
            self.generator.set_state(saved)
            return
        digest = hashlib.blake2b(saved.cpu().numpy().tobytes(), digest_size=8).digest()
        self.generator.manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))


class CriticPart(_Part):
    """Critic-learner half. Subclasses set up networks in ``__init__`` and write ``step``."""

    has_critic_target = True  # CrossQ: False, no target critic is built

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device, "critic-learner")
        self.critic = self.build_critic()
        self.actor = self.build_actor().requires_grad_(False)  # copy of the actor learner's network
        self.q_optimizer = FusedAdam(self.critic.parameters(), lr=spec.critic_lr, betas=self.adam_betas)
        self.modules["critic"] = self.critic
        if self.has_critic_target:
            self.critic_target = self.frozen_copy(self.critic)
            self.modules["critic_target"] = self.critic_target
        self.modules["actor_copy"] = self.actor
        self.optimizers["q_optimizer"] = self.q_optimizer
        self.critic_params = params_of([self.critic])
        self.critic_target_params = params_of([self.critic_target]) if self.has_critic_target else []
        self.actor_params = params_of([self.actor])
        self.updates = 0

    def step(self, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One critic update. Returns (per-sample |TD error| ``[B]``, scalar metric tensors)."""
        raise NotImplementedError

    def target_draw(self, b: Batch) -> Any:
        """The random numbers the Q target needs, drawn from this half's generator: SAC's and CrossQ's next
        actions and their log-probabilities, TD3's smoothing noise, nothing for DDPG.

        A step and its explicit step call it first, in their own frame. A generator draw is a graph break
        for torch.compile (``compiled-graph``), and a break inside a called function splits the caller's graph
        at the call: drawn inside the target's computation (a032dcd to 0caa2d0), it split the target from the
        Q regression into two compiled graphs (``tests/trainer/test_compile_graphs.py``). The H200's compiled
        update at batch 256 made 2,550-2,721 updates/s then, against 3,642-3,796 before (2026-11-29; the
        likely cause, not re-measured since the fix)."""
        return None

    def explicit_target_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``critic_target(obs, action)`` ``[n_q, B]`` through chains (the same ops without the module's
        per-network slicing): what an ``explicit_step`` hands its ``q_target``."""
        return q_forward(self.explicit_target, obs, action)[0]

    @cached_property
    def explicit_target(self) -> list[Chain]:
        return q_chains(self.critic_target)

    def extra_critic_state(self) -> list[torch.Tensor]:
        """Scalars appended to the critic vector (SAC: log_alpha)."""
        return []

    def published_tensors(self) -> list[torch.Tensor]:
        """The critic vector's tensors, in order: the critic's parameters, its running statistics
        (CrossQ), then the extra scalars."""
        extras = [t.reshape(1) for t in self.extra_critic_state()]
        return self.critic_params + running_statistics(self.critic) + extras

    def copy_tensors(self) -> list[torch.Tensor]:
        """The tensors an actor vector loads into (this half's copy of the actor)."""
        return self.actor_params

    def critic_vector(self) -> np.ndarray:
        return get_flat(self.published_tensors())

    @property
    def actor_vector_size(self) -> int:
        """Length of the actor vector this half loads."""
        return numel(self.actor)

    def load_actor_vector(self, vec: np.ndarray) -> None:
        set_flat(self.copy_tensors(), vec)


class TargetActorCriticPart(CriticPart):
    """A critic half that also owns a *target actor* (TD3, DDPG).

    The target actor lives with the critic because only the Q target uses it; it follows this
    half's copy of the actor. :meth:`update_targets` moves both targets every ``policy_delay``
    critic updates, as TD3 moves them with its delayed policy update (DDPG: delay 1).
    """

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device)
        self.actor_target = self.frozen_copy(self.actor)
        self.modules["actor_target"] = self.actor_target
        self.actor_target_params = params_of([self.actor_target])

    def step_variant(self) -> int:
        """1 when the next update also moves the targets (every ``policy_delay`` updates), else 0."""
        return int((self.updates + 1) % self.spec.policy_delay == 0)

    def update_targets(self) -> None:
        """Count the update; every ``policy_delay`` updates soft-update the target actor and critic."""
        self.updates += 1
        if self.updates % self.spec.policy_delay == 0:
            soft_update(self.actor_target_params, self.actor_params, self.spec.tau)
            soft_update(self.critic_target_params, self.critic_params, self.spec.tau)

    def q_target(self, b: Batch, draw: torch.Tensor | None,
                 critic_target: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        """The Q target ``[B]`` of the batch (the algorithm's, computed without grad) from ``draw`` (what
        :meth:`target_draw` returned), with the target critic's values from ``critic_target`` (default:
        the module)."""
        raise NotImplementedError

    @torch.no_grad()
    def explicit_step(self, b: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The subclass's ``step`` (a regression of every Q network on :meth:`q_target`) with its
        gradients written out (``explicit_grad.py``): the same update on the CPU."""
        next_q_value = self.q_target(b, self.target_draw(b), self.explicit_target_q)
        chains = self.explicit_critic
        qf_a_values, acts = q_forward(chains, b.obs, b.action)
        qf_losses = q_regression_grads(chains, acts, qf_a_values, next_q_value, b.weights)
        self.q_optimizer.step()
        self.update_targets()
        return q_report(qf_a_values, next_q_value, qf_losses)


class ActorPart(_Part):
    """Actor-learner half. Subclasses write ``step``."""

    def __init__(self, spec: AlgoSpec, device: str) -> None:
        super().__init__(spec, device, "actor-learner")
        self.actor = self.build_actor()
        self.critic = self.build_critic().requires_grad_(False)  # copy of the critic learner's network
        self.actor_optimizer = FusedAdam(self.actor.parameters(), lr=spec.actor_lr, betas=self.adam_betas)
        self.modules.update(actor=self.actor, critic_copy=self.critic)
        self.optimizers["actor_optimizer"] = self.actor_optimizer
        self.actor_params, self.critic_params = params_of([self.actor]), params_of([self.critic])
        self._critic_numel = numel(self.critic)
        self.updates = 0

    def step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One actor update. Returns scalar metric tensors."""
        raise NotImplementedError

    # Scalars a CriticPart appends to the critic vector (SAC: 1, log_alpha): a class constant, so the
    # supervisor sizes the boards without building networks (procs/segments.vector_sizes).
    n_extra_critic_state = 0

    def extra_copy_tensors(self) -> list[torch.Tensor]:
        """Where the ``n_extra_critic_state`` scalars of the critic vector land (SAC: the copy of log_alpha)."""
        return []

    def published_tensors(self) -> list[torch.Tensor]:
        """The actor vector's tensors: the actor's parameters."""
        return self.actor_params

    def copy_tensors(self) -> list[torch.Tensor]:
        """The tensors a critic vector loads into: the critic copy's parameters, its running
        statistics (CrossQ), then the extras."""
        return self.critic_params + running_statistics(self.critic) + self.extra_copy_tensors()

    @property
    def critic_vector_size(self) -> int:
        """Length of the critic vector this half loads."""
        return sum(t.numel() for t in self.copy_tensors())

    def actor_vector(self) -> np.ndarray:
        return get_flat(self.published_tensors())

    def load_critic_vector(self, vec: np.ndarray) -> None:
        set_flat(self.copy_tensors(), vec)
