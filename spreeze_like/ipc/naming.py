"""Names of our shared-memory objects, run ids, and creators' lifetime locks.

Every POSIX shared-memory segment (and semaphore, should one ever be needed) that spreeze_like
creates is named::

    /spz.<run-id>.<creator-pid>.<kind>.<index>

- ``run-id``: a short random hex id of one run (:func:`new_run_id`), so two runs on one desktop
  never clash and ``ls /dev/shm`` tells them apart.
- ``creator-pid``: the process that created the object, i.e. the one that must unlink it (the
  supervisor), as *its* PID namespace numbers it. For people and tools reading ``ls /dev/shm``;
  the sweep does not trust it alone (:mod:`spreeze_like.ipc.sweep`).
- ``kind``: what it is (``ring``, ``ctl``, ``w-actor``, ``w-critic``, ``prio``, ``replay``, ...);
  lower-case letters, digits and ``-``.
- ``index``: a non-negative integer telling objects of one kind apart (the sampler number).

On Linux the segment ``/spz.X`` is the file ``/dev/shm/spz.X`` and a named semaphore ``/spz.X``
is ``/dev/shm/sem.spz.X``.

The prefix ``spz`` can be lengthened with the environment variable ``SPREEZE_LIKE_SHM_PREFIX``
(``spz`` followed by at most 16 of a-z and 0-9, e.g. ``spzgw0``): runs, sweeps and
tools/shm_doctor.py see only the names of their own prefix. The test suite gives each pytest-xdist
worker its own, so that one worker's start never sweeps what another worker's test killed and is
about to inspect, and each worker's leak check sees its own segments only (tests/conftest.py).
Every process of a run reads the same value: the roles inherit the supervisor's environment.

Creators' lifetime locks (:func:`hold_lifetime_lock`) live here too: a segment's creator holds one
from creation to unlink; the kernel drops it when the creator dies, and :mod:`spreeze_like.ipc.sweep`
takes a lock nobody holds as the proof that a leftover may go.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import secrets
from dataclasses import dataclass

import psutil

SHM_DIR = "/dev/shm"
DEFAULT_PREFIX = "spz"
PREFIX_ENV = "SPREEZE_LIKE_SHM_PREFIX"
_PREFIX_RE = re.compile(r"^spz[a-z0-9]{0,16}$")
_SEM_FILE_PREFIX = "sem."
_RUN_ID_RE = re.compile(r"^[0-9a-zA-Z]{1,32}$")
_KIND_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


def shm_prefix() -> str:
    """The first part of every name: ``spz``, or ``$SPREEZE_LIKE_SHM_PREFIX`` where that is set.

    Raises:
        ShmError: If the variable is set to something else than ``spz`` and up to 16 of a-z, 0-9.
    """
    prefix = os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX
    if not _PREFIX_RE.match(prefix):
        from spreeze_like.errors import ShmError

        raise ShmError(f"{PREFIX_ENV}={prefix!r} is not a shared-memory prefix: use 'spz' followed by at most "
                       f"16 lower-case letters and digits (e.g. spzgw0), or unset it")
    return prefix


@functools.lru_cache(maxsize=8)
def _name_re(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"^/?(?:sem\.)?{prefix}\.([0-9a-zA-Z]{{1,32}})\.(\d+)\.([a-z0-9][a-z0-9-]{{0,31}})\.(\d+)$")


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
        return f"/{shm_prefix()}.{self.run_id}.{self.creator_pid}.{self.kind}.{self.index}"

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
    name of a named semaphore (``sem.spz...``); names of another prefix (:func:`shm_prefix`) are not ours.
    """
    m = _name_re(shm_prefix()).match(name)
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
    """True if ``pid`` names a live process *in this PID namespace* (a zombie counts as dead).

    Only for peers known to share our namespace (children, a ring's other side). Whether a
    segment's creator lives is not decided by its pid: see :func:`sweep_shm`.
    """
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # exists, owned by someone else
        return True


# ----------------------------------------------------------------------------------- lifetime locks
# Entry (file name under /dev/shm) -> descriptor on which this process holds the entry's lifetime lock.
_lifetime_locks: dict[str, int] = {}


def hold_lifetime_lock(name: str, fd: int) -> bool:
    """Take the creator's lifetime lock on a segment it just created, and keep it until the unlink.

    The lock is a shared ``flock`` on the segment's file, held through ``fd`` (which this call keeps
    open; it must be close-on-exec so that children do not inherit it). The kernel drops it when the
    creator dies, however it dies and whatever its PID namespace: the sweep's proof of death. (A
    child made by a plain ``fork`` without exec shares the lock until it exits too; the trainer
    starts every child with ``spawn``.)

    Returns:
        False if the name was removed before the lock was taken (a sweep saw the fresh, not yet
        locked segment as a leftover): the caller closes ``fd`` and creates the segment again.
    """
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits out a sweep's brief exclusive probe
    if os.fstat(fd).st_nlink == 0:
        return False
    _lifetime_locks[name.lstrip("/")] = fd
    return True


def release_lifetime_lock(name: str) -> None:
    """Drop the lifetime lock of ``name`` (after unlinking it); no-op if this process holds none."""
    fd = _lifetime_locks.pop(name.lstrip("/"), None)
    if fd is not None:
        os.close(fd)
