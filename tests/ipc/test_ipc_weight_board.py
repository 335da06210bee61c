"""Weight board: readers never accept a torn vector while a writer publishes as fast as it can."""

from __future__ import annotations

import multiprocessing as mp
import os

import ipc_workers as W
import numpy as np
import pytest

from spreeze_like.ipc import WeightBoard, new_run_id, segment_name

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
