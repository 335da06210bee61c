"""The sweep of leftovers: which of our /dev/shm entries a dead creator left, and removing them.

Liveness and the sweep. A creator holds a *lifetime lock* (a shared ``flock``) on each segment
file from creation to unlink (:func:`~spreeze_like.ipc.naming.hold_lifetime_lock`, called by ``Segment.create``); the
kernel drops it when the creator dies, SIGKILL and OOM kill included. If the creator died,
nobody else will unlink its objects, so any later start may: :func:`sweep_shm` unlinks an entry
of ours once it can take an exclusive lock on it and the pid in its name does not map it. A pid
alone cannot tell: containers sharing /dev/shm have their own PID namespaces (the pid means
another process here, or none), and ``hidepid`` hides other users' processes. Entries of other
users, and entries the sweep cannot remove, are reported and left alone.

Who calls it: the supervisor at every start (:func:`sweep_shm`, before any segment of its own), the
tools and tests; :func:`unlink_run` is the supervisor's last line of defence for its own run's
objects at shutdown. It owns no segment: it removes only entries whose creator is dead, or, in
:func:`unlink_run`, the caller's own.
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass, field

from spreeze_like.ipc.naming import SHM_DIR, list_our_files, parse_name, pid_alive, release_lifetime_lock


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
