"""SPSC rings with real spawned processes: every record exactly once, in order, by content."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import ipc_workers as W
import numpy as np
import pytest

from spreeze_like.errors import PeerDeadError, ShmError
from spreeze_like.ipc import Ring, TransitionLayout, WeightBoard, new_run_id, segment_name

CTX = mp.get_context("spawn")
WIDTH = 43  # HalfCheetah: 17 obs + 6 action + 1 reward + 17 next_obs + terminated + truncated


def _rings(run: str, n: int, capacity: int, width: int = WIDTH) -> list[Ring]:
    return [Ring.create(segment_name(run, "ring", i), capacity, width) for i in range(n)]


def _cleanup(rings: list[Ring], procs: list) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(10)
    for r in rings:
        r.close()
        r.unlink()


@pytest.mark.multiproc
@pytest.mark.parametrize(
    ("capacity", "n_records", "max_batch", "stall_every"),
    [
        (4096, 30_000, 300, 0),  # roomy ring, batches larger and smaller than the wrap
        (5, 3_000, 8, 3),  # tiny ring, full for long stretches; batches larger than the ring
    ],
    ids=["roomy", "tiny-full"],
)
def test_several_producers_exactly_once_in_order(capacity, n_records, max_batch, stall_every):
    run = new_run_id()
    producers = [11, 22, 33]
    rings = _rings(run, len(producers), capacity)
    me = os.getpid()
    procs = [
        CTX.Process(target=W.ring_producer, args=(me, r.name, pid, n_records, max_batch, 1000 + pid))
        for r, pid in zip(rings, producers)
    ]
    try:
        for p in procs:
            p.start()
        got = W.drain_rings([r.name for r in rings], producers, stall_every)
        for p in procs:
            p.join(30)
        assert [p.exitcode for p in procs] == [0] * len(procs)
        assert got == [n_records] * len(producers)
        for r in rings:
            assert r.write_seq == r.read_seq == n_records
            assert r.fill() == 0
        if capacity < max_batch:  # the tiny ring must really have been full, often
            assert all(r.full_waits > 50 for r in rings), [r.full_waits for r in rings]
    finally:
        _cleanup(rings, procs)


@pytest.mark.multiproc
def test_consumer_in_its_own_process():
    run = new_run_id()
    producers = [1, 2]
    rings = _rings(run, 2, 64)
    me = os.getpid()
    result_q = CTX.Queue()
    procs = [
        CTX.Process(target=W.ring_producer, args=(me, r.name, pid, 20_000, 100, pid))
        for r, pid in zip(rings, producers)
    ]
    procs.append(CTX.Process(target=W.ring_consumer, args=(me, [r.name for r in rings], producers, 0, result_q)))
    try:
        for p in procs:
            p.start()
        status, got = result_q.get(timeout=60)
        assert status == "ok", got
        assert got == [20_000, 20_000]
        for p in procs:
            p.join(30)
        assert [p.exitcode for p in procs] == [0, 0, 0]
    finally:
        result_q.close()
        result_q.join_thread()
        _cleanup(rings, procs)


def test_wrap_and_partial_batches_in_process():
    ring = Ring.create(segment_name(new_run_id(), "ring"), 7, 3, role="writer")
    reader = Ring.attach(ring.name, "reader")
    try:
        seq = 0
        for k in [3, 4, 5, 1, 6, 7, 2]:
            rows = W.record_rows(5, np.arange(seq, seq + k), 3)
            assert ring.try_write(rows) == k
            out = np.empty((10, 3), np.float32)
            n = 0
            while n < k:  # a view stops at the end of the buffer; the rest comes next
                view = reader.peek()
                out[n : n + len(view)] = view
                reader.release(len(view))
                n += len(view)
            W.check_rows(out[:k], 5, seq)
            seq += k
        assert ring.wait_writable(7, timeout=0.0)
        assert ring.try_write(W.record_rows(5, np.arange(seq, seq + 9), 3)) == 7  # only what fits
        t0 = time.monotonic()
        assert not ring.wait_writable(1, timeout=0.05)  # full: times out, no exception
        assert time.monotonic() - t0 >= 0.04
        assert ring.full_waits == 0
        with pytest.raises(ValueError, match="float32"):
            ring.write(np.zeros((2, 3)))  # float64
        with pytest.raises(ValueError, match="shape"):
            ring.write(np.zeros((2, 4), np.float32))
        with pytest.raises(ValueError, match="exceeds"):
            reader.release(8)
        with pytest.raises(RuntimeError, match="not as its writer"):
            reader.write(np.zeros(3, np.float32))
    finally:
        reader.close()
        ring.close()
        ring.unlink()


@pytest.mark.multiproc
def test_full_ring_with_dead_reader_raises_peer_dead():
    ring = Ring.create(segment_name(new_run_id(), "ring"), 8, WIDTH, role="writer")
    reader = CTX.Process(target=W.idle_child, args=(os.getpid(), ring.name, "reader"))
    try:
        reader.start()
        deadline = time.monotonic() + 30
        while ring.reader_pid == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        ring.write(np.zeros((8, WIDTH), np.float32))  # now full
        reader.kill()
        reader.join(10)
        t0 = time.monotonic()
        with pytest.raises(PeerDeadError) as info:
            ring.write(np.ones((3, WIDTH), np.float32), timeout=30)
        assert time.monotonic() - t0 < 5  # noticed by the liveness check, not by the timeout
        msg = str(info.value)
        assert "\n" not in msg and ring.name in msg and "died" in msg
        assert ring.full_waits == 1
        assert ring.write_seq == 8  # nothing half-published
    finally:
        _cleanup([ring], [reader])


def test_full_ring_with_stuck_reader_times_out_and_never_drops():
    ring = Ring.create(segment_name(new_run_id(), "ring"), 4, 2, role="writer")
    reader = Ring.attach(ring.name, "reader")  # alive (this process) but never reads
    try:
        ring.write(np.zeros((4, 2), np.float32))
        with pytest.raises(TimeoutError) as info:
            ring.write(np.ones((2, 2), np.float32), timeout=0.3)
        assert ring.name in str(info.value)
        assert ring.write_seq == 4 and reader.available() == 4
    finally:
        reader.close()
        ring.close()
        ring.unlink()


@pytest.mark.multiproc
def test_reader_sees_dead_writer():
    ring = Ring.create(segment_name(new_run_id(), "ring"), 16, WIDTH, role="reader")
    writer = CTX.Process(target=W.self_killing_child, args=(os.getpid(), ring.name))
    try:
        writer.start()
        writer.join(30)
        assert writer.exitcode == -9
        assert ring.wait_readable(timeout=5) == 2  # what it published before dying is there
        ring.release(2)
        with pytest.raises(PeerDeadError, match="died without closing"):
            ring.wait_readable(timeout=30)
    finally:
        _cleanup([ring], [writer])


def test_transition_layout_round_trip_through_a_ring():
    layout = TransitionLayout(obs_dim=17, act_dim=6)
    assert layout.width == WIDTH
    rng = np.random.default_rng(0)
    n = 5
    obs, nxt = rng.random((n, 17)), rng.random((n, 17))
    act, rew = rng.random((n, 6)), rng.random(n)
    term, trunc = np.array([0, 1, 0, 0, 1], bool), np.array([0, 0, 1, 0, 0], bool)
    rows = layout.pack(obs, act, rew, nxt, term, trunc)
    ring = Ring.create(segment_name(new_run_id(), "ring"), 8, layout.width, role="writer")
    reader = Ring.attach(ring.name, "reader")
    try:
        ring.write(rows)
        out = np.empty((8, layout.width), np.float32)
        assert reader.pop_into(out) == n
        cols = layout.unpack(out[:n])
        np.testing.assert_array_equal(cols["obs"], obs.astype(np.float32))
        np.testing.assert_array_equal(cols["next_obs"], nxt.astype(np.float32))
        np.testing.assert_array_equal(cols["action"], act.astype(np.float32))
        np.testing.assert_array_equal(cols["reward"], rew.astype(np.float32))
        np.testing.assert_array_equal(cols["terminated"], term)
        np.testing.assert_array_equal(cols["truncated"], trunc)
        with pytest.raises(ValueError, match="shape"):
            layout.unpack(out[:, :10])
    finally:
        reader.close()
        ring.close()
        ring.unlink()


def test_attaching_the_wrong_kind_of_segment_is_a_one_line_error():
    board = WeightBoard.create(segment_name(new_run_id(), "w-actor"), 1000)
    try:
        with pytest.raises(ShmError, match="not a ring") as info:
            Ring.attach(board.name, "reader")
        assert "\n" not in str(info.value) and board.name in str(info.value)
    finally:
        board.close()
        board.unlink()


@pytest.mark.multiproc
@pytest.mark.parametrize("action", ["write", "close", "pop"])
def test_doorbell_wakes_a_sleeping_peer(action):
    """A side asleep in the kernel is woken by the other process's publish, not by its timeout.

    The native waits are called directly with a 60 s timeout: the Python loops around them re-check
    every 50 ms, which would hide a lost wake-up.
    """
    ring = Ring.create(segment_name(new_run_id(), "ring"), 4, 3, role="reader" if action != "pop" else "writer")
    peer_role = "writer" if action != "pop" else "reader"
    if action == "pop":
        ring.write(np.zeros((4, 3), np.float32))  # full: the writer must wait for space
    child = CTX.Process(target=W.delayed_ring_action, args=(os.getpid(), ring.name, peer_role, 0.5, action))
    try:
        child.start()
        t0 = time.monotonic()
        if action == "pop":
            assert ring._core.wait_space(1, 60.0)
        else:
            avail = ring._core.wait_data(60.0)
            assert avail == (1 if action == "write" else 0)
            assert ring.writer_closed == (action == "close")
        assert time.monotonic() - t0 < 30  # woken by the doorbell (a lost wake-up would sleep 60 s)
        child.join(30)
        assert child.exitcode == 0
    finally:
        _cleanup([ring], [child])
