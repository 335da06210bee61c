"""Sampler process (``sampler-<i>``): a :class:`~spreeze_like.roles.sampler.SamplerWorker` wired to shared memory.

Ports: its own ring (attached as the one writer) is the transition sink, the actor weight board
(reader) the policy source, its stats row the stats writer. The loop:

- steps while the phase is ``RUN``, its session quota (the control row's ``quota-<i>``, read on every
  iteration: the supervisor raises it when a remote sampler is given up) is not done and the
  samplers' emitted total, remote rows and the rows the Ray bridge has asked for included, is below
  the critic learner's allowance (:mod:`spreeze_like.procs.pacing`, rule 2);
- otherwise waits (``WAITING``) or, once the quota is done or the phase left ``RUN``, idles
  (``DONE``) until ``EXIT`` (a raised quota sets it running again while the phase is ``RUN``);
- beats its heartbeat every iteration, waits included, so the supervisor can tell a hung env from
  a paced sampler.

Creates nothing shared. A crash (an env that raises, SIGKILL) loses only the transition of the
step in hand: records are published to the ring whole or not at all. The supervisor restarts the
process with back-off; the new one attaches the same ring (continuing from its published write
sequence) and the same stats row, whose ``env_steps`` counter tells it where its quota stands.
"""

from __future__ import annotations

import time

import numpy as np

from spreeze_like.ipc import Ring
from spreeze_like.procs import pacing
from spreeze_like.procs.control import (
    DONE,
    EXIT,
    RUN,
    RUNNING,
    WAITING,
    ChildArgs,
    Control,
    Napper,
    mark_first,
    mark_ready,
    set_state,
)
from spreeze_like.procs.segments import Attached
from spreeze_like.roles import build
from spreeze_like.roles.sampler import SamplerWorker


class StopSampling(Exception):
    """Raised out of a blocked ring write when the supervisor asks every child to exit."""


class RingSink:
    """A :class:`~spreeze_like.roles.ports.TransitionSink` over a ring that waits without hanging.

    ``Ring.write`` would block until the reader drains; this sink writes what fits, then sleeps on the
    ring's doorbell (``wait_writable``) and retries, beating the heartbeat and giving up when the
    phase becomes ``EXIT``. Waits are counted
    in the stats row (``ring_waits``, ``ring_wait_s``: the ``ipc/ring_full_waits`` metric).
    """

    def __init__(self, ring: Ring, control: Control, stats: object) -> None:
        self.ring, self.control, self.stats = ring, control, stats

    def write(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        done = self.ring.try_write(rows)
        if done == len(rows):
            return
        t0 = time.perf_counter()
        while done < len(rows):
            if self.control.phase() == EXIT:
                raise StopSampling
            # sleeps on the reader's doorbell: woken as soon as the feeder releases records
            self.ring.wait_writable(len(rows) - done, timeout=0.05)
            self.stats.beat()
            done += self.ring.try_write(rows[done:])
        waited = time.perf_counter() - t0
        self.stats.add("ring_waits")
        self.stats.add("ring_wait_s", waited)


def run(args: ChildArgs) -> None:
    """Process body (called by :func:`spreeze_like.procs.control.child_main`)."""
    cfg, i = args.config, args.index
    spec = args.spec
    with Attached(args.segments) as shm:
        block = shm.stats()
        control = Control(block)
        row = block.role(args.role)
        row.claim()
        pacing.drop_held_steps(row)  # a restart: the dead process's n-step windows died with it
        sampler_rows = [block.role(r) for r in block.roles if r.startswith("sampler-")]
        sink = RingSink(shm.ring(i, "writer"), control, row)
        weights = shm.board("actor", "reader")
        # A restart gets new env seeds and RNG streams (a new generation per restart and resume).
        worker = build.sampler(cfg, spec, i, sink, weights, row, generation=args.generation + 1000 * args.restarts)
        restored_steps, restored_episodes = args.extra.get("restored", (0, 0))  # from the resumed checkpoint
        session_steps = int(row.get("env_steps"))  # > 0 after a restart: this session's steps so far
        worker.env_steps = restored_steps + session_steps
        worker.episodes = restored_episodes + int(row.get("episodes"))
        critic = block.role("critic-learner")
        napper = Napper(max_s=2e-3)
        gap = pacing.resume_gap(int(args.extra.get("lead", 1)))
        try:
            _loop(worker, row, control, sampler_rows, critic, i, napper, gap)
        except StopSampling:
            pass
        finally:
            worker.close()


def _loop(worker: SamplerWorker, row: object, control: Control, sampler_rows: list, critic: object, index: int,
          napper: Napper, gap: int = 1) -> None:
    mark_ready(row)
    set_state(row, RUNNING)
    waiting = False
    first = True
    while True:
        row.beat()
        phase = control.phase()
        if phase == EXIT:
            return
        if phase != RUN or row.get("env_steps") >= control.quota(index):
            set_state(row, DONE)
            napper.nap()
            continue
        free = critic.get("allowance") - pacing.claimed(sampler_rows)  # remote rows in flight included
        if free <= 0 or (waiting and free < gap):  # at the allowance: wait until a burst's worth is free
            waiting = True
            set_state(row, WAITING)
            row.add("pace_wait_s", napper.nap())
            continue
        waiting = False
        napper.reset()
        set_state(row, RUNNING)
        worker.step()
        if first:
            mark_first(row)
            first = False
