"""The sampler's ring sink: backpressure without hanging, and the ring feeder's batched drain."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from spreeze_like.ipc import Ring, StatsBlock, new_run_id, segment_name
from spreeze_like.procs.control import CONTROL, EXIT, Control, parallel_schema
from spreeze_like.procs.feeder import RingFeeder
from spreeze_like.procs.sampler_proc import RingSink, StopSampling
from spreeze_like.replay import ReplayStorage, UniformSampler
from spreeze_like.roles.replay_writer import ReplayWriter
from spreeze_like.transition import TransitionLayout

LAYOUT = TransitionLayout(3, 1)


@pytest.fixture
def shm():
    run = new_run_id()
    block = StatsBlock.create(segment_name(run, "ctl"), parallel_schema(1))
    ring = Ring.create(segment_name(run, "ring"), 4, LAYOUT.width, role="writer")
    reader = Ring.attach(ring.name, "reader")
    yield block, ring, reader
    reader.close()
    for handle in (block, ring):
        handle.close()
        handle.unlink()


def rows(n: int, start: int = 0) -> np.ndarray:
    out = np.zeros((n, LAYOUT.width), np.float32)
    out[:, 0] = np.arange(start, start + n)  # obs[0] numbers the transition
    return out


def test_full_ring_waits_for_the_feeder_and_loses_nothing(shm):
    block, ring, reader = shm
    storage = ReplayStorage.local(64, 3, 1)
    writer = ReplayWriter(UniformSampler(storage, seed=0), LAYOUT, block.role("replay"))
    feeder = RingFeeder([reader], writer, block.role("critic-learner"))
    sink = RingSink(ring, Control(block), block.role("sampler-0"))

    def slow_feeder() -> None:
        while storage.inserted < 20:
            time.sleep(0.01)
            feeder.drain()

    thread = threading.Thread(target=slow_feeder)
    thread.start()
    for k in range(5):
        sink.write(rows(4, 4 * k))  # the ring holds 4: every write after the first waits for a drain
    thread.join(timeout=10)
    assert storage.inserted == 20 and feeder.empty()
    np.testing.assert_array_equal(storage.obs[:20, 0], np.arange(20))
    sampler = block.role("sampler-0")
    assert sampler.get("ring_waits") >= 1 and sampler.get("ring_wait_s") > 0
    assert block.role("critic-learner").get("drained_rows") == 20


def test_exit_phase_frees_a_writer_blocked_on_a_full_ring(shm):
    block, ring, _ = shm
    sink = RingSink(ring, Control(block), block.role("sampler-0"))
    sink.write(rows(4))  # full now, and nobody drains
    threading.Timer(0.3, lambda: block.role(CONTROL).set("phase", float(EXIT))).start()
    t0 = time.monotonic()
    with pytest.raises(StopSampling):
        sink.write(rows(1, 4))
    assert time.monotonic() - t0 < 5.0
