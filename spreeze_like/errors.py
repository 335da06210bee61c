"""User-facing errors.

Every mistake a user can make (unknown env, bad flag, full /dev/shm, corrupt checkpoint, a
segment name clash) is raised as a :class:`SpreezeError` with a one-line message that says what
happened and what to do. The CLI prints ``error: <message>`` and exits with status 2; no
traceback. Programming errors stay ordinary exceptions so that they keep their traceback; where a run
stops on one (an env's step raising in the serial mode, a role dying in the parallel mode), the
traceback is printed and a :class:`RoleFailedError` line follows it, naming what there is to resume.
"""

from __future__ import annotations

USAGE_EXIT_CODE = 2


class SpreezeError(Exception):
    """A user-facing error: one line, says what to do. The CLI exits with status 2."""

    exit_code = USAGE_EXIT_CODE


class ConfigError(SpreezeError):
    """An invalid flag, config file or combination of settings."""


class EnvError(SpreezeError):
    """An env that cannot be made, has the wrong spaces, or raises on reset."""


class ShmError(SpreezeError):
    """A shared-memory problem: name clash, full /dev/shm, a missing or foreign segment."""


class PeerDeadError(SpreezeError):
    """The process on the other side of a ring or board died."""


class CheckpointError(SpreezeError):
    """A checkpoint that is corrupt, missing, or from another env or algorithm."""


class RoleFailedError(SpreezeError):
    """A role died or hung (a learner in the parallel mode, any role's exception in the serial mode): the run
    ends with its last good checkpoint (exit status 1)."""

    exit_code = 1


class NonFiniteError(SpreezeError):
    """A learner saw NaN/inf gradients in too many updates in a row, or holds non-finite weights.

    Not a usage error: the run ends with exit status 1, keeping the last good checkpoint.
    """

    exit_code = 1


def first_line(exc: BaseException, limit: int = 0, named: bool = False) -> str:
    """The first line of ``exc``'s message (its type's name if it has none), ``Type: line`` when ``named``,
    cut to ``limit`` characters ending in ``...`` (0: uncut): a long message (Ray's, torch's) inside one line."""
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else ""
    if named or not line:
        line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if not limit or len(line) <= limit else line[: limit - 3] + "..."


def describe_exception(exc: BaseException) -> str:
    """``Type at file.py:line: message`` on one line, the line where it was raised (a SyntaxError's own text
    already names its line): what a one-line error says of an exception in the user's code."""
    message = " ".join(str(exc).split())
    where = ""
    if not isinstance(exc, SyntaxError) and exc.__traceback__ is not None:
        frame = exc.__traceback__
        while frame.tb_next is not None:
            frame = frame.tb_next
        code = frame.tb_frame.f_code
        where = f" at {code.co_filename.rsplit('/', 1)[-1]}:{frame.tb_lineno}"
    return f"{type(exc).__name__}{where}" + (f": {message}" if message else "")
