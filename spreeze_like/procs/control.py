"""The control protocol of a parallel run, the stats-block schema, and the children's entry point.

Control words live in the stats block (one shared segment, kind ``ctl``), in a ``control`` row that
only the supervisor writes; every child reads it in its loop (a few aligned 8-byte loads):

- ``phase``: :data:`RUN` (train), :data:`FINISH` (samplers stop; learners catch up to the UTD
  budget on the data already collected, then idle), :data:`HALT` (samplers stop; learners finish
  the update in hand and idle: Ctrl-C, SIGTERM, a failure), :data:`EXIT` (every child returns).
- ``ckpt_request``: a sequence number; a learner whose ``ckpt_ack`` is lower writes its part
  of checkpoint ``ckpt_request`` (see :mod:`spreeze_like.procs.parts`) and then sets ``ckpt_ack``.
- ``eval_request`` / ``eval_step``: the evaluator runs an evaluation at ``eval_step`` and sets
  ``eval_ack`` (the final evaluation).
- ``quota-<i>``: env steps sampler row ``i`` may take in this session, set at start from
  :func:`~spreeze_like.procs.pacing.sampler_quotas`. A local sampler (and the Ray bridge, for the
  remote rows) reads it on every iteration. The supervisor may raise a quota mid-run; it lowers one
  only to an abandoned remote row's own step count, handing the rest to the samplers left
  (:func:`~spreeze_like.procs.pacing.reassign_quota`).

Each role reports its progress in the state word of its own row (:data:`STARTING` ...
:data:`DONE`), and beats its heartbeat in every loop, waits included. One writer per row, so no
locks; a reader may see values of different rows from slightly different moments, which the
protocol tolerates (every wait re-reads).

:func:`child_main` is the target of every spawned process: it arms the parent-death signal,
ignores SIGINT (the supervisor orchestrates shutdown), sets the torch threads, runs the role, and
turns a user-facing :class:`~spreeze_like.errors.SpreezeError` into a one-line message file plus
exit status :data:`EXIT_USER_ERROR` (a usage error: the run ends with exit status 2) or
:data:`EXIT_ROLE_ERROR` (a training failure such as :class:`~spreeze_like.errors.NonFiniteError`:
the run ends with exit status 1, naming the last good checkpoint) that the supervisor re-raises
(where the file cannot be written, a full disk, the line goes to stderr instead). A child creates no segment and
no process: if it crashes, only its own mapping goes; the supervisor decides what happens next.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spreeze_like.ipc.lifetime import ROLE_STOP_SIGNAL
from spreeze_like.metrics import role_names, stats_schema

# --- phases (control row) and role states (each row's state word) ---------------------------------
RUN, FINISH, HALT, EXIT = 0, 1, 2, 3
STARTING, RUNNING, WAITING, DONE = 0, 1, 2, 3
STATE_NAMES = {STARTING: "starting", RUNNING: "running", WAITING: "waiting", DONE: "done"}

EXIT_USER_ERROR = 3  # a child's SpreezeError: the message is in its error file, the run ends with it
EXIT_ROLE_ERROR = 4  # a child's SpreezeError that is not a usage error (exit_code != 2), e.g. NonFiniteError

CONTROL = "control"
SUPERVISOR = "supervisor"
MONITOR = "monitor"
RAY_BRIDGE = "ray-bridge"  # the one Ray driver: writes the remote samplers' rows and rings (procs/ray_bridge_proc.py)

# Slots the parallel mode adds to the roles of ``metrics.stats_schema`` (all float64, like theirs).
# A sampler row's ``abandoned`` (1 once the bridge gave its remote actor up for good), ``remote_restarts``
# and ``in_flight`` (rows asked for, not yet received) are the bridge's; a local sampler leaves them 0.
# Start-up timestamps of a role's process (CLOCK_MONOTONIC seconds, 0 = not reached yet), for
# tools/bench_startup.py and ``startup.json`` (docs/startup.md): ``t_exec`` the process was created
# (/proc/self/stat, 10 ms resolution), ``t_main`` :func:`child_main` entered (interpreter up, arguments
# unpickled), ``t_imported`` the role's module imported (torch, for a learner), ``t_ready`` its objects
# built, entering its loop, ``t_first`` its first unit of work done (a sampler's env step, a learner's
# update, an evaluation). A restarted process writes them again. The critic adds ``t_data``: the data
# for its first update is in replay (``learning_starts`` reached and drained). ``torch_loaded`` is 1 if
# torch was in ``sys.modules`` at ``t_ready`` (only the learners need it: tests/parallel/test_startup.py).
# A learner adds ``flushing_threads``: how many of its torch threads flush subnormal floats (cpu_math.py).
STARTUP_SLOTS = ("t_exec", "t_main", "t_imported", "t_ready", "t_first", "torch_loaded")
_EXTRA_SLOTS: dict[str, tuple[str, ...]] = {
    "sampler": ("done", "pace_wait_s", "ring_waits", "ring_wait_s", "abandoned", "remote_restarts", "in_flight",
                *STARTUP_SLOTS),
    "critic-learner": ("done", "total_updates", "allowance", "ckpt_ack", "update_s", "drain_s", "data_wait_s",
                       "actor_wait_s", "learn_t0", "learn_t1", "learn_cpu_s", "drained_rows", *STARTUP_SLOTS,
                       "t_data", "flushing_threads"),
    "actor-learner": ("done", "total_updates", "ckpt_ack", "update_s", "wait_s", *STARTUP_SLOTS,
                      "flushing_threads"),
    "evaluator": ("done", "eval_ack", *STARTUP_SLOTS),
    "replay": (),
}
_NEW_ROLES: dict[str, tuple[str, ...]] = {
    CONTROL: ("phase", "ckpt_request", "eval_request", "eval_step"),
    SUPERVISOR: ("restarts", "env_steps"),
    MONITOR: ("done", *STARTUP_SLOTS),
}
# The bridge's row, present only in a run with remote samplers: ``connected`` (1 once ray.init succeeded),
# ``cpu_s`` (its process CPU seconds), ``rows_written`` (into the remote rings), ``calls`` (collect calls).
_BRIDGE_SLOTS = ("done", "connected", "cpu_s", "rows_written", "calls")


def quota_slot(row: int) -> str:
    """The control row's slot holding the env steps sampler row ``row`` may take in this session."""
    return f"quota-{row}"


def parallel_schema(samplers: int, bridge: bool = False) -> dict[str, list[str]]:
    """The serial mode's stats slots plus the parallel mode's control, timing, ack and quota slots.

    Args:
        samplers: sampler rows, local and remote (``TrainConfig.sampler_rows``).
        bridge: add the ``ray-bridge`` row (a run with remote samplers).
    """
    schema = stats_schema(samplers)
    for role in role_names(samplers):
        kind = "sampler" if role.startswith("sampler") else role
        schema[role] = schema[role] + [s for s in _EXTRA_SLOTS[kind] if s not in schema[role]]
    for role, slots in _NEW_ROLES.items():
        schema[role] = list(slots)
    schema[CONTROL] += [quota_slot(i) for i in range(samplers)]
    if bridge:
        schema[RAY_BRIDGE] = list(_BRIDGE_SLOTS)
    return schema


def process_start_time() -> float:
    """When this process was created, on the ``time.monotonic()`` clock (0.0 where /proc cannot tell).

    /proc/self/stat's field 22 counts clock ticks since boot (CLOCK_BOOTTIME); the difference of the
    two clocks now (suspended time, none on a server) converts it. Resolution: one tick, 10 ms.
    """
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # fields after the command: 3, 4, ... -> 22 is [19]
        since_boot = ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
    return since_boot - (time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic())


_startup: dict[str, float] = {}  # this process's t_exec / t_main / t_imported, set by child_main


def mark_ready(row: Any) -> None:
    """Write this process's start-up timestamps and ``t_ready`` (now) into its row; call before the loop."""
    for name, t in _startup.items():
        row.set(name, t)
    row.set("torch_loaded", float("torch" in sys.modules))
    row.set("t_ready", time.monotonic())


def mark_first(row: Any) -> None:
    """``t_first``: the role's first unit of work is done (the caller calls it once)."""
    row.set("t_first", time.monotonic())


def set_state(row: Any, state: int) -> None:
    """Set a role's state word and its ``done`` slot (what other roles poll: one float load)."""
    row.set_state(state)
    row.set("done", 1.0 if state == DONE else 0.0)


class Control:
    """A child's read-only view of the control row (the supervisor writes it through ``StatsBlock.role``)."""

    def __init__(self, block: Any) -> None:
        self._row = block.role(CONTROL)

    def phase(self) -> int:
        return int(self._row.get("phase"))

    def ckpt_request(self) -> int:
        return int(self._row.get("ckpt_request"))

    def eval_request(self) -> tuple[int, int]:
        """(request number, env step to evaluate at)."""
        return int(self._row.get("eval_request")), int(self._row.get("eval_step"))

    def quota(self, row: int) -> int:
        """Env steps sampler row ``row`` may take in this session (the supervisor may raise it mid-run)."""
        return int(self._row.get(quota_slot(row)))


class Napper:
    """Back-off sleeps for polling loops: 20 us doubling to ``max_s``; :meth:`reset` after progress.

    Waits in this design are short (a learner waits for one more transition, a sampler for one more
    update), so the first naps are tiny; a long wait settles at ``max_s`` and costs no CPU.
    """

    def __init__(self, max_s: float = 1e-3) -> None:
        self.max_s, self._nap = max_s, 0.0

    def nap(self) -> float:
        """Sleep once; returns the seconds slept (for the wait-time counters)."""
        self._nap = min(self.max_s, max(2e-5, self._nap * 2))
        t = time.perf_counter()
        time.sleep(self._nap)
        return time.perf_counter() - t

    def reset(self) -> None:
        self._nap = 0.0


@dataclass
class ChildArgs:
    """Everything a spawned role needs (pickled by ``spawn``: plain values and paths only).

    Attributes:
        role: role name (``sampler-0``, ``critic-learner``, ...).
        index: sampler row index (0 for other roles).
        config: the resolved :class:`~spreeze_like.config.TrainConfig`.
        spec: the :class:`~spreeze_like.algos.spec.AlgoSpec` the supervisor derived from the env's sizes,
            so that no role makes an env just to read them (a learner never makes one at all).
        segments: the run's :class:`~spreeze_like.procs.segments.RunSegments` (names and shapes).
        run_dir: the run folder.
        parent_pid: the supervisor's pid (the parent-death check compares with it).
        start_step: global env step this session starts from (0, or the resumed checkpoint's).
        checkpoint_path: checkpoint to restore this role's state from (resume), or None.
        generation: resume count (seeds differ per session).
        restarts: how often this role was restarted in this session (seeds differ per restart).
        extra: role-specific settings (pacing constants, restored counters, ...; quotas are in the control row).
    """

    role: str
    index: int
    config: Any
    spec: Any
    segments: Any
    run_dir: str
    parent_pid: int
    start_step: int = 0
    checkpoint_path: str | None = None
    generation: int = 0
    restarts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def error_file(run_dir: str | Path, role: str) -> Path:
    """Where a child leaves its one-line user-facing error for the supervisor."""
    return Path(run_dir) / f".error.{role}.txt"


def take_error_line(run_dir: str | Path, role: str) -> str:
    """The supervisor's side of :func:`error_file`: the line a dead child left (the file removed once
    read), or a generic line where it could write none (a full disk: it printed the line instead)."""
    return _take_text(error_file(run_dir, role)).strip() or f"{role} failed (its message is above)"


def traceback_file(run_dir: str | Path, role: str) -> Path:
    """Where a child leaves the traceback of the exception it died of, for the supervisor to print once."""
    return Path(run_dir) / f".traceback.{role}.txt"


def take_traceback(run_dir: str | Path, role: str) -> str:
    """The supervisor's side of :func:`traceback_file`: the text a dead child left ("" if none), the file removed."""
    return _take_text(traceback_file(run_dir, role))


def _take_text(path: Path) -> str:
    """A file's text ("" if it cannot be read), the file removed: what a dead child left for the supervisor."""
    try:
        text = path.read_text()
    except OSError:
        text = ""
    path.unlink(missing_ok=True)
    return text


def _leave_text(path: Path, text: str, shown: str) -> None:
    """A dying child's side of :func:`_take_text`: ``text`` into ``path``; where that fails (a full disk, which the
    error may well be; a run folder gone), ``shown`` goes to stderr instead, above the supervisor's lines."""
    try:
        path.write_text(text)
    except OSError:
        print(shown, end="", file=sys.stderr, flush=True)
        path.unlink(missing_ok=True)  # created but empty


def _exit_on_stop_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signal.SIGTERM)  # the status a terminated role always had: what the supervisor reads


def _group_sigterm(signum: int, frame: Any) -> None:
    """A SIGTERM to the whole process group is the supervisor's to act on (procs/children.py); this role goes on
    until told to stop. A handler, not ``SIG_IGN``, so that what the role's env execs starts with the default; a
    process the env forks from the role takes the default back and the signal's end."""
    if os.getpid() != _role_pid:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


_role_pid = 0


def child_main(module: str, args: ChildArgs) -> None:
    """Entry point of every spawned role process: ``spreeze_like.procs.<module>.run(args)``.

    A dotted ``module`` is imported as named (tests put a stand-in in a role's place, e.g. a fake Ray bridge).
    """
    _startup["t_main"] = time.monotonic()
    _startup["t_exec"] = process_start_time()
    from spreeze_like.errors import SpreezeError, first_line
    from spreeze_like.ipc import child_setup

    child_setup(args.parent_pid)  # dies with the supervisor; Ctrl-C is the supervisor's business
    # The supervisor's stop signal (a child that missed its exit deadline) unwinds like an exception, so
    # ``finally`` blocks still run: the monitor closes its event files instead of losing them. SIGTERM, ignored
    # since the start (procs/children.py), is the supervisor's: it reaches every process when sent to the group.
    global _role_pid
    _role_pid = os.getpid()
    signal.signal(ROLE_STOP_SIGNAL, _exit_on_stop_signal)
    signal.signal(signal.SIGTERM, _group_sigterm)
    if args.role.endswith("learner"):
        from spreeze_like.cpu_math import flushing_threads, set_learner_math

        set_learner_math(args.config.torch_threads)  # threads, and subnormals flushed (cpu_math.py)
        _startup["flushing_threads"] = float(flushing_threads())  # all of them: the pool starts flushing
    else:  # samplers, evaluator and monitor never import torch (numpy policy, tensorboard writer); if a
        os.environ["OMP_NUM_THREADS"] = "1"  # user's env module does, it gets one thread, read at its import
    _lower_priority(args.role)
    # one left by a session whose supervisor was killed before it read it is not this process's
    with contextlib.suppress(OSError):
        traceback_file(args.run_dir, args.role).unlink(missing_ok=True)
    try:
        body = importlib.import_module(module if "." in module else f"spreeze_like.procs.{module}")
        _startup["t_imported"] = time.monotonic()
        body.run(args)
    except SpreezeError as exc:
        line = first_line(exc)
        _leave_text(error_file(args.run_dir, args.role), line, f"[spreeze] {args.role}: {line}\n")
        _fast_exit(EXIT_USER_ERROR if exc.exit_code == SpreezeError.exit_code else EXIT_ROLE_ERROR)
    except Exception:  # noqa: BLE001 - the user's env code or a bug: the supervisor prints its traceback once
        text = traceback.format_exc()
        _leave_text(traceback_file(args.run_dir, args.role), text, f"Process {args.role}:\n{text}")  # as Python would
        _fast_exit(1)  # what an uncaught exception in a multiprocessing child exits with
    _fast_exit(0)


# Scheduler niceness per role. The learners set the pace of a run (pacing.py) and stay at the
# user's priority; a sampler, which wakes often and only feeds them, yields when a core is
# contended, so its wake-up does not preempt an update in hand. It still gets the CPU it needs:
# the critic waits for its data, and while a learner waits the sampler runs. The evaluator and the
# monitor stay at normal priority: niced, they starved on a loaded machine and delayed the end of a
# run (docs/parallel.md, "Start-up on small machines"); they are idle most of the time anyway.
# The Ray bridge only feeds too (it waits on Ray's replies and copies them into rings), so it yields like one.
ROLE_NICENESS = {"sampler": 5, RAY_BRIDGE: 5}


def _lower_priority(role: str) -> None:
    increment = ROLE_NICENESS.get("sampler" if role.startswith("sampler-") else role, 0)
    if increment:
        try:
            os.nice(increment)
        except OSError:  # not permitted (rare for an increase): run at the inherited priority
            pass


def _fast_exit(status: int) -> None:
    """Exit now, skipping interpreter finalisation.

    The role's ``finally`` blocks have run (mappings closed, event files closed); what is left is
    tearing down torch's module state, which on a loaded machine takes seconds of CPU and would
    delay the supervisor's join. A child owns nothing that finalisation would clean up.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
