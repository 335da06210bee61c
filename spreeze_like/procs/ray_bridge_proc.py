"""The ``ray-bridge`` process: the run's only Ray driver, feeding the remote samplers' rows into their rings.

Started by the supervisor when ``--remote-samplers`` is above 0, restartable like a sampler (a hang
of its own heartbeat, beaten every loop, is caught by the supervisor's HangWatch). It attaches the
run's segments, claims its ``ray-bridge`` row and the rows of remote samplers ``extra["first"] ..
first + count - 1``, attaches their rings as the one writer and the actor weight board as a reader,
joins the cluster (:func:`spreeze_like.remote.ray_handles.connect`, sets ``connected``; the errors
Ray pushes to its driver go to ``<run_dir>/ray-bridge.log``, the console gets the bridge's own lines), creates the
actors and runs :class:`~spreeze_like.remote.bridge.Bridge` until the phase is ``EXIT``. It stops
issuing calls at ``FINISH``/``HALT`` or when every quota is done (its rows then say ``DONE``).

Creates nothing shared. Its actors are its own (non-detached): on a normal exit it kills each and
calls ``ray.shutdown()``; if it dies (SIGKILL, or the supervisor's death through PDEATHSIG), Ray
kills them when it sees their owner gone. Rows already written stay in the rings; the rows of calls
in flight are lost, never counted. A restarted bridge creates new actors (each counted as a restart
of its remote sampler) and continues from the rows' counters. A first start that cannot join the
cluster ends the run with one line (exit status 2); a restart that cannot (the head died mid-run)
gives every remote sampler up instead, so the supervisor hands their steps to the local samplers.
"""

from __future__ import annotations

import time
from pathlib import Path

from spreeze_like.console import say
from spreeze_like.errors import SpreezeError
from spreeze_like.procs.control import DONE, EXIT, ChildArgs, Control, set_state
from spreeze_like.procs.segments import Attached
from spreeze_like.remote.bridge import BRIDGE_ROLE, Bridge

LOG_FILE = "ray-bridge.log"  # in the run folder: what the Ray cluster reports to the bridge (raylet deaths...)


def run(args: ChildArgs) -> None:
    """Process body (called by :func:`spreeze_like.procs.control.child_main`)."""
    from spreeze_like.remote import ray_handles

    cfg = args.config
    first, count = int(args.extra["first"]), int(args.extra["count"])
    restored = {int(i): (int(s), int(e)) for i, (s, e) in dict(args.extra.get("restored", {})).items()}
    with Attached(args.segments) as shm:
        block = shm.stats()
        control = Control(block)
        me = block.role(BRIDGE_ROLE)
        me.claim()
        rings = {i: shm.ring(i, "writer") for i in range(first, first + count)}
        board = shm.board("actor", "reader")
        address = args.extra.get("address") or cfg.ray  # "auto" resolved by the supervisor's preflight
        lead = int(args.extra.get("lead", 1))
        try:  # the cluster's own error reports go to ray-bridge.log in the run folder
            ray = ray_handles.connect(address, args.segments.run_id, Path(args.run_dir) / LOG_FILE)
        except SpreezeError as exc:
            if args.restarts == 0:
                raise  # the run's start: one line, the run ends (exit status 2)
            # A restarted bridge whose cluster is gone (its head died mid-run): the run goes on locally.
            bridge = Bridge(Unreachable(address), cfg, args.spec, block, rings, board, first, count,
                            restored=restored, generation=args.generation, lead=lead, run_dir=args.run_dir, say=_say)
            bridge.abandon_all(str(exc))
            while control.phase() != EXIT:
                bridge.poll(timeout=0.05)
            set_state(me, DONE)
            return
        cluster = ray_handles.RayCluster(ray, address)
        me.set("connected", 1.0)
        bridge = None
        try:
            bridge = Bridge(cluster, cfg, args.spec, block, rings, board, first, count, restored=restored,
                            generation=args.generation, lead=lead, run_dir=args.run_dir, say=_say)
            bridge.start(bridge_restarted=args.restarts > 0)
            while control.phase() != EXIT:
                bridge.poll(timeout=0.05)
        finally:
            if bridge is not None:
                bridge.close()
            set_state(me, DONE)
            me.set("cpu_s", time.process_time())
            cluster.shutdown()


class Unreachable:
    """The cluster of a bridge that could not rejoin it: only its address (every remote sampler is given up)."""

    def __init__(self, address: str) -> None:
        self.address = address


def _say(line: str) -> None:
    say(line)
