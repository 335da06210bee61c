"""``python -m spreeze_like.run`` started by another command or tool of ours: one stop signal, never two.

A run stops in order on its first SIGINT or SIGTERM (checkpoint, replay if asked, its processes and
segments removed) and forces its stop on the second, as a person's second Ctrl-C does. A launcher that
shares its process group with the run breaks that: a terminal's Ctrl-C, SLURM at a job's time limit,
systemd's ``KillMode=control-group`` and ``kill -TERM -<pgid>`` signal the launcher and the run at once,
and the launcher's own stop then sent the run a second signal, which forced it (no stop checkpoint).
``subprocess.run`` did worse: interrupted, it SIGKILLs its child after a quarter of a second, so the
run's supervisor died mid-stop and its segments stayed until the next start's sweep.

Who creates and removes what:

- :func:`start_run` starts the run as the leader of a session of its own (a group signal reaches only
  the launcher), with :func:`spreeze_like.ipc.lifetime.launcher_env`, so that the run sends itself one
  SIGTERM if the launcher dies, even by SIGKILL.
- :func:`stop_run` is the launcher's one stop signal; past its deadline it SIGKILLs the run's process
  group (the run's roles are in it; the next start's sweep unlinks the segments a killed run leaves).
- :func:`wait_run` waits for the run's end and stops it on any exception on the way (the launcher's
  Ctrl-C, a SIGTERM turned into ``KeyboardInterrupt`` by :func:`spreeze_like.console.run_tool`, a
  timeout), so that no run outlives its launcher's interest in it.
The seeds command (:mod:`spreeze_like.seed_runs`) and the tools that start runs (soak, bench_*) use these.
``bench_gpu`` starts its pytest and bench_sampler children through them too, with ``watch_launcher=False``
(pytest would hand the variable on to the runs its tests start, which have another parent) and SIGINT as
the one stop signal (pytest's orderly stop: fixtures torn down, the tests' runs stopped).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO

from spreeze_like.ipc.lifetime import LAUNCHER_ENV, launcher_env

RUN_MODULE = "spreeze_like.run"
FORCED_STOP_S = 30.0  # a forced stop kills the run's children and removes its segments: seconds at most


def start_run(args: Sequence[str], stdout: IO | int, *, stderr: IO | int | None = subprocess.STDOUT,
              module: str = RUN_MODULE, env: Mapping[str, str] | None = None, watch_launcher: bool = True,
              **extra_env: str) -> subprocess.Popen[bytes]:
    """Start ``python -m spreeze_like.run ARGS`` in a session of its own, writing to ``stdout`` (and ``stderr``:
    default with stdout). ``module``: another command of ours that stops in order on one signal and watches its
    launcher (``spreeze_like.seeds``). ``env``: the base environment (default: this process's), with
    ``extra_env`` over it. ``watch_launcher=False``: without :func:`launcher_env`'s variable, for a command
    that does not read it (pytest) and would pass it on to children of its own."""
    base = {**(os.environ if env is None else env), **extra_env}
    if not watch_launcher:
        base.pop(LAUNCHER_ENV, None)  # not even one this process was given
    return subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, env=launcher_env(base) if watch_launcher else base,
                            start_new_session=True)


def stop_run(proc: subprocess.Popen, signum: int = signal.SIGTERM, timeout_s: float = 120.0) -> int:
    """Stop the run with one ``signum`` and return its exit status: its orderly stop, or after ``timeout_s`` a
    SIGKILL to its process group. A Ctrl-C of the launcher while it waits is passed on as the run's second signal
    (its forced stop, which still removes its processes and segments) and raised once the run has ended."""
    if proc.poll() is not None:
        return proc.returncode
    signal_run(proc, signum)
    try:
        return _wait_or_kill(proc, timeout_s)
    except KeyboardInterrupt:
        signal_run(proc, signum)
        _wait_or_kill(proc, FORCED_STOP_S)
        raise


def wait_run(proc: subprocess.Popen, timeout_s: float | None = None, stop_timeout_s: float = 120.0,
             stop_signum: int = signal.SIGTERM) -> int:
    """The run's exit status once it ends. On any exception while waiting (``subprocess.TimeoutExpired`` after
    ``timeout_s``, the launcher's Ctrl-C or SIGTERM) the run is stopped (:func:`stop_run` with ``stop_signum``)
    and the exception raised."""
    try:
        return proc.wait(timeout=timeout_s)
    except BaseException:
        stop_run(proc, stop_signum, timeout_s=stop_timeout_s)
        raise


def run_to_end(args: Sequence[str], stdout: IO | int, *, timeout_s: float | None = None,
               env: Mapping[str, str] | None = None, **extra_env: str) -> int:
    """:func:`start_run`, then :func:`wait_run`: the exit status of a run its launcher waits for."""
    return wait_run(start_run(args, stdout, env=env, **extra_env), timeout_s)


def run_captured(args: Sequence[str], *, timeout_s: float | None = None, module: str = RUN_MODULE,
                 env: Mapping[str, str] | None = None, watch_launcher: bool = True,
                 stop_signum: int = signal.SIGTERM, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """:func:`run_to_end` with the run's stdout and stderr returned as text (through temporary files, which cannot
    fill up and stall the run as an unread pipe can while :func:`stop_run` waits). ``watch_launcher``: as
    :func:`start_run`'s; ``stop_signum``: the one stop signal when the wait ends by an exception."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = start_run(args, out, stderr=err, module=module, env=env, watch_launcher=watch_launcher, **extra_env)
        code = wait_run(proc, timeout_s, stop_signum=stop_signum)
        texts = []
        for file in (out, err):
            file.seek(0)
            texts.append(file.read().decode(errors="replace"))
    return subprocess.CompletedProcess(proc.args, code, *texts)


def signal_run(proc: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the run while it lives (it leads its session; its children are its own to stop)."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            pass


def _wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.wait()
