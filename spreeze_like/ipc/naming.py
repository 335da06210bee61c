"""Names of our shared-memory objects, run ids, creators' lifetime locks, and the sweep of leftovers.

Every POSIX shared-memory segment (and semaphore, should one ever be needed) that spreeze_like
creates is named::

    /spz.<run-id>.<creator-pid>.<kind>.<index>

- ``run-id``: a short random hex id of one run (:func:`new_run_id`), so two runs on one desktop
  never clash and ``ls /dev/shm`` tells them apart.
- ``creator-pid``: the process that created the object, i.e. the one that must unlink it (the
  supervisor), as *its* PID namespace numbers it. For people and tools reading ``ls /dev/shm``;
  the sweep does not trust it alone (see below).
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

Liveness and the sweep. A creator holds a *lifetime lock* (a shared ``flock``) on each segment
file from creation to unlink (:func:`hold_lifetime_lock`, called by ``Segment.create``); the
kernel drops it when the creator dies, SIGKILL and OOM kill included. If the creator died,
nobody else will unlink its objects, so any later start may: :func:`sweep_shm` unlinks an entry
of ours once it can take an exclusive lock on it and the pid in its name does not map it. A pid
alone cannot tell: containers sharing /dev/shm have their own PID namespaces (the pid means
another process here, or none), and ``hidepid`` hides other users' processes. Entries of other
users, and entries the sweep cannot remove, are reported and left alone.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import secrets
import stat
from dataclasses import dataclass, field

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


# ----------------------------------------------------------------------------------- the sweep
@dataclass
class SweepReport:
    """What :func:`sweep_shm` did with each entry of ours.

    Attributes:
        removed: Entries unlinked (their creator is dead).
        live: Entries kept because a live process holds or maps them.
        skipped: ``(entry, why)`` for entries the sweep may not or could not remove: other users'
            files, non-regular files, files it cannot open or unlink.
    """

    removed: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def removed_line(self, show: int = 4) -> str | None:
        """One line naming what was removed (None if nothing was)."""
        if not self.removed:
            return None
        return f"removed {len(self.removed)} shared-memory segment(s) left by dead runs: {_first(self.removed, show)}"

    def skipped_line(self, shm_dir: str = SHM_DIR, show: int = 4) -> str | None:
        """One line naming what was left alone and why (None if nothing was)."""
        if not self.skipped:
            return None
        n = len(self.skipped)
        what = _first([f"{entry} ({why})" for entry, why in self.skipped], show)
        return f"left {n} entr{'y' if n == 1 else 'ies'} of {shm_dir} alone: {what}"

    def report_lines(self, shm_dir: str = SHM_DIR, show: int = 4) -> list[str]:
        """What a user is told at start: at most two lines (removed; left alone and why)."""
        return [line for line in (self.removed_line(show), self.skipped_line(shm_dir, show)) if line]


def _first(items: list[str], show: int) -> str:
    more = f", and {len(items) - show} more" if len(items) > show else ""
    return ", ".join(items[:show]) + more


class _Mappings:
    """Files mapped by a pid, read once per sweep from ``/proc/<pid>/maps``.

    The fallback liveness test for entries nobody holds a lifetime lock on (named semaphores, test
    and benchmark helpers that call posix_ipc directly, an older spreeze_like): the pid in the name
    must be alive here *and* map the very file. A reused pid, or the pid of a creator in another
    namespace that means another process here, maps other files.
    """

    def __init__(self) -> None:
        self._by_pid: dict[int, set[tuple[int, int, int]] | None] = {}
        self._have_proc = os.path.isdir("/proc/self")

    def maps(self, pid: int, st: os.stat_result) -> bool:
        if not self._have_proc:  # no /proc (not Linux): the pid is all there is
            return pid_alive(pid)
        if pid not in self._by_pid:
            self._by_pid[pid] = self._read(pid)
        files = self._by_pid[pid]
        return files is not None and (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) in files

    @staticmethod
    def _read(pid: int) -> set[tuple[int, int, int]] | None:
        if pid <= 0:
            return None
        files = set()
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:  # address perms offset major:minor inode [path]
                    parts = line.split(None, 5)
                    if len(parts) >= 5 and parts[4] != "0":
                        major, minor = parts[3].split(":")
                        files.add((int(major, 16), int(minor, 16), int(parts[4])))
        except (FileNotFoundError, ProcessLookupError):  # no such process
            return None
        except OSError:  # another user's process: it cannot be the creator of a file of our uid
            return None
        return files


def _sweep_entry(entry: str, shm_dir: str, mappings: _Mappings, remove: bool) -> tuple[str, str]:
    """Decide one entry, and unlink it if it is dead and ``remove``; returns (state, why).

    States: ``removed``, ``dead`` (not removed because ``remove`` is False), ``live``, ``skipped``,
    ``gone`` (vanished while we looked).
    """
    path = os.path.join(shm_dir, entry)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone", ""
    if not stat.S_ISREG(st.st_mode):
        return "skipped", "not a regular file"
    if st.st_uid != os.geteuid():
        # Never touch another user's entries, even as root: their liveness cannot be told from here.
        return "skipped", f"owned by uid {st.st_uid}: not ours to remove"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "gone", ""
    except OSError as exc:
        return "skipped", f"cannot open it: {exc.strerror}"
    try:
        try:
            # Exclusive, so a creator that has not taken its shared lock yet waits for us and then sees
            # the name gone (hold_lifetime_lock) instead of keeping an unnamed segment.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "live", "its creator holds its lifetime lock"
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino) or held.st_nlink == 0:
            return "gone", ""  # replaced or removed while we looked: the next sweep decides
        parsed = parse_name(entry)
        pid = parsed.creator_pid if parsed is not None else 0
        if mappings.maps(pid, held):
            return "live", f"creator pid {pid} maps it"
        if not remove:
            return "dead", ""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return "gone", ""
        except OSError as exc:  # EPERM, EROFS, ...: report it, never crash the start of a run
            return "skipped", f"cannot remove it: {exc.strerror}"
        return "removed", ""
    finally:
        os.close(fd)  # drops our exclusive lock


def probe_entries(shm_dir: str = SHM_DIR) -> list[tuple[str, str, str]]:
    """``(entry, state, why)`` for every entry of ours, removing nothing (for tools/shm_doctor.py).

    States as in the sweep: ``live``, ``dead``, ``skipped`` (``gone`` entries are left out).
    """
    mappings = _Mappings()
    rows = []
    for entry in list_our_files(shm_dir):
        state, why = _sweep_entry(entry, shm_dir, mappings, remove=False)
        if state != "gone":
            rows.append((entry, state, why))
    return rows


def sweep_shm(shm_dir: str = SHM_DIR) -> SweepReport:
    """Unlink every segment and semaphore of ours whose creator is dead; report what it left and why.

    Run at every start (by the supervisor, by tools and by tests): a creator that was SIGKILLed,
    OOM-killed or crashed never unlinked its objects, and nobody else owns them.

    An entry counts as alive, and stays, if a process holds a lock on its file (every
    :meth:`~spreeze_like.ipc.segment.Segment.create` holds one until the unlink, and the kernel drops
    it at death: this works across PID namespaces, e.g. containers sharing /dev/shm, and under
    ``hidepid``), or if the pid in its name is alive here and maps the file (creators that hold no
    lock). The pid alone proves nothing: in another namespace it means another process or none.

    Entries of other users, and entries it cannot open or unlink, are skipped and reported, never
    raised: one user's leftover must not stop another user's runs (/dev/shm is sticky: EPERM).

    Args:
        shm_dir: Where POSIX shared memory lives (``/dev/shm`` on Linux).
    """
    report = SweepReport()
    mappings = _Mappings()
    try:
        entries = list_our_files(shm_dir)
    except OSError as exc:  # an unreadable directory: nothing we can do, and no reason to stop a run
        report.skipped.append((shm_dir, f"cannot list it: {exc.strerror}"))
        return report
    for entry in entries:
        state, why = _sweep_entry(entry, shm_dir, mappings, remove=True)
        if state == "removed":
            report.removed.append(entry)
        elif state == "live":
            report.live.append(entry)
        elif state == "skipped":
            report.skipped.append((entry, why))
    return report


def sweep_dead_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """:func:`sweep_shm`, returning only the /dev/shm file names removed, sorted."""
    return sweep_shm(shm_dir).removed


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
        if parsed is not None and parsed.creator_pid == pid:
            if _unlink_file(entry, shm_dir):
                removed.append(entry)
            release_lifetime_lock(entry)
    return removed


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
