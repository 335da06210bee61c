"""``procs/shutdown.drain_leftovers`` in one process over real segments: at a stop, what the samplers wrote
to their rings after the critic's last drain goes into replay before ``--save-replay`` writes it.

The end-to-end case (a real stop, the critic frozen so that records are left) is in test_save_replay.py;
here the parts a run reaches only by chance: the read cursor a reader that died left in shared memory,
prioritized rows, and the two refusals (a ring with corrupt counters, a storage another live process still
writes), each one line with the replay left as the critic left it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from spreeze_like.ipc import Ring
from spreeze_like.ipc.naming import new_run_id
from spreeze_like.ipc.ring import _WRITE_SEQ_OFF
from spreeze_like.native import _native
from spreeze_like.procs.control import parallel_schema
from spreeze_like.procs.segments import RunSegments
from spreeze_like.procs.shutdown import drain_leftovers

OBS, ACT, RING = 3, 1, 64


@pytest.fixture(params=[False, True], ids=["uniform", "prioritized"])
def run(request):
    plan = RunSegments.plan(new_run_id(), 2, request.param, 1000, OBS, ACT, RING, 10, 20)
    owned = plan.create(parallel_schema(2), tree_seed=0)
    lines: list[str] = []
    sup = SimpleNamespace(plan=plan, owned=owned, block=owned.stats, say=lines.append, lines=lines)
    try:
        yield sup
    finally:
        owned.unlink_all()


def _records(plan: RunSegments, first: int, n: int) -> np.ndarray:
    rows = np.zeros((n, plan.layout.width), dtype=np.float32)
    plan.layout.unpack(rows)["reward"][:] = np.arange(first, first + n)  # each record's number, to find it again
    return rows


def _write(sup, index: int, first: int, n: int) -> None:
    ring = Ring.attach(sup.plan.rings[index], "writer")
    ring.write(_records(sup.plan, first, n))
    ring.close()


def test_every_record_left_goes_into_replay_from_where_the_dead_reader_stopped(run):
    _write(run, 0, 0, 40)
    _write(run, 1, 100, 30)
    critic = Ring.attach(run.plan.rings[0], "reader")  # the critic drained ring 0's first 25, then stopped
    run.owned.storage().add(*(np.zeros((25, d), np.float32) for d in (OBS, ACT, 1, OBS, 1, 1)))
    critic.release(25)
    critic.close()
    assert drain_leftovers(run) == 15 + 30 and run.lines == []
    storage = run.owned.storage()
    assert storage.size == 25 + 45 and storage.writer_pid() == 0  # the writer role given back
    assert sorted(storage.reward[25:70]) == [*range(25, 40), *range(100, 130)]
    assert run.block.role("replay").get("inserted") == 45  # acknowledged, as the feeder counts
    assert all(Ring.attach(name, "reader").available() == 0 for name in run.plan.rings)
    if run.plan.prio is not None:  # new rows get the largest priority, as the feeder gives them
        tree = run.owned.tree()
        assert (np.asarray(tree.get(np.arange(25, 70))) == tree.max_priority()).all()
    assert drain_leftovers(run) == 0  # nothing twice


def test_a_ring_with_corrupt_counters_is_one_line_and_leaves_the_replay_as_it_was(run):
    _write(run, 0, 0, 10)
    _native.store_u64(run.owned.rings[0]._seg.mmap, _WRITE_SEQ_OFF, 2**40)  # another process wrote into it
    assert drain_leftovers(run) == 0
    assert len(run.lines) == 1 and run.lines[0].startswith("[spreeze] the records left in the sampler rings are not")
    assert "corrupt counters" in run.lines[0] and "\n" not in run.lines[0]
    assert run.owned.storage().size == 0 and run.owned.storage().writer_pid() == 0


def test_a_storage_another_live_process_writes_is_left_alone(run):
    _write(run, 0, 0, 10)
    code = ("import sys\nfrom spreeze_like.ipc.segment import Segment\n"
            "from spreeze_like.procs.segments import RunSegments\nimport numpy as np\n"
            f"plan = RunSegments.plan({run.plan.run_id!r}, 2, {run.plan.prio is not None}, 1000, {OBS}, {ACT}, {RING}, "
            f"10, 20, creator_pid={os.getpid()})\n"
            "s = plan.storage_over(Segment.attach(plan.replay).mmap)\n"
            f"s.add(*(np.zeros((1, d), np.float32) for d in {(OBS, ACT, 1, OBS, 1, 1)}))\n"
            "print('claimed', flush=True)\nsys.stdin.readline()\n")
    holder = subprocess.Popen(  # claims the writer role by adding a row, then waits
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "claimed\n", holder.stderr.read()
        assert drain_leftovers(run) == 0
    finally:
        holder.communicate("", timeout=30)
    assert len(run.lines) == 1 and f"already has a writer (pid {holder.pid})" in run.lines[0]
    assert run.owned.storage().size == 1
