"""Weight board: readers never accept a torn vector while a writer publishes as fast as it can."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time

import ipc_workers as W
import numpy as np
import pytest

from spreeze_like.ipc import WeightBoard, new_run_id, segment_name
from spreeze_like.ipc.weight_board import _SEQ_OFFS
from spreeze_like.native import _native

CTX = mp.get_context("spawn")


@pytest.mark.multiproc
@pytest.mark.parametrize("n_params", [1 << 18, 1000], ids=["1MiB", "4KiB"])
def test_readers_never_accept_a_torn_vector(n_params):
    board = WeightBoard.create(segment_name(new_run_id(), "w-actor"), n_params)
    result_q = CTX.Queue()
    me = os.getpid()
    seconds = 1.5
    stop = CTX.Event()
    procs = [CTX.Process(target=W.board_writer, args=(me, board.name, stop, result_q))]
    procs += [CTX.Process(target=W.board_reader, args=(me, board.name, seconds, result_q)) for _ in range(2)]
    try:
        for p in procs:
            p.start()
        # the writer publishes until both readers have done their share, then reports
        results = [result_q.get(timeout=60) for _ in procs[1:]]
        stop.set()
        results.append(result_q.get(timeout=60))
        for p in procs:
            p.join(30)
        assert [p.exitcode for p in procs] == [0, 0, 0]
        published = next(r[1] for r in results if r[0] == "writer")
        readers = [r[1:] for r in results if r[0] == "reader"]
        assert published > 100, results  # the writer really hammered the board
        for reads, torn, versions_seen in readers:
            assert torn == 0, results
            assert reads >= 200 and versions_seen >= 20, results  # reads overlapped many publishes
        assert board.version() == published
        out = np.empty(n_params, np.float32)
        assert board.read(out) == published
        np.testing.assert_array_equal(out, W.board_pattern(n_params) + published)
    finally:
        result_q.close()
        result_q.join_thread()
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
        board.close()
        board.unlink()


@pytest.mark.multiproc
def test_a_writer_killed_mid_publish_leaves_a_whole_version_and_its_restart_continues():
    """The audit's gap: a learner SIGKILLed while it copies a new version into the board. Readers in another
    process go on accepting only whole versions, the newest whole one is readable at once after each kill,
    and the restarted writer continues the version count over the slot the dead one left half-copied."""
    n_params = 1 << 20  # 4 MiB a version: the writer spends most of its time inside a copy
    board = WeightBoard.create(segment_name(new_run_id(), "w-actor"), n_params)
    seqs = [lambda s=s: _native.load_u64(board._seg.mmap, s) for s in _SEQ_OFFS]
    result_q = CTX.Queue()
    me = os.getpid()
    reader = CTX.Process(target=W.board_reader, args=(me, board.name, 3.0, result_q, 50, 10))
    base, out = W.board_pattern(n_params), np.empty(n_params, np.float32)
    rng = random.Random(0)
    kills, mid_copy, last = 0, 0, 0
    writer = None
    try:
        reader.start()
        while mid_copy < 6 and kills < 40:  # about half the kills land inside a copy (the rest in the writer's add)
            kills += 1
            writer = CTX.Process(target=W.board_writer_continuing, args=(me, board.name))
            writer.start()
            deadline = time.monotonic() + 30
            while board.version() < last + 3 and time.monotonic() < deadline:  # the new writer is publishing
                time.sleep(0.001)
            assert board.version() >= last + 3, "the restarted writer did not continue the count"
            time.sleep(rng.uniform(0, 0.01))
            os.kill(writer.pid, signal.SIGKILL)
            writer.join(10)
            assert writer.exitcode == -signal.SIGKILL  # not 3: every publish continued the count
            latest = board.version()
            mid_copy += seqs[(latest + 1) % 2]() == 2 * (latest + 1) - 1  # killed inside version latest + 1's copy
            v = board.read(out, timeout=1.0)  # at once: the dead writer blocks nothing
            assert v == latest >= last
            np.testing.assert_array_equal(out, base + np.float32(v))
            last = v
        _name, reads, torn, versions_seen = result_q.get(timeout=60)
        reader.join(30)
        assert reader.exitcode == 0 and torn == 0 and reads >= 50, (reads, torn, versions_seen)
        assert mid_copy >= 6, f"only {mid_copy} of {kills} kills landed inside a copy: the case is not exercised"
    finally:
        result_q.close()
        result_q.join_thread()
        for p in (reader, writer):
            if p is not None and p.is_alive():
                p.kill()
            if p is not None:
                p.join(10)
        board.close()
        board.unlink()


def test_board_api_in_process():
    board = WeightBoard.create(segment_name(new_run_id(), "w-critic"), 10, role="writer")
    reader = WeightBoard.attach(board.name, "reader")
    out = np.zeros(10, np.float32)
    try:
        assert reader.version() == 0 and reader.read(out) == 0  # nothing published yet
        assert not reader.has_newer(0)
        assert board.publish(np.full(10, 1, np.float32)) == 1
        assert board.publish(np.full((2, 5), 2, np.float32)) == 2  # any shape with n_params elements
        assert reader.has_newer(1) and not reader.has_newer(2)
        assert reader.read(out) == 2 and (out == 2).all()
        assert reader.read_if_newer(out, 2) == 2
        board.publish(np.full(10, 3, np.float32))
        assert reader.read_if_newer(out, 2) == 3 and (out == 3).all()
        with pytest.raises(ValueError, match="float32"):
            board.publish(np.zeros(10))
        with pytest.raises(ValueError, match="10 elements"):
            board.publish(np.zeros(11, np.float32))
        with pytest.raises(RuntimeError, match="not as its writer"):
            reader.publish(out)
        # a restarted writer continues the version count
        again = WeightBoard.attach(board.name, "writer")
        assert again.publish(np.full(10, 4, np.float32)) == 4
        again.close()
    finally:
        reader.close()
        board.close()
        board.unlink()
