"""The supervisor's handle on one role's process: spawn, death detection, restart with back-off, stop.

Who owns what: the supervisor creates every child through :meth:`RoleProcess.start` (``spawn``
context, ``daemon=True`` so multiprocessing's own exit hook terminates any child the supervisor's
``finally`` missed) and is the only process that joins, terminates or kills them. Children die
with the supervisor even when it is SIGKILLed (``PR_SET_PDEATHSIG`` armed first thing in
:func:`~spreeze_like.procs.control.child_main`). Each child carries a tag in its environment, and
what its env starts inherits it: once the child is gone, those processes are SIGKILLed
(:mod:`~spreeze_like.procs.descendants`). Children stay in the supervisor's process group, so
Ctrl-Z and ``kill -STOP -<pgid>`` pause the whole run.

A child is started with SIGINT and SIGTERM ignored from its very first instruction: the disposition
``SIG_IGN`` survives ``exec``, so a Ctrl-C that reaches the whole process group while a child is
still importing torch cannot kill it with a traceback; the supervisor alone turns Ctrl-C into an
orderly stop. (A blocked signal mask would not help: the spawn start method resets it.) SIGTERM
likewise: SLURM at a job's time limit, systemd's default ``KillMode=control-group`` and ``kill -TERM
-<pgid>`` send it to every process of the run at once, and until 2026-12-03 the learners died of it
(``actor-learner (pid N) died (exit status 143); the run stopped; no checkpoint was written``, exit 1)
where the run should stop in order as for a SIGTERM to the supervisor. The supervisor's own "exit now"
to a child past its deadline is therefore :data:`~spreeze_like.ipc.lifetime.ROLE_STOP_SIGNAL` (SIGUSR1),
which :func:`~spreeze_like.procs.control.child_main` unwinds like an exception.
"""

from __future__ import annotations

import contextlib
import multiprocessing.resource_tracker
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.context import BaseContext
from typing import Any

from spreeze_like.ipc.lifetime import ROLE_STOP_SIGNAL
from spreeze_like.procs.control import ChildArgs, child_main, take_traceback
from spreeze_like.procs.descendants import TAG_VAR, kill_tagged, role_tag
from spreeze_like.procs.pacing import backoff_s

STABLE_S = 60.0  # a child that lived this long before dying starts its back-off from the beginning again
RESTART_WINDOW_S = 600.0  # the restart budget (max_restarts) counts deaths within this many seconds


GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what reaches a whole process group: the supervisor's to act on


def start_ignoring_group_signals(process: Any) -> None:
    """``process.start()`` with SIGINT and SIGTERM ignored in the child from birth; the parent's handlers are kept.

    Both are blocked around the switch so a signal in that instant stays pending (Linux never
    discards a blocked signal at generation) and reaches the parent's handler right after.
    """
    if threading.current_thread() is not threading.main_thread():
        process.start()  # signal dispositions can only be changed from the main thread
        return
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(GROUP_SIGNALS))
    old_handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in GROUP_SIGNALS}
    try:
        process.start()
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


# Set in a child's environment at spawn unless the user set them: numpy is loaded while the child
# unpickles its arguments, before any code of ours runs, and OpenBLAS reads its thread count then.
# With the default (one thread per core) every small matmul of the numpy policy wakes a second
# thread that spins: twice the CPU for no gain (an ad-hoc timing here: 7.1 vs 3.5 us of CPU for a
# 1x256 @ 256x256 product). Torch's own threads are set separately (learners: --torch-threads).
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1"}


@contextlib.contextmanager
def child_environment(tag: str | None = None) -> Iterator[None]:
    """:data:`CHILD_ENV` (and the role's ``tag``, :mod:`~spreeze_like.procs.descendants`) in ``os.environ``
    while a child is spawned (it copies the environment then)."""
    extra = {k: v for k, v in CHILD_ENV.items() if k not in os.environ}
    if tag is not None:
        extra[TAG_VAR] = tag
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def describe_exit(exitcode: int | None) -> str:
    """``exit status 1`` or ``killed by SIGKILL``."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


class RoleProcess:
    """One role's process over the run, across restarts.

    Args:
        ctx: the ``spawn`` multiprocessing context.
        role: role name (``sampler-0``, ``critic-learner``, ...).
        module: module under ``spreeze_like.procs`` whose ``run(args)`` is the body.
        make_args: builds the child's arguments for a given restart count.
        restartable: restart after a death (samplers, evaluator, monitor) or end the run (learners).
        max_restarts: restarts allowed within any :data:`RESTART_WINDOW_S`; one more death ends the run.
        run_id: the run's id, the first part of each process's tag (see below).

    Each process is spawned with its tag, ``<run_id>/<role>/<restart>``, in its environment; once it
    has died (or been stopped) every process still carrying that tag, which its env started, is
    SIGKILLed (:func:`~spreeze_like.procs.descendants.kill_tagged`, review finding 18), and their pids
    are in :attr:`leftovers`.

    The budget is a sliding window, not a total: a long run may lose a sampler to a flaky env (or
    a kill) now and then for hours, but an env that crashes at every start exhausts it in minutes
    (with back-off 1, 2, 4 ... 30 s) instead of restarting forever.
    """

    def __init__(self, ctx: BaseContext, role: str, module: str, make_args: Callable[[int], ChildArgs],
                 restartable: bool, max_restarts: int = 10, run_id: str = "run") -> None:
        self.ctx, self.role, self.module, self.make_args = ctx, role, module, make_args
        self.restartable, self.max_restarts, self.run_id = restartable, max_restarts, run_id
        self.tag: str | None = None  # the current process's tag
        self.leftovers: list[int] = []  # processes of its env killed after its last death
        self.process: Any = None
        self.restarts = 0  # restarts done in this session
        self.deaths: list[float] = []  # monotonic times of the deaths that led to a restart decision
        self.failures = 0  # deaths in a row, each within STABLE_S of its start: drives the back-off
        self.started_at = 0.0
        self.restart_at: float | None = None
        self.last_exit: int | None = None
        self.death_handled = False
        self.last_traceback = ""  # the last traceback printed for this role (a repeat is not printed again)
        self.run_dir = ""  # where its processes leave their tracebacks (ChildArgs.run_dir, read at start)

    def report_traceback(self) -> str:
        """Print the traceback the process left on its death (stderr), unless it is the one printed last for this
        role; then return what the death's line adds instead (""; or the repeated exception, in one line).

        Why: an env that raises at every start printed its whole traceback once per restart, a wall of them
        (--max-restarts 10: eleven); the author of the env needs it once, and a count of the repeats.
        """
        text = take_traceback(self.run_dir, self.role) if self.run_dir else ""
        if not text:
            return ""
        if text == self.last_traceback:
            return f"; again {text.strip().splitlines()[-1]}, the traceback above"
        self.last_traceback = text
        print(f"[spreeze] {self.role} (pid {self.pid}) raised:\n{text}", end="", file=sys.stderr, flush=True)
        return ""

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        args = self.make_args(self.restarts)
        self.run_dir = str(args.run_dir)
        process = self.ctx.Process(target=child_main, args=(self.module, args), name=self.role, daemon=True)
        # multiprocessing starts its resource tracker at the first spawn, with the environment of the
        # moment: started here, before the tag is set, it is never taken for a role's leftover
        multiprocessing.resource_tracker.ensure_running()
        tag = role_tag(self.run_id, self.role, self.restarts)
        with child_environment(tag):
            start_ignoring_group_signals(process)  # on failure self.process stays what it was, never an unstarted one
        self.process, self.tag = process, tag
        self.started_at = time.monotonic()
        self.restart_at = None
        self.death_handled = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    @property
    def sentinel(self) -> int | None:
        return self.process.sentinel if self.alive else None

    def new_death(self) -> bool:
        """True once for each death of the current process (its exit code is then in ``last_exit``)."""
        if self.process is None or self.death_handled or self.process.is_alive():
            return False
        self.process.join(0)
        self.last_exit = self.process.exitcode
        self.death_handled = True
        self._kill_leftovers()
        return True

    def _kill_leftovers(self) -> None:
        """SIGKILL what the dead process's env started and left running (its ``close`` never ran)."""
        if self.tag is not None:
            self.leftovers = kill_tagged(self.tag)

    def recent_deaths(self, now: float) -> int:
        """Deaths within the last :data:`RESTART_WINDOW_S`, this one included once recorded."""
        return sum(1 for t in self.deaths if now - t < RESTART_WINDOW_S)

    def over_budget(self, now: float) -> bool:
        """Record a death; True if it is more than ``max_restarts`` within the window (the run must end)."""
        self.deaths.append(now)
        return self.recent_deaths(now) > self.max_restarts

    def schedule_restart(self, now: float) -> float:
        """Plan the next start after a death; returns the back-off delay in seconds."""
        self.failures = self.failures + 1 if now - self.started_at < STABLE_S else 1
        delay = backoff_s(self.failures)
        self.restart_at = now + delay
        return delay

    def restart_due(self, now: float) -> bool:
        return self.restart_at is not None and now >= self.restart_at

    def restart(self) -> None:
        self.restarts += 1
        self.start()

    def kill_now(self) -> None:
        """SIGKILL (a hung child, or a forced exit)."""
        if self.alive:
            self.process.kill()

    def stop(self, deadline: float) -> None:
        """Wait for the child's own exit until ``deadline``, then :data:`ROLE_STOP_SIGNAL` (the child ignores SIGTERM,
        which a whole process group gets: see the module docstring), then SIGKILL; always reaps it."""
        if self.process is None:
            return
        self.process.join(max(0.0, deadline - time.monotonic()))
        if self.process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, ROLE_STOP_SIGNAL)
            self.process.join(2.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2.0)
        if not self.death_handled and not self.process.is_alive():
            self.last_exit = self.process.exitcode
            self.death_handled = True
            self.report_traceback()  # a role that raised as the run ended: its traceback, as for any death
        self._kill_leftovers()

    def state(self) -> str:
        if self.process is None:
            return "not started"
        if self.alive:
            return "alive"
        if self.restart_at is not None:
            return "restarting"
        return "exited"


class StopSignals:
    """The supervisor's Ctrl-C / SIGTERM handling: the first asks for an orderly stop, the second forces.

    :meth:`install` replaces the SIGINT and SIGTERM handlers (main thread only: a ``train()`` called
    from another thread leaves signals to its caller); :attr:`received` is the first signal's
    number; a second signal raises ``KeyboardInterrupt`` wherever the supervisor is, its number in
    :attr:`forced`. :meth:`restore` puts the previous handlers back.

    The cleanup after a forced stop must not be cut short (review finding 18): it joins and kills
    the children, kills their envs' processes, writes the final ``status.json`` and unlinks the
    segments. So the second signal's handler ignores both signals *before* it raises, leaving no
    instant in which a third one could raise again, and :meth:`hold` does the same at the start of
    every final cleanup. The cleanup is bounded (a forced stop kills the children: a few seconds at
    most), and SIGKILL still ends the process (the next start sweeps its segments).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self.forced: int | None = None
        self._old: dict[int, Any] = {}
        self._deferring = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handler) for sig in self.SIGNALS}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            self.forced = signum
            self.hold()
            if not self._deferring:
                raise KeyboardInterrupt
            return
        self.received = signum

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A forcing signal inside the block takes effect at its end: a checkpoint being written is finished.

        Raised in the middle of ``torch.save``, the KeyboardInterrupt broke the zip writer, whose own
        error then escaped with a traceback (seen in CI under a storm of SIGTERMs). A write takes well
        under a second; the forced stop follows at once.
        """
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self.forced is not None:
            raise KeyboardInterrupt

    def hold(self) -> None:
        """Ignore Ctrl-C and SIGTERM until :meth:`restore` (the last cleanup)."""
        if self._old:
            for sig in self.SIGNALS:
                signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}
