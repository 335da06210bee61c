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

import numpy as np

from spreeze_like.algos import make_actor_part
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.roles.learning import LearnerRole, to_batch
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, WeightsSink, WeightsSource


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
    ) -> None:
        part = make_actor_part(spec, device)
        self.replay, self.policy_delay = replay, spec.policy_delay
        super().__init__(part, critic_source, actor_sink, stats, batch_size, sync_period, part.critic_vector_size,
                         "actor-learner", max_nonfinite_steps)

    def own_vector(self) -> np.ndarray:
        return self.part.actor_vector()

    def load_copy(self, vec: np.ndarray) -> None:
        self.part.load_critic_vector(vec)

    def updates_due(self, critic_updates: int) -> int:
        """Actor updates owed after ``critic_updates`` critic updates (never negative)."""
        return max(0, critic_updates // self.policy_delay - self.part.updates)

    def update(self) -> None:
        """One actor update (maybe sync, sample, step, maybe publish)."""
        if self.sync_due():
            self.refresh_copy()
        raw = self.replay.sample(self.batch_size)
        self.guard.begin()
        with self.part.autocast():
            metrics = self.part.step(to_batch(raw, self.part.device, use_weights=False))
        self.metrics.add(metrics, applied=self.guard.end())
        self.observe_staleness()
        self.stats.add("updates")
        if self.sync_due():
            self.publish()
