"""Where each run mode's entry point lives: ``serial_entry()`` and ``parallel_entry()``.

``training.train`` picks a mode through these, and ``autotune.apply`` asks whether the parallel mode
is built, without either importing the other. The modes themselves (``serial``, ``supervisor``)
import only :mod:`spreeze_like.results` for their return type, never this module nor ``training``,
so no import goes upward. The modes are imported only when asked for: importing this module stays
light (no torch). It owns nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spreeze_like.results import TrainResult

    # run_serial(config, context, print_fn) / run_parallel(config, context, print_fn=print)
    ModeEntry = Callable[..., TrainResult]

__all__ = ["parallel_entry", "serial_entry"]


def serial_entry() -> ModeEntry:
    """``spreeze_like.serial.run_serial``: every role in this process."""
    from spreeze_like.serial import run_serial

    return run_serial


def parallel_entry() -> ModeEntry | None:
    """``spreeze_like.supervisor.run_parallel`` if the parallel mode is built, else None."""
    try:
        from spreeze_like.supervisor import run_parallel
    except ModuleNotFoundError as exc:
        if exc.name == "spreeze_like.supervisor":
            return None
        raise
    return run_parallel
