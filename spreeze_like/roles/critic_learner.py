"""Critic-learner role (``critic-learner``): twin-Q updates, SAC's alpha, TD-error priorities.

A :class:`CriticLearner` holds the algorithm's :class:`~spreeze_like.algos.base.CriticPart` on its
device: the critic, its targets and optimiser (SAC: alpha), and a copy of the actor. Each
``update()`` samples a batch from its replay sampler, does one critic step, writes the new
priorities back (prioritized replay), and every ``sync_period`` updates publishes the critic vector
and refreshes its actor copy from the actor weights source. The copy's staleness (newest actor
version minus the copy's version) is measured at every update and logged.

It creates no shared resource: replay sampler, weights source/sink and stats block are injected and
owned by whoever created them. A crash loses the updates since the last checkpoint.

Versions are the critic board's publish count (see ``roles.ports``). The first publish, at
construction, is the initial network, which equals the copy the actor learner built from the same
seed; so the two learners agree from the start without waiting for each other.

Non-finite steps are skipped by the learner's :class:`~spreeze_like.roles.nonfinite.NonFiniteGuard`
(parameters and optimiser state unchanged, counted in ``nonfinite_steps``); ``max_nonfinite_steps`` in a
row end the run with :class:`~spreeze_like.errors.NonFiniteError`; a skipped step writes no priorities.
"""

from __future__ import annotations

import numpy as np

from spreeze_like.algos import make_critic_part
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.roles.learning import LearnerRole, to_batch
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, WeightsSink, WeightsSource


class CriticLearner(LearnerRole):
    """See the module docstring.

    Args:
        spec: algorithm spec.
        device: torch device of this learner, e.g. ``"cpu"`` or ``"cuda:1"``.
        replay: sampler over replay storage; its priorities are updated when ``prioritized``.
        actor_source: the actor weights (to refresh the actor copy).
        critic_sink: where the critic vector is published.
        stats: this role's stats block.
        batch_size: transitions per update.
        sync_period: updates between publishing the critic and refreshing the actor copy.
        prioritized: apply importance weights and write TD-error priorities.
        max_nonfinite_steps: consecutive steps with NaN/inf gradients that end the run.
    """

    def __init__(
        self,
        spec: AlgoSpec,
        device: str,
        replay: ReplaySampler,
        actor_source: WeightsSource,
        critic_sink: WeightsSink,
        stats: StatsWriter,
        batch_size: int,
        sync_period: int = 1,
        prioritized: bool = False,
        max_nonfinite_steps: int = 10,
    ) -> None:
        part = make_critic_part(spec, device)
        self.replay, self.prioritized = replay, prioritized
        super().__init__(part, actor_source, critic_sink, stats, batch_size, sync_period, part.actor_vector_size,
                         "critic-learner", max_nonfinite_steps)

    def own_vector(self) -> np.ndarray:
        return self.part.critic_vector()

    def load_copy(self, vec: np.ndarray) -> None:
        self.part.load_actor_vector(vec)

    def update(self) -> None:
        """One critic update (sample, step, priorities, maybe sync)."""
        if self.sync_due():
            self.refresh_copy()
        raw = self.replay.sample(self.batch_size)
        batch = to_batch(raw, self.part.device, use_weights=self.prioritized)
        self.guard.begin()
        with self.part.autocast():
            td_errors, metrics = self.part.step(batch)
        if self.prioritized:
            priorities = td_errors.cpu().numpy()
            if np.isfinite(priorities).all():  # a skipped step's TD errors may be NaN: keep the old priorities
                self.replay.update_priorities(raw.slots, raw.generations, priorities)
        metrics["td_error"] = td_errors.mean()
        if batch.weights is not None:
            metrics["is_weight"] = batch.weights.mean()
        self.metrics.add(metrics, applied=self.guard.end())
        self.observe_staleness()
        self.stats.add("updates")
        self.stats.add("update_frames", float(self.batch_size))
        if self.sync_due():
            self.publish()
