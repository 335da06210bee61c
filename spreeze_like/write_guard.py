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

:func:`writable_file` is the other side: a file the user names for a command's result (``profile --json``, a
benchmark's ``--json``), tried before the minutes or hours of work that fill it, so that a typo in its folder
is one line at the start and not a traceback at the end with the figures lost.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spreeze_like.console import say
from spreeze_like.errors import ConfigError


def _stderr(line: str) -> None:
    say(line, file=sys.stderr)


def describe_os_error(exc: OSError) -> str:
    """``No space left on device`` (the errno text) rather than the full repr with the path."""
    return exc.strerror or str(exc) or type(exc).__name__


def writable_file(path: str | Path, flag: str) -> Path:
    """``path``, its folder made, after opening it for appending (not truncating; a file made by this is removed
    again): ``os.access`` would say yes to root, even under /proc. ConfigError (one line naming ``flag``) where it
    cannot be written: a folder, a file in its way, no such place, a read-only filesystem."""
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        existed = out.exists()
        with open(out, "a"):
            pass
        if not existed:
            out.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {describe_os_error(exc)}; pass {flag} with a writable path") from None
    return out


def tool_output(parser: Any, path: str | Path | None, flag: str = "--json") -> Path | None:
    """A benchmark tool's output file (None where not given), tried before the tool measures: else one ``error:``
    line and exit status 2 (``parser.exit``, the tool's argparse parser), as :func:`spreeze_like.envs.tool_env`
    does for its env. Before, each tool wrote its JSON at the end: a soak's half hour, then a traceback."""
    if not path:
        return None
    try:
        return writable_file(path, flag)
    except ConfigError as exc:
        parser.exit(2, f"error: {exc}\n")


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
