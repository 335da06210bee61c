"""After a normal exit, a child's exception, a child's SIGKILL and the parent's SIGKILL, nothing of
ours stays in /dev/shm once the next start has swept, and children die with their parent."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ipc_workers as W
import pytest

from spreeze_like.ipc import Ring, list_our_files, new_run_id, pid_alive, segment_name, sweep_dead_segments

PARENT = Path(__file__).with_name("ipc_parent.py")
CTX = mp.get_context("spawn")


def _run_parent(mode: str, run: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PARENT), mode, run], check=False, capture_output=True, text=True, timeout=90
    )


@pytest.mark.multiproc
@pytest.mark.parametrize(("mode", "exit_code"), [("normal", 0), ("child-raises", 3), ("child-killed", 4)])
def test_supervisor_exit_paths_leave_nothing(mode, exit_code):
    run = new_run_id()
    proc = _run_parent(mode, run)
    assert proc.returncode == exit_code, proc.stderr
    if mode == "child-raises":
        assert "deliberate error" in proc.stderr  # the child's traceback reached the log
    assert list_our_files(run_id=run) == []  # the supervisor's own cleanup was enough
    sweep_dead_segments()
    assert list_our_files(run_id=run) == []


@pytest.mark.multiproc
def test_parent_sigkill_children_die_and_sweep_removes_segments():
    run = new_run_id()
    parent = subprocess.Popen(
        [sys.executable, str(PARENT), "parent-killed", run], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    children: list[int] = []
    try:
        line = parent.stdout.readline()
        assert line, parent.stderr.read()
        children[:] = json.loads(line)["children"]
        assert all(pid_alive(pid) for pid in children)
        assert len(list_our_files(run_id=run)) == 3
        parent.send_signal(signal.SIGKILL)
        assert parent.wait(30) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while any(pid_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(pid) for pid in children), "children outlived their SIGKILLed parent"
        # Nobody cleaned up: the three segments wait for the next start's sweep. (On a shared dev
        # machine another test session's start may sweep them first; the sweep logic itself is
        # checked deterministically in test_ipc_segment.py.)
        sweep_dead_segments()
        assert list_our_files(run_id=run) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        for pid in children:  # on failure, do not leave orphans (they are not our children)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.stdout.close()
        parent.stderr.close()


@pytest.mark.multiproc
def test_children_ignore_sigint():
    ring = Ring.create(segment_name(new_run_id(), "ring"), 4, 2)
    child = CTX.Process(target=W.idle_child, args=(os.getpid(), ring.name, "reader"))
    child.start()
    try:
        deadline = time.monotonic() + 30
        while ring.reader_pid != child.pid and time.monotonic() < deadline:  # attached, so past child_setup
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGINT)
        child.join(0.5)
        assert child.is_alive()  # Ctrl-C is the supervisor's business
    finally:
        child.kill()
        child.join(10)
        ring.close()
        ring.unlink()
