"""Stats block: each process writes its own row; the supervisor/monitor reads all rows; native words."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from spreeze_like.ipc import Segment, StatsBlock, new_run_id, segment_name
from spreeze_like.native import _native

CTX = mp.get_context("spawn")
SCHEMA = {
    "supervisor": ["restarts"],
    "sampler-0": {"env_steps": "i8", "episodes": "i8", "sps": "f8"},
    "sampler-1": {"env_steps": "i8", "episodes": "i8", "sps": "f8"},
}


def _sampler(parent: int, name: str, role: str, steps: int) -> None:
    from spreeze_like.ipc import child_setup

    child_setup(parent)
    row = StatsBlock.attach(name).role(role)
    row.claim()
    row.set_state(1)
    for i in range(steps):
        row.add("env_steps")
        if i % 100 == 99:
            row.add("episodes")
            row.beat()
    row.set("sps", 1234.5)
    row.set_state(2)


@pytest.mark.multiproc
def test_each_process_writes_its_row_monitor_reads_all():
    block = StatsBlock.create(segment_name(new_run_id(), "ctl"), SCHEMA)
    me = os.getpid()
    procs = [CTX.Process(target=_sampler, args=(me, block.name, f"sampler-{i}", 5000 * (i + 1))) for i in range(2)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        snap = block.snapshot()
        for i, p in enumerate(procs):
            row = snap[f"sampler-{i}"]
            assert row["pid"] == p.pid and row["state"] == 2
            assert row["env_steps"] == 5000 * (i + 1) and row["episodes"] == 50 * (i + 1)
            assert row["beats"] == 1 + 50 * (i + 1)
            assert row["sps"] == 1234.5 and isinstance(row["env_steps"], int)
            assert 0 <= row["heartbeat_age_s"] < 60
        assert snap["supervisor"]["pid"] == 0 and snap["supervisor"]["heartbeat_age_s"] == float("inf")
        sup = block.role("supervisor")
        sup.claim()
        sup.add("restarts", 2)
        assert block.stale_roles(1e-9) == ["supervisor", "sampler-0", "sampler-1"]
        assert block.stale_roles(60.0) == []
        assert block.heartbeat_age("supervisor") < 60 and block.pid("supervisor") == me
        with pytest.raises(KeyError, match="no role"):
            block.role("critic")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
        block.close()
        block.unlink()


def test_attach_reads_schema_and_rows_are_cache_line_aligned():
    block = StatsBlock.create(segment_name(new_run_id(), "ctl"), SCHEMA)
    other = StatsBlock.attach(block.name)
    try:
        assert other.schema == {r: (c if isinstance(c, dict) else dict.fromkeys(c, "f8")) for r, c in SCHEMA.items()}
        for role in SCHEMA:
            assert block.role(role)._i64.ctypes.data % 64 == 0
        other.role("sampler-1").add("sps", 0.5)
        assert block.role("sampler-1").get("sps") == 0.5
        with pytest.raises(ValueError, match="'f8' or 'i8'"):
            StatsBlock.create(segment_name(new_run_id(), "ctl"), {"x": {"c": "f4"}})
    finally:
        other.close()
        block.close()
        block.unlink()


def test_native_word_primitives():
    with Segment.create(segment_name(new_run_id(), "test"), 4096) as seg:
        buf = seg.mmap
        _native.store_u64(buf, 64, 41)
        assert _native.fetch_add_u64(buf, 64, 1) == 41
        assert _native.load_u64(buf, 64) == 42
        assert seg.ndarray(np.uint64, 1, 64)[0] == 42  # the same word numpy sees
        _native.fence_acquire()
        _native.fence_release()
        _native.fence_seq_cst()
        with pytest.raises(ValueError, match="aligned"):
            _native.load_u64(buf, 3)
        with pytest.raises(ValueError, match="inside the buffer"):
            _native.store_u64(buf, 4096, 1)
        with pytest.raises(BufferError):
            _native.store_u64(bytes(8), 0, 1)  # read-only buffer


def test_stale_heartbeat_is_seen():
    block = StatsBlock.create(segment_name(new_run_id(), "ctl"), {"actor": []})
    try:
        row = block.role("actor")
        row.claim()
        time.sleep(0.05)
        assert block.stale_roles(0.04) == ["actor"]
        row.beat()
        assert block.stale_roles(30.0) == []  # generous: a loaded CI machine may pause us for a while
    finally:
        block.close()
        block.unlink()
