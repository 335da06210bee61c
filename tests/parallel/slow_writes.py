"""Launcher for tests: ``SLOW_WRITES_GATE=DIR python slow_writes.py CLI_ARGS...`` runs ``spreeze_like.run``
with one write of the run held open, so that a test's signal lands while it is in hand.

Once the test writes a name into ``DIR/armed``, the next write of that kind first writes ``DIR/inside`` and
then sleeps ``HOLD_S`` before any byte of it:

* ``ckpt``: ``torch.save`` of a checkpoint (the supervisor, or the serial trainer), held in its first write
  call: torch's zip writer calls back into the file from C++;
* ``replay``: a replay column's ``np.save`` (the same process, at the stop, with ``--save-replay``);
* ``load``: a resume's load of the saved replay (``persist.load_replay`` as ``resume_replay`` calls it),
  held before it reads the folder: the supervisor after its signal handlers are installed, the serial
  trainer before its own are;
* ``start``: the serial mode's start, once the run folder is made: the import of ``spreeze_like.serial``
  (with torch, about a second of a plain CLI's start, before any handler of the run's own), held by an
  import hook;
* ``sweep``: the parallel mode's start, once the run folder is made: the supervisor's sweep of dead runs'
  segments (``supervisor.sweep_shm``), before any segment of its own.

Everything else is the real CLI. Spawned children re-import this file as ``__mp_main__``: the guard below
keeps them from patching anything or running a second CLI.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import time
from pathlib import Path

GATE = Path(os.environ.get("SLOW_WRITES_GATE", "/nonexistent"))
HOLD_S = 1.0


def _held(what: str) -> None:
    """For the one write the test armed: say so, then hold it open for HOLD_S."""
    armed = GATE / "armed"
    if not armed.exists() or armed.read_text().strip() != what or (GATE / "inside").exists():
        return
    (GATE / "inside").write_text(what)
    time.sleep(HOLD_S)


class _HeldFile:
    """A file whose first write is held open."""

    def __init__(self, f) -> None:
        self.f = f

    def write(self, data) -> int:
        _held("ckpt")
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _install_in_the_writer() -> None:
    import torch

    from spreeze_like import supervisor
    from spreeze_like.replay import persist

    write_npy, torch_save, load_replay, sweep_shm = persist._write_npy, torch.save, persist.load_replay, supervisor.sweep_shm

    def held_npy(path, array) -> None:
        _held("replay")
        write_npy(path, array)

    def held_save(obj, f, *args, **kwargs):
        return torch_save(obj, _HeldFile(f) if hasattr(f, "write") else f, *args, **kwargs)

    def held_load(*args, **kwargs):
        _held("load")
        return load_replay(*args, **kwargs)

    def held_sweep(*args, **kwargs):
        _held("sweep")
        return sweep_shm(*args, **kwargs)

    class HeldImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):  # finds nothing: the normal finders import it
            if name == "spreeze_like.serial":
                _held("start")

    persist._write_npy = held_npy
    torch.save = held_save
    persist.load_replay = held_load
    supervisor.sweep_shm = held_sweep
    sys.meta_path.insert(0, HeldImport())


if __name__ == "__main__":
    _install_in_the_writer()
    from spreeze_like.run import main

    sys.exit(main(sys.argv[1:]))
