"""List and remove spreeze_like shared memory left behind by dead runs.

    python tools/shm_doctor.py            # list our /dev/shm entries: creator pid, state, size
    python tools/shm_doctor.py --clean    # remove those whose creator is dead

It sees the names of this environment's prefix only (``spz``, or ``$SPREEZE_LIKE_SHM_PREFIX``:
ipc/naming.py).

Every start of a run already sweeps leftovers (``ipc.sweep.sweep_shm``); this tool is the same
sweep by hand, for a user who wants /dev/shm back before the next run. The states:

- ``live``: a live creator holds the entry's lifetime lock (or, for creators that hold none, the
  pid in its name maps it). Never removed: stop that run instead (Ctrl-C, or SIGTERM to its
  supervisor, whose pid is the creator pid shown, as the creator's PID namespace numbers it).
- ``dead (leftover)``: nobody holds it; ``--clean`` removes it.
- ``left alone``: another user's entry (``not ours to remove``: that user, or root by hand, may
  remove it), or one this user cannot open. Reported, never touched.
"""

from __future__ import annotations

import argparse
import os
import sys

from spreeze_like.errors import ConfigError, SpreezeError
from spreeze_like.ipc.naming import SHM_DIR, parse_name
from spreeze_like.ipc.sweep import probe_entries, sweep_shm

_STATE = {"live": "live (a running run: stop it to free this)", "dead": "dead (leftover)", "skipped": "left alone"}


def describe(shm_dir: str = SHM_DIR) -> list[tuple[str, int, str, str, int]]:
    """(name, creator pid, state, why, bytes) of every entry of ours under ``shm_dir``.

    ``state`` is ``live``, ``dead`` or ``skipped``; ``why`` says what made it live or skipped.
    """
    rows = []
    for entry, state, why in probe_entries(shm_dir):
        parsed = parse_name(entry)
        assert parsed is not None  # probe_entries returns parseable names only
        try:
            size = os.lstat(os.path.join(shm_dir, entry)).st_size
        except FileNotFoundError:  # removed while we looked
            continue
        rows.append((entry, parsed.creator_pid, state, why, size))
    return rows


def _entries(n: int) -> str:
    return f"{n} leftover entr{'y' if n == 1 else 'ies'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="List (and with --clean remove) spreeze_like shared memory.")
    parser.add_argument("--clean", action="store_true", help="remove the entries whose creator is dead")
    parser.add_argument("--shm-dir", default=SHM_DIR, help="where POSIX shared memory lives (default /dev/shm)")
    args = parser.parse_args(argv)
    try:
        if not os.path.isdir(args.shm_dir):  # a typo was "nothing of ours in it"; a file was a traceback
            raise ConfigError(f"--shm-dir {args.shm_dir}: no such folder; give the folder of POSIX shared memory "
                              f"(default {SHM_DIR})")
        rows = describe(args.shm_dir)
    except SpreezeError as exc:  # that, or a bad SPREEZE_LIKE_SHM_PREFIX
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if not rows:
        print(f"nothing of ours in {args.shm_dir}")
        return 0
    for name, pid, state, why, size in rows:
        shown = _STATE[state] + (f": {why}" if state == "skipped" else "")
        print(f"{name:60s} creator {pid:>7d} {shown:45s} {size / 2**20:10.1f} MiB")
    if args.clean:
        report = sweep_shm(args.shm_dir)
        print(f"removed {_entries(len(report.removed))}")
        skipped = report.skipped_line(args.shm_dir)
        if skipped:
            print(skipped)  # what was left alone, and why, in one line
    else:
        dead = sum(1 for row in rows if row[2] == "dead")
        if dead:
            print(f"{_entries(dead)}; run with --clean to remove")
    return 0


if __name__ == "__main__":
    sys.exit(main())
