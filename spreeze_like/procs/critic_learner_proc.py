"""Critic-learner process (``critic-learner``): the feeder, twin-Q updates at the UTD ratio, priorities.

Builds the existing :class:`~spreeze_like.roles.critic_learner.CriticLearner` with shared-memory
ports: a replay sampler over the shared storage (prioritized over the shared sum tree, or uniform),
the actor board as its actor source, the critic board as its sink, its stats row. It is also the
replay storage's one writer: its :class:`~spreeze_like.procs.feeder.RingFeeder` drains the rings
between updates (docs/parallel.md has the measurement behind running it inline).

Loop (every iteration beats the heartbeat and serves checkpoint requests):

- ``RUN``/``FINISH``: drain the rings (in batches: when the budget is spent or ``lead`` records
  wait); update while the UTD budget allows
  (:func:`~spreeze_like.procs.pacing.critic_budget`) and the actor is not too far behind; after each
  update publish the new allowance for the samplers. Without budget, wait (``data_wait_s``). In
  ``FINISH``, once every sampler is done, the rings are empty and the budget is spent, flush
  metrics and idle (``DONE``).
- ``HALT``: the update in hand is finished (the loop is single-threaded), flush, idle (``DONE``).
- ``EXIT``: return.

Timing slots for ``tools/bench_learner_rate.py``: ``update_s`` (inside ``update()``), ``drain_s``,
``data_wait_s``, ``actor_wait_s``, and the learning window ``learn_t0``/``learn_t1`` with the
process CPU seconds spent in it (``learn_cpu_s``). Creates nothing shared; if it dies, the
supervisor ends the run (a learner's state since the last checkpoint cannot be rebuilt).
"""

from __future__ import annotations

import os
import time
from typing import Any

from spreeze_like.devices import bind_learner_device
from spreeze_like.errors import ConfigError
from spreeze_like.procs import pacing
from spreeze_like.procs.control import (
    EXIT,
    FINISH,
    HALT,
    RUNNING,
    WAITING,
    ChildArgs,
    Control,
    Napper,
    mark_first,
    mark_ready,
    set_state,
)
from spreeze_like.procs.feeder import FeederThread, RingFeeder
from spreeze_like.procs.learner_loop import LearnerLoop, restore
from spreeze_like.procs.segments import Attached
from spreeze_like.roles import build
from spreeze_like.roles.critic_learner import CriticLearner
from spreeze_like.roles.replay_writer import ReplayWriter
from spreeze_like.seeding import derive_seed, seed_process

FEEDER_MODES = ("inline", "thread")


def feeder_mode() -> str:
    """``SPREEZE_FEEDER`` (benchmark knob): ``inline`` (default) or ``thread``."""
    mode = os.environ.get("SPREEZE_FEEDER", "inline")
    if mode not in FEEDER_MODES:
        raise ConfigError(f"SPREEZE_FEEDER={mode!r} is invalid; use one of {', '.join(FEEDER_MODES)} or unset it")
    return mode


def run(args: ChildArgs) -> None:
    """Process body (called by :func:`spreeze_like.procs.control.child_main`)."""
    cfg = args.config
    mode = feeder_mode()
    seed_process(cfg.seed, f"critic-learner/{args.generation}")
    spec = args.spec
    with Attached(args.segments) as shm:
        block = shm.stats()
        row = block.role(args.role)
        row.claim()
        storage = shm.storage()
        tree = shm.tree(derive_seed(cfg.seed, "replay/critic")) if cfg.prioritized else None
        sampler, _ = build.replay_samplers(cfg, storage, tree)
        writer = ReplayWriter(sampler, args.segments.layout, block.role("replay"))
        # every sampler row's ring: the local samplers' and the remote ones' (written by the ray-bridge)
        feeder = RingFeeder([shm.ring(i, "reader") for i in range(cfg.sampler_rows)], writer, row)
        bind_learner_device(cfg.critic_device)
        learner = build.critic_learner(cfg, spec, sampler, shm.board("actor", "reader"), shm.board("critic", "writer"),
                                       row)
        if mode == "thread" and type(learner.batches).__name__ == "MirrorBatches":
            # the tree learns of a new row before its cursor is published: a mirror synced from another
            # thread could be handed a slot it has not copied yet (the inline feeder cannot race it)
            raise ConfigError("SPREEZE_FEEDER=thread does not go with the device replay mirror; unset it or pass "
                              "--device-replay off")
        restore(learner, args, args.role)
        samplers = [block.role(r) for r in block.roles if r.startswith("sampler-")]
        loop = CriticLoop(args, learner, feeder, storage, Control(block), row, block.role("actor-learner"), samplers)
        thread = FeederThread(feeder) if mode == "thread" else None
        try:
            loop.run(thread)
        finally:
            if thread is not None:
                thread.stop()


class CriticLoop(LearnerLoop):
    """The critic process's loop; see the module docstring."""

    def __init__(self, args: ChildArgs, learner: CriticLearner, feeder: RingFeeder, storage: Any, control: Control,
                 row: Any, actor_row: Any, sampler_rows: list[Any]) -> None:
        cfg = args.config
        super().__init__(args, learner, control, row)
        self.feeder, self.storage, self.actor_row, self.sampler_rows = feeder, storage, actor_row, sampler_rows
        # rows a resume loaded into replay (--save-replay) count toward the warm-up, not toward this session's data
        self.preloaded = int(args.extra.get("preloaded", 0))
        self.start = pacing.session_learn_after(cfg.batch_size, cfg.learning_starts, self.preloaded)
        self.utd, self.lead, self.delay = cfg.utd_per_row, int(args.extra["lead"]), max(1, cfg.policy_delay)
        self.session = 0
        self.t0: float | None = None
        self.cpu0 = 0.0

    def run(self, thread: FeederThread | None) -> None:
        row, napper = self.row, Napper()
        row.set("total_updates", float(self.learner.updates))
        row.set("allowance", float(pacing.data_allowance(0, self.start, self.utd, self.lead)))
        mark_ready(row)
        set_state(row, RUNNING)
        flushed = False
        while True:
            row.beat()
            self._serve_checkpoint()
            phase = self.control.phase()
            if phase == EXIT:
                return
            if thread is not None:
                thread.check()
            if phase == HALT:
                flushed = self._idle(flushed, napper)
                continue
            flushed = False
            has_budget = self.session < pacing.critic_budget(self._new_rows(), self.start, self.utd)
            # Drain in batches: when the budget is spent (the next update needs data) or a lead's worth
            # waits. A drain's cost is mostly per call, so one row per update would cost ~5 % of the
            # critic's time on a small network; a batch of ~lead rows makes it negligible.
            if thread is None and (not has_budget or self.feeder.backlog() >= self.lead):
                self.feeder.drain()
                has_budget = self.session < pacing.critic_budget(self._new_rows(), self.start, self.utd)
            if has_budget:
                actor_total = int(self.actor_row.get("total_updates"))
                if pacing.actor_lag(self.learner.updates, actor_total, self.delay) > pacing.MAX_ACTOR_LAG:
                    set_state(row, WAITING)
                    row.add("actor_wait_s", napper.nap())
                    continue
                napper.reset()
                self._update()
            elif phase == FINISH and self._samplers_done() and self.feeder.empty():  # all data in and learned from
                flushed = self._idle(flushed, napper)
            else:
                set_state(row, WAITING)
                row.add("data_wait_s", napper.nap())

    def _new_rows(self) -> int:
        """Transitions this session put into replay (the feeder's, not those a resume loaded)."""
        return self.storage.inserted - self.preloaded

    def _samplers_done(self) -> bool:
        """Every sampler has stopped stepping (it marks ``done`` after its last write), so no record is in flight."""
        return all(r.get("done") for r in self.sampler_rows)

    def _update(self) -> None:
        row = self.row
        if self.t0 is None:
            self.t0, self.cpu0 = time.monotonic(), time.process_time()
            row.set("learn_t0", self.t0)
            row.set("t_data", self.t0)  # the first update's data is in replay
        set_state(row, RUNNING)
        t = time.perf_counter()
        self.learner.update()
        t1 = time.perf_counter()
        self.session += 1
        if self.session == 1:
            mark_first(row)
        row.add("update_s", t1 - t)
        row.set("total_updates", float(self.learner.updates))
        row.set("allowance", float(pacing.data_allowance(self.session, self.start, self.utd, self.lead)))
        row.set("learn_t1", time.monotonic())
        row.set("learn_cpu_s", time.process_time() - self.cpu0)

    def part_extras(self) -> dict[str, Any]:
        return {"session_updates": self.session}
