"""Actor-learner role (``actor-learner``): policy updates against a copy of the critic.

An :class:`ActorLearner` holds the algorithm's :class:`~spreeze_like.algos.base.ActorPart` on its
device: the actor and its optimiser, and a copy of the critic (SAC: with alpha). Each ``update()``
samples a batch, does one actor step, and every ``sync_period`` updates publishes the actor vector
(read by the samplers, the evaluator and the critic learner) and refreshes its critic copy. The
copy's staleness in critic versions is logged at every update.

Pacing: the algorithms want one actor update per ``policy_delay`` critic updates (TD3: 2, SAC and
DDPG: 1). :meth:`ActorLearner.updates_due` says how many actor updates are owed given the critic's
update count; the serial loop passes the critic learner's count, a parallel actor-learner process
reads the critic learner's ``updates`` counter from the stats block.

Replay: the actor samples uniformly even when the critic uses prioritized replay; priorities
describe where the *critic* is wrong, and an IS-corrected policy gradient over them buys nothing
(the LAP paper, Fujimoto et al. 2020, makes the same choice). Owns no shared resource.

Non-finite steps are skipped by the learner's :class:`~spreeze_like.roles.nonfinite.NonFiniteGuard`
(parameters and optimiser state unchanged, counted in ``nonfinite_steps``); ``max_nonfinite_steps`` in a
row end the run with :class:`~spreeze_like.errors.NonFiniteError`.
"""

from __future__ import annotations

from typing import Any

from spreeze_like.algos import make_actor_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.graphed import ACTOR_INPUTS, resolve_step_mode
from spreeze_like.roles.batches import HostBatches, MirrorBatches, use_device_replay
from spreeze_like.roles.learning import LearnerRole
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, WeightsSink, WeightsSource
from spreeze_like.seeding import derive_seed


class ActorLearner(LearnerRole):
    """See the module docstring.

    Args:
        spec: algorithm spec (``policy_delay`` paces the updates).
        device: torch device of this learner, e.g. ``"cpu"`` or ``"cuda:0"``.
        replay: a (uniform) sampler over replay storage.
        critic_source: the critic weights (to refresh the critic copy).
        actor_sink: where the actor vector is published.
        stats: this role's stats block.
        batch_size: transitions per update.
        sync_period: updates between publishing the actor and refreshing the critic copy.
        max_nonfinite_steps: consecutive steps with NaN/inf gradients that end the run.
        step_mode: ``auto``/``eager``/``explicit``/``cuda-graph`` (see ``algos/graphed.py``).
        device_replay: ``auto``/``on``/``off``: gather observations from a mirror on the device.
        updates_per_graph: updates run together from one graph when the last is due (uniform device replay
            only; ``algos/graphed.py``, "Blocks of updates").
    """

    def __init__(
        self,
        spec: AlgoSpec,
        device: str,
        replay: ReplaySampler,
        critic_source: WeightsSource,
        actor_sink: WeightsSink,
        stats: StatsWriter,
        batch_size: int,
        sync_period: int = 1,
        max_nonfinite_steps: int = 10,
        step_mode: str = "auto",
        device_replay: str = "auto",
        updates_per_graph: int = 1,
    ) -> None:
        part = make_actor_part(spec, device)
        self.replay, self.policy_delay = replay, spec.policy_delay
        if use_device_replay(device_replay, device):
            # observations only: every actor loss here reads nothing else (ACTOR_INPUTS)
            self.batches: Any = MirrorBatches(replay, part.device, ACTOR_INPUTS, False,
                                              derive_seed(spec.seed, "replay/actor-device"))
        else:
            self.batches = HostBatches(replay, False)
        super().__init__(part, critic_source, actor_sink, stats, batch_size, sync_period, "actor-learner",
                         max_nonfinite_steps, ACTOR_INPUTS, False,
                         resolve_step_mode(step_mode, device, part.explicit_ok()),
                         self.batches, updates_per_graph)

    def device_update(self, batch: Batch) -> None:
        self.metrics.accumulate(self.part_step(batch), self.guard.count())

    def updates_due(self, critic_updates: int) -> int:
        """Actor updates owed after ``critic_updates`` critic updates (never negative)."""
        return max(0, critic_updates // self.policy_delay - self.updates)

    def update(self) -> None:
        """One actor update (maybe sync, sample, step, maybe publish)."""
        if self.sync_due():
            self.refresh_copy()
        self.poll_publish()
        self.runner.run(self.batches.draw(self.runner).batch)
        self.guard.tick()
        self.metrics.tick()
        self.observe_staleness()
        self.stats.add("updates")
        if self.sync_due():
            self.request_publish()
