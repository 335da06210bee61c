"""Console lines for a person: a closed stdout (``| head`` or a pager quit) or a full one never ends a run.

A run's console lines (the header, the progress line, restarts, the final evaluation) are a view;
TensorBoard, ``curves.csv``, ``evals.jsonl`` and the checkpoints are the record. When the reader of
a piped stdout quits, the next ``print`` raises ``BrokenPipeError``; uncaught, it killed the monitor
(restarted, then dying again) and then the supervisor mid-run with a traceback. :func:`say` turns
that into one note on stderr and points this process's stdout at ``/dev/null`` (the recipe of
Python's ``signal`` docs), so later lines, and the flush at interpreter exit, go nowhere quietly
while the run trains on. Every process of a run that prints (supervisor, monitor, evaluator, the
serial mode, ``--list-presets``, the profiler) prints through here. Owns no files or threads.

:func:`exit_status` is the commands' shared ending: a user-facing error is one ``error: ...`` line on
stderr and its exit status (2), Ctrl-C one line and 130, SIGTERM one line and 143, never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn, TextIO

from spreeze_like.errors import SpreezeError

__all__ = ["CLOSED_NOTE", "UNWRITABLE_NOTE", "exit_status", "flush_stdout", "run_tool", "say"]

CLOSED_NOTE = ("[spreeze] stdout is closed (the reader of the pipe quit): console lines from here on are dropped; "
               "TensorBoard and the run folder keep the record")
# stdout is a file that cannot take more (``> log.txt`` on a full disk, the seeds command's console.log): the same
UNWRITABLE_NOTE = ("[spreeze] cannot write console lines to stdout ({why}): they are dropped from here on; "
                   "TensorBoard and the run folder keep the record")

_noted = False


def say(line: str, file: TextIO | None = None) -> None:
    """``print(line, flush=True)`` to stdout (or ``file``); a closed pipe drops this and later lines (see above)."""
    stream = sys.stdout if file is None else file
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        _detach(stream)
    except OSError as exc:  # a full disk (ENOSPC), an I/O error: a console line is never worth the run
        _detach(stream, UNWRITABLE_NOTE.format(why=exc.strerror or exc))


def exit_status(body: Callable[[], int], interrupted: str = "interrupted") -> int:
    """``body()``'s exit status; a :class:`SpreezeError` is its one line and status, Ctrl-C ``interrupted`` and 130
    (or the line the ``KeyboardInterrupt`` carries, where the body knows better what there is to resume), SIGTERM
    the same line and 143 (where the body installs no handler of its own: a run's roles do)."""
    with _sigterm_interrupts() as sigterm:
        try:
            try:
                return body()
            finally:
                sigterm.armed = False  # the ending is under way: a SIGTERM from here on is ignored, never raised
        except SpreezeError as exc:
            say(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt as exc:
            say(str(exc) or interrupted, file=sys.stderr)
            return 128 + signal.SIGTERM if sigterm.raised else 130


def run_tool(main: Callable[[], object]) -> NoReturn:
    """A benchmark tool's ``__main__``: exits with :func:`exit_status` of ``main()`` (its int, or 0 for the figures
    a tool returns). Ctrl-C and SIGTERM then run the tool's ``finally`` clauses (its children stopped, a scratch
    folder named) and end in one line, where they were a traceback or, for SIGTERM, an exit with nothing said."""

    def body() -> int:
        status = main()
        return status if isinstance(status, int) else 0

    sys.exit(exit_status(body))


@dataclasses.dataclass
class _Sigterm:
    """What :func:`_sigterm_interrupts`' handler did: ``raised`` once at most, and only while ``armed``."""

    armed: bool = True
    raised: bool = False


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[_Sigterm]:
    """SIGTERM raises ``KeyboardInterrupt`` in the block, so that ``finally`` clauses run: the autotune probe's
    worker killed, its ring unlinked, its queue closed. By default SIGTERM ends the process on the spot (a batch
    system's stop during the probe: no line, and multiprocessing's warning about leaked semaphores). A run's
    supervisor or serial trainer installs its own handlers inside it and puts this one back when it ends.

    It raises once, and not after :func:`exit_status` has disarmed it (its body has ended): SIGTERMs sent every
    2 ms through a run's stop reached this handler once the supervisor had put it back, and it raised in the
    ending itself (between the body's SystemExit(143) and this block's exit, seen in CI on 2026-11-30), which
    printed a traceback and, since this ``finally`` never ran, left the handler in place to interrupt torch's
    finalizers at exit. A later SIGTERM is ignored; this block's end puts the previous handler back."""
    state = _Sigterm()
    if threading.current_thread() is not threading.main_thread():  # signals are the caller's there
        yield state
        return

    def handler(signum: int, frame: object) -> None:
        if state.armed:
            state.armed, state.raised = False, True
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


def flush_stdout() -> None:
    """``sys.stdout.flush()``, with a closed pipe handled as :func:`say` does."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _detach(sys.stdout)
    except OSError as exc:
        _detach(sys.stdout, UNWRITABLE_NOTE.format(why=exc.strerror or exc))


def _detach(stream: TextIO, note: str = CLOSED_NOTE) -> None:
    """Point ``stream``'s descriptor at /dev/null (what is buffered goes there too, so the flush at exit
    succeeds) and say ``note`` once on stderr."""
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
            print(note, file=sys.stderr, flush=True)
        except (BrokenPipeError, OSError):  # stderr went with it (2>&1 | head): nothing left to tell
            pass
