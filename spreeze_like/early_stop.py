"""Ending a run before its last env step: ``--stop-at-return`` and ``--time-limit-s``, one rule for both modes.

A run stops early when an evaluation's mean return reaches ``--stop-at-return``, or when this session
has run ``--time-limit-s`` seconds of wall time (counted from the session's start, the zero of
``curves.csv``'s ``wall_s``; a paused process's pause counts, as a scheduler's time limit counts it).
Either way it then ends as at its last step: the samplers stop, the learners catch up on what was
collected, and the final checkpoint and evaluation follow (so they come after the limit: on
HalfCheetah-v5 ten evaluation episodes take seconds). ``--resume`` continues such a run, with the same
limit per session unless the flag is given again.

Why a time limit (Sample Factory's ``--train_for_seconds``): a job under a scheduler's time limit
ends with its checkpoint written instead of being killed, and settings compared at equal wall time
(``tools/bench_autotune.py``'s question) need no outside timer and signal.

The supervisor (:mod:`spreeze_like.supervisor`, parallel mode) and the serial trainer
(:mod:`spreeze_like.serial`) each hold one :class:`EarlyStop` and ask it after each of their
evaluations and on each pass of their loop. Owns no process or shared resource.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EarlyStop:
    """The early-stop rules of one session.

    Attributes:
        stop_at_return: ``--stop-at-return`` (None: never).
        time_limit_s: ``--time-limit-s`` (0: no limit).
        t0: the session's start, in ``time.monotonic()`` seconds.
        reason: ``""`` while the run goes on, then ``"return"`` or ``"time limit"``.
    """

    stop_at_return: float | None
    time_limit_s: float
    t0: float
    reason: str = ""

    @property
    def deadline(self) -> float:
        """The ``time.monotonic()`` value at which the time limit comes (inf: none)."""
        return self.t0 + self.time_limit_s if self.time_limit_s > 0 else math.inf

    def evaluated(self, mean_return: float, env_step: int) -> str | None:
        """After an evaluation: the line that says the run stops here if it reached ``--stop-at-return``."""
        if self.stop_at_return is None or not mean_return >= self.stop_at_return:
            return None
        self.reason = "return"
        return (f"[spreeze] evaluation return {mean_return:.1f} >= --stop-at-return {self.stop_at_return} at "
                f"{env_step:,} env steps; stopping")

    def timed_out(self, now: float, env_step: int) -> str | None:
        """On a loop pass: the line that says the run stops here if ``now`` is past the time limit."""
        if now < self.deadline:
            return None
        self.reason = "time limit"
        return (f"[spreeze] --time-limit-s {self.time_limit_s:g} reached at {env_step:,} env steps; stopping "
                "(the final checkpoint and evaluation follow; --resume continues the run)")
