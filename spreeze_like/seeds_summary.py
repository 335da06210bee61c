"""What a multi-seed run ends with: each seed's outcome, statistics over the seeds, and the exit status.

Statistics are over the seeds that finished with an evaluation: mean, sample standard deviation,
median, interquartile mean (IQM: the mean of the middle half, 25% cut from each end as
``scipy.stats.trim_mean(x, 0.25)`` cuts; rliable recommends it for few runs, as robust as the median
and less noisy) and the range with the seeds at its ends. No confidence interval is printed: over
a handful of seeds a bootstrap interval says little more than the range does.

A grid (``--vary``) gets these statistics per setting, and the settings ranked by IQM with each one's
range beside it: where the ranges overlap, the seeds have not separated the settings.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spreeze_like.seed_runs import SeedRecord
from spreeze_like.seeds_grid import Cell


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


def outcome(record: SeedRecord, reach: float | None = None) -> str:
    """One seed's outcome in a few words (with ``--reach``: when its evaluation first reached it)."""
    if record.status == "done":
        if record.final_return is None:
            return "done, no evaluation recorded"
        text = f"{record.final_return:.1f} after {record.env_steps:,} env steps"
        if reach is not None:
            text += (f"; evaluation {reach:g} not reached" if record.reached_steps is None else
                     f"; evaluation {reach:g} reached at {record.reached_steps:,} env steps, {record.reached_s:.1f} s")
        return text
    if record.status in ("failed", "refused"):
        return f"{record.status}: {record.line}"
    if record.status == "stopped":
        return "stopped (resumable)"
    return "not started"


@dataclass(frozen=True)
class ReachStats:
    """How soon the finished runs' evaluations first reached ``--reach``: medians and ranges of those that did."""

    threshold: float
    reached: int  # runs whose evaluation reached it
    runs: int  # finished runs
    steps_median: float | None
    steps_range: tuple[int, int] | None
    seconds_median: float | None
    seconds_range: tuple[float, float] | None


def reach_stats(seeds: Sequence[SeedRecord], threshold: float) -> ReachStats:
    done = [s for s in seeds if s.finished]
    hit = [s for s in done if s.reached_steps is not None and s.reached_s is not None]
    if not hit:
        return ReachStats(threshold, 0, len(done), None, None, None, None)
    steps = [int(s.reached_steps) for s in hit]  # type: ignore[arg-type]
    secs = [float(s.reached_s) for s in hit]  # type: ignore[arg-type]
    return ReachStats(threshold, len(hit), len(done), statistics.median(steps), (min(steps), max(steps)),
                      statistics.median(secs), (min(secs), max(secs)))


def reach_line(stats: ReachStats) -> str:
    head = f"evaluation {stats.threshold:g} reached by {stats.reached} of {stats.runs} finished seeds"
    if not stats.reached:
        return head
    lo, hi = stats.steps_range  # type: ignore[misc]
    slo, shi = stats.seconds_range  # type: ignore[misc]
    return (f"{head}: env steps median {stats.steps_median:,.0f} ({lo:,}-{hi:,}), wall seconds median "
            f"{stats.seconds_median:.1f} ({slo:.1f}-{shi:.1f}; the runs' clocks, curves.csv's wall_s)")


def run_name(record: SeedRecord, cells: Sequence[Cell] = ()) -> str:
    """``seed 3``, or in a grid ``seed 3 of setting 1 (tau=0.02)``."""
    if record.cell is None:
        return f"seed {record.seed}"
    return f"seed {record.seed} of setting {record.cell} ({cells[record.cell].label})"


def by_cell(seeds: Sequence[SeedRecord], n_cells: int) -> list[list[SeedRecord]]:
    """The runs of each setting of a grid, in the settings' order."""
    return [[s for s in seeds if s.cell == k] for k in range(n_cells)]


def summary_record(seeds: Sequence[SeedRecord], cells: Sequence[Cell] = (), reach: float | None = None) -> Any:
    """The statistics for ``seeds.json``: one setting's as a dict (None without an evaluation; with ``--reach``
    a ``reach`` entry too); a grid's as ``{"cells": [{"label": ..., "stats": dict or None, "reach": ...}, ...]}``."""
    if not cells:
        stats = seed_stats(seeds)
        out: Any = None if stats is None else asdict(stats)
        if reach is not None:
            out = {**(out or {}), "reach": asdict(reach_stats(seeds, reach))}
        return out
    entries = []
    for cell, runs in zip(cells, by_cell(seeds, len(cells))):
        stats = seed_stats(runs)
        entry = {"label": cell.label, "stats": None if stats is None else asdict(stats)}
        if reach is not None:
            entry["reach"] = asdict(reach_stats(runs, reach))
        entries.append(entry)
    return {"cells": entries}


def stats_line(stats: SeedStats) -> str:
    return (f"final evaluation over {stats.n} seed{'s' if stats.n > 1 else ''}: mean {stats.mean:.1f} (std "
            f"{stats.std:.1f}), median {stats.median:.1f}, IQM {stats.iqm:.1f}, min {stats.low[1]:.1f} (seed "
            f"{stats.low[0]}), max {stats.high[1]:.1f} (seed {stats.high[0]})")


def grid_lines(seeds: Sequence[SeedRecord], cells: Sequence[Cell], reach: float | None = None) -> list[str]:
    """Each setting's statistics, then the settings ranked by IQM with their ranges (a grid's closing lines)."""
    lines, ranked = [], []
    for k, (cell, runs) in enumerate(zip(cells, by_cell(seeds, len(cells)))):
        stats = seed_stats(runs)
        lines.append(f"setting {k} ({cell.label}): " + ("no seed finished with an evaluation" if stats is None
                                                         else stats_line(stats)))
        if reach is not None:
            lines.append(f"setting {k} ({cell.label}): " + reach_line(reach_stats(runs, reach)))
        if stats is not None:
            ranked.append((stats.iqm, k, stats))
    if reach is not None:
        lines += reach_ranking(seeds, cells, reach)
    if len(ranked) > 1:
        ranked.sort(key=lambda x: -x[0])
        order = "; ".join(f"{k} ({cells[k].label}) IQM {st.iqm:.1f} [{st.low[1]:.1f}, {st.high[1]:.1f}]"
                          for _, k, st in ranked)
        lines.append(f"settings by IQM, with each one's range over its seeds: {order}")
        best, second = ranked[0][2], ranked[1][2]
        if best.low[1] <= second.high[1]:
            lines.append("the best two settings' ranges of final returns overlap: these seeds do not separate them by "
                         "their final returns (more seeds would)")
    return lines


def reach_ranking(seeds: Sequence[SeedRecord], cells: Sequence[Cell], reach: float) -> list[str]:
    """The settings that got to ``reach``, soonest first by median env steps (more seeds there first), and
    whether the soonest two are separated: every seed of the first sooner than every seed of the second."""
    got = [(k, st) for k, runs in enumerate(by_cell(seeds, len(cells)))
           if (st := reach_stats(runs, reach)).reached]
    if len(got) < 2:
        return []
    got.sort(key=lambda x: (-x[1].reached / max(x[1].runs, 1), x[1].steps_median))
    order = "; ".join(f"{k} ({cells[k].label}) {st.steps_median:,.0f} [{st.steps_range[0]:,}-{st.steps_range[1]:,}], "
                      f"{st.reached} of {st.runs}" for k, st in got)  # type: ignore[index]
    lines = [f"settings by env steps to evaluation {reach:g} (median [range], seeds that got there): {order}"]
    (first, a), (second, b) = got[0], got[1]
    apart = a.reached == a.runs and a.steps_range[1] < b.steps_range[0]  # type: ignore[index]
    lines.append(f"every seed of setting {first} got there sooner than every seed of setting {second}" if apart else
                 f"the soonest two settings' seeds overlap in env steps to {reach:g}: these seeds do not separate them")
    return lines


def summary_lines(seeds: Sequence[SeedRecord], folder: Path, stopped: bool, cells: Sequence[Cell] = (),
                  reach: float | None = None) -> list[str]:
    """The closing lines: per run, the statistics (per setting in a grid), and what to do about runs that did
    not finish."""
    lines = [f"[seeds] {run_name(s, cells)}: {outcome(s, reach)}" for s in seeds]
    if cells:
        lines += grid_lines(seeds, cells, reach)
    else:
        stats = seed_stats(seeds)
        if stats is not None:
            lines.append(stats_line(stats))
        if reach is not None:
            lines.append(reach_line(reach_stats(seeds, reach)))
    unfinished = [s for s in seeds if not s.finished]
    if unfinished:
        why = "interrupted" if stopped else "not finished"
        which = (f"seeds {' '.join(str(s.seed) for s in unfinished)}" if not cells else
                 f"{len(unfinished)} runs ({', '.join(run_name(s, cells) for s in unfinished[:3])}"
                 f"{', ...' if len(unfinished) > 3 else ''})")
        lines.append(f"{why}: {which}; continue them (each from its newest checkpoint) with python -m "
                     f"spreeze_like.seeds --resume {folder}")
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

