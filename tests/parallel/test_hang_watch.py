"""HangWatch's pause rule against the supervisor's own work (procs/hangs.py), without processes.

A gap of more than PAUSE_GAP_S between two checks means the run was stopped or frozen: every hang
clock restarts and one line says so. Time the loop spent on work of its own (assembling a checkpoint,
whose first one imports torch: 3 s on a 2-core machine) is not a pause: before ``busy`` it printed
"did not run for 3 s" in every default run and forgave the hang clocks. The pause itself (SIGSTOP,
a frozen cgroup) is tested with real processes in test_supervision_findings.py.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from spreeze_like.procs.control import RUNNING
from spreeze_like.procs.hangs import PAUSE_GAP_S, HangWatch

CONFIG = SimpleNamespace(sampler_hang_s=60.0, learner_hang_s=180.0, evaluator_hang_s=600.0)


def watch() -> tuple[HangWatch, list[str]]:
    said: list[str] = []
    return HangWatch(CONFIG, said.append), said


def sampler(heartbeat_age_s: float) -> tuple[dict, dict]:
    """One running sampler (this test's own pid: alive, not stopped) and its stats row."""
    child = SimpleNamespace(alive=True, pid=os.getpid(), started_at=0.0)
    row = {"pid": os.getpid(), "state": RUNNING, "heartbeat_age_s": heartbeat_age_s}
    return {"sampler-0": child}, {"sampler-0": row}


def test_the_loops_own_work_is_not_a_pause():
    hangs, said = watch()
    hangs.check(0.0, {}, {})
    hangs.busy(3.5)  # a checkpoint assembled in the loop
    hangs.check(3.6, {}, {})
    assert said == []


def test_a_pause_beside_the_work_is_still_seen_and_measured_without_it():
    hangs, said = watch()
    hangs.check(0.0, {}, {})
    hangs.busy(1.0)
    hangs.check(1.0 + PAUSE_GAP_S + 2.0, {}, {})
    assert len(said) == 1 and "did not run for 4 s" in said[0]
    hangs.check(1.0 + PAUSE_GAP_S + 2.0 + PAUSE_GAP_S + 0.5, {}, {})  # the busy time is not carried over
    assert len(said) == 2


def test_work_does_not_forgive_a_hung_role_but_a_pause_does():
    children, quiet = sampler(heartbeat_age_s=1.0)
    _, hung_row = sampler(heartbeat_age_s=100.0)  # past the 60 s limit
    hangs, _ = watch()
    hangs.check(0.0, children, quiet)
    hangs.busy(5.0)
    assert [h.role for h in hangs.check(5.1, children, hung_row)] == ["sampler-0"]
    paused, _ = watch()
    paused.check(0.0, children, quiet)
    assert paused.check(5.1, children, hung_row) == []  # a real 5 s pause: clocks restarted, not judged on it


def test_a_stop_just_before_the_supervisor_reads_the_stats_is_a_pause_not_a_hang(monkeypatch):
    """The supervisor reads its clock after the stats snapshot. A SIGSTOP of the whole run that lands after the
    tick's clock read but before the snapshot made every role's heartbeat age the pause's length, measured
    against a time read before it: no gap was seen, and every role was killed as hung (CI, 2026-11-27, in
    test_supervision_findings.py's Ctrl-Z test). Here the stop lands in that window, on a fake clock."""
    import time

    from spreeze_like.supervisor import Supervisor

    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    children, quiet = sampler(heartbeat_age_s=1.0)
    _, after_stop = sampler(heartbeat_age_s=65.0)  # past the 60 s limit: it last beat before the stop
    killed: list[int] = []
    children["sampler-0"].kill_now, children["sampler-0"].restartable = (lambda: killed.append(1)), True
    rows = iter([quiet, after_stop])

    def snapshot() -> dict:
        snap = next(rows)
        if snap is after_stop:
            clock[0] += 64.0  # the run was stopped for 64 s just before this read
        return snap

    hangs, said = watch()
    supervisor = SimpleNamespace(hangs=hangs, children=children, block=SimpleNamespace(snapshot=snapshot),
                                 say=said.append, failure=None)
    Supervisor._check_hangs(supervisor)
    clock[0] = 0.05  # the next tick
    Supervisor._check_hangs(supervisor)
    assert killed == [] and supervisor.failure is None
    assert len(said) == 1 and "did not run for 64 s" in said[0]
