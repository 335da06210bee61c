"""An env's own processes (simulator servers, helpers): found by a tag in their environment, killed with their role.

An env may start processes of its own (a simulator server, a renderer). A well-behaved env ends
them in ``close()``, which a role calls on a normal exit; a role that is SIGKILLed (by a user, the
OOM killer, or the supervisor's hang kill), or whose supervisor is, never calls it, and the
env's processes would run on for good, orphaned (review finding 18). So every role process is
spawned with ``SPREEZE_ROLE_TAG=<run id>/<role>/<restart>`` in its environment
(:meth:`~spreeze_like.procs.children.RoleProcess.start`), which every process it or its env starts
inherits, and:

- when a role's process has died, the supervisor kills every process tagged with that process's
  tag (:func:`kill_tagged`, on each death it handles);
- at the end of a run, the supervisor kills every process tagged with the run id;
- if the supervisor itself is SIGKILLed, a small watcher it started (:class:`Reaper`, this file
  run as a script, in a session of its own) sees the end of its pipe and kills every process tagged
  with the run id (the roles die by their parent-death signal, their env's processes here), then
  unlinks the run's shared-memory segments and semaphores, so a killed run leaves nothing in
  /dev/shm (the next start's sweep stays the second line, for a reaper that was killed too).

Why a tag, not a process group per role (decision). A process group per role would split the
run's job: Ctrl-Z, ``kill -STOP -<pgid>``, a terminal hang-up would then reach the supervisor and
not the roles (a paused run that trains on). And a simulator started with ``start_new_session``
(common, precisely to keep Ctrl-C away from it), or a daemon that double-forks, leaves any group or
parent chain, while it keeps its environment. The same idea is Jenkins' ProcessTreeKiller
(``BUILD_ID``). Limit: a process started with an environment of its own making (``env={...}``
without ``os.environ``) carries no tag and is not found.

Killing is race-free where the kernel has pidfds (Linux 5.3+): a pidfd is opened first, the
environment is read, and the signal goes through the pidfd, so a pid reused in between is never hit.
Reading ``/proc/<pid>/environ`` needs the same user (or root): another user's processes are never
candidates. Cost: one read per process on the machine, about 25 µs each (0.7 ms for 28 processes
here), only when a role died and at the end of a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time

TAG_VAR = "SPREEZE_ROLE_TAG"
_NEEDLE = TAG_VAR.encode() + b"="


def role_tag(run_id: str, role: str, restarts: int) -> str:
    """The tag of one process of a role: ``<run id>/<role>/<restart>``."""
    return f"{run_id}/{role}/{restarts}"


def _matches(value: bytes, key: bytes) -> bool:
    return value == key or value.startswith(key + b"/")


def _tag_of(pid: int) -> bytes | None:
    """The tag in ``pid``'s environment, or None (no tag, gone, a zombie, another user's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(_NEEDLE):
            return entry[len(_NEEDLE):]
    return None


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no /proc (not Linux): nothing can be found this way
        return []


def kill_tagged(key: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process whose tag is ``key`` or starts with ``key/``; returns their pids.

    ``key`` is a whole tag (one process of a role and everything it started) or a run id (the run).
    This process is never signalled.
    """
    wanted, me, hit = key.encode(), os.getpid(), []
    pidfds = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
    for pid in _pids():
        if pid == me:
            continue
        fd = -1
        if pidfds:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already, or not ours to see
        try:
            tag = _tag_of(pid)
            if tag is None or not _matches(tag, wanted):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if fd >= 0:
                    signal.pidfd_send_signal(fd, sig)
                else:
                    os.kill(pid, sig)
                hit.append(pid)
        finally:
            if fd >= 0:
                os.close(fd)
    return hit


class Reaper:
    """The watcher that kills a run's tagged processes when its supervisor dies, however it dies.

    :meth:`start` runs this file as a script (``python -I -S``: the standard library only, no
    site packages, about 20 ms) in a session of its own, holding the read end of a pipe whose only
    write end the supervisor keeps (``O_CLOEXEC``: the roles do not inherit it). Its stdin reaches
    end-of-file when the supervisor's process ends, SIGKILL included; it then kills every process
    tagged with the run id, again every 0.1 s until three scans in a row find none (a role
    that was starting an env's process as it died), for at most 10 s, and exits. :meth:`stop` is
    the normal end: the supervisor has killed what was left itself, so the reaper scans once.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        from spreeze_like.ipc.naming import SHM_DIR, shm_prefix  # the script itself cannot import the package

        argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), self.run_id, SHM_DIR,
                f"{shm_prefix()}.{self.run_id}."]
        try:
            self.process = subprocess.Popen(argv,
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                            start_new_session=True, close_fds=True)
        except OSError:  # no watcher: the run still works; only a SIGKILLed supervisor would leave env processes
            self.process = None

    def stop(self, timeout: float = 5.0) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.write(b"done\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def unlink_dead_run_files(shm_dir: str, prefix: str) -> list[str]:
    """Unlink the /dev/shm entries of a run whose supervisor is gone: names ``<prefix>...`` and their
    semaphores ``sem.<prefix>...``, each only if no process holds its lifetime lock (as the sweep
    decides in ``spreeze_like.ipc.sweep``; this file cannot import it, see :class:`Reaper`)."""
    removed = []
    try:
        entries = os.listdir(shm_dir)
    except OSError:
        return removed
    for entry in sorted(entries):
        if not entry.startswith((prefix, "sem." + prefix)):
            continue
        path = os.path.join(shm_dir, entry)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live creator; leave it
            os.unlink(path)
            removed.append(entry)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _reap(run_id: str, shm_dir: str | None = None, prefix: str | None = None) -> None:
    """The reaper's body: wait for the end of stdin, then kill the run's tagged processes and, after
    an abnormal end, unlink the run's segments (a normal end: the supervisor unlinked them)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the supervisor's end ends it
    said = b""
    while True:
        chunk = os.read(0, 64)
        if not chunk:
            break
        said += chunk
    needed = 1 if said.startswith(b"done") else 3  # a normal end: the supervisor already killed what was left
    deadline, quiet = time.monotonic() + 10.0, 0
    while True:
        quiet = 0 if kill_tagged(run_id) else quiet + 1
        if quiet >= needed or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if needed > 1 and shm_dir and prefix:
        unlink_dead_run_files(shm_dir, prefix)


if __name__ == "__main__":
    _reap(*sys.argv[1:4])
