"""Where a learner's batches come from: the host replay, or a mirror of it on the learner's device.

* :class:`HostBatches` samples on the host (``replay.samplers``: numpy, the native sum tree) and
  brings the rows to the device: the CPU path, and the fallback for ``--device-replay off``.
* :class:`MirrorBatches` keeps a :class:`~spreeze_like.replay.device_replay.DeviceReplay` of the
  columns the learner reads, synced from the host storage before each update (the critic process
  is the storage's writer, so its mirror is exact; the actor process copies what the critic
  published). Uniform indices are drawn on the device, and the draw and gather are part of the
  update itself (``MirrorBatches.fill_in_step``, run by the step runner inside the captured
  CUDA graph: one replay draws, gathers and updates). Prioritized ones come from the native tree
  (it stays the authority) and travel with their weights in one small copy before the update. The
  gather happens on the device, into the step runner's static batch: no batch crosses PCIe.

:class:`PendingPriorities` writes a critic's TD errors back as priorities. On a GPU the copy to the
host is asynchronous and the write lands one update later (the generation check drops it for slots
overwritten meanwhile, as for any late write); on the CPU it is immediate.

Both own device tensors and pinned buffers of their process only; nothing shared.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from spreeze_like.algos.base import Batch
from spreeze_like.algos.graphed import GRAPH_MODES
from spreeze_like.roles.learning import to_batch

DEVICE_REPLAY_MODES = ("auto", "on", "off")


def use_device_replay(mode: str, device: str | torch.device) -> bool:
    """``auto``: mirror replay on the device when it is a GPU (on the CPU it would only be a second copy)."""
    return torch.device(device).type == "cuda" if mode == "auto" else mode == "on"


class Drawn(NamedTuple):
    """What a batch source hands the learner for one update."""

    batch: Batch | None  # None: the runner's static batch was filled
    slots: np.ndarray | None  # prioritized replay: the slots, for the priority write
    generations: np.ndarray | None


class HostBatches:
    """Batches sampled on the host; see the module docstring."""

    fill_in_step = None  # nothing to do inside the update: draw() filled the batch
    generators: tuple[torch.Generator, ...] = ()

    def __init__(self, sampler: Any, with_weights: bool) -> None:
        self.sampler, self.with_weights = sampler, with_weights

    def draw(self, runner: Any) -> Drawn:
        raw = self.sampler.sample(runner.batch_size)
        if runner.mode not in GRAPH_MODES:  # no graph reads the static batch: hand the rows over, no copy
            batch = to_batch(raw, runner.part.device, use_weights=self.with_weights)
        else:
            runner.fill_from_host(raw)
            batch = None
        return Drawn(batch, raw.slots, raw.generations)


class MirrorBatches:
    """Batches gathered on the device from a replay mirror; see the module docstring.

    Args:
        sampler: the host sampler (its ``storage`` is mirrored; a ``PrioritizedSampler``'s tree
            draws the slots when ``prioritized``).
        device: the learner's device.
        columns: the columns the learner reads.
        prioritized: draw slots from the host sum tree instead of uniformly on the device.
        seed: the mirror's device generator seed (uniform indices).
    """

    def __init__(self, sampler: Any, device: torch.device, columns: tuple[str, ...], prioritized: bool,
                 seed: int) -> None:
        from spreeze_like.replay.device_replay import DeviceReplay

        storage = sampler.storage
        self.sampler, self.storage, self.prioritized = sampler, storage, prioritized
        self.mirror = DeviceReplay(storage.capacity, storage.obs_dim, storage.act_dim, device, columns=columns,
                                   seed=seed)
        # uniform: the runner calls fill_in_step inside the update (and its graph draws from the mirror's
        # generator); prioritized: draw() fills the batch from the host tree's slots before the update
        self.fill_in_step = None if prioritized else self._draw_uniform
        self.generators = () if prioritized else (self.mirror.generator,)

    def sync(self) -> int:
        """Copy what the host storage published since the last call; returns the rows copied."""
        return self.mirror.sync_from(self.storage)

    @property
    def size(self) -> int:
        return self.mirror.size

    def draw(self, runner: Any) -> Drawn:
        """Sync the mirror; prioritized: also fill the runner's static batch (uniform: the update does)."""
        self.sync()
        self.mirror.require_rows()  # checked here too: a replayed graph draws without calling sample_uniform
        if self.prioritized:
            slots, weights, generations = self.sampler.sample_slots(runner.batch_size)
            indices, dev_weights = self.mirror.upload_indices(slots, weights)
            runner.inputs["weights"].copy_(dev_weights)
            self.mirror.gather_packed(indices, runner.packed)
            return Drawn(None, slots, generations)
        return Drawn(None, None, None)

    def _draw_uniform(self, runner: Any) -> None:
        # the runner's static batch has the mirror's packed layout (both from the learner's INPUTS)
        self.mirror.draw_uniform_into(runner.packed)


class PendingPriorities:
    """TD errors -> priorities, asynchronously on a GPU; see the module docstring."""

    def __init__(self, sampler: Any, device: torch.device, batch_size: int) -> None:
        self.sampler = sampler
        self.cuda = device.type == "cuda"
        self._pending: tuple[np.ndarray, np.ndarray] | None = None
        self.dropped_nonfinite = 0  # writes skipped because a (skipped) step's TD errors were not finite
        if self.cuda:
            self._pinned = torch.empty(batch_size, dtype=torch.float32, pin_memory=True)
            self._event = torch.cuda.Event()
            self._stream = torch.cuda.current_stream(device)  # the copy's: not the current device's, if another

    def push(self, td_errors: torch.Tensor, slots: np.ndarray, generations: np.ndarray) -> None:
        if not self.cuda:
            self._write(td_errors.detach().float().cpu().numpy(), slots, generations)
            return
        self.poll(block=True)  # at most one in flight: by now it landed long ago (one update later)
        self._pinned.copy_(td_errors.detach().float(), non_blocking=True)
        self._event.record(self._stream)
        self._pending = (slots, generations)

    def poll(self, block: bool = False) -> None:
        if self._pending is None:
            return
        if block:
            self._event.synchronize()
        elif not self._event.query():
            return
        slots, generations = self._pending
        self._pending = None
        self._write(self._pinned.numpy(), slots, generations)

    def _write(self, priorities: np.ndarray, slots: np.ndarray, generations: np.ndarray) -> None:
        if np.isfinite(priorities).all():  # a skipped step's TD errors may be NaN: keep the old priorities
            self.sampler.update_priorities(slots, generations, priorities)
        else:
            self.dropped_nonfinite += 1
