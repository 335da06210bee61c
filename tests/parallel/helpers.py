"""Running the CLI in parallel mode as a subprocess, and checking that a run left nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SHM_DIR = "/dev/shm"

# Small networks and budgets: these runs check processes, files and protocols, not learning.
TINY_ARGS = ["--hidden-sizes", "32", "32", "--batch-size", "64", "--learning-starts", "300", "--eval-episodes", "2",
             "--eval-every", "0", "--log-interval", "0", "--tb-interval", "0.5", "--buffer-size", "20000"]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}


def start_cli(*args: str, log: Path, new_session: bool = False) -> subprocess.Popen:
    """Start ``python -m spreeze_like.run ARGS`` with stdout+stderr going to ``log`` (``new_session``: in a process
    group of its own, which a test may signal whole)."""
    out = open(log, "w")  # noqa: SIM115 - closed by the child's exit; the file outlives this call
    return subprocess.Popen([sys.executable, "-m", "spreeze_like.run", *args], stdout=out, stderr=subprocess.STDOUT,
                            env=cli_env(), text=True, start_new_session=new_session)


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spreeze_like.run", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=cli_env())


def only_run_dir(logdir: Path, timeout: float = 60.0) -> Path:
    """The one run folder under ``logdir`` (waits until the CLI has made it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in logdir.iterdir() if p.is_dir()] if logdir.is_dir() else []
        if len(found) == 1:
            return found[0]
        assert len(found) <= 1, f"several run folders under {logdir}: {found}"
        time.sleep(0.1)
    raise AssertionError(f"no run folder appeared under {logdir} within {timeout} s")


def read_status(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def finished_counters(proc: subprocess.CompletedProcess, logdir: Path) -> tuple[Path, dict]:
    """A CLI run that must have finished (exit status 0): its run folder and the counters of its ``status.json``."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(logdir)
    return run_dir, read_status(run_dir)["counters"]


def wait_status(run_dir: Path, predicate, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None
                ) -> dict:
    """Poll ``status.json`` until ``predicate(status)``; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = read_status(run_dir)
        if status is not None and predicate(status):
            return status
        if proc is not None and proc.poll() is not None:
            text = log.read_text() if log is not None else ""
            raise AssertionError(f"the run exited with {proc.returncode} before the condition held:\n{text[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout} s; last status: {status}")


def start_long_run(logdir: Path, log: Path, *extra: str, min_steps: int = 350,
                   new_session: bool = False) -> tuple[subprocess.Popen, Path]:
    """A tiny CLI run with a huge step budget, returned once it passed ``min_steps`` env steps.

    The caller signals or kills it; on a failure while waiting, the process is killed here.
    """
    proc = start_cli(*TINY_ARGS, "--total-steps", "100000", *extra, "--logdir", str(logdir), log=log,
                     new_session=new_session)
    try:
        run_dir = only_run_dir(logdir)
        wait_status(run_dir, lambda s: s["env_steps"] > min_steps, timeout=180, proc=proc, log=log)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, run_dir


def run_pids(run_dir: Path) -> list[int]:
    """Every pid the run's status file names: the supervisor and each role's (last) process."""
    status = read_status(run_dir) or {}
    pids = [status.get("supervisor_pid")] + [r.get("pid") for r in status.get("roles", {}).values()]
    return [p for p in pids if p]


def reaper_pids(run_id: str) -> list[int]:
    """Pids of the run's reaper (``procs/descendants.py`` run as a script with the run id)."""
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(a.endswith("descendants.py") for a in cmd) and run_id in cmd:
            pids.append(proc.pid)
    return pids


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(pids: list[int], timeout: float) -> list[int]:
    """The ``pids`` still alive after waiting up to ``timeout`` s for all of them to die."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def run_segments(run_dir: Path) -> list[str]:
    """Entries of /dev/shm that belong to the run (named in its shm.json)."""
    names = json.loads((run_dir / "shm.json").read_text())["segments"]
    return [n.lstrip("/") for n in names if os.path.exists(os.path.join(SHM_DIR, n.lstrip("/")))]


def assert_nothing_left(run_dir: Path, grace_s: float = 5.0) -> None:
    """No process of the run alive and none of its segments in /dev/shm (after ``grace_s``)."""
    deadline = time.monotonic() + grace_s
    while True:
        living = [p for p in run_pids(run_dir) if alive(p)]
        segments = run_segments(run_dir)
        if not living and not segments:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind: processes {living}, segments {segments}")
        time.sleep(0.1)


def interrupt(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 30.0, group: bool = False) -> float:
    """Send ``sig`` to the CLI (``group``: to its whole process group, one of its own) and wait for its exit;
    returns the seconds it took."""
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    proc.wait(timeout=timeout)
    return time.monotonic() - t0


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of every scalar in the run folder's event files."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def text_tags(run_dir: Path) -> list[str]:
    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return acc.Tags()["tensors"]
