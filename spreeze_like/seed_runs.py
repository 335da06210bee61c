"""One seed of a multi-seed run (:mod:`spreeze_like.seeds`): its child process, its record, its outcome.

Each seed is an ordinary run, ``python -m spreeze_like.run ... --seed S --logdir <folder>/seed_S``, so it
has every property of one (its run folder, checkpoints, ``--resume``, TensorBoard, its own cleanup).

Who creates and removes what:

- :meth:`SeedRun.start` starts the child in a session of its own (:func:`spreeze_like.run_launch.start_run`),
  so that a terminal's Ctrl-C reaches only the seeds process, which forwards it once to every child
  (:meth:`SeedRun.signal`); a run stops
  in order on the first SIGINT or SIGTERM and forces its stop on the second, as it does for a person.
- The run watches its parent first thing (``SPREEZE_DIE_WITH_PARENT``:
  :func:`spreeze_like.ipc.lifetime.die_with_launcher`): if the seeds process dies, even by SIGKILL, each
  run sends itself one SIGTERM and stops as for a user's SIGTERM (checkpoint, its own processes and
  shared-memory segments removed, exit 143). A run that is
  killed itself cleans up as any killed run does (its children die with it; the next run's start-up
  sweep unlinks its segments).
- The seeds process waits for every child it started (:meth:`SeedRun.poll`) before it exits.
- The child's console (stdout and stderr) goes to ``<folder>/seed_S/console.log``, appended to across
  sessions; the run folder, ``<folder>/seed_S/<env>__<algo>__<S>__<time>``, is the run's own.

What a seed ended with is read from the run's record, not from its console: the final evaluation is
the last ``eval`` row of its ``curves.csv`` (the final evaluation is always one), with the run's own
wall time across sessions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spreeze_like.checkpoint import checkpoint_step, list_checkpoints
from spreeze_like.curves import Curves, read_curves
from spreeze_like.errors import SpreezeError
from spreeze_like.run_launch import signal_run, start_run

RECORD_FILE = "seeds.json"  # a seeds folder's record (spreeze_like.seeds)
CONSOLE_LOG = "console.log"
CONFIG_FILE = "config.json"

# What a seed's record says of it. "refused": the run stopped with a bad-input error before it made a run
# folder (every seed would be refused alike); "stopped": interrupted by a stop of the seeds process, resumable.
STATUSES = ("waiting", "running", "done", "failed", "refused", "stopped")
STOP_STATUSES = (130, 143)  # a run's exit status after an orderly (or forced) stop by SIGINT / SIGTERM


@dataclass
class SeedRecord:
    """One seed's line of ``seeds.json``."""

    seed: int
    status: str = "waiting"
    cell: int | None = None  # its setting's index in the folder's grid (``--vary``); None: no grid
    run_dir: str | None = None  # relative to the seeds folder (which may move)
    exit_status: int | None = None
    final_return: float | None = None
    env_steps: int | None = None
    wall_s: float | None = None  # the run's own, across its sessions (its curves' last row)
    line: str | None = None  # the error line of a failed or refused seed
    reached_steps: int | None = None  # --reach X: env step of the first evaluation >= X (None: never, or no --reach)
    reached_s: float | None = None  # ... and the run's wall time then (its curves.csv's wall_s)
    pid: int | None = None  # the run's process while it runs
    started: list[float] = field(default_factory=list)  # unix times each session started and ended
    ended: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeedRecord:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        record = cls(**known)
        if record.status not in STATUSES:
            raise ValueError(f"unknown status {record.status!r}")
        return record

    @property
    def finished(self) -> bool:
        return self.status == "done"


def seed_dir(folder: Path, seed: int, cell_folder: str = "") -> Path:
    """Where seed ``seed``'s run folders and console log live (of a grid's cell: in the cell's folder)."""
    return folder / cell_folder / f"seed_{seed}"


def run_folders(where: Path) -> list[Path]:
    """The run folders under a seed's folder (those with a ``config.json``), oldest first."""
    if not where.is_dir():
        return []
    found = [p for p in where.iterdir() if p.is_dir() and (p / CONFIG_FILE).is_file()]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


class SeedRun:
    """The child process of one seed's session (see the module docstring)."""

    def __init__(self, record: SeedRecord, folder: Path, run_args: list[str], where: Path | None = None) -> None:
        self.record, self.folder, self.run_args = record, folder, run_args
        self.dir = where or seed_dir(folder, record.seed)
        self.proc: subprocess.Popen[bytes] | None = None
        self._known: set[Path] = set()

    def start(self) -> None:
        """Start ``python -m spreeze_like.run RUN_ARGS`` with its console going to the seed's log."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            log = open(self.dir / CONSOLE_LOG, "ab")  # noqa: SIM115 - the child holds it; closed below
        except OSError as exc:
            raise SpreezeError(f"cannot write to {self.dir}: {exc.strerror or exc}; free space or pass another "
                               "--logdir") from None
        self._known = set(run_folders(self.dir))
        try:
            self.proc = start_run(self.run_args, log, PYTHONUNBUFFERED="1")
        except OSError as exc:  # no memory or no process slots left: this command's failure, in one line
            raise SpreezeError(f"cannot start seed {self.record.seed}'s run: {exc.strerror or exc}") from None
        finally:
            log.close()
        self.record.status, self.record.pid, self.record.exit_status = "running", self.proc.pid, None
        self.record.started.append(time.time())

    def find_run_dir(self) -> Path | None:
        """The run folder this session works in: the one it was resumed from, or the one it made (looked for
        until found; a fresh start clears ``record.run_dir`` first)."""
        if self.record.run_dir:
            return self.folder / self.record.run_dir
        made = [p for p in run_folders(self.dir) if p not in self._known]
        if made:
            self.record.run_dir = made[-1].relative_to(self.folder).as_posix()
            return made[-1]
        return None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the run's process (it is the leader of its session; its children are its own)."""
        if self.proc is not None:
            signal_run(self.proc, signum)

    def poll(self, stopping: bool) -> bool:
        """True once the child has exited, with its record filled in from its run folder and console."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            self.find_run_dir()
            return False
        record = self.record
        record.exit_status, record.pid = code, None
        record.ended.append(time.time())
        run_dir = self.find_run_dir()
        if code == 0:
            record.status, record.line = "done", None
            read_outcome(record, run_dir)
        elif stopping and code in (*STOP_STATUSES, -signal.SIGINT, -signal.SIGTERM):
            record.status, record.line = "stopped", None
        elif code == 2 and run_dir is None:
            record.status, record.line = "refused", self.why(code)
        else:
            record.status, record.line = "failed", self.why(code)
        return True

    def why(self, code: int) -> str:
        """Why the run ended: its console's last ``error:`` line; else how it died (a signal), or its exit
        status with the console's last line (a traceback's exception)."""
        lines = self._console_tail()
        errors = [ln for ln in lines if ln.startswith("error:")]
        if errors:
            return errors[-1]
        if code < 0 or not lines:
            return describe_exit(code)
        return f"{describe_exit(code)}: {lines[-1]}"

    def _console_tail(self) -> list[str]:
        try:
            with open(self.dir / CONSOLE_LOG, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
                return [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return []


def describe_exit(code: int) -> str:
    """``exit status N`` or ``killed by SIGNAME``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _curves(run_dir: Path | None) -> Curves | None:
    """The run folder's curves, or None (no folder yet, no curves.csv yet, unreadable)."""
    if run_dir is None:
        return None
    try:
        return read_curves(run_dir)
    except (OSError, SpreezeError):
        return None


def read_outcome(record: SeedRecord, run_dir: Path | None) -> None:
    """Fill in the final evaluation, env steps and wall time from the run folder's curves (None where absent)."""
    record.final_return = record.env_steps = record.wall_s = None
    curves = _curves(run_dir)
    if curves is None:
        return
    if curves.eval:
        last = curves.eval[-1]
        record.final_return, record.env_steps = float(last.episode_return), int(last.env_steps)
    rows = curves.train + curves.eval
    if rows:
        record.wall_s = max(p.wall_s for p in rows)


def read_reach(record: SeedRecord, run_dir: Path | None, threshold: float) -> None:
    """Fill in when the run's evaluation first reached ``threshold`` (both None when it never did)."""
    record.reached_steps = record.reached_s = None
    curves = _curves(run_dir)
    for point in curves.eval if curves is not None else ():
        if point.episode_return >= threshold:
            record.reached_steps, record.reached_s = int(point.env_steps), float(point.wall_s)
            return


def latest_eval(run_dir: Path | None) -> tuple[int, float] | None:
    """(env step, mean return) of the run's newest evaluation so far, for the progress line."""
    curves = _curves(run_dir)
    if curves is None or not curves.eval:
        return None
    return curves.eval[-1].env_steps, curves.eval[-1].episode_return


def resume_args(record: SeedRecord, folder: Path, overrides: list[str]) -> list[str] | None:
    """The run's arguments to continue seed ``record`` from its run folder, or None when it has nothing to
    continue from (no run folder, or one without a checkpoint: the seed starts again in a new one).

    ``--resume`` keeps the run's saved settings, as ``python -m spreeze_like.run --resume`` does, except for
    ``overrides``: the run flags typed with the seeds command's ``--resume`` (``--env`` typed again for a
    ``module:EnvId``, a larger ``--total-steps``).
    """
    run_dir = folder / record.run_dir if record.run_dir else None
    if run_dir is None or not run_dir.is_dir() or not list_checkpoints(run_dir):
        return None
    return ["--resume", str(run_dir), *overrides]


def at_total_steps(record: SeedRecord, folder: Path, total_steps: int) -> bool:
    """True when the seed's newest checkpoint is at ``total_steps`` already: nothing is left to run (a run
    refuses such a resume; its seeds process was killed as it ended)."""
    if not record.run_dir:
        return False
    checkpoints = list_checkpoints(folder / record.run_dir)
    return bool(checkpoints) and checkpoint_step(checkpoints[-1]) >= total_steps
