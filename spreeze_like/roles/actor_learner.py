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
(the LAP paper, Fujimoto et al. 2020, makes the same choice).

Non-finite steps are skipped and counted like the critic's (:mod:`spreeze_like.roles.nonfinite`).
Owns no shared resource.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spreeze_like.algos import make_actor_part
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.roles.learning import MetricMeans, to_batch
from spreeze_like.roles.nonfinite import NonFiniteGuard
from spreeze_like.roles.ports import ReplaySampler, StatsWriter, WeightsSink, WeightsSource, observe


class ActorLearner:
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
        self.part = make_actor_part(spec, device)
        self.replay, self.critic_source, self.actor_sink, self.stats = replay, critic_source, actor_sink, stats
        self.batch_size, self.sync_period, self.policy_delay = batch_size, sync_period, spec.policy_delay
        self.copy_version = 0  # board version held in the critic copy; 0: the seed-determined initial network
        self.version = 0  # board version of our last publish
        self._copy_vec = np.zeros(self.part.critic_vector_size, dtype=np.float32)
        self.metrics = MetricMeans(stats)
        self.guard = NonFiniteGuard(self.part, "actor-learner", stats, max_nonfinite_steps)
        self.publish()

    @property
    def updates(self) -> int:
        return self.part.updates

    def updates_due(self, critic_updates: int) -> int:
        """Actor updates owed after ``critic_updates`` critic updates (never negative)."""
        return max(0, critic_updates // self.policy_delay - self.part.updates)

    def update(self) -> None:
        """One actor update (maybe sync, sample, step, maybe publish)."""
        if self.part.updates % self.sync_period == 0:
            self.refresh_critic_copy()
        raw = self.replay.sample(self.batch_size)
        self.guard.begin()
        with self.part.autocast():
            metrics = self.part.step(to_batch(raw, self.part.device, use_weights=False))
        self.metrics.add(metrics, applied=self.guard.end())
        observe(self.stats, "copy_staleness", float(max(0, self.critic_source.version() - self.copy_version)))
        self.stats.add("updates")
        if self.part.updates % self.sync_period == 0:
            self.publish()

    def refresh_critic_copy(self) -> None:
        if self.critic_source.version() > self.copy_version:
            version = self.critic_source.read(self._copy_vec)
            if version > 0:
                self.part.load_critic_vector(self._copy_vec)
                self.copy_version = version

    def publish(self) -> None:
        self.version = self.actor_sink.publish(self.part.actor_vector())
        self.stats.set("version", float(self.version))

    def flush(self) -> None:
        """Hand pending metrics and skip counts to stats; raises NonFiniteError after too many skips in a row."""
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
