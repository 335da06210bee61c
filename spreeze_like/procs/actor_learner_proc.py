"""Actor-learner process (``actor-learner``): policy updates paced by the critic learner's count.

Builds the existing :class:`~spreeze_like.roles.actor_learner.ActorLearner` with shared-memory
ports: a uniform sampler over the shared replay storage (read-only: the critic process is its one
writer), the critic board as its critic source, the actor board as its sink (read by samplers, the
evaluator and the critic), its stats row.

Loop (every iteration beats the heartbeat and serves checkpoint requests):

- ``RUN``/``FINISH``: do the actor updates owed after the critic's total update count
  (``ActorLearner.updates_due``, i.e. one per ``policy_delay`` critic updates, the serial count);
  otherwise wait (``wait_s``). In ``FINISH``, once the critic is ``DONE`` and nothing is owed, idle
  (``DONE``).
- ``HALT``: the update in hand is finished, flush, idle (``DONE``).
- ``EXIT``: return.

Creates nothing shared; if it dies, the supervisor ends the run with the last good checkpoint.
"""

from __future__ import annotations

import time
from typing import Any

from spreeze_like.devices import bind_learner_device
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
from spreeze_like.procs.learner_loop import LearnerLoop, restore
from spreeze_like.procs.segments import Attached
from spreeze_like.roles import build
from spreeze_like.roles.actor_learner import ActorLearner
from spreeze_like.seeding import derive_seed, seed_process


def run(args: ChildArgs) -> None:
    """Process body (called by :func:`spreeze_like.procs.control.child_main`)."""
    cfg = args.config
    seed_process(cfg.seed, f"actor-learner/{args.generation}")
    spec = args.spec
    with Attached(args.segments) as shm:
        block = shm.stats()
        row = block.role(args.role)
        row.claim()
        storage = shm.storage()
        # build.replay_samplers makes the critic's sampler too; with --prioritized it needs the tree for that
        tree = shm.tree(derive_seed(cfg.seed, "replay/critic")) if cfg.prioritized else None
        _, sampler = build.replay_samplers(cfg, storage, tree)
        bind_learner_device(cfg.actor_device)
        learner = build.actor_learner(cfg, spec, sampler, shm.board("critic", "reader"), shm.board("actor", "writer"),
                                      row)
        restore(learner, args, args.role)
        ActorLoop(args, learner, storage, Control(block), row, block.role("critic-learner")).run()


class ActorLoop(LearnerLoop):
    """The actor process's loop; see the module docstring."""

    def __init__(self, args: ChildArgs, learner: ActorLearner, storage: Any, control: Control, row: Any,
                 critic_row: Any) -> None:
        super().__init__(args, learner, control, row)
        self.storage, self.critic_row = storage, critic_row
        self.batch_size = args.config.batch_size

    def run(self) -> None:
        row, napper = self.row, Napper()
        row.set("total_updates", float(self.learner.updates))
        mark_ready(row)
        set_state(row, RUNNING)
        flushed = False
        first = True
        while True:
            row.beat()
            self._serve_checkpoint()
            phase = self.control.phase()
            if phase == EXIT:
                return
            if phase == HALT:
                flushed = self._idle(flushed, napper)
                continue
            flushed = False
            critic_total = int(self.critic_row.get("total_updates"))
            if self.learner.updates_due(critic_total) > 0 and self.storage.size >= self.batch_size:
                napper.reset()
                set_state(row, RUNNING)
                t = time.perf_counter()
                self.learner.update()
                row.add("update_s", time.perf_counter() - t)
                row.set("total_updates", float(self.learner.updates))
                if first:
                    mark_first(row)
                    first = False
            elif phase == FINISH and self.critic_row.get("done"):  # the critic's count is final
                flushed = self._idle(flushed, napper)
            else:
                set_state(row, WAITING)
                row.add("wait_s", napper.nap())
