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

from typing import Any

import torch

from spreeze_like.algos import make_critic_part
from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.graphed import CRITIC_INPUTS, resolve_step_mode
from spreeze_like.roles.batches import HostBatches, MirrorBatches, PendingPriorities, use_device_replay
from spreeze_like.roles.learning import LearnerRole
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, WeightsSink, WeightsSource
from spreeze_like.seeding import derive_seed


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
        step_mode: ``auto``/``eager``/``explicit``/``cuda-graph`` (see ``algos/graphed.py``).
        device_replay: ``auto``/``on``/``off``: gather batches from a mirror on the device (``roles/batches.py``).
        updates_per_graph: updates run together from one graph when the last is due (uniform device replay
            only; ``algos/graphed.py``, "Blocks of updates").
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
        step_mode: str = "auto",
        device_replay: str = "auto",
        updates_per_graph: int = 1,
    ) -> None:
        part = make_critic_part(spec, device)
        self.replay, self.prioritized = replay, prioritized
        if use_device_replay(device_replay, device):
            self.batches: Any = MirrorBatches(replay, part.device, CRITIC_INPUTS, prioritized,
                                              derive_seed(spec.seed, "replay/critic-device"))
        else:
            self.batches = HostBatches(replay, prioritized)
        self.priorities = PendingPriorities(replay, part.device, batch_size) if prioritized else None
        super().__init__(part, actor_source, critic_sink, stats, batch_size, sync_period, "critic-learner",
                         max_nonfinite_steps, CRITIC_INPUTS, prioritized,
                         resolve_step_mode(step_mode, device, part.explicit_ok()),
                         self.batches, updates_per_graph)

    def device_update(self, batch: Batch) -> torch.Tensor:
        td_errors, metrics = self.part_step(batch)
        metrics["td_error"] = td_errors.mean()
        if batch.weights is not None:
            metrics["is_weight"] = batch.weights.mean()
        self.metrics.accumulate(metrics, self.guard.count())
        return td_errors

    def update(self) -> None:
        """One critic update (sample, step, priorities, maybe sync)."""
        if self.sync_due():
            self.refresh_copy()
        self.poll_publish()
        drawn = self.batches.draw(self.runner)
        td_errors = self.runner.run(drawn.batch)
        self.guard.tick()
        self.metrics.tick()
        if self.priorities is not None:
            self.priorities.push(td_errors, drawn.slots, drawn.generations)
        self.observe_staleness()
        self.stats.add("updates")
        self.stats.add("update_frames", float(self.batch_size))
        if self.sync_due():
            self.request_publish()

    def flush(self) -> None:
        if self.priorities is not None:
            self.priorities.poll(block=True)
        super().flush()
