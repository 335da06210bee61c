"""Which role processes are hung: heartbeat ages against per-role limits, with pauses forgiven.

The supervisor calls :meth:`HangWatch.check` at every tick of its loop and kills what it returns
(a sampler, the evaluator or the monitor is then restarted; a hung learner ends the run). Owns no
resource: it reads the stats block's snapshot and ``/proc/<pid>/stat``.

Rules (review findings 8 and 9):

- Limits: ``--sampler-hang-s`` (default 60; also the ``ray-bridge``'s, which beats in every loop
  like a sampler; remote actors' hangs are the bridge's own business), ``--learner-hang-s`` (180), ``--evaluator-hang-s``
  (600; the evaluator beats during evaluations too), and :data:`MONITOR_HANG_S` for the monitor,
  which runs no user code (it reads shared memory and writes files, and a full disk no longer
  stops it), so it needs no flag.
- A role is *starting* until the process has claimed its row and its loop set the state word to
  ``RUNNING`` (importing torch, making its envs: a slow simulator's launch counts here). It then
  gets ``max(STARTUP_GRACE_S, its limit)`` from the process's start; the supervisor resets the state
  word before a restart, so a restarted role starts over.
- Paused, not hung: heartbeats and this check use CLOCK_MONOTONIC, which keeps counting while
  processes are stopped (SIGSTOP, Ctrl-Z's SIGTSTP) or frozen (the cgroup freezer: docker pause,
  a SLURM suspend), as CLOCK_BOOTTIME does; the two differ only while the machine is suspended,
  which MONOTONIC does not count, so after a suspend no age has grown (decision: MONOTONIC). A stop
  or freeze of the whole run stops the supervisor's loop too, so a gap of more than
  :data:`PAUSE_GAP_S` between two checks restarts every hang clock. A role whose own process is
  stopped (state ``T``/``t``: stopped alone) is not hung either; its clock restarts from the last
  time it was seen stopped. A role hung meanwhile is still killed, one limit after the pause.
- Not detected: a pause shorter than :data:`PAUSE_GAP_S` (limits are at least 1 s, 60 s and more
  by default), and a freeze of some roles' cgroup without the supervisor's (frozen processes show
  ``S`` or ``D``, not ``T``): such a role is killed after its limit, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spreeze_like.procs.control import RAY_BRIDGE, STARTING

MONITOR_HANG_S = 120.0
STARTUP_GRACE_S = 120.0  # importing torch on a loaded machine can take this long before the loop runs
# The supervisor's loop runs every 20-50 ms; the longest work in it, assembling a checkpoint, takes
# well under a second. A longer gap means it did not run: stopped, frozen, or a stalled machine.
PAUSE_GAP_S = 2.0


@dataclass(frozen=True)
class Hang:
    """A role to kill: its handle, the seconds it went without beating (or starting), and which of the two."""

    role: str
    child: Any
    age: float
    starting: bool

    def describe(self) -> str:
        what = "has not finished starting within" if self.starting else "has not beaten for"
        return f"{self.role} (pid {self.child.pid}) {what} {self.age:.0f} s"


class HangWatch:
    """See the module docstring.

    Args:
        config: the run's :class:`~spreeze_like.config.TrainConfig` (its ``*_hang_s`` limits).
        say: where the line about a detected pause goes.
    """

    def __init__(self, config: Any, say: Callable[[str], None]) -> None:
        self.limits = {"sampler": config.sampler_hang_s, "critic-learner": config.learner_hang_s,
                       "actor-learner": config.learner_hang_s, "evaluator": config.evaluator_hang_s,
                       "monitor": MONITOR_HANG_S, RAY_BRIDGE: config.sampler_hang_s}
        self.say = say
        self._checked_at: float | None = None
        self._busy_s = 0.0  # the loop's own work since the last check (see busy)
        self._clocks_from = -math.inf  # ages count from here at the earliest (the end of the last pause)
        self._stopped_seen: dict[str, float] = {}  # role -> when its process was last seen stopped
        self._killed: dict[str, int | None] = {}  # role -> the pid returned as hung (it may take a while to go)

    def limit(self, role: str) -> float:
        return self.limits["sampler" if role.startswith("sampler-") else role]

    def busy(self, seconds: float) -> None:
        """The supervisor's loop spent ``seconds`` on work of its own since the last check: not a pause.

        Assembling the first checkpoint imports torch in the supervisor (3 s on a 2-core machine,
        measured), which read as "did not run for 3 s" in every default run before this.
        """
        self._busy_s += max(0.0, seconds)

    def check(self, now: float, children: Mapping[str, Any], snap: Mapping[str, Mapping[str, float]]) -> list[Hang]:
        """The live roles that are hung now (each process once); ``now`` is ``time.monotonic()`` read after
        ``snap`` was taken (so that a pause before the snapshot shows as a gap here, not as heartbeat ages)."""
        gap = (now - self._checked_at - self._busy_s) if self._checked_at is not None else 0.0
        if gap > PAUSE_GAP_S:
            self._clocks_from = now
            self.say(f"[spreeze] this process did not run for {gap:.0f} s (the run was stopped "
                     "or frozen, or the machine stalled); heartbeat ages count from now")
        self._checked_at, self._busy_s = now, 0.0
        hung = []
        for role, child in children.items():
            if not child.alive or self._killed.get(role) == child.pid:
                continue
            since = max(self._clocks_from, self._stopped_seen.get(role, -math.inf))
            row = snap[role]
            starting = row["pid"] != child.pid or row["state"] == STARTING
            if starting:
                age = now - max(child.started_at, since)
                if age <= max(STARTUP_GRACE_S, self.limit(role)):
                    continue
            else:
                age = min(row["heartbeat_age_s"], now - since)
                if age <= self.limit(role):
                    continue
            if stopped(child.pid):
                self._stopped_seen[role] = now
                continue
            self._killed[role] = child.pid
            hung.append(Hang(role, child, age, starting))
        return hung


def stopped(pid: int | None) -> bool:
    """True if ``pid`` is stopped (``T``: SIGSTOP, SIGTSTP; ``t``: a debugger), from ``/proc/<pid>/stat``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] in (b"T", b"t")  # the state follows the command name's ")"
