"""A stand-in for the ``ray-bridge`` process, for the supervisor's remote-sampler tests without Ray.

The supervisor spawns it in the bridge's place (``spreeze_like.supervisor.BRIDGE_MODULE`` set to this
module's dotted name in the CLI process; ``child_main`` imports a dotted name as given). It plays the
part of the contract that the supervisor depends on, and nothing of Ray:

- claims the ``ray-bridge`` row and every remote sampler row, sets ``connected``, beats in every loop;
- first incarnation (restart 0), with ``SPZ_FAKE_BRIDGE_STEPS`` = N > 0: the first remote row takes N
  env steps through a real :class:`~spreeze_like.roles.sampler.SamplerWorker` writing that row's ring
  (as the bridge writes an actor's rows), then the process dies (exit status 1): a bridge crash;
- any later incarnation, or the first when N = 0: gives every remote row up the way the contract says
  (``remote_restarts`` = 2, ``abandoned`` = 1, state DONE), writes ``remote_samplers.json``, and idles
  until the phase is ``EXIT``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from spreeze_like.procs.control import DONE, EXIT, RUN, RUNNING, ChildArgs, Control, set_state
from spreeze_like.procs.sampler_proc import RingSink
from spreeze_like.procs.segments import Attached
from spreeze_like.roles import build

STEPS_VAR = "SPZ_FAKE_BRIDGE_STEPS"
REMOTE_RESTARTS = 2  # what the stand-in reports per remote row once it gives them up


def _write_info(run_dir: str, rows: list[int], state: str) -> None:
    info = {"ray_address": "fake", "samplers": {
        f"sampler-{i}": {"node_ip": "127.0.0.9", "node_id": f"fake-node-{i}", "pid": None, "state": state,
                         "restarts": REMOTE_RESTARTS if state == "abandoned" else 0, "steps_per_s": 0.0,
                         "policy_lag": 0.5}
        for i in rows}}
    path = Path(run_dir) / "remote_samplers.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


def run(args: ChildArgs) -> None:
    steps = int(os.environ.get(STEPS_VAR, "0"))
    first, count = int(args.extra["first"]), int(args.extra["count"])
    indices = list(range(first, first + count))
    with Attached(args.segments) as shm:
        block = shm.stats()
        control = Control(block)
        me = block.role(args.role)
        me.claim()
        me.set("connected", 1.0)
        set_state(me, RUNNING)
        rows = [block.role(f"sampler-{i}") for i in indices]
        for row in rows:
            row.claim()
        _write_info(args.run_dir, indices, "running")
        if args.restarts == 0 and steps > 0:
            row = rows[0]
            set_state(row, RUNNING)
            sink = RingSink(shm.ring(first, "writer"), control, row)
            worker = build.sampler(args.config, args.spec, first, sink, shm.board("actor", "reader"), row,
                                   generation=args.generation)
            while row.get("env_steps") < steps and control.phase() == RUN:
                me.beat()
                row.beat()
                worker.step()
            os._exit(1)  # a crash of the bridge process: the supervisor restarts it
        for row in rows:
            row.set("remote_restarts", float(REMOTE_RESTARTS))
            row.set("abandoned", 1.0)
            set_state(row, DONE)
        _write_info(args.run_dir, indices, "abandoned")
        while control.phase() != EXIT:
            me.beat()
            time.sleep(0.02)
        set_state(me, DONE)
