"""A real, small filesystem to fill up: a tmpfs mounted for one test and unmounted after it.

Disk-full handling is tested on a filesystem that really runs out of space (ENOSPC from the
kernel), not on a mocked write. Mounting needs CAP_SYS_ADMIN (root, as on our CI machines); where
the mount is refused the test is skipped with that reason, never passed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size_kib: int) -> Iterator[Path]:
    """Mount a ``size_kib`` KiB tmpfs at ``where`` (created) for the duration of the block."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0777", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'mount failed'}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path, leave_kib: int = 0) -> None:
    """Fill the filesystem of ``folder`` until at most ``leave_kib`` KiB are free."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize - leave_kib * 1024
    if free > 0:
        try:
            f = open(folder / ".filler", "wb", buffering=0)  # noqa: SIM115 - closed below
        except OSError:  # already full (the run's own files): the goal of this function
            return
        # unbuffered, and the close inside the suppress too: when a run's own files grew after statvfs, the
        # write stops short with ENOSPC, and a buffered file's close then raised it again from its flush
        # (seen once in CI, test_finding07)
        with contextlib.suppress(OSError), f:
            f.write(b"\0" * free)
