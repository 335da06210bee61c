"""Monitor process (``monitor``): TensorBoard and the console progress line from the stats block.

Runs the existing :class:`~spreeze_like.roles.monitor.Monitor` over ``StatsBlock.snapshot`` (one
copy of every role's row per write), so the learners' logging cost stays a few float adds per
update whatever the TensorBoard rate. It adds the scalars only a parallel run has:

- ``ipc/ring_fill`` (records waiting in all rings), ``ipc/ring_full_waits`` (sampler writes that
  found their ring full, total),
- ``stats/restarts`` (role restarts by the supervisor plus the remote sampler actors' restarts that the
  Ray bridge counts in their rows' ``remote_restarts``, total),
- ``perf/critic_busy`` / ``perf/critic_data_wait`` / ``perf/critic_actor_wait`` (fractions of the
  period the critic learner spent updating / waiting for data / waiting for the actor),
  ``perf/sampler_pace_wait`` (fraction of the period the average sampler waited for the learners).

It owns the run's event files and ``curves.csv``: it flushes and closes them when the phase
becomes ``EXIT`` (after the final evaluation), so nothing is lost on a normal stop or a Ctrl-C.
Between TensorBoard writes it watches the evaluator's ``evaluations`` counter (one word of the
stats block per nap) and records a new evaluation at once, so its ``eval`` row's wall time is late
by a nap (0.1 s at most), not by a ``tb_interval``. ``wall_s`` in ``curves.csv`` counts from
``args.extra["t0"]`` (the supervisor's session start, the evaluator's clock too) when the
supervisor passes it, else from this process's start. If it is killed, the
events since the last flush are lost and the supervisor restarts it (a new event file in the same
folder; TensorBoard merges them). It runs at normal priority: it is light, and a starved monitor
would leave the user without curves on a busy machine. Creates nothing shared.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from spreeze_like.console import say
from spreeze_like.procs.control import EXIT, RUNNING, SUPERVISOR, ChildArgs, Control, mark_ready, set_state
from spreeze_like.procs.segments import Attached
from spreeze_like.roles.monitor import Monitor


def _print(line: str) -> None:
    say(line)  # a child's stdout is a pipe or a file more often than a terminal (console.py: a closed one)


class ParallelScalars:
    """The parallel-only scalars, as deltas between two snapshots."""

    def __init__(self, rings: list[Any]) -> None:
        self.rings = rings
        self.before: Mapping[str, Mapping[str, float]] | None = None
        self.t_before = time.monotonic()

    def write(self, writer: Any, step: int, snap: Mapping[str, Mapping[str, float]]) -> None:
        now = time.monotonic()
        samplers = [r for r in snap if r.startswith("sampler-")]
        writer.add_scalar("ipc/ring_fill", float(sum(ring.fill() for ring in self.rings)), step)
        writer.add_scalar("ipc/ring_full_waits", sum(snap[r].get("ring_waits", 0.0) for r in samplers), step)
        restarts = snap.get(SUPERVISOR, {}).get("restarts", 0.0) + sum(snap[r].get("remote_restarts", 0.0)
                                                                       for r in samplers)
        writer.add_scalar("stats/restarts", restarts, step)
        if self.before is not None:
            dt = max(now - self.t_before, 1e-9)
            critic, before = snap.get("critic-learner", {}), self.before.get("critic-learner", {})
            for tag, key in (("perf/critic_busy", "update_s"), ("perf/critic_data_wait", "data_wait_s"),
                             ("perf/critic_actor_wait", "actor_wait_s")):
                writer.add_scalar(tag, (critic.get(key, 0.0) - before.get(key, 0.0)) / dt, step)
            waits = sum(snap[r].get("pace_wait_s", 0.0) - self.before.get(r, {}).get("pace_wait_s", 0.0)
                        for r in samplers)
            writer.add_scalar("perf/sampler_pace_wait", waits / dt / max(1, len(samplers)), step)
        self.before, self.t_before = snap, now


def run(args: ChildArgs) -> None:
    """Process body (called by :func:`spreeze_like.procs.control.child_main`)."""
    cfg = args.config
    with Attached(args.segments) as shm:
        block = shm.stats()
        row = block.role(args.role)
        row.claim()
        control = Control(block)
        resumed = args.checkpoint_path is not None
        monitor = Monitor(args.run_dir, block.snapshot, cfg.to_dict(), cfg.total_steps, start_step=args.start_step,
                          tb_interval=cfg.tb_interval, log_interval=cfg.log_interval,
                          purge_step=args.start_step + 1 if resumed and args.restarts == 0 else None,
                          print_fn=_print, session_start=args.extra.get("t0"),
                          preloaded=int(args.extra.get("preloaded", 0)))
        extra = ParallelScalars([shm.ring(i, None) for i in range(cfg.sampler_rows)])  # remote rows' rings too
        nap = min(0.1, max(0.02, cfg.tb_interval / 4))
        evaluator = block.role("evaluator")
        mark_ready(row)
        set_state(row, RUNNING)
        try:
            while control.phase() != EXIT:
                row.beat()
                if monitor.poll():
                    extra.write(monitor.writer, monitor.global_step(monitor.before), monitor.before)
                elif evaluator.get("evaluations") > monitor.evaluations_seen:
                    monitor.poll_evals()
                time.sleep(nap)
        finally:
            if monitor.t_last <= monitor.t0:
                # started late (a short session on a loaded machine): write the final state at least once,
                # Monitor.close() skips its last write when the previous one is under 0.5 s old
                monitor.write()
            snap = block.snapshot()
            extra.write(monitor.writer, monitor.global_step(snap), snap)
            monitor.close()
