"""Critic-learner role (``critic-learner``): twin-Q updates, SAC's alpha, TD-error priorities.

A :class:`CriticLearner` holds the algorithm's :class:`~spreeze_like.algos.base.CriticPart` on its
device: the critic, its targets and optimiser (SAC: alpha), and a copy of the actor. Each
``update()`` samples a batch from its replay sampler, does one critic step, writes the new
priorities back (prioritized replay), and every ``sync_period`` updates publishes the critic vector
and refreshes its actor copy from the actor weights source. The copy's staleness (newest actor
version minus the copy's version) is measured at every update and logged.

Non-finite steps are skipped by a :class:`~spreeze_like.roles.nonfinite.NonFiniteGuard` (parameters
and optimiser state unchanged, counted in ``nonfinite_steps``; ``max_nonfinite_steps`` in a row end
the run with :class:`~spreeze_like.errors.NonFiniteError`); a skipped step writes no priorities.

It creates no shared resource: replay sampler, weights source/sink and stats block are injected and
owned by whoever created them. A crash loses the updates since the last checkpoint.

Versions are the critic board's publish count (see ``roles.ports``). The first publish, at
construction, is the initial network, which equals the copy the actor learner built from the same
seed; so the two learners agree from the start without waiting for each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spreeze_like.algos import make_critic_part
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.roles.learning import MetricMeans, to_batch
from spreeze_like.roles.nonfinite import NonFiniteGuard
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, WeightsSink, WeightsSource, observe


class CriticLearner:
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
        self.part = make_critic_part(spec, device)
        self.replay, self.actor_source, self.critic_sink, self.stats = replay, actor_source, critic_sink, stats
        self.batch_size, self.sync_period, self.prioritized = batch_size, sync_period, prioritized
        self.copy_version = 0  # board version held in the actor copy; 0: the seed-determined initial network
        self.version = 0  # board version of our last publish
        self._copy_vec = np.zeros(self.part.actor_vector_size, dtype=np.float32)
        self.metrics = MetricMeans(stats)
        self.guard = NonFiniteGuard(self.part, "critic-learner", stats, max_nonfinite_steps)
        self.publish()

    @property
    def updates(self) -> int:
        return self.part.updates

    def update(self) -> None:
        """One critic update (sample, step, priorities, maybe sync)."""
        if self.part.updates % self.sync_period == 0:
            self.refresh_actor_copy()
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
        observe(self.stats, "copy_staleness", float(max(0, self.actor_source.version() - self.copy_version)))
        self.stats.add("updates")
        self.stats.add("update_frames", float(self.batch_size))
        if self.part.updates % self.sync_period == 0:
            self.publish()

    def refresh_actor_copy(self) -> None:
        if self.actor_source.version() > self.copy_version:
            version = self.actor_source.read(self._copy_vec)
            if version > 0:
                self.part.load_actor_vector(self._copy_vec)
                self.copy_version = version

    def publish(self) -> None:
        self.version = self.critic_sink.publish(self.part.critic_vector())
        self.stats.set("version", float(self.version))

    def flush(self) -> None:
        """Hand pending metric sums and skip counts to the stats block (call before a final read).

        Raises NonFiniteError if the last updates were skipped ``max_nonfinite_steps`` times in a row.
        """
        self.metrics.flush()
        self.guard.check()

    def check_finite(self) -> None:
        """Before a checkpoint: raise NonFiniteError unless every network and optimiser tensor is finite."""
        self.flush()
        self.guard.assert_finite_state()

    def state_dict(self) -> dict[str, Any]:
        return {"part": self.part.state_dict(), "updates": self.part.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.part.load_state_dict(state["part"])
        self.part.updates = int(state["updates"])
        self.publish()
