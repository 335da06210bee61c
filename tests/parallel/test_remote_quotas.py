"""Remote sampler rows on the desktop side (issue 16), without processes: quota arithmetic, the lead and ring
sizes, the stats schema, the local sampler loop reading its quota from the control row, the bridge's hang
limit, the monitor's remote scalars and status.json's remote_samplers."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spreeze_like.ipc import StatsBlock, new_run_id, segment_name
from spreeze_like.procs import pacing
from spreeze_like.procs.control import (
    CONTROL,
    DONE,
    EXIT,
    RAY_BRIDGE,
    WAITING,
    Control,
    Napper,
    parallel_schema,
    quota_slot,
)
from spreeze_like.procs.hangs import HangWatch
from spreeze_like.procs.sampler_proc import _loop
from spreeze_like.procs.segments import RunSegments
from spreeze_like.procs.status import write_status
from spreeze_like.remote.info_file import read_remote_info
from spreeze_like.roles.monitor import REMOTE_LAYOUT, Monitor, scalars_layout
from spreeze_like.roles.ports import LocalStatsBlock

from .helpers import scalars, text_tags


@given(remaining=st.integers(0, 10**6), rows=st.integers(2, 12), data=st.data())
def test_reassigning_an_abandoned_rows_quota_keeps_the_total(remaining, rows, data):
    quotas = pacing.sampler_quotas(remaining, rows)
    abandoned = data.draw(st.integers(0, rows - 1))
    taken = data.draw(st.integers(0, quotas[abandoned]))
    receivers = data.draw(st.lists(st.integers(0, rows - 1), unique=True, max_size=rows))
    new = pacing.reassign_quota(quotas, abandoned, taken, receivers)
    assert sum(new) == sum(quotas) == remaining
    real = [r for r in receivers if r != abandoned]
    left = quotas[abandoned] - taken
    if left == 0 or not real:
        assert new == quotas  # nothing to hand over, or nobody to take it: the caller decides
        return
    assert new[abandoned] == taken
    gains = [new[r] - quotas[r] for r in real]
    assert sum(gains) == left and max(gains) - min(gains) <= 1 and gains == sorted(gains, reverse=True)
    assert all(new[r] == quotas[r] for r in range(rows) if r not in real and r != abandoned)


def test_reassigning_by_example():
    # rows 0, 1 local; 2, 3 remote. Row 3 was given up after 100 of its 250 steps: 150 go to rows 0 and 1.
    assert pacing.reassign_quota([250, 250, 250, 250], 3, 100, [0, 1]) == [325, 325, 250, 100]
    assert pacing.reassign_quota([250, 250, 250, 251], 3, 100, [0, 1]) == [326, 325, 250, 100]  # odd step to the first
    assert pacing.reassign_quota([10, 10], 1, 10, [0]) == [10, 10]  # it had finished: nothing left
    assert pacing.reassign_quota([10, 10], 1, 3, []) == [10, 10]  # no receiver


def test_the_lead_and_the_rings_make_room_for_remote_batches():
    assert pacing.remote_lead(0, 2048) == 0 and pacing.remote_lead(3, 2048) == 3 * 2 * 2048
    # unchanged without remote samplers (a run without Ray keeps its ring sizes)
    assert [pacing.ring_capacity(pacing.default_lead(s, e), e) for s, e in [(1, 1), (4, 8), (32, 16)]] == \
        [pacing.ring_capacity(pacing.default_lead(s, e), e, 0) for s, e in [(1, 1), (4, 8), (32, 16)]]
    for batch in (256, 2048, 3000, 16384):
        cap = pacing.ring_capacity(64, 1, batch)
        assert cap >= 4 * batch and cap & (cap - 1) == 0  # two calls in flight plus two replies not yet drained


def test_segments_size_remote_rings_apart():
    plan = RunSegments.plan("r", 3, False, 1000, 3, 1, 256, 10, 20, creator_pid=1, remote_rows=2,
                            remote_ring_capacity=8192)
    assert len(plan.rings) == 3 and [plan.capacity_of(i) for i in range(3)] == [256, 8192, 8192]
    local_only = RunSegments.plan("r", 2, False, 1000, 3, 1, 256, 10, 20, creator_pid=1)
    assert [local_only.capacity_of(i) for i in range(2)] == [256, 256]


@pytest.mark.parametrize("rows", [1, 4])
def test_schema_has_a_quota_per_row_and_the_bridge_row_only_with_remote_samplers(rows):
    schema = parallel_schema(rows, bridge=True)
    assert [s for s in schema[CONTROL] if s.startswith("quota-")] == [quota_slot(i) for i in range(rows)]
    assert set(schema[RAY_BRIDGE]) == {"done", "connected", "cpu_s", "rows_written", "calls"}
    for i in range(rows):
        assert {"abandoned", "remote_restarts", "in_flight", "done"} <= set(schema[f"sampler-{i}"])
    assert RAY_BRIDGE not in parallel_schema(rows)


@pytest.fixture
def block():
    stats = StatsBlock.create(segment_name(new_run_id(), "ctl"), parallel_schema(2))
    yield stats
    stats.close()
    stats.unlink()


class CountingWorker:
    """Stands in for a SamplerWorker: each step adds one env step to its row."""

    def __init__(self, row) -> None:
        self.row = row

    def step(self) -> None:
        self.row.add("env_steps", 1)


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_a_local_sampler_reads_its_quota_every_loop_and_resumes_when_it_is_raised(block):
    """The sampler loop stops at quota-1, reports DONE, and steps again when the supervisor raises the quota."""
    control_row, row = block.role(CONTROL), block.role("sampler-1")
    control_row.set(quota_slot(1), 5.0)
    block.role("critic-learner").set("allowance", 1e9)
    sampler_rows = [block.role("sampler-0"), row]
    loop = threading.Thread(target=_loop, args=(CountingWorker(row), row, Control(block), sampler_rows,
                                                 block.role("critic-learner"), 1, Napper(max_s=1e-3), 1))
    loop.start()
    try:
        wait_until(lambda: row.get("done") == 1.0)
        assert row.get("env_steps") == 5
        time.sleep(0.05)
        assert row.get("env_steps") == 5  # done means done while the quota stands
        control_row.set(quota_slot(1), 9.0)  # what the supervisor does when a remote row is given up
        wait_until(lambda: row.get("env_steps") == 9 and row.get("done") == 1.0)
        assert block.snapshot()["sampler-1"]["state"] == DONE
    finally:
        control_row.set("phase", float(EXIT))
        loop.join(5)
    assert not loop.is_alive()
    assert block.role("sampler-0").get("env_steps") == 0  # another row's quota (0) is not this one's


def test_the_bridge_has_the_samplers_hang_limit():
    config = SimpleNamespace(sampler_hang_s=17.0, learner_hang_s=180.0, evaluator_hang_s=600.0)
    assert HangWatch(config, print).limit(RAY_BRIDGE) == 17.0 == HangWatch(config, print).limit("sampler-3")


def test_remote_info_is_read_defensively(tmp_path):
    assert read_remote_info(tmp_path) is None  # not written yet
    (tmp_path / "remote_samplers.json").write_text('{"samplers": {"sampler-1": {"node_ip": "10.')  # torn
    assert read_remote_info(tmp_path) is None
    (tmp_path / "remote_samplers.json").write_text("[1, 2]")  # not an object
    assert read_remote_info(tmp_path) is None
    (tmp_path / "remote_samplers.json").write_text('{"ray_address": "h:1", "samplers": {}}')
    assert read_remote_info(tmp_path) == {"ray_address": "h:1", "samplers": {}}


def test_status_json_carries_remote_samplers(tmp_path):
    info = {"ray_address": "h:1", "samplers": {"sampler-1": {"node_ip": "10.0.0.2", "state": "running"}}}
    write_status(tmp_path, "run", "running", 10, 100, None, None, {}, {}, extra={"remote_samplers": info})
    assert json.loads((tmp_path / "status.json").read_text())["remote_samplers"] == info
    write_status(tmp_path, "run", "running", 10, 100, None, None, {}, {})
    assert "remote_samplers" not in json.loads((tmp_path / "status.json").read_text())


def test_the_monitor_writes_each_remote_rows_scalars_and_node(tmp_path):
    class Clock:
        t = 100.0

        def __call__(self) -> float:
            return self.t

    stats, clock = LocalStatsBlock(parallel_schema(3, bridge=True)), Clock()
    config = {"env": "X", "seed": 1, "serial": False, "samplers": 1, "remote_samplers": 2}
    monitor = Monitor(tmp_path, stats.snapshot, config, total_steps=1000, tb_interval=1.0, log_interval=0,
                      print_fn=lambda line: None, clock=clock)
    remote = stats.role("sampler-1")
    remote.add("env_steps", 300)
    remote.add("policy_lag.sum", 6.0)
    remote.add("policy_lag.count", 3.0)
    remote.set("remote_restarts", 2.0)
    stats.role("sampler-0").add("env_steps", 100)
    (tmp_path / "remote_samplers.json").write_text(json.dumps({"ray_address": "h:1", "samplers": {
        "sampler-1": {"node_ip": "10.0.0.2", "node_id": "abc", "policy_lag": 9.0},
        "sampler-2": {"node_ip": "10.0.0.3", "node_id": "def", "policy_lag": 4.0}}}))
    clock.t = 102.0
    monitor.poll()
    monitor.close()
    got = scalars(tmp_path)
    assert got["remote/sampler-1/steps_per_s"][0][1] == pytest.approx(150.0)
    assert got["remote/sampler-1/policy_lag"][0][1] == pytest.approx(2.0)  # the row's own mean over the period
    assert got["remote/sampler-2/policy_lag"][0][1] == pytest.approx(4.0)  # no batch arrived: the bridge's figure
    assert got["remote/sampler-1/restarts"][0][1] == 2.0 and got["remote/sampler-2/restarts"][0][1] == 0.0
    assert got["remote/sampler-2/steps_per_s"][0][1] == 0.0
    assert not [t for t in got if t.startswith("remote/sampler-0")]  # a local row
    assert {"remote/sampler-1/node", "remote/sampler-2/node"} <= set(text_tags(tmp_path))
    assert scalars_layout(parallel=True, remote=True)["Remote samplers"] == REMOTE_LAYOUT["Remote samplers"]
    assert "Remote samplers" not in scalars_layout(parallel=True)


def test_a_local_sampler_counts_a_remote_rows_in_flight_steps_against_the_allowance(block):
    """allowance 10, the bridge has 6 rows asked for on sampler-1: sampler-0 may take 4 steps, not 10."""
    control_row, local, remote = block.role(CONTROL), block.role("sampler-0"), block.role("sampler-1")
    control_row.set(quota_slot(0), 100.0)
    block.role("critic-learner").set("allowance", 10.0)
    remote.set("in_flight", 6.0)
    loop = threading.Thread(target=_loop, args=(CountingWorker(local), local, Control(block), [local, remote],
                                                 block.role("critic-learner"), 0, Napper(max_s=1e-3), 1))
    loop.start()
    try:
        wait_until(lambda: local.get("env_steps") == 4 and block.snapshot()["sampler-0"]["state"] == WAITING)
        time.sleep(0.05)
        assert local.get("env_steps") == 4
        remote.set("in_flight", 0.0)  # the replies arrived short (the actor was given up): 6 steps are free again
        wait_until(lambda: local.get("env_steps") == 10)
    finally:
        control_row.set("phase", float(EXIT))
        loop.join(5)
    assert not loop.is_alive()
