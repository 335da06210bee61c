"""Benchmark: moving transitions between two processes, our shared-memory ring vs multiprocessing.Queue.

One producer process sends HalfCheetah-sized transitions (42 float32 = 168 bytes, the issue's
size: 17 obs, 6 action, reward, 17 next_obs, done; our own record, with separate terminated and
truncated flags, is 43) to one consumer process, 1 and 256 transitions per write, through
``multiprocessing.Queue`` (the peer) and through :class:`spreeze_like.ipc.Ring`. Both consumers
store what they receive into a replay-sized array, as a feeder does. A single-process numpy copy
of a large buffer is the floor (the best one core can move memory). MB/CPU-s divides the bytes
moved by the CPU time of producer and consumer together: it says how the ring would fare on a
machine too busy to give it two free cores (the ring copies every byte twice, memcpy once). All in one run, so the
ratios compare like with like:

    python tools/bench_ipc.py            # full run (about a minute)
    python tools/bench_ipc.py --quick    # smaller counts, a smoke test

Acceptance (issue 2): ring at 1/write >= 25x Queue's transitions/s; ring at 256/write moves bytes
at >= 50% of the memcpy floor. Processes are torch-free (only numpy and spreeze_like.ipc).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from spreeze_like.console import run_tool
from spreeze_like.ipc import Ring, child_setup, new_run_id, segment_name, sweep_dead_segments
from spreeze_like.write_guard import tool_output

WIDTH = 42
RECORD_BYTES = WIDTH * 4
DEST_ROWS = 1 << 18  # the consumer's replay-like destination (44 MB): larger than any cache
RING_CAPACITY = 1 << 14  # 2.75 MB ring


# ------------------------------------------------------------------------------------------ workers
def _queue_producer(parent: int, q: Any, go: Any, n: int, per_write: int, out: Any) -> None:
    child_setup(parent)
    batch = np.random.default_rng(0).random((per_write, WIDTH), dtype=np.float32)
    item = batch[0].copy() if per_write == 1 else batch  # one numpy row per put, or one (256, 42) array
    go.wait()
    c0 = time.process_time()  # all threads of the process: the Queue's feeder thread included
    for _ in range(n // per_write):
        q.put(item)
    q.close()
    q.join_thread()
    out.put(("producer", time.process_time() - c0))


def _queue_consumer(parent: int, q: Any, ready: Any, go: Any, n: int, per_write: int, out: Any) -> None:
    child_setup(parent)
    dest = np.zeros((DEST_ROWS, WIDTH), np.float32)
    ready.set()
    go.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    cursor = 0
    got = 0
    while got < n:
        x = q.get()
        k = 1 if x.ndim == 1 else len(x)
        if cursor + k > DEST_ROWS:
            cursor = 0
        dest[cursor : cursor + k] = x
        cursor += k
        got += k
    out.put(("consumer", got, time.perf_counter() - t0, time.process_time() - c0))


def _ring_producer(parent: int, name: str, go: Any, n: int, per_write: int, out: Any) -> None:
    child_setup(parent)
    ring = Ring.attach(name, "writer")
    batch = np.random.default_rng(0).random((per_write, WIDTH), dtype=np.float32)
    item = batch[0].copy() if per_write == 1 else batch
    write = ring.write
    go.wait()
    c0 = time.process_time()
    for _ in range(n // per_write):
        write(item)
    ring.close_writer()
    out.put(("producer", time.process_time() - c0))
    ring.close()


def _ring_consumer(parent: int, name: str, ready: Any, go: Any, n: int, per_write: int, out: Any) -> None:
    child_setup(parent)
    ring = Ring.attach(name, "reader")
    dest = np.zeros((DEST_ROWS, WIDTH), np.float32)
    chunk = 4096
    views = [dest[i : i + chunk] for i in range(0, DEST_ROWS, chunk)]  # pop straight into the destination
    ready.set()
    go.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    got = 0
    v = 0
    pop = ring.pop_into
    while got < n:
        k = pop(views[v])
        if k:
            got += k
            v = (v + 1) % len(views)
        else:
            ring.wait_readable(timeout=60)
    out.put(("consumer", got, time.perf_counter() - t0, time.process_time() - c0))
    ring.close()


# ------------------------------------------------------------------------------------------ runs
def _run_pair(kind: str, per_write: int, n: int) -> tuple[float, float]:
    """One producer/consumer run; returns (transitions/s measured by the consumer, CPU seconds of both)."""
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    me = os.getpid()
    ring = None
    if kind == "queue":
        q = ctx.Queue()
        procs = [
            ctx.Process(target=_queue_producer, args=(me, q, go, n, per_write, out)),
            ctx.Process(target=_queue_consumer, args=(me, q, ready, go, n, per_write, out)),
        ]
    else:
        ring = Ring.create(segment_name(new_run_id(), "ring"), RING_CAPACITY, WIDTH)
        procs = [
            ctx.Process(target=_ring_producer, args=(me, ring.name, go, n, per_write, out)),
            ctx.Process(target=_ring_consumer, args=(me, ring.name, ready, go, n, per_write, out)),
        ]
    try:
        for p in procs:
            p.start()
        if not ready.wait(120):
            raise RuntimeError(f"{kind} consumer did not start")
        time.sleep(0.2)  # producer is past its imports too
        go.set()
        reports = {}
        for _ in range(2):
            msg = out.get(timeout=600)
            reports[msg[0]] = msg[1:]
        for p in procs:
            p.join(60)
        got, seconds, consumer_cpu = reports["consumer"]
        if got != n:
            raise RuntimeError(f"{kind}: consumer got {got} of {n} transitions")
        return got / seconds, consumer_cpu + reports["producer"][0]
    finally:
        for p in procs:
            if p.pid is None:  # never started
                continue
            if p.is_alive():
                p.kill()
            p.join(10)
        if ring is not None:
            ring.close()
            ring.unlink()


def memcpy_floor(nbytes: int = 256 << 20, reps: int = 5) -> float:
    """Bytes/s of one numpy copy of a large buffer in one process (best of ``reps``)."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.zeros_like(src)  # touched, so page faults are not timed
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller counts (same as --scale 0.1)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every transition count by this")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; the median is reported")
    parser.add_argument("--json", default="", help="also write the results to this file")
    args = parser.parse_args()
    tool_output(parser, args.json)  # tried now, not after the measuring
    if args.repeats < 1 or args.scale <= 0:
        parser.error("--repeats must be >= 1 and --scale > 0")
    scale = 0.1 if args.quick else args.scale
    counts = {  # transitions per run: each run takes ~1-3 s on a 2-core desktop
        ("queue", 1): 200_000,
        ("ring", 1): 5_000_000,
        ("queue", 256): 2_048_000,
        ("ring", 256): 40_960_000,
    }
    if "torch" in sys.modules:  # the comparison is of IPC alone: no torch threads in these processes
        raise RuntimeError("bench_ipc must run torch-free")
    sweep_dead_segments()
    load_before = os.getloadavg()
    floor = statistics.median(memcpy_floor(max(16 << 20, int((256 << 20) * min(scale, 1.0)))) for _ in range(3))
    rates: dict[tuple[str, int], float] = {}
    per_cpu_s: dict[tuple[str, int], float] = {}  # transitions per CPU-second of producer + consumer
    for per_write in (1, 256):
        for kind in ("queue", "ring"):
            n = int(counts[(kind, per_write)] * scale) // per_write * per_write
            runs = [_run_pair(kind, per_write, n) for _ in range(args.repeats)]
            rates[(kind, per_write)] = statistics.median(r for r, _ in runs)
            per_cpu_s[(kind, per_write)] = statistics.median(n / cpu for _, cpu in runs)
            print(f"  {kind:5s} {per_write:3d}/write: " + ", ".join(f"{r:,.0f}" for r, _ in runs) + " transitions/s")
    load_after = os.getloadavg()

    print(f"\nIPC benchmark: {WIDTH} float32 per transition ({RECORD_BYTES} B), producer process -> consumer process")
    print(f"{'method':<22}{'per write':>10}{'transitions/s':>16}{'MB/s':>12}{'MB/CPU-s':>12}")
    print(f"{'memcpy (1 process)':<22}{'-':>10}{'-':>16}{floor / 1e6:>12,.0f}{floor / 1e6:>12,.0f}")
    for per_write in (1, 256):
        for kind, label in (("queue", "multiprocessing.Queue"), ("ring", "spreeze ring")):
            r, c = rates[(kind, per_write)], per_cpu_s[(kind, per_write)]
            print(
                f"{label:<22}{per_write:>10}{r:>16,.0f}{r * RECORD_BYTES / 1e6:>12,.0f}{c * RECORD_BYTES / 1e6:>12,.0f}"
            )
    x1 = rates[("ring", 1)] / rates[("queue", 1)]
    x256 = rates[("ring", 256)] / rates[("queue", 256)]
    frac = rates[("ring", 256)] * RECORD_BYTES / floor
    print(f"\nring / Queue at 1 per write:    {x1:6.1f}x   (target >= 25x: {'PASS' if x1 >= 25 else 'FAIL'})")
    print(f"ring / Queue at 256 per write:  {x256:6.1f}x")
    print(f"ring at 256 / memcpy bytes/s:   {frac:6.1%}   (target >= 50%: {'PASS' if frac >= 0.5 else 'FAIL'})")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; {os.cpu_count()} logical cores")
    if args.json:
        result = {
            "memcpy_bytes_per_s": floor,
            "rates": {f"{k}@{w}": v for (k, w), v in rates.items()},
            "transitions_per_cpu_s": {f"{k}@{w}": v for (k, w), v in per_cpu_s.items()},
            "ring_over_queue_1": x1,
            "ring_over_queue_256": x256,
            "ring256_over_memcpy": frac,
            "load_before": load_before,
            "load_after": load_after,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    run_tool(main)
