"""Target functions of the processes the IPC tests spawn (kept light: no pytest import in children).

Every record and every weight vector carries a pattern derived from its identity, so a reader can
check each one it accepts by content alone.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from spreeze_like.ipc import Ring, StatsBlock, WeightBoard, child_setup


# ---------------------------------------------------------------------------------- records
def record_rows(producer: int, seqs: np.ndarray, width: int) -> np.ndarray:
    """Rows (producer, seq, f(producer, seq, column)...): every value exact in float32."""
    rows = np.empty((len(seqs), width), np.float32)
    rows[:, 0] = producer
    rows[:, 1] = seqs
    rows[:, 2:] = (seqs[:, None] * 31 + producer * 7 + np.arange(width - 2)[None, :]) % 4093
    return rows


def ring_producer(parent_pid: int, name: str, producer: int, n: int, max_batch: int, seed: int) -> None:
    """Write records 0..n-1 of ``producer`` in random batch sizes 1..max_batch, then close the stream."""
    child_setup(parent_pid)
    ring = Ring.attach(name, "writer")
    rng = np.random.default_rng(seed)
    seq = 0
    while seq < n:
        k = int(min(n - seq, rng.integers(1, max_batch + 1)))
        ring.write(record_rows(producer, np.arange(seq, seq + k), ring.record_width), timeout=30)
        seq += k
    ring.close_writer()
    ring.close()


def check_rows(rows: np.ndarray, producer: int, first_seq: int) -> None:
    """Raise AssertionError unless ``rows`` are exactly records first_seq.. of ``producer``."""
    expect = record_rows(producer, np.arange(first_seq, first_seq + len(rows)), rows.shape[1])
    if not np.array_equal(rows, expect):
        bad = int(np.argmax((rows != expect).any(axis=1)))
        raise AssertionError(
            f"producer {producer}: record {first_seq + bad} wrong: got {rows[bad, :4]}, want {expect[bad, :4]}"
        )


def ring_consumer(parent_pid: int, names: list[str], producers: list[int], stall_every: int, result_q) -> None:
    """Drain several rings (round robin, alternating peek/release and pop_into); report counts."""
    child_setup(parent_pid)
    try:
        result_q.put(("ok", drain_rings(names, producers, stall_every)))
    except Exception as exc:  # noqa: BLE001 - report to the test instead of dying silently
        result_q.put(("error", repr(exc)))


def drain_rings(names: list[str], producers: list[int], stall_every: int, timeout: float = 60.0) -> list[int]:
    """Read every ring until its writer closed it and it is empty, checking order and content.

    Args:
        names: Ring segment names.
        producers: Producer id written into each ring's records.
        stall_every: Sleep 2 ms after every this many reads (keeps small rings full), 0 for never.
        timeout: Fail if nothing at all arrives for this long.

    Returns:
        Records received per ring.
    """
    rings = [Ring.attach(n, "reader") for n in names]
    got = [0] * len(rings)
    done = [False] * len(rings)
    out = np.empty((64, rings[0].record_width), np.float32)
    reads = 0
    last_progress = time.monotonic()
    while not all(done):
        progressed = False
        for i, ring in enumerate(rings):
            if done[i]:
                continue
            closed = ring.writer_closed  # read before available(): a close seen means all data is published
            if reads % 2:
                view = ring.peek(max_rows=100)
                k = len(view)
                if k:
                    check_rows(np.array(view), producers[i], got[i])
                    ring.release(k)
            else:
                k = ring.pop_into(out)
                if k:
                    check_rows(out[:k], producers[i], got[i])
            reads += 1
            got[i] += k
            progressed |= k > 0
            if k == 0 and closed and ring.available() == 0:
                done[i] = True
            if stall_every and reads % stall_every == 0:
                time.sleep(0.002)
        now = time.monotonic()
        if progressed:
            last_progress = now
        elif now - last_progress > timeout:
            raise TimeoutError(f"no records for {timeout} s; got {got}")
        else:
            time.sleep(0.0002)
    for ring in rings:
        ring.close()
    return got


# ---------------------------------------------------------------------------------- weights
def board_pattern(n: int) -> np.ndarray:
    """Per-element offsets; version v is published as pattern + v (exact in float32 below 2**24)."""
    return ((np.arange(n, dtype=np.int64) * 7919) % 65521).astype(np.float32)


def board_writer(parent_pid: int, name: str, stop, result_q, max_seconds: float = 60.0) -> None:
    """Publish versions as fast as possible until ``stop`` is set (the readers are done); report how many."""
    child_setup(parent_pid)
    board = WeightBoard.attach(name, "writer")
    base = board_pattern(board.n_params)
    vec = np.empty_like(base)
    deadline = time.monotonic() + max_seconds
    v = 0
    while not stop.is_set() and time.monotonic() < deadline:
        np.add(base, np.float32(v + 1), out=vec)
        v = board.publish(vec)
    board.close()
    result_q.put(("writer", v))


def board_writer_continuing(parent_pid: int, name: str) -> None:
    """Publish version v as ``pattern + v`` for v = the board's next, until killed (a restarted learner continues
    the count from the board; its first version overwrites the slot a killed writer may have left half-copied)."""
    child_setup(parent_pid)
    board = WeightBoard.attach(name, "writer")
    base = board_pattern(board.n_params)
    vec = np.empty_like(base)
    v = board.version()
    while True:
        np.add(base, np.float32(v + 1), out=vec)
        got = board.publish(vec)
        if got != v + 1:
            os._exit(3)  # the count did not continue: the parent sees exit code 3
        v = got


def board_reader(
    parent_pid: int, name: str, seconds: float, result_q, min_reads: int = 200, min_versions: int = 20
) -> None:
    """Read as fast as possible; every accepted copy must be exactly one version's pattern.

    Reads for at least ``seconds`` and until ``min_reads`` reads overlapped ``min_versions`` publishes
    (so a reader starved by a loaded machine still does its share), at most 30 s.
    """
    child_setup(parent_pid)
    board = WeightBoard.attach(name, "reader")
    base = board_pattern(board.n_params)
    out = np.empty_like(base)
    reads = torn = versions_seen = 0
    last = 0
    start = time.monotonic()

    def more() -> bool:
        elapsed = time.monotonic() - start
        if elapsed > 30.0:
            return False
        return elapsed < seconds or reads < min_reads or versions_seen < min_versions

    while more():
        v = board.read(out)
        if v == 0:
            continue
        reads += 1
        if v < last or not np.array_equal(out - base, np.full_like(base, v)):
            torn += 1
        versions_seen += v != last
        last = v
    board.close()
    result_q.put(("reader", reads, torn, versions_seen))


# ---------------------------------------------------------------------------------- lifetime
def idle_child(
    parent_pid: int, name: str | None = None, role: str = "reader", stats: str | None = None, stats_role: str = ""
) -> None:
    """Attach a ring (if given), claim a stats row (if given: tells the parent it is ready), idle until killed."""
    child_setup(parent_pid)
    if name is not None:
        Ring.attach(name, role)  # type: ignore[arg-type]
    if stats is not None:
        StatsBlock.attach(stats).role(stats_role).claim()
    while True:
        time.sleep(0.1)


def failing_child(parent_pid: int, name: str) -> None:
    """Attach the stats block, beat once, then raise."""
    child_setup(parent_pid)
    stats = StatsBlock.attach(name)
    stats.role("sampler-0").claim()
    raise RuntimeError("failing_child: deliberate error")


def self_killing_child(parent_pid: int, name: str) -> None:
    """Attach a ring as writer, write a little, then SIGKILL itself."""
    child_setup(parent_pid)
    ring = Ring.attach(name, "writer")
    ring.write(np.zeros((2, ring.record_width), np.float32))
    os.kill(os.getpid(), signal.SIGKILL)


def delayed_ring_action(parent_pid: int, name: str, role: str, delay: float, action: str) -> None:
    """After ``delay`` s: as writer, write one record or close the stream; as reader, pop one record."""
    child_setup(parent_pid)
    ring = Ring.attach(name, role)  # type: ignore[arg-type]
    time.sleep(delay)
    if action == "write":
        ring.write(np.ones((1, ring.record_width), np.float32))
    elif action == "close":
        ring.close_writer()
    elif action == "pop":
        assert ring.pop_into(np.empty((1, ring.record_width), np.float32)) == 1
    ring.close()
