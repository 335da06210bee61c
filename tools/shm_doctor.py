"""List and remove spreeze_like shared memory left behind by dead runs.

    python tools/shm_doctor.py            # list our /dev/shm entries: run, creator pid, alive?, size
    python tools/shm_doctor.py --clean    # remove those whose creator process is dead

Every start of a run already sweeps segments whose creator is dead (``ipc.naming.
sweep_dead_segments``); this tool is the same sweep by hand, for a user who wants /dev/shm back
before the next run. Segments of a live run are never removed: stop that run instead (Ctrl-C, or
SIGTERM to the supervisor, whose pid is the creator pid shown here).
"""

from __future__ import annotations

import argparse
import os
import sys

from spreeze_like.ipc.naming import SHM_DIR, list_our_files, parse_name, pid_alive, sweep_dead_segments


def describe(shm_dir: str = SHM_DIR) -> list[tuple[str, int, bool, int]]:
    """(name, creator pid, creator alive, bytes) of every entry of ours under ``shm_dir``."""
    rows = []
    for entry in list_our_files(shm_dir):
        parsed = parse_name(entry)
        assert parsed is not None  # list_our_files returns parseable names only
        try:
            size = os.stat(os.path.join(shm_dir, entry)).st_size
        except FileNotFoundError:  # removed while we looked
            continue
        rows.append((entry, parsed.creator_pid, pid_alive(parsed.creator_pid), size))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="List (and with --clean remove) spreeze_like shared memory.")
    parser.add_argument("--clean", action="store_true", help="remove the entries whose creator process is dead")
    parser.add_argument("--shm-dir", default=SHM_DIR, help="where POSIX shared memory lives (default /dev/shm)")
    args = parser.parse_args(argv)
    rows = describe(args.shm_dir)
    if not rows:
        print(f"nothing of ours in {args.shm_dir}")
        return 0
    for name, pid, alive, size in rows:
        state = "alive (a running run: stop it to free this)" if alive else "dead (leftover)"
        print(f"{name:60s} creator {pid:>7d} {state:45s} {size / 2**20:10.1f} MiB")
    if args.clean:
        removed = sweep_dead_segments(args.shm_dir)
        print(f"removed {len(removed)} leftover entr{'y' if len(removed) == 1 else 'ies'}")
    else:
        dead = sum(1 for row in rows if not row[2])
        if dead:
            print(f"{dead} leftover entr{'y' if dead == 1 else 'ies'}; run with --clean to remove")
    return 0


if __name__ == "__main__":
    sys.exit(main())
