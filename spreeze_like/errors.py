"""User-facing errors.

Every mistake a user can make (unknown env, bad flag, full /dev/shm, corrupt checkpoint, a
segment name clash) is raised as a :class:`SpreezeError` with a one-line message that says what
happened and what to do. The CLI prints ``error: <message>`` and exits with status 2; no
traceback. Programming errors stay ordinary exceptions so that they keep their traceback.
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


class NonFiniteError(SpreezeError):
    """A learner saw NaN/inf gradients in too many updates in a row, or holds non-finite weights.

    Not a usage error: the run ends with exit status 1, keeping the last good checkpoint.
    """

    exit_code = 1
