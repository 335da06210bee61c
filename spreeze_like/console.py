"""Console lines for a person: a closed stdout (``| head`` or a pager quit) never ends a run.

A run's console lines (the header, the progress line, restarts, the final evaluation) are a view;
TensorBoard, ``curves.csv``, ``evals.jsonl`` and the checkpoints are the record. When the reader of
a piped stdout quits, the next ``print`` raises ``BrokenPipeError``; uncaught, it killed the monitor
(restarted, then dying again) and then the supervisor mid-run with a traceback. :func:`say` turns
that into one note on stderr and points this process's stdout at ``/dev/null`` (the recipe of
Python's ``signal`` docs), so later lines, and the flush at interpreter exit, go nowhere quietly
while the run trains on. Every process of a run that prints (supervisor, monitor, evaluator, the
serial mode, ``--list-presets``, the profiler) prints through here. Owns no files or threads.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["CLOSED_NOTE", "flush_stdout", "say"]

CLOSED_NOTE = ("[spreeze] stdout is closed (the reader of the pipe quit): console lines from here on are dropped; "
               "TensorBoard and the run folder keep the record")

_noted = False


def say(line: str, file: TextIO | None = None) -> None:
    """``print(line, flush=True)`` to stdout (or ``file``); a closed pipe drops this and later lines (see above)."""
    stream = sys.stdout if file is None else file
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        _detach(stream)


def flush_stdout() -> None:
    """``sys.stdout.flush()``, with a closed pipe handled as :func:`say` does."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _detach(sys.stdout)


def _detach(stream: TextIO) -> None:
    global _noted
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a real file (a test's StringIO): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    if not _noted and stream is not sys.stderr:
        _noted = True
        try:
            print(CLOSED_NOTE, file=sys.stderr, flush=True)
        except (BrokenPipeError, OSError):  # stderr went with it (2>&1 | head): nothing left to tell
            pass
