"""Timing under a budget, and the data-path probes: memcpy bandwidth and ring throughput.

:func:`time_rate` is the one timing loop every probe uses. It runs warm-up calls untimed, then
calls the function in chunks until the budget is spent, synchronising (``sync``, e.g.
``torch.cuda.synchronize``) only between chunks so that a GPU queue is not drained after every
call -- the learners do not do that either. A budget too small for ``min_ops`` timed operations
still yields a figure, marked as an estimate with the reason.

The ring probe moves real transition rows (the env's row width) from a spawned producer process
into this process through a :class:`~spreeze_like.ipc.Ring`, 256 rows per write, the way a sampler
feeds the replay writer. This process creates the ring and unlinks it in ``finally``; the producer
only attaches, dies with this process (``child_setup``) and is joined or killed before returning,
so a crash of either side leaves at most a segment that the next start's sweep removes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable

import numpy as np

from spreeze_like.autotune.results import Rate

RING_MIN_BUDGET_S = 0.5  # below this, spawning a producer is most of the budget: estimate instead
RING_ROWS_PER_WRITE = 256
RING_CAPACITY = 1 << 14


def time_rate(
    fn: Callable[[], object],
    budget_s: float,
    unit: str,
    *,
    per_call: int = 1,
    warmup: int = 1,
    min_ops: int = 3,
    sync: Callable[[], object] | None = None,
) -> Rate:
    """Rate of ``fn`` (``per_call`` operations per call) measured for about ``budget_s`` seconds.

    At least one call is always timed, so even a zero budget gives a figure -- marked as an
    estimate when fewer than ``min_ops`` operations were timed.
    """
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    calls, chunk = 0, 1
    t0 = time.perf_counter()
    deadline = t0 + max(0.0, budget_s)
    while True:
        for _ in range(chunk):
            fn()
        calls += chunk
        sync()
        now = time.perf_counter()
        if now >= deadline:
            break
        # grow the chunk while it is short against the budget: fewer clock reads and syncs
        if (now - t0) / calls * chunk * 2 < budget_s / 20:
            chunk *= 2
        chunk = max(1, min(chunk, int((deadline - now) / max((now - t0) / calls, 1e-9)) + 1))
    seconds = time.perf_counter() - t0
    ops = calls * per_call
    estimate = ""
    if ops < min_ops:
        estimate = f"only {ops} operation(s) fit in the {budget_s:.2g} s budget; give the probe more time"
    return Rate(ops / seconds, unit, ops, seconds, estimate)


def memcpy_rate(budget_s: float, nbytes: int = 64 << 20) -> Rate:
    """Bytes/s of one numpy copy of a buffer larger than any cache, in this process (best copy)."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.zeros_like(src)  # touched first, so page faults are not timed
    best, copies = float("inf"), 0
    deadline = time.perf_counter() + budget_s
    while copies < 2 or (time.perf_counter() < deadline and copies < 50):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
        copies += 1
    # best-of-n, not the mean: the question is what the memory system can do, not what a busy machine gave us
    return Rate(nbytes / best, "bytes/s", copies, best * copies)


def _ring_producer(parent_pid: int, name: str, width: int, stop: mp.synchronize.Event) -> None:
    from spreeze_like.ipc import Ring, child_setup

    child_setup(parent_pid)
    ring = Ring.attach(name, "writer")
    rows = np.random.default_rng(0).random((RING_ROWS_PER_WRITE, width), dtype=np.float32)
    try:
        while not stop.is_set():
            for _ in range(32):
                ring.write(rows, timeout=30.0)
    finally:
        ring.close_writer()
        ring.close()


def ring_rate(width: int, budget_s: float, memcpy: Rate | None = None) -> Rate:
    """Transitions/s (rows of ``width`` float32) from a producer process through one ring into this one.

    Args:
        width: floats per transition row (the env's ``TransitionLayout.width``).
        budget_s: seconds to time the consumer (process start-up comes on top, about a second).
        memcpy: the memcpy rate, used for the estimate when the budget is too small to measure.
    """
    row_bytes = 4 * width
    if budget_s < RING_MIN_BUDGET_S:
        base = memcpy.value if memcpy is not None else 0.0
        return Rate(0.5 * base / row_bytes, "transitions/s", 0, 0.0,
                    f"budget {budget_s:.2g} s is below the {RING_MIN_BUDGET_S} s a two-process ring measurement "
                    "needs; estimated as half the memcpy bandwidth (each row is copied twice)")
    from spreeze_like.ipc import Ring, new_run_id, segment_name

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    ring = Ring.create(segment_name(new_run_id(), "probe-ring"), RING_CAPACITY, width, role="reader")
    proc = ctx.Process(target=_ring_producer, args=(os.getpid(), ring.name, width, stop), daemon=True)
    dest = np.zeros((1 << 17, width), np.float32)  # replay-like destination larger than the caches
    chunk = 4096
    views = [dest[i : i + chunk] for i in range(0, len(dest), chunk)]
    try:
        proc.start()
        if not ring.wait_readable(timeout=60.0):
            raise RuntimeError("ring probe: the producer process did not start within 60 s")
        got, v = 0, 0
        t0 = time.perf_counter()
        deadline = t0 + budget_s
        while time.perf_counter() < deadline:
            k = ring.pop_into(views[v])
            if k:
                got += k
                v = (v + 1) % len(views)
            else:
                ring.wait_readable(timeout=30.0)
        seconds = time.perf_counter() - t0
        stop.set()
        while not (ring.writer_closed and ring.available() == 0):  # drain, so a blocked writer can finish
            if not ring.pop_into(views[0]):
                time.sleep(0.001)
                if not proc.is_alive():
                    break
        proc.join(10.0)
        return Rate(got / seconds, "transitions/s", got, seconds)
    finally:
        if proc.is_alive():
            proc.kill()
        if proc.pid is not None:
            proc.join(5.0)
        ring.close()
        ring.unlink()
