"""spreeze_like.run_launch with a stand-in command (tests/launch_stub.py): the session of its own, the one stop
signal, and the SIGKILL to the whole group past the deadline. A real run under a real tool, stopped by a group
SIGTERM, is tests/bench/test_bench_resume.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spreeze_like.ipc.naming import pid_alive
from spreeze_like.run_launch import run_captured, start_run, stop_run, wait_run

TESTS = Path(__file__).resolve().parent


def start_stub(tmp_path: Path, mode: str, **kwargs: Any) -> tuple[subprocess.Popen, list[int]]:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    proc = start_run([str(tmp_path), mode], subprocess.DEVNULL, module="launch_stub", env=env, **kwargs)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").is_file() or not (tmp_path / "started").read_text():
        assert proc.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.02)
    time.sleep(0.1)  # the file is written in one go; its handlers are set before it
    return proc, [int(x) for x in (tmp_path / "started").read_text().split()]


def test_the_run_leads_a_session_of_its_own_so_a_group_signal_misses_it(tmp_path):
    proc, (pid, pgid) = start_stub(tmp_path, "counting")
    try:
        assert pid == pgid == proc.pid and os.getsid(pid) == pid
        assert os.getpgid(0) != pgid  # a signal to this process's group (a terminal's Ctrl-C) does not reach it
        assert stop_run(proc, timeout_s=30) == 143
    finally:
        proc.kill()
    assert (tmp_path / "signals").read_text().split() == [str(int(signal.SIGTERM))]  # one signal, not two


def test_a_run_past_its_deadline_is_killed_with_its_whole_group(tmp_path):
    proc, (_, pgid, grandchild) = start_stub(tmp_path, "stubborn")
    try:
        t0 = time.monotonic()
        assert stop_run(proc, timeout_s=1.0) == -signal.SIGKILL
        assert time.monotonic() - t0 < 10
        deadline = time.monotonic() + 10
        while pid_alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(grandchild)  # a role of the run dies with it, not left to its parent-death watch
    finally:
        proc.kill()
        if pgid != os.getpgid(0):  # never this process's own group (the stand-in's, were it not in a session)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_wait_run_stops_the_run_when_its_wait_ends_by_an_exception(tmp_path):
    proc, _ = start_stub(tmp_path, "counting")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_run(proc, timeout_s=0.2, stop_timeout_s=30)
        assert proc.returncode == 143
    finally:
        proc.kill()
    assert (tmp_path / "signals").read_text().split() == [str(int(signal.SIGTERM))]


def test_run_captured_returns_both_texts_and_names_this_process_as_the_launcher(tmp_path):
    done = run_captured([str(tmp_path), "printing"], module="launch_stub", env={**os.environ, "PYTHONPATH": str(TESTS)})
    assert (done.returncode, done.stdout, done.stderr) == (3, f"{os.getpid()}\n", "to stderr\n")


def test_a_child_that_is_no_run_gets_no_launcher_variable_and_its_own_stop_signal(tmp_path, monkeypatch):
    """bench_gpu's pytest child: started without the launcher's variable (pytest would hand it to the runs its tests
    start, whose parent is pytest: they would stop at once), even one this process was given, and stopped with the
    one SIGINT pytest stops in order on."""
    monkeypatch.setenv("SPREEZE_DIE_WITH_PARENT", "1")
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    done = run_captured([str(tmp_path), "printing"], module="launch_stub", env=env, watch_launcher=False)
    assert (done.returncode, done.stdout) == (3, "-\n")
    proc, _ = start_stub(tmp_path, "counting", watch_launcher=False)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_run(proc, timeout_s=0.2, stop_timeout_s=30, stop_signum=signal.SIGINT)
        assert proc.returncode == 143
    finally:
        proc.kill()
    assert (tmp_path / "signals").read_text().split() == [str(int(signal.SIGINT))]


def test_a_ctrl_c_of_the_launcher_while_it_stops_the_run_is_passed_on_as_the_runs_second_signal(tmp_path):
    """stop_run's one signal, then this process's Ctrl-C while it waits (a person's second Ctrl-C at the tool): the
    run gets a second SIGTERM, its forced stop, and the KeyboardInterrupt is raised once the run has ended."""
    proc, _ = start_stub(tmp_path, "counting")
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            stop_run(proc, timeout_s=30)
        assert proc.returncode == 143
    finally:
        timer.cancel()
        proc.kill()
    assert (tmp_path / "signals").read_text().split() == [str(int(signal.SIGTERM))] * 2
