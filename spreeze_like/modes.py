"""Where each run mode's entry point lives: ``serial_entry()`` and ``parallel_entry()``.

``training.train`` picks a mode through these, and ``autotune.apply`` asks whether the parallel mode
is built, without either importing the other. The modes themselves (``serial``, ``supervisor``)
import only :mod:`spreeze_like.results` for their return type, never this module nor ``training``,
so no import goes upward. The modes are imported only when asked for: importing this module stays
light (no torch). It owns nothing, but each entry it hands out releases the run folder's lock
(:class:`spreeze_like.rundir.RunFolderLock`, taken by ``prepare_run``) when the mode returns or
raises, so that the same process can resume the folder right after (tests and notebooks do).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spreeze_like.checkpoint import stop_before_training_says_so

if TYPE_CHECKING:
    from spreeze_like.results import TrainResult
    from spreeze_like.rundir import RunContext

    # run_serial(config, context, print_fn) / run_parallel(config, context, print_fn=print)
    ModeEntry = Callable[..., TrainResult]

__all__ = ["parallel_entry", "serial_entry"]


def serial_entry() -> ModeEntry:
    """``spreeze_like.serial.run_serial``: every role in this process, imported when the entry is called."""

    def run_serial(config: Any, context: RunContext, *args: Any, **kwargs: Any) -> TrainResult:
        with stop_before_training_says_so(context.run_dir):  # the serial trainer and torch: about a second,
            from spreeze_like.serial import run_serial as entry  # after the run folder is made, before its handlers
        return entry(config, context, *args, **kwargs)

    return _releasing_the_folder(run_serial)


def parallel_entry() -> ModeEntry | None:
    """``spreeze_like.supervisor.run_parallel`` if the parallel mode is built, else None."""
    try:
        from spreeze_like.supervisor import run_parallel
    except ModuleNotFoundError as exc:
        if exc.name == "spreeze_like.supervisor":
            return None
        raise
    return _releasing_the_folder(run_parallel)


def _releasing_the_folder(entry: ModeEntry) -> ModeEntry:
    """``entry`` that lets go of the run folder's lock when it returns or raises."""

    @functools.wraps(entry)
    def run(config: Any, context: RunContext, *args: Any, **kwargs: Any) -> TrainResult:
        try:
            return entry(config, context, *args, **kwargs)
        finally:
            context.release()

    return run
