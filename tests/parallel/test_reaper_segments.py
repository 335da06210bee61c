"""The reaper's segment cleanup after a SIGKILLed supervisor (procs/descendants.py), on a stand-in /dev/shm.

The end-to-end case (a real run, its supervisor SIGKILLed, nothing left in /dev/shm within 15 s) is
tests/parallel/test_supervision_findings.py's finding-18 test; this one pins which entries go.
"""

from __future__ import annotations

import subprocess
import sys

from spreeze_like.procs.descendants import unlink_dead_run_files

HOLD = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_SH); " \
       "print('held', flush=True); time.sleep(60)"


def test_only_the_runs_unlocked_entries_are_unlinked(tmp_path):
    names = ["spz.abc.11.ring.0", "sem.spz.abc.11.ring-doorbell.0", "spz.abc.11.stats.0",
             "spz.abcd.11.ring.0", "spz.other.11.ring.0", "unrelated"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "spz.abc.11.stats.0")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        removed = unlink_dead_run_files(str(tmp_path), "spz.abc.")
    finally:
        holder.kill()
        holder.wait()
    assert removed == ["sem.spz.abc.11.ring-doorbell.0", "spz.abc.11.ring.0"]
    # a live lock holder keeps its entry; another run's ids (even one that extends this id) are not touched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spz.abc.11.stats.0", "spz.abcd.11.ring.0",
                                                          "spz.other.11.ring.0", "unrelated"]
    assert unlink_dead_run_files(str(tmp_path / "missing"), "spz.abc.") == []
