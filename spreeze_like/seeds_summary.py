"""What a multi-seed run ends with: each seed's outcome, statistics over the seeds, and the exit status.

Statistics are over the seeds that finished with an evaluation: mean, sample standard deviation,
median, interquartile mean (IQM: the mean of the middle half, 25% cut from each end as
``scipy.stats.trim_mean(x, 0.25)`` cuts; rliable recommends it for few runs, as robust as the median
and less noisy) and the range with the seeds at its ends. No confidence interval is printed: over
a handful of seeds a bootstrap interval says little more than the range does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spreeze_like.seed_runs import SeedRecord


@dataclass(frozen=True)
class SeedStats:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for one seed
    median: float
    iqm: float
    low: tuple[int, float]  # (seed, return) at each end of the range
    high: tuple[int, float]


def interquartile_mean(values: Sequence[float]) -> float:
    """The mean of ``values`` without the lowest and the highest ``floor(n / 4)``."""
    ordered = sorted(values)
    cut = int(0.25 * len(ordered))
    middle = ordered[cut:len(ordered) - cut]
    return math.fsum(middle) / len(middle)


def seed_stats(seeds: Sequence[SeedRecord]) -> SeedStats | None:
    """Statistics over the finished seeds' final evaluations, or None when no seed has one."""
    scored = [(s.seed, s.final_return) for s in seeds if s.finished and s.final_return is not None]
    if not scored:
        return None
    values = [r for _, r in scored]
    return SeedStats(
        n=len(values), mean=statistics.fmean(values), std=statistics.stdev(values) if len(values) > 1 else 0.0,
        median=statistics.median(values), iqm=interquartile_mean(values),
        low=min(scored, key=lambda x: x[1]), high=max(scored, key=lambda x: x[1]),
    )


def outcome(record: SeedRecord) -> str:
    """One seed's outcome in a few words."""
    if record.status == "done":
        if record.final_return is None:
            return "done, no evaluation recorded"
        return f"{record.final_return:.1f} after {record.env_steps:,} env steps"
    if record.status in ("failed", "refused"):
        return f"{record.status}: {record.line}"
    if record.status == "stopped":
        return "stopped (resumable)"
    return "not started"


def summary_lines(seeds: Sequence[SeedRecord], folder: Path, stopped: bool) -> list[str]:
    """The closing lines: per seed, the statistics, and what to do about seeds that did not finish."""
    lines = [f"[seeds] seed {s.seed}: {outcome(s)}" for s in seeds]
    stats = seed_stats(seeds)
    if stats is not None:
        lines.append(
            f"final evaluation over {stats.n} seed{'s' if stats.n > 1 else ''}: mean {stats.mean:.1f} (std "
            f"{stats.std:.1f}), median {stats.median:.1f}, IQM {stats.iqm:.1f}, min {stats.low[1]:.1f} (seed "
            f"{stats.low[0]}), max {stats.high[1]:.1f} (seed {stats.high[0]})"
        )
    unfinished = [s for s in seeds if not s.finished]
    if unfinished:
        why = "interrupted" if stopped else "not finished"
        lines.append(f"{why}: seeds {' '.join(str(s.seed) for s in unfinished)}; continue them (each from its newest "
                     f"checkpoint) with python -m spreeze_like.seeds --resume {folder}")
    lines.append(f"seeds folder: {folder}   (tensorboard --logdir {folder})")
    return lines


def exit_code(seeds: Sequence[SeedRecord], stop_signal: int | None) -> int:
    """128 + the signal after a stop; 2 when a seed refused its settings; 1 when a seed failed; else 0."""
    if stop_signal is not None:
        return 128 + int(stop_signal)
    if any(s.status == "refused" for s in seeds):
        return 2
    if any(s.status == "failed" for s in seeds):
        return 1
    return 0 if all(s.finished for s in seeds) else 1

