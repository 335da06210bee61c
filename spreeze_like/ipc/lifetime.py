"""Children die with their parent: the parent-death signal and SIGINT handling for spawned children.

A ``spawn`` child outlives a parent that was SIGKILLed or OOM-killed: ``daemon=True`` only helps on
the parent's *normal* exit path. Every child of the supervisor therefore calls
:func:`child_setup` first thing in its target function:

- On Linux it asks the kernel (``prctl(PR_SET_PDEATHSIG)``) to send it SIGKILL the moment its
  parent dies. The signal fires when the *thread* that started the child exits, so children must
  be started from the supervisor's main thread. If the parent died before the call, the child
  notices (``getppid()`` changed) and exits at once.
- Elsewhere, a daemon thread polls ``getppid()`` twice a second and exits the process when the
  parent is gone (the keep-alive fallback).
- Children ignore SIGINT: Ctrl-C reaches the whole process group, and the supervisor alone decides
  how to shut down (it tells children to stop through shared state or terminates them). The
  supervisor's roles ignore SIGTERM too, for the same reason (a scheduler's SIGTERM to the group), and
  are told to exit now by :data:`ROLE_STOP_SIGNAL` (procs/children.py).

Children only attach to shared memory, so dying abruptly leaves nothing behind; the supervisor
(or, if it died too, the next start's sweep) unlinks the segments.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
ROLE_STOP_SIGNAL = signal.SIGUSR1  # the supervisor's "exit now" to a role past its exit deadline
EXIT_PARENT_GONE = 70  # exit status of a child whose parent died before it could arm the signal


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    Returns:
        True if armed; False where prctl is not available (not Linux).
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")
    return True


def _watch_parent(parent_pid: int, period_s: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(period_s)
    os._exit(EXIT_PARENT_GONE)


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL, poll_s: float = 0.5) -> None:
    """Make this process die when ``parent_pid`` (its parent) dies.

    Args:
        parent_pid: The parent's pid as the parent saw it (``os.getpid()`` passed in the child's args).
        sig: Signal the kernel sends on the parent's death (Linux).
        poll_s: Period of the fallback watcher thread where prctl is not available.
    """
    armed = set_parent_death_signal(sig)
    if os.getppid() != parent_pid:  # parent died before the signal was armed: nobody would send it
        os._exit(EXIT_PARENT_GONE)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent_pid, poll_s), daemon=True, name="parent-watch").start()


def child_setup(parent_pid: int, ignore_sigint: bool = True, sig: int = signal.SIGKILL) -> None:
    """First call in every spawned child's target: die with the parent; leave Ctrl-C to the supervisor.

    Args:
        parent_pid: The supervisor's pid (``os.getpid()`` in the parent, passed as an argument).
        ignore_sigint: Ignore SIGINT so that a Ctrl-C in the terminal only reaches the supervisor's logic.
        sig: Signal delivered when the parent dies.
    """
    die_with_parent(parent_pid, sig)
    if ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


LAUNCHER_ENV = "SPREEZE_DIE_WITH_PARENT"  # set by a launcher of ours (the seeds command) to its pid


def launcher_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment for a ``python -m spreeze_like.run`` that this process starts as its direct child: ``base``
    (default: this process's environment) with ``extra`` and :data:`LAUNCHER_ENV` naming this process, so that the
    run stops in order if this process dies, even by SIGKILL (:func:`die_with_launcher`). Without it a launcher's
    death left its runs training to their last step (the soak's runs to 10**9)."""
    return {**(os.environ if base is None else base), **extra, LAUNCHER_ENV: str(os.getpid())}


def die_with_launcher(poll_s: float = 0.5) -> None:
    """First call of a command that another of ours may have started (``python -m spreeze_like.run`` under
    ``python -m spreeze_like.seeds``): when ``SPREEZE_DIE_WITH_PARENT`` names the parent, send this process
    one SIGTERM when the parent dies (the run's orderly stop: checkpoint, its processes and segments removed),
    and take Ctrl-C as a person's.

    A watcher thread polls ``getppid()`` rather than ``PR_SET_PDEATHSIG``: the kernel sends the parent-death
    signal again each time the child is handed to another thread of a dying parent, so a launcher with
    threads (numpy's BLAS pool) that is SIGKILLed sent two or three SIGTERMs, and the second one forces the
    run's stop before its checkpoint (seen in test_seeds_runs). One signal, at most ``poll_s`` late. The
    variable is removed first, so the command's own children do not inherit it.
    """
    value = os.environ.pop(LAUNCHER_ENV, None)
    if not value:
        return
    try:
        parent = int(value)
    except ValueError:
        return
    threading.Thread(target=_stop_when_orphaned, args=(parent, poll_s), daemon=True, name="launcher-watch").start()
    # a launcher started with SIGINT ignored (a shell's background job) hands that on through exec: the
    # launcher forwards Ctrl-C, and this process must take it as an interrupt
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _stop_when_orphaned(parent_pid: int, period_s: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(period_s)
    os.kill(os.getpid(), signal.SIGTERM)
