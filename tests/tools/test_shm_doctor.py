"""tools/shm_doctor.py lists our entries and removes only those whose creator is dead.

Other users' entries (finding 1 of the review) are tested with a second uid in
tests/ipc/test_ipc_sweep_findings.py.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from spreeze_like.ipc.naming import shm_prefix

ROOT = Path(__file__).resolve().parents[2]


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "shm_doctor.py"), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_lists_and_cleans_only_dead_creators(tmp_path):
    # a private directory standing in for /dev/shm, so a concurrent run on this machine is untouched
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
    dead = f"{shm_prefix()}.abcd1234.{dead_pid}.ring.0"
    live = f"{shm_prefix()}.abcd1234.{os.getpid()}.ring.1"
    for name in (dead, live, "unrelated.file"):
        (tmp_path / name).write_bytes(b"x" * 1024)
    with open(tmp_path / live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_SH)  # its creator's lifetime lock, as Segment.create holds it
        listing = _doctor("--shm-dir", str(tmp_path))
        assert listing.returncode == 0, listing.stderr
        assert dead in listing.stdout and live in listing.stdout and "unrelated" not in listing.stdout
        assert "1 leftover entry" in listing.stdout
        assert next(line for line in listing.stdout.splitlines() if live in line).split()[3] == "live"

        cleaned = _doctor("--shm-dir", str(tmp_path), "--clean")
        assert cleaned.returncode == 0, cleaned.stderr
        assert "removed 1 leftover entry" in cleaned.stdout
        assert sorted(os.listdir(tmp_path)) == sorted([live, "unrelated.file"])


def test_empty_directory(tmp_path):
    out = _doctor("--shm-dir", str(tmp_path))
    assert out.returncode == 0 and "nothing of ours" in out.stdout


def test_a_shm_dir_that_is_no_folder_is_one_error_line(tmp_path):
    """A file was a NotADirectoryError traceback; a misspelt folder was "nothing of ours in it"."""
    (tmp_path / "a_file").write_text("x")
    for where in (tmp_path / "a_file", tmp_path / "missing"):
        out = _doctor("--shm-dir", str(where))
        assert out.returncode == 2 and out.stdout == "", out.stdout
        assert out.stderr == f"error: --shm-dir {where}: no such folder; give the folder of POSIX shared memory " \
                             "(default /dev/shm)\n"
