"""Moving a learner's weights to and from the weight boards without stalling its device.

The boards (``ipc.weight_board``) live in host shared memory: samplers and the evaluator read the
actor there, and each learner reads the other's network there. A learner on a GPU therefore has to
bring a flat copy of its parameters to the host (publish) and the other's vector to its device
(load). Done naively (``tensor.cpu()``, ``torch.as_tensor(vec).to(device)``) each transfer waits
for every queued kernel: with one publish per update, the GPU idles while the host copies.

* :class:`FlatPublisher`: on CUDA, ``request()`` enqueues, behind the update that produced them,
  one ``cat`` of the parameters into a device buffer (on the learner's stream: a snapshot in stream
  order, so later updates cannot tear it) and one asynchronous copy of that buffer into a pinned host
  buffer on a copy stream of its own, and records an event there; ``poll()`` (called every update)
  publishes the pinned buffer once the event has passed. A request while a copy is in flight is
  merged into one more copy when that one lands (never a queue of stale versions), so the device
  buffer is never written while a copy still reads it. By construction the publish lands at a later
  update's poll, about one update after a blocking copy would (not yet measured on a GPU).
* :class:`FlatLoader`: on CUDA, ``refresh()`` reads the newest board version into a pinned buffer,
  copies it to a device buffer on the copy stream (after the previous scatter has read that buffer)
  and makes the learner's stream wait for the copy before one ``_foreach_copy_`` scatters it into
  the parameters, all queued before the next update; the pinned buffer is reused only after the
  copy's event has passed, so a read never overwrites bytes a copy is still taking.
* Why a copy stream: on the learner's stream the PCIe copy (about 0.5 MB for a 256x256 twin critic
  each publish at ``--weight-sync-period 1``) sat between two updates' graph replays, which waited
  for it. On the H200 a publish every 8th update instead of every one made the whole critic update
  1.02-1.10x faster at batch 256 (three calls; docs/gpu.md): an upper bound on what moving the copies off the
  learner's stream can buy. Its own stream lets the copy engine take the bytes while the next
  update runs; the ``cat`` stays on the learner's stream, since it is the snapshot. Measured against
  the learner's stream in one call (``COPY_STREAMS`` below), twice on the H200 (2026-11-29): 0.97x and
  1.05x, no difference that those calls can tell (docs/gpu.md).
* On the CPU both are plain synchronous copies (nothing to overlap), through a flat buffer made once:
  one ``cat`` into it and the board copies it out (publish); the board copies into it and one
  ``_foreach_copy_`` scatters it (load).

Both keep flat views of their tensors, made once: the networks' parameters are updated in place for
the life of the process (optimiser steps, checkpoint loads), so the views stay theirs. Making them per
call cost about 13 reshapes and an allocation per publish of a 256x256 critic (CPU, HalfCheetah
sizes: 73 us against 37-43 us for the cat into a kept buffer).

Why not CUDA IPC between the two learners: the actor vector must reach host memory for the
samplers anyway, and the critic vector (~0.5 MB for 256x256 twin Q) is one small copy (estimated tens of microseconds over PCIe, not measured here); one
path for every layout (one GPU, two GPUs, GPU + CPU) is worth more than that.

Events are recorded on a named stream of the tensors' device (the learner's or the copy stream):
``Event.record()`` alone records on the process's current device, which is another GPU when a
process's learner is not on it (serial mode on two GPUs), and the event would then pass before the
copy it guards. The device buffer is marked as used by the copy stream (``record_stream``), so that
freeing it (a learner torn down with a copy in flight) cannot hand its memory to the learner's
stream before the copy is done with it.

Owns pinned host buffers and device buffers of its process only; a crash frees them with it.
"""

from __future__ import annotations

from typing import Any

import torch

# The copies on streams of their own (the default). False queues them on the learner's stream, as before
# 2026-11-29: tools/bench_gpu.py's ``samestream/256`` entry sets it for an A/B in one call. Read when a
# publisher or loader is made.
COPY_STREAMS = True


def _flat_buffers(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """(flat buffer on the tensors' device, host buffer, views of the flat buffer shaped like ``tensors``).

    On CUDA the host buffer is pinned (asynchronous copies); on the CPU it is the flat buffer itself.
    """
    total = sum(t.numel() for t in tensors)
    device = tensors[0].device
    flat = torch.zeros(total, dtype=torch.float32, device=device)
    host = torch.empty(total, dtype=torch.float32, pin_memory=True) if device.type == "cuda" else flat
    views, offset = [], 0
    for t in tensors:
        views.append(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    return flat, host, views


def _flat_views(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor as a 1-d view of its own storage (``view`` refuses a tensor it would have to copy).

    Detached first: a view of a parameter made with grad enabled carries a ``ViewBackward`` node, which
    creates the parameter's gradient accumulator on the stream current at construction (the default one)
    and keeps it alive. Every backward then accumulates onto the default stream, and the first CUDA-graph
    capture of a process failed on it (H200, 2026-11-27: "operation would make the legacy stream depend
    on a capturing blocking stream"). ``tests/trainer/test_capture_safety.py`` checks no such graph lives.
    """
    return [t.detach().view(-1) for t in tensors]


class FlatPublisher:
    """Publishes ``tensors`` (one network, flattened in order) to ``sink``; see the module docstring."""

    def __init__(self, tensors: list[torch.Tensor], sink: Any) -> None:
        self.sink = sink
        self.cuda = tensors[0].device.type == "cuda"
        self.in_flight = False
        self.again = False
        self.published = 0  # publishes that reached the board
        self.merged = 0  # requests folded into a later copy (the copy was still in flight)
        self._pieces = _flat_views(tensors)
        self._flat, self._pinned, _ = _flat_buffers(tensors)  # on the CPU, _pinned is _flat
        self._host = self._pinned.numpy()
        if self.cuda:
            self._event = torch.cuda.Event()  # the copy to the pinned buffer has landed
            self._stream = torch.cuda.current_stream(self._flat.device)  # the learner's: the snapshot's stream
            self._copy_stream = torch.cuda.Stream(self._flat.device) if COPY_STREAMS else self._stream
            self._flat.record_stream(self._copy_stream)

    def publish_now(self) -> int:
        """Publish synchronously (start-up, checkpoints, the end of a run); returns the board version."""
        if self.cuda:
            self.poll(block=True)
            self._enqueue()
            return self.poll(block=True) or 0
        self.published += 1
        with torch.no_grad():
            torch.cat(self._pieces, out=self._flat)
        return self.sink.publish(self._host)  # the board copies it: the buffer is ours again at return

    def request(self) -> int | None:
        """Publish the parameters as they are after the work queued so far; returns a version if it landed."""
        if not self.cuda:
            return self.publish_now()
        if self.in_flight:
            self.again, self.merged = True, self.merged + 1
            return self.poll()
        self._enqueue()
        return None

    def poll(self, block: bool = False) -> int | None:
        """Publish a copy that has landed (``block``: wait for it); returns the new version, else None."""
        if not self.in_flight:
            return None
        if block:
            self._event.synchronize()
        elif not self._event.query():
            return None
        self.in_flight = False
        version = self.sink.publish(self._host)
        self.published += 1
        if self.again:
            self.again = False
            self._enqueue()
        return version

    def _enqueue(self) -> None:
        # only with no copy in flight (request/poll): the copy stream has finished reading _flat
        with torch.no_grad():
            torch.cat(self._pieces, out=self._flat)  # the snapshot, in the learner's stream order
            self._copy_stream.wait_stream(self._stream)
            with torch.cuda.stream(self._copy_stream):
                self._pinned.copy_(self._flat, non_blocking=True)
        self._event.record(self._copy_stream)
        self.in_flight = True


class FlatLoader:
    """Loads the newest vector of ``source`` into ``tensors`` (the copy of the other learner's network)."""

    def __init__(self, tensors: list[torch.Tensor], source: Any) -> None:
        self.tensors, self.source = tensors, source
        self.cuda = tensors[0].device.type == "cuda"
        self.version = 0  # board version held in the tensors; 0: the seed-determined initial network
        self.deferred = 0  # refreshes put off because the previous copy was still in flight
        self._flat, self._pinned, self._views = _flat_buffers(tensors)  # on the CPU, _pinned is _flat
        self._host = self._pinned.numpy()
        if self.cuda:
            self._event = torch.cuda.Event()  # the copy from the pinned buffer has landed
            self._stream = torch.cuda.current_stream(self._flat.device)  # the learner's: the scatter's stream
            self._copy_stream = torch.cuda.Stream(self._flat.device) if COPY_STREAMS else self._stream
            self._flat.record_stream(self._copy_stream)
            # the last scatter has read the device buffer; at first, the buffer's zero fill has run (both on the
            # learner's stream, which the copy stream would otherwise race)
            self._scattered = torch.cuda.Event()
            self._scattered.record(self._stream)
            self._pending = False

    def refresh(self) -> int:
        """Load the newest published vector if it is newer than the one held; returns the version held."""
        if self.source.version() <= self.version:
            return self.version
        if self.cuda and self._pending and not self._event.query():
            self.deferred += 1  # the pinned buffer is still being copied from: take the newer one next time
            return self.version
        version = self.source.read(self._host)
        if version <= 0:
            return self.version
        with torch.no_grad():
            if self.cuda:
                self._copy_stream.wait_event(self._scattered)  # it may still be queued on the learner's stream
                with torch.cuda.stream(self._copy_stream):
                    self._flat.copy_(self._pinned, non_blocking=True)
                self._event.record(self._copy_stream)
                self._stream.wait_event(self._event)
            torch._foreach_copy_(self.tensors, self._views)
        if self.cuda:
            self._scattered.record(self._stream)
            self._pending = True
        self.version = version
        return version
