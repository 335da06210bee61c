"""Rows per collect call of a remote sampler: big enough to hide the call cost, small enough to keep lag low.

Measured with Ray 2.60 on a 2-core machine (``docs/design`` note RAY_REMOTE_SAMPLERS.md, section 3):
a call costs about 0.7-0.9 ms plus 0.6-7.4 us per returned HalfCheetah transition, falling with the
batch. A call that takes :data:`BATCH_SECONDS` of the actor's stepping makes the fixed cost about 1 %
of it, and with two calls in flight per actor the data transfer overlaps the next call's stepping.
So the bridge asks for ``measured step rate x 0.1 s`` rows, within [:data:`MIN_BATCH`,
:data:`MAX_BATCH`], and never more than :func:`remote_batch_rows` (what the remote rings are sized
for). Pure functions; owns nothing.

The cap depends on the update-to-data ratio (decision). Every row a call holds was collected with
one policy version, and the run's lead grows by two calls per remote sampler, so at UTD 1 a call of
2,048 rows is 2,048 updates of policy lag (measured: 69-160 versions mean lag per step on Pendulum
with that cap). The cap is therefore the rows of :data:`LAG_UPDATES` updates, ``256 / utd``, within
[:data:`MIN_BATCH`, :data:`AUTO_BATCH`]: 256 at UTD 1 (the design note measured a call's fixed cost at
0.7-0.9 ms; the bridge's CPU at this size was not benchmarked), 2,048 at UTD 1/8 and below, where the
learners do not bound sampling and large calls pay (tools/bench_remote.py's overhead figure).
"""

from __future__ import annotations

import math
from typing import Any

MIN_BATCH = 256
MAX_BATCH = 16384
AUTO_BATCH = 2048  # --remote-batch 0: the largest batch the bridge asks for, and the rings' sizing unit
LAG_UPDATES = 256  # --remote-batch 0: a call holds at most this many critic updates' worth of rows
BATCH_SECONDS = 0.1  # of actor stepping per call


def remote_batch_rows(cfg: Any) -> int:
    """The most rows one collect call asks for: ``--remote-batch`` if set, else ``256 / utd`` within
    [:data:`MIN_BATCH`, :data:`AUTO_BATCH`] (see the module docstring).

    The supervisor sizes each remote sampler's ring for two calls of this many rows in flight.
    """
    batch = int(getattr(cfg, "remote_batch", 0) or 0)
    if batch > 0:
        return batch
    utd = float(getattr(cfg, "utd", 1.0) or 1.0)
    return min(AUTO_BATCH, max(MIN_BATCH, math.ceil(LAG_UPDATES / utd - 1e-9)))


def batch_rows(cfg: Any, steps_per_s: float | None) -> int:
    """Rows to ask for next: ``--remote-batch`` when set, else the rule of the module docstring.

    Args:
        cfg: the run's config (``remote_batch``).
        steps_per_s: the actor's measured env steps per second of stepping, None before its first reply.
    """
    cap = remote_batch_rows(cfg)
    if int(getattr(cfg, "remote_batch", 0) or 0) > 0:
        return cap
    if steps_per_s is None or steps_per_s <= 0:
        return min(cap, MIN_BATCH)  # a first, short call measures the rate
    return min(cap, max(MIN_BATCH, min(MAX_BATCH, int(steps_per_s * BATCH_SECONDS))))


def round_to_envs(rows: int, n_envs: int, up: bool) -> int:
    """``rows`` rounded to a multiple of ``n_envs`` (a sampler steps all its envs at once)."""
    if up:
        return -(-rows // n_envs) * n_envs
    return rows // n_envs * n_envs
