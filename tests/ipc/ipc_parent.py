"""A small supervisor run as a subprocess by test_ipc_lifetime.py: ``python ipc_parent.py MODE RUN_ID``.

It creates a ring, a weight board and a stats block the way the real supervisor does, spawns
children, and unlinks everything in ``finally`` (modes normal, child-raises, child-killed). In mode
parent-killed it prints its children's pids and waits to be SIGKILLed, so nothing of its own
cleanup runs: the children must die with it and the next start's sweep must remove the segments.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time

import ipc_workers as W
import numpy as np

from spreeze_like.ipc import Ring, StatsBlock, WeightBoard, segment_name, unlink_run


def main(mode: str, run: str) -> int:
    ctx = mp.get_context("spawn")
    me = os.getpid()
    ring = Ring.create(segment_name(run, "ring", 0), 64, 8, role="reader")
    board = WeightBoard.create(segment_name(run, "w-actor", 0), 1000, role="writer")
    roles = {"supervisor": ["restarts"], "sampler-0": ["steps"], "sampler-1": ["steps"]}
    stats = StatsBlock.create(segment_name(run, "ctl", 0), roles)
    owned = [ring, board, stats]
    procs: list = []
    try:
        board.publish(np.zeros(1000, np.float32))
        if mode == "normal":
            procs = [ctx.Process(target=W.ring_producer, args=(me, ring.name, 7, 2000, 50, 0))]
            procs[0].start()
            ring.close()
            got = W.drain_rings([ring.name], [7], 0)
            procs[0].join(30)
            return 0 if got == [2000] and procs[0].exitcode == 0 else 1
        if mode == "child-raises":
            procs = [ctx.Process(target=W.failing_child, args=(me, stats.name))]
            procs[0].start()
            procs[0].join(30)
            return 3 if procs[0].exitcode == 1 else 1
        if mode == "child-killed":
            procs = [ctx.Process(target=W.self_killing_child, args=(me, ring.name))]
            procs[0].start()
            procs[0].join(30)
            return 4 if procs[0].exitcode == -9 else 1
        if mode == "parent-killed":
            procs = [
                ctx.Process(target=W.idle_child, args=(me, ring.name, "writer", stats.name, f"sampler-{i}"))
                for i in range(2)
            ]
            for p in procs:
                p.start()
            # Wait until both children are past start-up (they claim their stats row): a child killed
            # while multiprocessing still feeds it its spawn data would die of that, proving nothing.
            while any(stats.pid(f"sampler-{i}") != p.pid for i, p in enumerate(procs)):
                time.sleep(0.01)
            print(json.dumps({"children": [p.pid for p in procs]}), flush=True)
            time.sleep(120)  # the test SIGKILLs us long before this
            return 1
        raise ValueError(f"unknown mode {mode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
        for obj in owned:
            obj.close()
            obj.unlink()
        unlink_run(run)  # last line of defence: anything of this run this process created


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
