"""Storage layout, FIFO overwrite, attach checks, the writer claim, torn rows and UniformSampler."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

from spreeze_like.errors import ConfigError, ShmError
from spreeze_like.native import _native
from spreeze_like.replay import ReplayStorage, UniformSampler

OBS, ACT = 3, 2


def chunk(start: int, n: int):
    """Transitions whose every field encodes their row number, so a torn or misplaced row shows."""
    rows = np.arange(start, start + n, dtype=np.float32)
    obs = np.repeat(rows[:, None], OBS, 1)
    return obs, np.repeat(rows[:, None], ACT, 1), rows, obs + 0.5, rows % 2


def test_layout_is_aligned_and_sized():
    cap = 1000
    st = ReplayStorage.local(cap, OBS, ACT)
    base = st._header.ctypes.data
    for col in (st.obs, st.action, st.reward, st.next_obs, st.terminated, st.truncated, st.generations):
        assert (col.ctypes.data - base) % 64 == 0
        assert col.shape[0] == cap
    assert ReplayStorage.nbytes(cap, OBS, ACT) >= 4 * cap * (2 * OBS + ACT + 3) + 8 * cap


def test_fifo_overwrite_and_wrapping_chunk():
    st = ReplayStorage.local(10, OBS, ACT)
    assert st.size == 0
    slots = st.add(*chunk(0, 7))
    assert list(slots) == list(range(7)) and st.size == 7
    slots = st.add(*chunk(7, 6))  # wraps: rows 7..9 -> slots 7..9, rows 10..12 -> slots 0..2
    assert list(slots) == [7, 8, 9, 0, 1, 2]
    assert st.size == 10 and st.inserted == 13
    np.testing.assert_array_equal(st.reward, [10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(st.next_obs[:, 0], st.reward + 0.5)
    assert list(st.generations) == [4, 4, 4, 2, 2, 2, 2, 2, 2, 2]  # even: no write in flight


def test_single_transition_without_batch_dim():
    st = ReplayStorage.local(4, OBS, ACT)
    st.add(np.ones(OBS), np.ones(ACT), 1.0, np.ones(OBS), 0.0, 1.0)
    assert st.size == 1 and st.truncated[0] == 1.0


def test_attach_sees_the_same_memory_and_checks_shape():
    buf = np.zeros(ReplayStorage.nbytes(8, OBS, ACT), np.uint8)
    with pytest.raises(ShmError, match="create it"):
        ReplayStorage(buf, 8, OBS, ACT, create=False)
    a = ReplayStorage(buf, 8, OBS, ACT, create=True)
    a.add(*chunk(0, 5))
    b = ReplayStorage(buf, 8, OBS, ACT, create=False)
    assert b.size == 5 and b.reward[4] == 4
    with pytest.raises(ShmError, match="attach with the creator's shape"):
        ReplayStorage(buf, 8, OBS + 1, ACT, create=False)
    with pytest.raises(ShmError, match="needs"):
        ReplayStorage(np.zeros(16, np.uint8), 8, OBS, ACT, create=True)


@pytest.mark.parametrize("bad", [0, -5, 2.5, None])
def test_non_positive_capacity_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="capacity"):
        ReplayStorage.nbytes(bad, OBS, ACT)


def test_bad_chunks_are_rejected_before_writing():
    st = ReplayStorage.local(4, OBS, ACT)
    obs, act, rew, nxt, term = chunk(0, 2)
    with pytest.raises(ValueError, match="action has shape"):
        st.add(obs, act[:1], rew, nxt, term)
    with pytest.raises(ValueError, match="capacity"):
        st.add(*chunk(0, 5))
    assert st.inserted == 0 and not st.generations.any()


def test_gather_reports_rows_being_written():
    st = ReplayStorage.local(8, OBS, ACT)
    st.add(*chunk(0, 8))
    slots = np.array([1, 3, 5], np.int64)
    assert st.gather(slots).torn.size == 0
    _native.generations_begin_write(st.generations, np.array([3], np.int64))  # a write in flight
    rows = st.gather(slots)
    assert list(rows.torn) == [1]
    _native.generations_end_write(st.generations, np.array([3], np.int64))
    first = _native.generations_read(st.generations, slots)
    _native.generations_begin_write(st.generations, np.array([5], np.int64))
    _native.generations_end_write(st.generations, np.array([5], np.int64))  # rewritten after the read
    assert list(_native.generations_torn(st.generations, slots, first)) == [2]


def test_uniform_sampler_never_returns_a_torn_row():
    st = ReplayStorage.local(64, OBS, ACT)
    sampler = UniformSampler(st, seed=3)
    sampler.add(*chunk(0, 64))
    busy = np.arange(0, 64, 2, dtype=np.int64)
    _native.generations_begin_write(st.generations, busy)  # half the slots mid-write
    for _ in range(20):
        batch = sampler.sample(32)
        assert np.all(batch.slots % 2 == 1)
        assert np.all(batch.generations % 2 == 0)
        np.testing.assert_array_equal(batch.obs[:, 0], batch.slots)
        assert sampler.update_priorities(batch.slots, batch.generations, np.zeros(32)) == 0


def test_uniform_sample_matches_rows_and_checks_batch_size():
    st = ReplayStorage.local(100, OBS, ACT)
    sampler = UniformSampler(st, seed=1)
    sampler.add(*chunk(0, 50))
    with pytest.raises(ValueError, match="only 50 stored"):
        sampler.sample(51)
    batch = sampler.sample(50)
    assert batch.slots.max() < 50
    np.testing.assert_array_equal(batch.reward, batch.slots)
    np.testing.assert_array_equal(batch.action[:, 1], batch.slots)
    np.testing.assert_array_equal(batch.terminated, batch.slots % 2)
    assert batch.weights.dtype == np.float32 and np.all(batch.weights == 1)
    counts = np.bincount(np.concatenate([sampler.sample(50).slots for _ in range(400)]), minlength=50)
    assert counts.min() > 250 and counts.max() < 550  # 400 expected per slot


def _exit_now() -> None:
    pass


def test_one_writer_process_and_takeover_from_a_dead_one():
    st = ReplayStorage.local(8, OBS, ACT)
    st._header[6] = os.getppid()  # pretend a live other process is the writer
    with pytest.raises(RuntimeError, match="already has a writer"):
        st.add(*chunk(0, 1))
    proc = mp.get_context("spawn").Process(target=_exit_now)
    proc.start()
    proc.join()
    st._header[6] = proc.pid  # a writer that died
    st.add(*chunk(0, 1))
    assert st.writer_pid() == os.getpid()
    st.release_writer()
    assert st.writer_pid() == 0
