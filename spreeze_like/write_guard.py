"""Write failures of a run's log files (a full disk): one warning line, sparse retries, never a crash.

TensorBoard events, ``curves.csv``, ``status.json`` and ``evals.jsonl`` are for people and tools,
not for training: when the disk fills up (or the folder's filesystem fails) the run must go on and
say so once, not die with a traceback or restart its monitor in a loop (review finding 7). Each
writer owns a :class:`WriteGuard`; it turns the first ``OSError`` into one line::

    [spreeze] warning: cannot write TensorBoard events (<run folder>): No space left on device; ...

then tells its writer when to try again (every ``retry_s`` seconds: each retry of an event file or
of ``curves.csv`` opens a file, so those retry once a minute; ``status.json`` and ``evals.jsonl``
retry at their next write). When a retry succeeds it says ``[spreeze] <what>: written again``; a
later failure warns again. What was not written in between is lost; checkpoints are not guarded
here: a checkpoint that cannot be written ends the run with one line (``checkpoint.py``), since a
run that cannot checkpoint cannot be resumed.

Owns nothing but its state; no file, no thread.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from spreeze_like.console import say


def _stderr(line: str) -> None:
    say(line, file=sys.stderr)


def describe_os_error(exc: OSError) -> str:
    """``No space left on device`` (the errno text) rather than the full repr with the path."""
    return exc.strerror or str(exc) or type(exc).__name__


class WriteGuard:
    """The failure state of one log file; see the module docstring.

    Args:
        what: the file as the warning names it (``TensorBoard events (<dir>)``, ``status.json``).
        consequence: what the run does meanwhile, the end of the warning line.
        warn: where the lines go (the console; default stderr).
        retry_s: seconds between attempts while failing (0: at every write).
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(self, what: str, consequence: str, warn: Callable[[str], None] | None = None, retry_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.consequence = what, consequence
        self.warn = warn or _stderr
        self.retry_s, self.clock = retry_s, clock
        self.failing = False
        self.failures = 0  # every failed attempt, warned or not
        self._retry_at = 0.0

    def may_try(self) -> bool:
        """True unless failing and the next retry is not due yet."""
        return not self.failing or self.clock() >= self._retry_at

    def failed(self, exc: OSError) -> None:
        """Record a failed write; the first of a run of failures is the one warning line."""
        if not self.failing:
            self.warn(f"[spreeze] warning: cannot write {self.what}: {describe_os_error(exc)}; {self.consequence}")
        self.failing = True
        self.failures += 1
        self._retry_at = self.clock() + self.retry_s

    def succeeded(self) -> None:
        """Record a successful write; after failures, say the file is written again."""
        if self.failing:
            self.failing = False
            self.warn(f"[spreeze] {self.what}: written again")
