"""The disk-full helper itself (tests/fullfs.py): it must fill a filesystem without raising, also when
the space it measured is gone before it writes (a run's own files growing meanwhile). test_finding07
failed once in CI that way: a filler smaller than the file buffer was written at close, and the close
raised ENOSPC outside the helper's suppress."""

from __future__ import annotations

import contextlib
import os

from fullfs import fill, small_tmpfs


def test_fill_does_not_raise_when_the_space_it_measured_is_gone(tmp_path, monkeypatch):
    with small_tmpfs(tmp_path / "fs", 1024) as fs:
        with open(fs / "a_runs_own_file", "wb", buffering=0) as f, contextlib.suppress(OSError):
            f.write(b"\0" * (2 << 20))  # takes every byte of the 1 MiB
        real = os.statvfs(fs)

        class Stale:  # what statvfs said a moment before: 4 KiB free, less than a file buffer
            f_frsize = real.f_frsize
            f_bavail = 4096 // real.f_frsize

        monkeypatch.setattr(os, "statvfs", lambda path: Stale)
        fill(fs)  # raised OSError (ENOSPC) from the filler's close before the fix
