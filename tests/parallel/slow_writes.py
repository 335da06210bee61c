"""Launcher for tests: ``python slow_writes.py GATE_DIR CLI_ARGS...`` runs ``spreeze_like.run`` with one of
the stop's writes held open, so that a test's second signal lands inside it.

Once the test writes ``ckpt`` or ``replay`` into ``GATE_DIR/armed``, the next such write (``torch.save`` of a
checkpoint; a replay column's ``np.save``) first writes ``GATE_DIR/inside`` and then sleeps 1 s at the very
start of its first write call, before any byte of it. Everything else is the real CLI; the patches apply in
the process that writes both (the supervisor, or the serial trainer). The guard below keeps spawned children
(which re-import this file as ``__mp_main__``) from running a second CLI.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from spreeze_like.replay import persist

GATE = Path(sys.argv[1]) if __name__ == "__main__" else Path("/nonexistent")
HOLD_S = 1.0


def _held(what: str) -> bool:
    """True once for the write the test armed: it says so, then holds the write open for HOLD_S."""
    armed = GATE / "armed"
    if not armed.exists() or armed.read_text().strip() != what or (GATE / "inside").exists():
        return False
    (GATE / "inside").write_text(what)
    time.sleep(HOLD_S)
    return True


class _HeldFile:
    """A file whose first write is held open: torch.save's zip writer calls back into it from C++."""

    def __init__(self, f) -> None:
        self.f = f

    def write(self, data) -> int:
        _held("ckpt")
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _install() -> None:
    write_npy, torch_save = persist._write_npy, torch.save

    def held_npy(path, array) -> None:
        _held("replay")
        write_npy(path, array)

    def held_save(obj, f, *args, **kwargs):
        return torch_save(obj, _HeldFile(f) if hasattr(f, "write") else f, *args, **kwargs)

    persist._write_npy = held_npy
    torch.save = held_save


if __name__ == "__main__":
    _install()
    from spreeze_like.run import main

    sys.exit(main(sys.argv[2:]))
