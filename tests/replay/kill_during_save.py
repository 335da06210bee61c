"""Child for test_persist's crash test: ``python kill_during_save.py CHECKPOINTS STEP ROWS KILL_AT`` saves a
replay of ROWS numbered rows at STEP (where the test has already saved one) and SIGKILLs itself at its
KILL_AT-th change of the checkpoint folder's names: just before a rename, or partway through removing a
folder (one file gone). It prints ``saved`` when the save made fewer changes than that.

Only folder-level changes are counted: a kill while the column files are written is the older case of a
killed writer's temporary folder, tested on its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np

from spreeze_like.replay.persist import save_replay
from spreeze_like.replay.storage import ReplayStorage

OBS, ACT = 3, 2  # as test_persist's
ENV = "Toy-v0"


def main() -> None:
    checkpoints, step, rows, kill_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    storage = ReplayStorage.local(100, OBS, ACT)
    numbers = np.arange(rows, dtype=np.float32)  # the rows test_persist's ``chunk(0, rows)`` makes
    obs = np.repeat(numbers[:, None], OBS, 1)
    storage.add(obs, np.repeat(numbers[:, None], ACT, 1), numbers, obs + 0.5, numbers % 2,
                (numbers % 3 == 0).astype(np.float32))
    changes = 0
    real_replace, real_rmtree = os.replace, shutil.rmtree

    def reached() -> bool:
        nonlocal changes
        changes += 1
        return changes - 1 == kill_at

    def replace(src, dst):
        if reached():
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst)

    def rmtree(path, *args, **kwargs):
        if Path(path).exists() and reached():
            first = next((p for p in sorted(Path(path).iterdir()) if p.is_file()), None)
            if first is not None:
                first.unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_rmtree(path, *args, **kwargs)

    os.replace, shutil.rmtree = replace, rmtree
    save_replay(storage, checkpoints, step, ENV)
    print("saved", changes)


if __name__ == "__main__":
    main()
