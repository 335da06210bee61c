"""The device mirror of replay: equal to the host storage slot for slot, under wrap-around, gaps
larger than the capacity, torn rows, and a writer process lapping the storage while it syncs.

Rows encode their write index in every field (tests/replay/test_storage.py ``chunk``), so a row
that is torn, misplaced or never written is caught by value.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import pytest
import torch

from spreeze_like.native import _native
from spreeze_like.replay import ReplayStorage
from spreeze_like.replay.device_replay import ALL_COLUMNS, DeviceReplay, device_replay_bytes
from tests.replay.helpers import attach_buffer, shared_buffer
from tests.replay.test_storage import ACT, OBS, chunk

DEVICES = [
    "cpu",
    pytest.param(
        "cuda:0",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")],
    ),
]


def _host(storage: ReplayStorage, name: str) -> np.ndarray:
    return getattr(storage, name)[: storage.size]


def assert_mirror_equals_host(mirror: DeviceReplay, storage: ReplayStorage) -> None:
    assert mirror.seen == storage.inserted and mirror.size == storage.size
    for name in mirror.columns:
        got = mirror.column(name)[: mirror.size].cpu().numpy()
        np.testing.assert_array_equal(got, _host(storage, name), err_msg=name)


def assert_rows_are_written_rows(mirror: DeviceReplay, limit: int) -> None:
    """Every mirrored row is one complete row the writer wrote (row r sits in slot r % capacity)."""
    cols = {name: mirror.column(name)[: mirror.size].cpu().numpy() for name in ALL_COLUMNS}
    row = cols["reward"]
    slots = np.arange(mirror.size)
    assert np.all(row == np.floor(row)) and np.all((row >= 0) & (row < limit)), "reward is not a row number"
    assert np.all(row.astype(np.int64) % mirror.capacity == slots), "row in the wrong slot"
    assert np.all(cols["obs"] == row[:, None]) and np.all(cols["next_obs"] == row[:, None] + 0.5), "torn obs"
    assert np.all(cols["action"] == row[:, None]) and np.all(cols["terminated"] == row % 2), "torn action"


@pytest.mark.parametrize("device", DEVICES)
def test_mirror_follows_appends_wraparound_and_gap_larger_than_capacity(device):
    cap = 50
    storage = ReplayStorage.local(cap, OBS, ACT)
    mirror = DeviceReplay(cap, OBS, ACT, device, chunk_rows=16)  # several chunks per sync
    assert mirror.sync_from(storage) == 0 and mirror.size == 0
    storage.add(*chunk(0, 30))
    assert mirror.sync_from(storage) == 30
    assert_mirror_equals_host(mirror, storage)
    storage.add(*chunk(30, 35))  # wraps: slots 30..49, then 0..14 overwritten
    assert mirror.sync_from(storage) == 35
    assert_mirror_equals_host(mirror, storage)
    assert mirror.sync_from(storage) == 0  # nothing new
    for start in range(65, 65 + 3 * cap, 25):  # 150 rows: the gap laps the capacity three times
        storage.add(*chunk(start, 25))
    assert mirror.sync_from(storage) == cap  # only the last capacity rows are read
    assert_mirror_equals_host(mirror, storage)
    assert mirror.seen == 65 + 3 * cap and mirror.torn_rows == 0


@pytest.mark.parametrize("device", DEVICES)
def test_partial_columns_and_a_mirror_started_late(device):
    storage = ReplayStorage.local(64, OBS, ACT)
    storage.add(*chunk(0, 64))
    storage.add(*chunk(64, 10))
    actor = DeviceReplay(64, OBS, ACT, device, columns=("obs",))
    assert actor.sync_from(storage) == 64
    assert actor.columns == ("obs",)
    assert_mirror_equals_host(actor, storage)
    out = {"obs": torch.empty(4, OBS, device=device), "weights": torch.empty(4, device=device)}
    actor.gather_into(torch.tensor([0, 9, 10, 63], device=device), out)  # "weights" is not a column: left alone
    np.testing.assert_array_equal(out["obs"].cpu().numpy(), storage.obs[[0, 9, 10, 63]])
    with pytest.raises(KeyError, match="not mirrored"):
        actor.gather_into(torch.tensor([0], device=device), {"reward": torch.empty(1, device=device)})


@pytest.mark.parametrize("device", DEVICES)
def test_gather_returns_host_rows_and_upload_round_trips(device):
    storage = ReplayStorage.local(100, OBS, ACT)
    storage.add(*chunk(0, 100))
    storage.add(*chunk(100, 37))
    mirror = DeviceReplay(100, OBS, ACT, device)
    mirror.sync_from(storage)
    slots = np.array([0, 36, 37, 99, 5, 5], np.int64)
    weights = np.linspace(0.1, 1.0, slots.size).astype(np.float32)
    indices, w = mirror.upload_indices(slots, weights)
    assert indices.device == mirror.device and indices.dtype == torch.int64
    np.testing.assert_array_equal(indices.cpu().numpy(), slots)
    np.testing.assert_array_equal(w.cpu().numpy(), weights)
    host = storage.gather(slots)
    got = mirror.gather(indices)
    out = {name: torch.full_like(got[name], -1.0) for name in ALL_COLUMNS}
    mirror.gather_into(indices, out)
    for name in ALL_COLUMNS:
        np.testing.assert_array_equal(got[name].cpu().numpy(), getattr(host, name), err_msg=name)
        np.testing.assert_array_equal(out[name].cpu().numpy(), getattr(host, name), err_msg=name)
    assert out["reward"].shape == (slots.size,)
    # one gather of packed rows into a packed batch of the same layout gives the same columns
    packed = torch.full((slots.size, mirror.width), -1.0, device=mirror.device)
    mirror.gather_packed(indices, packed)
    for name, first, width in mirror.layout:
        column = packed[:, first] if name in ("reward", "terminated") else packed[:, first : first + width]
        np.testing.assert_array_equal(column.cpu().numpy(), getattr(host, name), err_msg=name)
    assert mirror.width == 2 * OBS + ACT + 2
    only, none = mirror.upload_indices(np.arange(3))  # no weights: uniform use of the same path
    assert none is None and only.tolist() == [0, 1, 2]
    # Reused staging buffers: later uploads do not change tensors an earlier call returned.
    first, _ = mirror.upload_indices(np.array([1, 2], np.int64))
    for k in range(5):
        mirror.upload_indices(np.full(2000, k, np.int64), np.ones(2000, np.float32))  # grows the buffers
    assert first.tolist() == [1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_upload_rejects_slots_the_mirror_does_not_hold(device):
    storage = ReplayStorage.local(100, OBS, ACT)
    storage.add(*chunk(0, 10))
    mirror = DeviceReplay(100, OBS, ACT, device)
    mirror.sync_from(storage)
    with pytest.raises(ValueError, match="sync_from"):
        mirror.upload_indices(np.array([3, 10]))
    with pytest.raises(ValueError, match="sync_from"):
        mirror.upload_indices(np.array([-1]))
    with pytest.raises(ValueError, match="weights"):
        mirror.upload_indices(np.array([1, 2]), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="shape"):
        DeviceReplay(99, OBS, ACT, device).sync_from(storage)


@pytest.mark.parametrize("device", DEVICES)
def test_uniform_indices_in_range_reproducible_and_uniform(device):
    storage = ReplayStorage.local(1000, OBS, ACT)
    storage.add(*chunk(0, 40))
    a, b = DeviceReplay(1000, OBS, ACT, device, seed=7), DeviceReplay(1000, OBS, ACT, device, seed=7)
    a.sync_from(storage)
    b.sync_from(storage)
    with pytest.raises(ValueError, match="empty"):
        DeviceReplay(1000, OBS, ACT, device).sample_uniform(8)
    draws = torch.cat([a.sample_uniform(1000) for _ in range(40)])
    assert draws.device == a.device and draws.dtype == torch.int64
    assert torch.equal(draws, torch.cat([b.sample_uniform(1000) for _ in range(40)]))
    other = DeviceReplay(1000, OBS, ACT, device, seed=8)
    other.sync_from(storage)
    assert not torch.equal(draws[:1000], other.sample_uniform(1000))
    counts = np.bincount(draws.cpu().numpy(), minlength=40)
    assert counts.size == 40 and counts.min() > 0  # every index drawn, none at or past size
    expected = draws.numel() / 40
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 80.0  # 39 degrees of freedom: the 99.99th percentile is about 80


@pytest.mark.parametrize("device", DEVICES)
def test_uniform_draws_follow_the_synced_size(device):
    """The draw reads the size from the device tensor each sync refreshes: one row -> only slot 0; more
    rows synced -> draws cover them; a full ring -> the whole capacity, never past it."""
    storage = ReplayStorage.local(64, OBS, ACT)
    mirror = DeviceReplay(64, OBS, ACT, device, seed=3)
    storage.add(*chunk(0, 1))
    mirror.sync_from(storage)
    assert mirror.sample_uniform(500).unique().tolist() == [0]
    storage.add(*chunk(1, 9))
    mirror.sync_from(storage)
    assert sorted(mirror.sample_uniform(2000).unique().tolist()) == list(range(10))
    for start in (10, 60, 110):  # laps the ring: size stays 64
        storage.add(*chunk(start, 50))
    mirror.sync_from(storage)
    assert sorted(mirror.sample_uniform(5000).unique().tolist()) == list(range(64))
    out = torch.full((16, mirror.width), -1.0, device=mirror.device)
    mirror.draw_uniform_into(out)
    assert bool((out != -1.0).all())


@pytest.mark.parametrize("device", DEVICES)
def test_torn_row_is_not_copied_and_is_copied_by_the_next_sync(device):
    cap = 8
    storage = ReplayStorage.local(cap, OBS, ACT)
    storage.add(*chunk(0, cap))
    mirror = DeviceReplay(cap, OBS, ACT, device)
    mirror.sync_from(storage)
    storage.add(*chunk(8, 8))
    storage.add(*chunk(16, 2))  # rows 8..17 published; the writer's next row (18) goes to slot 2
    # The writer is mid-way through row 18: slot 2's generation is odd and half of its obs is new.
    _native.generations_begin_write(storage.generations, np.array([2], np.int64))
    storage.obs[2, 0] = 18.0
    assert mirror.sync_from(storage) == cap - 1  # rows 10..17 except the torn one
    assert mirror.torn_rows == 1 and mirror.skipped_rows == 1
    assert mirror.column("obs")[2].tolist() == [2.0] * OBS  # slot 2 keeps its older, complete row
    assert mirror.column("reward")[2].item() == 2.0
    _native.generations_end_write(storage.generations, np.array([2], np.int64))  # (abandon, then redo it)
    storage.add(*chunk(18, 1))
    assert mirror.sync_from(storage) == 1
    assert_mirror_equals_host(mirror, storage)


@pytest.mark.parametrize("device", DEVICES)
def test_an_unfilled_slot_waits_for_the_writer_to_complete_its_row(device):
    cap = 8
    storage = ReplayStorage.local(cap, OBS, ACT)
    storage.add(*chunk(0, cap))
    slot = np.array([2], np.int64)
    _native.generations_begin_write(storage.generations, slot)  # the writer laps: row 10 half-written
    storage.obs[2, 0] = 10.0

    def finish_row_10() -> None:
        for name, value in zip(ALL_COLUMNS, chunk(10, 1)):
            getattr(storage, name)[2] = value[0]
        _native.generations_end_write(storage.generations, slot)

    finisher = threading.Timer(0.05, finish_row_10)
    finisher.start()
    mirror = DeviceReplay(cap, OBS, ACT, device)  # a fresh mirror: slot 2 holds no older row
    try:
        assert mirror.sync_from(storage) == cap
    finally:
        finisher.join()
    assert mirror.torn_rows >= 1 and mirror.skipped_rows == 0
    assert mirror.column("reward")[2].item() == 10.0  # the completed newer row, not zeros, not torn
    assert mirror.column("obs")[2].tolist() == [10.0] * OBS
    # A writer that died mid-write: the wait is bounded and the slot is reported as skipped.
    _native.generations_begin_write(storage.generations, np.array([5], np.int64))
    late = DeviceReplay(cap, OBS, ACT, device)
    assert late.sync_from(storage) == cap - 1 and late.skipped_rows == 1
    assert late.column("reward")[5].item() == 0.0


def test_device_replay_bytes_counts_the_columns():
    assert device_replay_bytes(1000, 17, 6) == 4 * 1000 * (17 + 6 + 1 + 17 + 1)
    assert device_replay_bytes(1000, 17, 6, ("obs",)) == 4 * 1000 * 17
    mirror = DeviceReplay(1000, 17, 6, "cpu", columns=("obs", "reward"))
    held = sum(mirror.column(c).numel() * 4 for c in mirror.columns)
    assert held == device_replay_bytes(1000, 17, 6, ("obs", "reward"))
    with pytest.raises(ValueError, match="columns"):
        device_replay_bytes(10, 3, 2, ("obs", "truncated"))


# --- a writer process lapping the storage while this process syncs --------------------------------

CONCURRENT_CAP = 256
WRITER_CHUNK = 97  # not a divisor of the capacity: chunks wrap at varying slots
ROW_LIMIT = 1 << 22  # float32 holds row + 0.5 exactly below 2^23
RUN_SECONDS = 2.0


def _writer(name: str, ready, stop, written) -> None:
    storage = ReplayStorage(attach_buffer(name), CONCURRENT_CAP, OBS, ACT, create=False)
    ready.set()
    row = 0
    while not stop.is_set() and row + WRITER_CHUNK < ROW_LIMIT:
        storage.add(*chunk(row, WRITER_CHUNK))  # bursts lap the small storage between two syncs ...
        row += WRITER_CHUNK
        if (row // WRITER_CHUNK) % 64 == 0:
            time.sleep(0.005)  # ... and pauses let some syncs see gaps below the capacity
    written.value = row
    storage.release_writer()


@pytest.mark.multiproc
@pytest.mark.parametrize("device", DEVICES)
def test_sync_while_a_writer_process_laps_the_storage(device):
    ctx = mp.get_context("spawn")
    with shared_buffer(ReplayStorage.nbytes(CONCURRENT_CAP, OBS, ACT), "replay") as (name, mem):
        storage = ReplayStorage(mem, CONCURRENT_CAP, OBS, ACT, create=True)
        mirror = DeviceReplay(CONCURRENT_CAP, OBS, ACT, device, chunk_rows=64)
        ready, stop, written = ctx.Event(), ctx.Event(), ctx.Value("q", -1)
        writer = ctx.Process(target=_writer, args=(name, ready, stop, written))
        writer.start()
        try:
            assert ready.wait(120), "the writer process did not start"
            start = time.monotonic()
            syncs = laps = 0
            while time.monotonic() < start + RUN_SECONDS and writer.is_alive():
                before = mirror.seen
                mirror.sync_from(storage)
                laps += mirror.seen - before > CONCURRENT_CAP
                syncs += int(mirror.seen > before)
                assert_rows_are_written_rows(mirror, ROW_LIMIT)
        finally:
            stop.set()
            writer.join(30)
        assert writer.exitcode == 0
        assert written.value == storage.inserted > 4 * CONCURRENT_CAP  # the writer lapped many times
        assert syncs >= 10, f"only {syncs} syncs saw new rows"
        mirror.sync_from(storage)  # the writer is done: nothing can be torn now
        assert_mirror_equals_host(mirror, storage)
        assert_rows_are_written_rows(mirror, ROW_LIMIT)
        print(f"syncs {syncs}, gaps over capacity {laps}, torn {mirror.torn_rows}, skipped {mirror.skipped_rows}")
        del storage
