"""The learning-speed rule: which batch size and UTD to learn at, from the learner's and the samplers' rates.

**Replay ratio.** ``R = batch_size x utd`` is how many transitions the critic reads per env step
collected, so with uniform replay each transition is read about R times while it is in the buffer.
It, not the update frames/s, says whether the data is used well: SAC's defaults (batch 256, one
update per env step) read each transition 256 times. A planner that maximises update frames/s
alone lands on a huge batch at UTD 1 (batch 8192: each transition read 8192 times, while the
samplers the machine could run stay idle). So the plan keeps R in a band that learns and spends
the machine on *data*:

* :data:`REPLAY_RATIO_TARGET` = 256, the ratio SAC's (and TD3's) published hyperparameters were
  tuned at (batch 256, UTD 1; our learning rates, tau and alpha schedule are those).
* :data:`REPLAY_RATIO_MAX` = 1024, four times that: re-reading the same data more than this without
  resets or critic regularisation -- which our algorithms do not have -- is the regime where
  off-policy actor-critics overfit their early data (the replay-ratio / primacy-bias studies that
  needed network resets to go higher).
* :data:`REPLAY_RATIO_MIN` = 128, half the target: the bottom of the band a *user's* ratio is judged
  by (a ``--utd`` that puts R below it is noted in the plan). Large-batch, many-env recipes
  (Spreeze, FastTD3: batch 32768 with 2 updates per step of 128 to 4096 GPU-simulated envs, R of
  about 512 down to 16) read each transition far fewer times than SAC's defaults, and the plan used
  to go down to 128 with GPU learners and idle cores. The H200 grid of 2026-11-28 (HalfCheetah-v5
  CrossQ, 90 s per run, BENCHMARKS.md "Autotune") measured against it: the two R-128 runs returned
  8,507 (the autotuned one) and 8,845, the three R-256 runs with 13 samplers 8,887 to 10,561. So the
  plan itself does not go below the target.

**The rule** (:func:`choose_feed`), for each measured batch size ``b`` the critic device can run
(the caller passes those up to the update-rate knee: beyond it a doubling costs more update rate
than it buys frames): the critic does ``F = updates/s x b`` frames/s; the samplers the cores allow
make at most ``S`` env steps/s. Learner and samplers both run flat out at ``R = F / S``; the plan
takes that ratio, kept inside the band, and the env steps/s the critic then learns from,
``D = min(F / R, S)``. The batch with the most ``D`` wins; among batches within 5% of it, the one
whose R is nearest the target from below (one the samplers feed at no more than SAC's ratio), else
the one nearest it from above, then the smaller. So the batch grows only as far as the samplers can
feed it: past that, a larger batch only raises R (re-reading the same data), which the tie-break
does not buy.

Where R sits when the learner is the bottleneck (``F / S`` below the target): at the target, with GPU
or CPU learners (the planner passes it as ``floor``; one measurement, above, moved GPU learners off
:data:`REPLAY_RATIO_MIN`). With CPU learners spare cores go to their threads (rule 5 of the planner),
and a 2-core machine has none, so extra sampling would take the learners' own CPU anyway.

**Run length.** A run of ``total_steps`` env steps does ``total_steps x utd`` critic updates in
all. The plan keeps at least :data:`MIN_RUN_UPDATES` of them (what SAC's defaults do in the
default 20,000-step run): a short run gets SAC's defaults, not a large batch it has no time to
learn with; a long or time-bound run (the benchmarks' ``--total-steps 10000000``) is not limited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spreeze_like.autotune.results import UpdatePoint

REPLAY_RATIO_TARGET = 256.0
REPLAY_RATIO_MIN = 128.0
REPLAY_RATIO_MAX = 1024.0
MIN_RUN_UPDATES = 20_000
FEED_TIE = 0.05  # env steps/s learned within this fraction of the best count as equal (measurement noise)
BAND_SLACK = 1e-3  # relative slack of the band checks (a UTD is rounded to 5 significant digits)


@dataclass(frozen=True)
class Feed:
    """One batch size with its replay ratio and the rates that follow."""

    point: UpdatePoint
    critic_hz: float  # critic updates/s the learner can do at this batch (device sharing counted)
    ratio: float  # R = batch x utd
    utd: float
    data_hz: float  # env steps/s the critic learns from: min(F / R, samplers' rate)
    limit: str  # what set R: "balanced", "floor", "target", "ceiling", "run length" or "yours"

    @property
    def batch_size(self) -> int:
        return self.point.batch_size

    @property
    def frames_hz(self) -> float:
        """Update frames/s actually done: the data learned from times the ratio (an idle learner does fewer)."""
        return self.data_hz * self.ratio

    @property
    def learner_idle(self) -> float:
        """Fraction of its update rate the critic cannot use (the samplers cannot feed it even at R_MAX)."""
        return max(0.0, 1.0 - self.frames_hz / (self.critic_hz * self.batch_size))


def in_band(ratio: float) -> bool:
    return REPLAY_RATIO_MIN * (1 - BAND_SLACK) <= ratio <= REPLAY_RATIO_MAX * (1 + BAND_SLACK)


def round_utd(utd: float) -> float:
    """5 significant digits: exact for the power-of-two ratios (256 / 8192 = 0.03125), readable otherwise."""
    return float(f"{utd:.5g}")


def min_utd(total_steps: int) -> float:
    """The smallest UTD that gives a run of ``total_steps`` env steps :data:`MIN_RUN_UPDATES` updates."""
    return MIN_RUN_UPDATES / max(int(total_steps), 1)


def feed_at(point: UpdatePoint, critic_hz: float, supply_hz: float, floor: float, utd: float | None = None) -> Feed:
    """Batch ``point`` at the ratio where learner and samplers balance, kept in ``[floor, REPLAY_RATIO_MAX]``.

    ``utd`` given (the user's): the ratio is ``batch x utd``, whatever it is.
    """
    b = point.batch_size
    frames = critic_hz * b
    if utd is not None:
        ratio, limit = b * utd, "yours"
    else:
        balanced = frames / supply_hz if supply_hz > 0 else math.inf
        if balanced > REPLAY_RATIO_MAX:
            ratio, limit = REPLAY_RATIO_MAX, "ceiling"
        elif balanced < floor:
            ratio, limit = floor, "floor"
        else:
            ratio, limit = balanced, "balanced"
        utd = round_utd(ratio / b)
        ratio = b * utd
    return Feed(point, critic_hz, ratio, utd, min(frames / ratio, supply_hz), limit)


def choose_feed(candidates: Sequence[tuple[UpdatePoint, float]], supply_hz: float, floor: float,
                least_utd: float, utd: float | None = None) -> Feed:
    """The batch and ratio to learn at; see the module docstring.

    Args:
        candidates: (batch point, critic updates/s there) for every batch size allowed.
        supply_hz: most env steps/s the samplers can make.
        floor: lowest ratio the plan takes (:data:`REPLAY_RATIO_MIN` or the target).
        least_utd: the run length's lower bound on the UTD (:func:`min_utd`).
        utd: the user's UTD, if set: batches whose ratio falls in the band are preferred.
    """
    feeds: list[Feed] = []
    for point, hz in candidates:
        b = point.batch_size
        if utd is not None:
            feeds.append(feed_at(point, hz, supply_hz, floor, utd))
            continue
        need = b * least_utd  # the run length's floor on the ratio at this batch
        if need > REPLAY_RATIO_MAX * (1 + BAND_SLACK):
            continue  # this batch cannot give the run its updates inside the band
        feed = feed_at(point, hz, supply_hz, max(floor, need))
        if need >= floor and need > 0 and feed.limit == "floor":  # the run's updates bind (also where R = floor)
            feed = Feed(feed.point, feed.critic_hz, feed.ratio, feed.utd, feed.data_hz, "run length")
        elif feed.limit == "floor" and floor >= REPLAY_RATIO_TARGET:
            feed = Feed(feed.point, feed.critic_hz, feed.ratio, feed.utd, feed.data_hz, "target")
        feeds.append(feed)
    if not feeds:  # every batch is too large for the run's updates: the smallest, at the band's top
        point, hz = min(candidates, key=lambda c: c[0].batch_size)
        ratio = max(floor, min(REPLAY_RATIO_MAX, point.batch_size * least_utd))
        u = round_utd(ratio / point.batch_size)
        return Feed(point, hz, point.batch_size * u, u, min(hz / u, supply_hz), "run length")
    if utd is not None:
        inside = [f for f in feeds if in_band(f.ratio)]
        feeds = inside or [min(feeds, key=lambda f: _band_distance(f.ratio))]
    best = max(f.data_hz for f in feeds)
    ties = [f for f in feeds if f.data_hz >= (1.0 - FEED_TIE) * best]
    return min(ties, key=lambda f: preference(f.ratio, f.batch_size))


def preference(ratio: float, batch_size: int) -> tuple[bool, float, int]:
    """Sort key among equally fast choices: R at most the target first, nearest it, then the smaller batch."""
    return ratio > REPLAY_RATIO_TARGET * (1 + BAND_SLACK), abs(math.log(ratio / REPLAY_RATIO_TARGET)), batch_size


def _band_distance(ratio: float) -> float:
    if ratio < REPLAY_RATIO_MIN:
        return math.log(REPLAY_RATIO_MIN / ratio)
    return max(0.0, math.log(ratio / REPLAY_RATIO_MAX))


def serial_ratio(batch_size: int, least_utd: float, utd: float | None = None) -> tuple[float, float, str]:
    """(ratio, utd, what set it) for the serial mode: one process, no idle resource to trade, so the target."""
    if utd is not None:
        return batch_size * utd, utd, "yours"
    ratio, limit = REPLAY_RATIO_TARGET, "target"
    if batch_size * least_utd > ratio:
        ratio, limit = min(REPLAY_RATIO_MAX, batch_size * least_utd), "run length"
    u = round_utd(ratio / batch_size)
    return batch_size * u, u, limit


def ratio_reason(feed_ratio: float, limit: str, *, gpu_learners: bool, spare_cores: int, least_utd: float,
                 total_steps: int, supply_hz: float, data_hz: float) -> str:
    """The one-line reason of the planned UTD."""
    head = (f"replay ratio R = batch x UTD = {feed_ratio:,.0f} (each transition read ~{feed_ratio:,.0f} times; "
            f"band [{REPLAY_RATIO_MIN:.0f}, {REPLAY_RATIO_MAX:.0f}] around SAC's 256 x 1)")
    why = {
        "floor": (f"the learner is the bottleneck and {'its GPUs leave' if gpu_learners else 'it leaves'} "
                  f"{spare_cores} core(s) to samplers: R at the band's floor, the most fresh data per update"),
        "target": ("the learner is the bottleneck: R at SAC's tuned ratio"
                   + (" (R 128 learned less in 90 s on the H200 grid of 2026-11-28)" if gpu_learners
                      else " (spare cores go to the CPU learners, not to more sampling)")),
        "balanced": f"learner and samplers both run flat out at {data_hz:,.0f} env steps/s",
        "ceiling": (f"the samplers make at most {supply_hz:,.0f} env steps/s: R at the band's top, the critic's "
                    "remaining update rate stays unused"),
        "run length": (f"the run's {total_steps:,} steps need >= {MIN_RUN_UPDATES:,} critic updates in all "
                       f"(UTD >= {least_utd:.3g})"),
        "yours": "your --utd",
    }[limit]
    return f"{head}: {why}"
