"""What both learner roles share: the weight-board plumbing, replay batch -> device tensors, metrics."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spreeze_like.algos.base import Batch
from spreeze_like.roles.ports import StatsWriter, WeightsSink, WeightsSource, observe


def _tensor(array: Any, device: torch.device, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    arr = np.ascontiguousarray(array, dtype=np.float32)
    # reshaped in numpy, then shared by from_numpy: a third of as_tensor's and Tensor.reshape's cost, which
    # five columns per update pay on the CPU path (no copy either way)
    t = torch.from_numpy(arr if shape is None else arr.reshape(shape))
    return t.to(device, non_blocking=True) if device.type != "cpu" else t


def to_batch(raw: Any, device: torch.device, use_weights: bool) -> Batch:
    """A replay sample (numpy fields) as a :class:`Batch` on ``device``.

    ``weights`` stays None unless ``use_weights`` (prioritized replay for the critic), so the
    uniform path does no importance-weight multiply at all.
    """
    n = len(raw.obs)
    return Batch(
        obs=_tensor(raw.obs, device, (n, -1)),
        action=_tensor(raw.action, device, (n, -1)),
        reward=_tensor(raw.reward, device, (n,)),
        next_obs=_tensor(raw.next_obs, device, (n, -1)),
        terminated=_tensor(raw.terminated, device, (n,)),
        weights=_tensor(raw.weights, device, (n,)) if use_weights and raw.weights is not None else None,
    )


class MetricMeans:
    """Sums scalar metric tensors on the learner's device and hands them to stats every ``period`` updates.

    :meth:`accumulate` is device work only (a CUDA graph captures it with the step); :meth:`tick`
    is the host's count, and every ``period`` updates :meth:`flush` reads the sums with one
    device-to-host copy. So logging never forces a GPU sync per update, and the stats block sees a
    handful of writes per period, not per update. A step the non-finite guard skipped
    (``applied`` 0) adds nothing: its metrics may be NaN. The sums are zeroed in place (a captured
    graph keeps adding into the same tensors), and the set of metric names is fixed at the first call.
    """

    def __init__(self, stats: StatsWriter, period: int = 20) -> None:
        self.stats, self.period = stats, period
        self._keys: tuple[str, ...] = ()
        self._sum: torch.Tensor | None = None  # [len(keys) + 1]: the sums, then the applied steps
        self._count = 0

    def add(self, metrics: dict[str, torch.Tensor], applied: torch.Tensor | float = 1.0) -> None:
        """Add one update's metrics; ``applied`` is 1.0, or 0.0 for a skipped step (a tensor: no sync)."""
        self.accumulate(metrics, applied)
        self.tick()

    def accumulate(self, metrics: dict[str, torch.Tensor], applied: torch.Tensor | float = 1.0) -> None:
        keys = tuple(metrics)
        values = torch.stack([v.reshape(()).float() for v in metrics.values()])
        kept = torch.as_tensor(applied, dtype=torch.float32, device=values.device).reshape(1)
        row = torch.cat([torch.where(kept > 0, values, 0.0), kept])  # where, not a product: 0 * NaN is NaN
        if self._sum is None:
            self._keys, self._sum = keys, torch.zeros_like(row)
        elif keys != self._keys:
            raise ValueError(f"metric names changed from {self._keys} to {keys}")
        self._sum.add_(row)

    def tick(self) -> None:
        self._count += 1
        if self._count >= self.period:
            self.flush()

    def flush(self) -> None:
        if self._sum is not None and self._count:
            *totals, kept = self._sum.tolist()
            self._sum.zero_()
            if kept > 0:
                for key, total in zip(self._keys, totals):
                    observe(self.stats, key, total, kept)
        self._count = 0


class LearnerRole:
    """The part of a learner role that is the same for the critic and the actor half.

    It holds the algorithm half (``part``), publishes the half's own vector to ``sink`` and loads
    the other half's vector from ``source`` into its copy, through a
    :class:`~spreeze_like.roles.weight_transfer.FlatPublisher` / ``FlatLoader`` (asynchronous on a
    GPU). Versions are board publish counts: the first publish, at construction, is the
    seed-determined initial network, which equals the copy the other learner built from the same
    seed, so the two agree without waiting for each other.

    Each update runs through a :class:`~spreeze_like.algos.graphed.StepRunner` (eager, or CUDA
    graphs): :meth:`device_update` is everything an update does on the device -- the guard's reset,
    the half's step, the guard's count, the metric sums -- so one graph replay is the whole update.

    Non-finite steps: a :class:`~spreeze_like.roles.nonfinite.NonFiniteGuard` on the half's optimisers
    skips them, counts them in ``nonfinite_steps`` and raises :class:`~spreeze_like.errors.NonFiniteError`
    after ``max_nonfinite_steps`` in a row.
    """

    def __init__(self, part: Any, source: WeightsSource, sink: WeightsSink, stats: StatsWriter, batch_size: int,
                 sync_period: int, role: str, max_nonfinite_steps: int = 10, inputs: tuple[str, ...] = (),
                 with_weights: bool = False, step_mode: str = "eager", batches: Any = None,
                 updates_per_graph: int = 1) -> None:
        from spreeze_like.algos.graphed import StepRunner  # here: nonfinite/graphed import nothing of ours back
        from spreeze_like.roles.nonfinite import NonFiniteGuard
        from spreeze_like.roles.weight_transfer import FlatLoader, FlatPublisher

        self.part, self.source, self.sink, self.stats = part, source, sink, stats
        self.batch_size, self.sync_period = batch_size, sync_period
        self.version = 0  # board version of our last publish
        self.metrics = MetricMeans(stats)
        self.guard = NonFiniteGuard(part, role, stats, max_nonfinite_steps)
        self.publisher = FlatPublisher(part.published_tensors(), sink)
        self.loader = FlatLoader(part.copy_tensors(), source)
        # the half's update as this mode runs it: by autograd (``step``), or written out (``explicit_step``)
        self.part_step = part.explicit_step if step_mode == "explicit" else part.step
        # a device mirror's uniform draw and gather run inside the update (and its graph): batches.fill_in_step
        self.runner = StepRunner(part, self.device_update, batch_size, inputs, with_weights, self.guard.begin,
                                 step_mode, fill=getattr(batches, "fill_in_step", None),
                                 generators=getattr(batches, "generators", ()), updates_per_replay=updates_per_graph)
        self.publish()

    @property
    def updates(self) -> int:
        """Updates taken: those done, and those pending in the step runner's block (algos/graphed.py)."""
        return self.part.updates + self.runner.pending

    @property
    def copy_version(self) -> int:
        """Board version held in the copy; 0: the seed-determined initial network."""
        return self.loader.version

    def device_update(self, batch: Batch) -> Any:
        """One update's device work (captured whole in graph mode); returns what the host needs later."""
        raise NotImplementedError

    def sync_due(self) -> bool:
        return self.updates % self.sync_period == 0

    def refresh_copy(self) -> None:
        """Load the other half's newest vector into the copy, if there is a newer one."""
        self.loader.refresh()

    def observe_staleness(self) -> None:
        observe(self.stats, "copy_staleness", float(max(0, self.source.version() - self.copy_version)))

    def publish(self) -> None:
        """Publish the own network now (start-up, restore, end): waits for the device."""
        self._published(self.publisher.publish_now())

    def request_publish(self) -> None:
        """Publish the own network after the queued work, without waiting for the device (every sync)."""
        self._published(self.publisher.request())

    def poll_publish(self) -> None:
        """Hand a finished asynchronous copy to the board (call every update)."""
        self._published(self.publisher.poll())

    def _published(self, version: int | None) -> None:
        if version:
            self.version = version
            self.stats.set("version", float(version))

    def flush(self) -> None:
        """Hand pending metric sums and skip counts to the stats block, and land a publish in flight.

        Raises NonFiniteError if the last updates were skipped ``max_nonfinite_steps`` times in a row.
        Pending updates of a block run first, so the counts and weights after a flush agree.
        """
        self.runner.drain()
        self.metrics.flush()
        self.guard.check()
        while self.publisher.in_flight:  # a request folded into a landing copy goes out when it lands
            self._published(self.publisher.poll(block=True))

    def check_finite(self) -> None:
        """Before a checkpoint: raise NonFiniteError unless every network and optimiser tensor is finite."""
        self.flush()
        self.guard.assert_finite_state()

    def state_dict(self) -> dict[str, Any]:
        self.runner.drain()  # the saved weights are those of the saved count
        return {"part": self.part.state_dict(), "updates": self.part.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # graphs first: the load makes new optimiser state tensors, which captured graphs would miss (and
        # pending updates of a block would run on the loaded weights with the old graphs)
        self.runner.drain()
        self.runner.reset()
        self.part.load_state_dict(state["part"])
        self.part.updates = int(state["updates"])
        self.publish()
