"""Findings 1 and 6 of the security and reliability review: the start-up sweep and shm_doctor with
another user's leftovers, and with a live creator in another PID namespace. Real processes throughout.

- Finding 1: /dev/shm is sticky, so unlinking another user's file fails with EPERM; the sweep used to
  let that PermissionError escape (a traceback at every start of every other user). Reproduced with
  a second uid (65534), so these tests need root; CI runs as one unprivileged user and skips them.
- Finding 6: liveness rested on ``psutil.Process(pid)`` in the sweeper's own PID namespace, so a
  start in one container unlinked the live segments of a run in another container sharing
  /dev/shm. Reproduced with ``unshare --pid`` (root again), the creator's namespace pid chosen with
  ``ns_last_pid`` so that it is dead (or names another process) in ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from spreeze_like.ipc import Segment, list_our_files, new_run_id, parse_name, sweep_dead_segments
from spreeze_like.ipc.naming import shm_prefix

HERE = Path(__file__).resolve().parent
MARKER = b"live creator in another pid namespace"  # what pidns_creator.py writes into its segment
ROOT = HERE.parents[1]
NOBODY = 65534  # the conventional unprivileged uid; any uid other than ours shows the same
CREATOR = HERE / "pidns_creator.py"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: acting as a second user (setuid) or making a PID namespace (unshare) takes "
    "privileges; CI runs the suite as one unprivileged user, so these run on a root dev box only",
)


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True)
    return int(proc.stdout)


@contextlib.contextmanager
def _sticky_dir() -> Iterator[Path]:
    """A private directory with /dev/shm's mode (1777, sticky) on the same tmpfs, so that another
    test session's sweep of the real /dev/shm cannot remove the leftovers first."""
    path = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None, prefix="pytest-sticky-"))
    try:
        path.chmod(0o1777)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _leftover(directory: Path, name: str, uid: int) -> Path:
    path = directory / name
    path.write_bytes(b"x" * 4096)
    path.chmod(0o600)  # as Segment.create makes them
    os.chown(path, uid, uid)
    return path


def _as_nobody(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child that imports what it needs as root and then becomes uid 65534 (the
    interpreter lives under /root here, unreadable to that uid, so imports must come first)."""
    prologue = f"import os, sys, json\nsys.path.insert(0, {str(ROOT / 'tools')!r})\n"
    drop = f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"
    body = code.replace("#DROP\n", drop)
    return subprocess.run([sys.executable, "-c", prologue + body], check=False, capture_output=True, text=True,
                          timeout=120)


# ------------------------------------------------------------------------------------------- finding 1
@needs_root
def test_finding01_sweep_skips_other_users_leftovers():
    run, dead = new_run_id(), _dead_pid()
    with _sticky_dir() as d:
        roots = _leftover(d, f"{shm_prefix()}.{run}.{dead}.ring.0", 0)
        mine = _leftover(d, f"{shm_prefix()}.{run}.{dead}.ring.1", NOBODY)
        proc = _as_nobody(
            "from spreeze_like.ipc.sweep import sweep_dead_segments\n"
            "#DROP\n"
            f"removed = sweep_dead_segments({str(d)!r})\n"  # the call the supervisor made at start
            "from spreeze_like.ipc.sweep import sweep_shm\n"  # (the module is loaded: no file access)
            f"report = sweep_shm({str(d)!r})\n"
            "print(json.dumps({'uid': os.geteuid(), 'removed': removed, 'skipped': report.skipped,\n"
            "                  'lines': report.report_lines()}))\n"
        )
        assert proc.returncode == 0, proc.stderr  # before the fix: PermissionError traceback
        out = json.loads(proc.stdout)
        assert out["uid"] == NOBODY
        assert out["removed"] == [mine.name]  # its own dead leftover still goes
        assert roots.exists() and not mine.exists()
        assert out["skipped"] == [[roots.name, "owned by uid 0: not ours to remove"]]
        assert len(out["lines"]) == 1 and roots.name in out["lines"][0] and "\n" not in out["lines"][0]


@needs_root
def test_finding01_shm_doctor_clean_skips_other_users_leftovers():
    run, dead = new_run_id(), _dead_pid()
    with _sticky_dir() as d:
        roots = _leftover(d, f"{shm_prefix()}.{run}.{dead}.ring.0", 0)
        mine = _leftover(d, f"{shm_prefix()}.{run}.{dead}.ring.1", NOBODY)
        proc = _as_nobody(f"import shm_doctor\n#DROP\nsys.exit(shm_doctor.main(['--shm-dir', {str(d)!r}, '--clean']))\n")
        assert proc.returncode == 0, proc.stderr  # before the fix: PermissionError traceback
        assert "Traceback" not in proc.stderr
        assert roots.exists() and not mine.exists()
        lines = proc.stdout.splitlines()
        assert any(roots.name in line and "not ours to remove" in line for line in lines), proc.stdout
        assert "removed 1 leftover entry" in proc.stdout
        assert any(line.startswith("left 1 entry") and roots.name in line for line in lines), proc.stdout


@needs_root
def test_finding01_root_sweep_leaves_other_users_entries():
    # Root *could* unlink another user's file in a sticky directory; the sweep never tries: whether
    # that user's run is alive cannot be told from here (its lock needs its file opened).
    run, dead = new_run_id(), _dead_pid()
    with _sticky_dir() as d:
        theirs = _leftover(d, f"{shm_prefix()}.{run}.{dead}.ring.0", NOBODY)
        assert sweep_dead_segments(str(d)) == []
        assert theirs.exists()
        from spreeze_like.ipc.sweep import sweep_shm

        report = sweep_shm(str(d))
        assert report.removed == [] and report.skipped == [(theirs.name, f"owned by uid {NOBODY}: not ours to remove")]


# ------------------------------------------------------------------------------------------- finding 6
def _unshare_works() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], check=False, capture_output=True)
    return probe.returncode == 0


needs_pidns = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and _unshare_works()),
    reason="needs root and util-linux `unshare --pid --fork --mount-proc` to put the creator in its own PID "
    "namespace; CI runs as an unprivileged user, so this runs on a root dev box only",
)


@contextlib.contextmanager
def _creator_in_new_pid_namespace(run: str, ns_pid: int) -> Iterator[tuple[subprocess.Popen, str]]:
    """A live creator whose pid in its own namespace is ``ns_pid``; yields (process, segment name)."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(CREATOR), "init", run, str(ns_pid)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    name = f"/{shm_prefix()}.{run}.{ns_pid}.ring.0"
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        info = json.loads(line)
        assert info == {"pid": ns_pid, "name": name}  # the name carries the namespace's pid
        yield proc, name
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
        proc.wait(30)
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/shm" + name)


def _kill_creator(proc: subprocess.Popen) -> None:
    proc.stdin.write("die\n")
    proc.stdin.flush()
    assert proc.wait(60) != 0  # killed, so nothing unlinked the segment


def _free_pid_here() -> int:
    """A pid number with no process in this namespace, below the last one handed out (so not reused soon)."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    for pid in range(max(300, last // 2), max(301, last)):
        if not psutil.pid_exists(pid):
            return pid
    pytest.skip("no free pid number below the last one handed out")


@needs_pidns
def test_finding06_sweep_keeps_live_segment_of_another_pid_namespace():
    # The creator's pid means nothing here: the old sweep took it for dead and unlinked a live run's segment.
    run = new_run_id()
    with _creator_in_new_pid_namespace(run, _free_pid_here()) as (proc, name):
        entry = name[1:]
        assert not psutil.pid_exists(parse_name(name).creator_pid)  # dead as far as this namespace can tell
        assert entry not in sweep_dead_segments()
        assert list_our_files(run_id=run) == [entry]
        seg = Segment.attach(name)  # the run in the other namespace can still attach (a restart)
        try:
            assert bytes(seg.buf[: len(MARKER)]) == MARKER  # its data, intact
        finally:
            seg.close()
        from spreeze_like.ipc.sweep import sweep_shm

        assert entry in sweep_shm().live
        _kill_creator(proc)
        assert list_our_files(run_id=run) == [entry]  # SIGKILL: nobody unlinked it
        assert entry in sweep_dead_segments()  # ... and now the sweep may, and does
        assert list_our_files(run_id=run) == []


@needs_pidns
def test_finding06_sweep_removes_dead_segment_whose_pid_is_alive_here():
    # The creator's namespace pid is this test's own pid here: alive, but not the creator. The old
    # sweep kept the dead run's segments for as long as that unrelated process lived (a container's
    # pid 1 against the host's init: forever).
    run = new_run_id()
    with _creator_in_new_pid_namespace(run, os.getpid()) as (proc, name):
        entry = name[1:]
        sweep_dead_segments()
        assert list_our_files(run_id=run) == [entry]  # alive: kept
        _kill_creator(proc)
        assert psutil.pid_exists(parse_name(name).creator_pid)
        assert entry in sweep_dead_segments()
        assert list_our_files(run_id=run) == []


_RACE_CREATOR = """
import os, sys
from spreeze_like.ipc import Segment, segment_name
run, n = sys.argv[1], int(sys.argv[2])
lost = 0
for i in range(n):
    seg = Segment.create(segment_name(run, "race", i), 4096)
    lost += not os.path.exists("/dev/shm" + seg.name)  # a sweep took the name of a live segment
    seg.close()
    seg.unlink()
print(lost)
"""

_RACE_SWEEPER = """
import sys, time
from spreeze_like.ipc import naming, sweep
run, stop_at = sys.argv[1], time.monotonic() + float(sys.argv[2])
removed = 0
print("ready", flush=True)
while time.monotonic() < stop_at:  # the sweep's own per-entry step, limited to this test's run
    for entry in naming.list_our_files(run_id=run):
        removed += sweep._sweep_entry(entry, naming.SHM_DIR, sweep._Mappings(), remove=True)[0] == "removed"
print(removed)
"""


@pytest.mark.multiproc
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")
def test_finding06_create_racing_a_sweep_keeps_its_name():
    # The lifetime lock is taken just after the exclusive create. A sweep that finds the segment in
    # between unlinks it (its lock is free); the creator must notice and create it again, never go on
    # with a segment whose name is gone (its children could not attach).
    run = new_run_id()
    sweeper = subprocess.Popen([sys.executable, "-c", _RACE_SWEEPER, run, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert sweeper.stdout.readline() == "ready\n"
        # Without the creator's nlink check the name was lost 5-8 times in 8,000 creations here (3 runs of 3).
        creator = subprocess.run([sys.executable, "-c", _RACE_CREATOR, run, "8000"], check=False,
                                 capture_output=True, text=True, timeout=120)
    finally:
        sweeper.kill()
        sweeper.communicate(timeout=30)
    assert creator.returncode == 0, creator.stderr
    assert int(creator.stdout) == 0
    assert list_our_files(run_id=run) == []


_OPEN_FILES = """
import os
for fd in os.listdir("/proc/self/fd"):
    try:
        print(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # the descriptor listdir itself used, closed by now
        pass
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_finding06_lifetime_lock_is_not_inherited_by_children():
    # The lock must die with its creator: a child that inherited the descriptor (even one that kept
    # every descriptor: close_fds=False) would keep a dead run's segments "alive" for as long as it lives.
    with Segment.create(f"/{shm_prefix()}.{new_run_id()}.{os.getpid()}.ring.0", 4096) as seg:
        path = "/dev/shm" + seg.name
        here = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                here.append(os.readlink(f"/proc/self/fd/{fd}"))
        assert path in here  # the creator holds it ...
        child = subprocess.run([sys.executable, "-c", _OPEN_FILES], check=True, capture_output=True, text=True,
                               close_fds=False)
        assert path not in child.stdout.splitlines()  # ... its children do not


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_finding06_every_unlink_path_drops_the_lifetime_lock():
    # An open descriptor keeps an unlinked tmpfs file's memory allocated: each way of unlinking must
    # also close the lock descriptor, or a long-lived process (tests, autotune probes) leaks /dev/shm.
    from spreeze_like.ipc import unlink_run, unlink_segment

    run = new_run_id()
    segs = [Segment.create(f"/{shm_prefix()}.{run}.{os.getpid()}.ring.{i}", 4096) for i in range(3)]
    paths = {"/dev/shm" + s.name for s in segs}

    def held() -> set[str]:
        out = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                out.add(os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)"))
        return out & paths

    assert held() == paths
    for s in segs:
        s.close()
    segs[0].unlink()
    assert unlink_segment(segs[1].name)
    assert unlink_run(run) == [segs[2].name[1:]]
    assert held() == set() and list_our_files(run_id=run) == []
