"""Segments and names: create/attach/views/unlink, the sweep, and the bad-input errors."""

from __future__ import annotations

import fcntl
import mmap
import os
import subprocess
import sys

import numpy as np
import pytest

from spreeze_like.errors import ShmError
from spreeze_like.ipc import (
    ArrayLayout,
    Segment,
    list_our_files,
    new_run_id,
    parse_name,
    segment_name,
    shm_free_bytes,
    sweep_dead_segments,
    unlink_run,
)
from spreeze_like.ipc.naming import shm_prefix


def test_name_round_trip():
    run = new_run_id()
    name = segment_name(run, "w-actor", 3)
    assert name == f"/{shm_prefix()}.{run}.{os.getpid()}.w-actor.3"
    parsed = parse_name(name)
    assert parsed is not None and parsed.name == name
    assert (parsed.run_id, parsed.creator_pid, parsed.kind, parsed.index) == (run, os.getpid(), "w-actor", 3)
    assert parse_name(name.lstrip("/")) == parsed
    assert parse_name("sem." + name.lstrip("/")) == parsed
    for foreign in ("/spz.abc.notapid.ring.0", "/psm_123", "/spz.a.b", "spz.run.12.Ring.0", "/spz.r.1.ring.0.x"):
        assert parse_name(foreign) is None
    with pytest.raises(ValueError):
        segment_name("a.b", "ring")
    with pytest.raises(ValueError):
        segment_name(run, "Ring")
    assert new_run_id() != new_run_id()


def test_create_attach_views_unlink():
    name = segment_name(new_run_id(), "test")
    seg = Segment.create(name, 10_000)
    try:
        assert seg.is_owner and seg.size == 10_000
        st = os.stat("/dev/shm/" + name[1:])
        assert st.st_mode & 0o777 == 0o600
        assert st.st_blocks * 512 >= 10_000  # space reserved up front, not lazily
        a = seg.ndarray(np.float64, (10, 4), offset=64)
        assert not a.any()  # fresh segment reads as zeros
        a[:] = np.arange(40).reshape(10, 4)
        other = Segment.attach(name)
        b = other.ndarray(np.float64, (10, 4), offset=64)
        np.testing.assert_array_equal(b, a)
        b[0, 0] = -1.0
        assert a[0, 0] == -1.0  # one memory, two mappings
        with pytest.raises(ValueError, match="aligned"):
            seg.ndarray(np.float64, 2, offset=4)
        with pytest.raises(ValueError, match="past the end"):
            seg.ndarray(np.float64, 2000, offset=0)
        del b
        other.close()
        other.close()  # idempotent
        assert other.closed
    finally:
        seg.close()  # `a` still alive: mapping released later, no error
        seg.unlink()
    assert not os.path.exists("/dev/shm/" + name[1:])
    assert a[0, 0] == -1.0  # views outlive close() safely


def test_array_layout_aligns_fields():
    n = 37
    layout = ArrayLayout({"obs": (np.float32, (n, 17)), "rew": (np.float32, n), "idx": (np.int64, (n,))})
    with Segment.create(segment_name(new_run_id(), "layout"), layout.nbytes) as seg:
        views = layout.views(seg)
        for key, arr in views.items():
            assert arr.ctypes.data % 64 == 0, key
        views["obs"][:] = 1.0
        views["rew"][:] = 2.0
        views["idx"][:] = 3
        assert views["obs"].sum() == n * 17 and views["rew"].sum() == 2 * n and views["idx"].sum() == 3 * n


def test_name_clash_is_one_line_error_and_keeps_original():
    name = segment_name(new_run_id(), "clash")
    with Segment.create(name, 4096) as seg:
        seg.ndarray(np.uint8, 4)[:] = 7
        with pytest.raises(ShmError) as info:
            Segment.create(name, 4096)
        msg = str(info.value)
        assert "\n" not in msg and name in msg and "already exists" in msg
        assert Segment.attach(name).ndarray(np.uint8, 4)[0] == 7  # the first one is untouched


def test_full_dev_shm_fails_at_once_and_leaves_nothing():
    free, total = shm_free_bytes()
    name = segment_name(new_run_id(), "huge")
    with pytest.raises(ShmError) as info:
        Segment.create(name, total + free + 2**30)  # more than /dev/shm can ever hold
    msg = str(info.value)
    assert "\n" not in msg and name in msg and "/dev/shm" in msg and "enlarge" in msg
    assert not os.path.exists("/dev/shm/" + name[1:])


def test_attach_missing_is_one_line_error():
    name = segment_name(new_run_id(), "missing")
    with pytest.raises(ShmError, match="does not exist") as info:
        Segment.attach(name)
    assert "\n" not in str(info.value)


def test_child_may_not_unlink():
    name = segment_name(new_run_id(), "own")
    code = (
        "import sys; from spreeze_like.ipc import Segment; from spreeze_like.errors import ShmError\n"
        "s = Segment.attach(sys.argv[1])\n"
        "try:\n    s.unlink()\nexcept ShmError as e:\n    print(e)\n"
    )
    with Segment.create(name, 4096):
        proc = subprocess.run(
            [sys.executable, "-c", code, name], check=False, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert "only its creator" in proc.stdout
        assert os.path.exists("/dev/shm/" + name[1:])


_ORPHAN_MAKER = """
import sys
from spreeze_like.ipc import Segment, segment_name
import posix_ipc
run = sys.argv[1]
Segment.create(segment_name(run, "ring", 0), 4096)
posix_ipc.Semaphore(segment_name(run, "sem", 0), flags=posix_ipc.O_CREX)
import os
os.kill(os.getpid(), 9)  # die without cleanup
"""


def test_sweep_removes_dead_creators_only(tmp_path):
    # A private directory standing in for /dev/shm, so that no concurrent session's sweep interferes.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True)
    dead_pid = int(dead.stdout)
    run = new_run_id()
    dead_names = [segment_name(run, "ring", 0, dead_pid), segment_name(run, "w-actor", 1, dead_pid)]
    locked, mapped = segment_name(run, "ring", 2), segment_name(run, "ring", 3)  # live: ours, held or mapped
    reused = segment_name(run, "ctl", 0, creator_pid=1)  # pid alive here (init), yet neither holds nor maps it
    files = [n[1:] for n in [*dead_names, locked, mapped, reused]] + ["sem." + dead_names[0][1:], "unrelated.file"]
    files.append("spz.junk")
    for f in files:
        (tmp_path / f).write_bytes(b"x" * 64)
    with open(tmp_path / locked[1:], "rb") as held, open(tmp_path / mapped[1:], "r+b") as m:
        fcntl.flock(held.fileno(), fcntl.LOCK_SH)  # what Segment.create holds until the unlink
        view = mmap.mmap(m.fileno(), 64)  # a creator that holds no lock, but maps its segment
        try:
            removed = sweep_dead_segments(str(tmp_path))
        finally:
            view.close()
    assert removed == sorted([n[1:] for n in [*dead_names, reused]] + ["sem." + dead_names[0][1:]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([locked[1:], mapped[1:], "unrelated.file", "spz.junk"])
    assert unlink_run(run, shm_dir=str(tmp_path)) == [locked[1:], mapped[1:]]  # only this process's own


def test_sweep_on_dev_shm_after_sigkill():
    run = new_run_id()
    proc = subprocess.run([sys.executable, "-c", _ORPHAN_MAKER, run], check=False, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    mine = Segment.create(segment_name(run, "live"), 4096)  # a live creator's segment must survive
    try:
        sweep_dead_segments()  # (another session's start may have swept first: same result)
        assert list_our_files(run_id=run) == [mine.name[1:]]
    finally:
        mine.close()
    assert unlink_run(run) == [mine.name[1:]]
    assert list_our_files(run_id=run) == []


def test_atexit_unlinks_what_the_creator_forgot():
    run = new_run_id()
    code = (
        "import sys; from spreeze_like.ipc import Segment, segment_name\n"
        "s = Segment.create(segment_name(sys.argv[1], 'ring'), 4096)\n"
        "raise RuntimeError('boom')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, run], check=False, capture_output=True, timeout=60)
    assert proc.returncode == 1 and b"boom" in proc.stderr
    assert list_our_files(run_id=run) == []
