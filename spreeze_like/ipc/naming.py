"""Names of our shared-memory objects, run ids, and the sweep of objects whose creator died.

Every POSIX shared-memory segment (and semaphore, should one ever be needed) that spreeze_like
creates is named::

    /spz.<run-id>.<creator-pid>.<kind>.<index>

- ``run-id``: a short random hex id of one run (:func:`new_run_id`), so two runs on one desktop
  never clash and ``ls /dev/shm`` tells them apart.
- ``creator-pid``: the process that created the object, i.e. the one that must unlink it (the
  supervisor). If that process is dead, nobody else will unlink it, so any later start may:
  that is what :func:`sweep_dead_segments` does.
- ``kind``: what it is (``ring``, ``ctl``, ``w-actor``, ``w-critic``, ``prio``, ``replay``, ...);
  lower-case letters, digits and ``-``.
- ``index``: a non-negative integer telling objects of one kind apart (the sampler number).

On Linux the segment ``/spz.X`` is the file ``/dev/shm/spz.X`` and a named semaphore ``/spz.X``
is ``/dev/shm/sem.spz.X``.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass

import psutil

SHM_DIR = "/dev/shm"
PREFIX = "spz"
_SEM_FILE_PREFIX = "sem."
_RUN_ID_RE = re.compile(r"^[0-9a-zA-Z]{1,32}$")
_KIND_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_NAME_RE = re.compile(r"^/?(?:sem\.)?spz\.([0-9a-zA-Z]{1,32})\.(\d+)\.([a-z0-9][a-z0-9-]{0,31})\.(\d+)$")


@dataclass(frozen=True)
class ShmName:
    """The parts of a shared-memory name ``/spz.<run_id>.<creator_pid>.<kind>.<index>``.

    Attributes:
        run_id: Id of the run the object belongs to.
        creator_pid: Pid of the process that created it and must unlink it.
        kind: What the object is (``ring``, ``ctl``, ``w-actor``, ...).
        index: Number telling objects of one kind apart.
    """

    run_id: str
    creator_pid: int
    kind: str
    index: int

    @property
    def name(self) -> str:
        """The POSIX name with its leading slash, as posix_ipc takes it."""
        return f"/{PREFIX}.{self.run_id}.{self.creator_pid}.{self.kind}.{self.index}"

    def __str__(self) -> str:
        return self.name


def new_run_id() -> str:
    """A fresh random run id: 8 hex digits (32 bits), short enough to read in ``ls /dev/shm``."""
    return secrets.token_hex(4)


def segment_name(run_id: str, kind: str, index: int = 0, creator_pid: int | None = None) -> str:
    """Build ``/spz.<run_id>.<creator_pid>.<kind>.<index>``.

    Args:
        run_id: Run id (letters and digits, see :func:`new_run_id`).
        kind: Object kind: lower-case letters, digits and ``-``, at most 32 characters.
        index: Non-negative index among objects of this kind.
        creator_pid: Pid of the creating process; this process by default.

    Returns:
        The name with its leading slash.

    Raises:
        ValueError: If a part would make the name ambiguous to parse (a dot, an upper-case kind, ...).
    """
    if not _RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r} must be 1-32 letters or digits")
    if not _KIND_RE.match(kind):
        raise ValueError(f"segment kind {kind!r} must be 1-32 of a-z, 0-9 and '-', starting with a letter or digit")
    if index < 0:
        raise ValueError(f"segment index must be >= 0, got {index}")
    pid = os.getpid() if creator_pid is None else int(creator_pid)
    return ShmName(run_id, pid, kind, int(index)).name


def parse_name(name: str) -> ShmName | None:
    """Parse one of our names; ``None`` if ``name`` is not ours.

    Accepts the POSIX name (``/spz...``), the file name under /dev/shm (``spz...``) and the file
    name of a named semaphore (``sem.spz...``).
    """
    m = _NAME_RE.match(name)
    if m is None:
        return None
    return ShmName(run_id=m.group(1), creator_pid=int(m.group(2)), kind=m.group(3), index=int(m.group(4)))


def list_our_files(shm_dir: str = SHM_DIR, run_id: str | None = None) -> list[str]:
    """File names under ``shm_dir`` that are ours (segments and semaphores), optionally of one run."""
    try:
        entries = os.listdir(shm_dir)
    except FileNotFoundError:  # not Linux, or no /dev/shm: nothing of ours can be there
        return []
    out = []
    for entry in sorted(entries):
        parsed = parse_name(entry)
        if parsed is not None and (run_id is None or parsed.run_id == run_id):
            out.append(entry)
    return out


def pid_alive(pid: int) -> bool:
    """True if ``pid`` names a live process (a zombie, which has exited but not been reaped, is dead)."""
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # exists, owned by someone else
        return True


def _unlink_file(entry: str, shm_dir: str) -> bool:
    """Unlink one of our /dev/shm entries; False if it was already gone.

    On Linux ``shm_unlink("/x")`` and ``sem_unlink("/x")`` are glibc wrappers around unlinking
    ``/dev/shm/x`` and ``/dev/shm/sem.x``, so unlinking the file is the same operation, and it also
    works on a test directory standing in for /dev/shm.
    """
    try:
        os.unlink(os.path.join(shm_dir, entry))
        return True
    except FileNotFoundError:
        return False


def sweep_dead_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Unlink every segment and semaphore of ours whose creator process is dead.

    Run at every start (by the supervisor, by tools and by tests): a creator that was SIGKILLed,
    OOM-killed or crashed never unlinked its objects, and nobody else owns them. Objects of live
    creators (another run on this desktop) are left alone.

    Args:
        shm_dir: Where POSIX shared memory lives (``/dev/shm`` on Linux).

    Returns:
        The /dev/shm file names removed, sorted.
    """
    removed = []
    alive: dict[int, bool] = {}
    for entry in list_our_files(shm_dir):
        parsed = parse_name(entry)
        assert parsed is not None  # list_our_files only returns parseable names
        pid = parsed.creator_pid
        if pid not in alive:
            alive[pid] = pid_alive(pid)
        if not alive[pid] and _unlink_file(entry, shm_dir):
            removed.append(entry)
    return removed


def unlink_run(run_id: str, creator_pid: int | None = None, shm_dir: str = SHM_DIR) -> list[str]:
    """Unlink every object of one run created by ``creator_pid`` (this process by default).

    The supervisor's last line of defence on shutdown (``finally``/``atexit``): whatever it created
    for this run goes, even objects whose :class:`~spreeze_like.ipc.segment.Segment` was lost.

    Returns:
        The /dev/shm file names removed, sorted.
    """
    pid = os.getpid() if creator_pid is None else creator_pid
    removed = []
    for entry in list_our_files(shm_dir, run_id=run_id):
        parsed = parse_name(entry)
        if parsed is not None and parsed.creator_pid == pid and _unlink_file(entry, shm_dir):
            removed.append(entry)
    return removed
