"""Learning curves of a ``tools/bench_vs_sb3.py`` invocation: one ``curves.csv`` per run, one PNG per env.

Every system's curve (ours in either mode, SB3, SBX SAC, SBX CrossQ) is built here from the benchmark's own records,
not from the ``curves.csv`` our monitor writes in its run folder: the monitor's clock starts at the
serial ``run()`` or the supervisor's ``run()``, after our start-up, while the benchmark's clock
starts just before ``train()`` / the peer's constructor for everyone. One clock for all is what makes the
picture a comparison. The points are:

- ``train``: one row per finished training episode (the recording wrapper's end time, shifted to
  the run's t0; env step = the summed lengths of the training episodes finished so far, exact with
  one env and a slight undercount with several);
- ``eval``: one row per evaluation, at the time its result was known, with the env step it was
  started at. For the peers that time has the evaluations' own duration taken out (the benchmark
  subtracts it). For ours, an evaluation whose env step the benchmark could not tie to our
  evaluator's results (``-1`` in the records) gets the env step the training had reached at that
  time; :func:`write_bench_curves` counts those and the benchmark prints the count.

Who writes and removes: :func:`write_bench_curves` writes ``<curves_dir>/<env>-<run>-seed<seed>/curves.csv``
(atomically, :func:`spreeze_like.curves.write_curves`) after all runs of the invocation; a later
invocation with the same folder replaces the files of the runs it repeats and leaves the others.
:func:`plot_bench` draws this invocation's runs only. Nothing is removed by the benchmark: the
folder is the user's (by default beside ``--json``). A crash before the end writes no curves (the
``--json`` partial records hold the finished seeds' points).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from spreeze_like.curves import CurvePoint, read_curves, write_curves
from spreeze_like.rundir import safe_name

LABELS = {"ours-parallel": "spreeze_like parallel", "ours-serial": "spreeze_like serial", "sb3": "SB3 SAC",
          "sbx": "SBX SAC", "sbx-crossq": "SBX CrossQ"}
ALGO_NAMES = {"sac": "SAC", "crossq": "CrossQ", "td3": "TD3", "ddpg": "DDPG"}
CLOCK = ("bench_vs_sb3: from just before train() / the peer's constructor, start-up counted for all; the peers' "
         "evaluation time subtracted")


class BenchRun(Protocol):
    """What the benchmark records of one run (``peers_record.RunRecord``); times since its t0."""

    name: str
    seed: int
    train: list[tuple[float, int, float]]  # (wall s, env step, return) per training episode
    evals: list[tuple[float, int, float]]  # (wall s, env step or -1, mean return) per evaluation
    device: str
    algo: str  # sac, crossq, ...


@dataclass(frozen=True)
class WrittenCurves:
    """The run folders written, and how many evaluation steps had to be estimated."""

    run_dirs: list[Path]
    estimated_eval_steps: int


def run_points(run: BenchRun, eval_episodes: int) -> tuple[list[CurvePoint], int]:
    """The curve rows of one run, in time order, and the number of evaluations whose step was estimated."""
    points = [CurvePoint("train", t, int(step), ret, 1) for t, step, ret in run.train]
    ends = [t for t, _, _ in run.train]
    estimated = 0
    for t, step, mean in run.evals:
        if step < 0:  # not tied to our evaluator's results: the env step the training had reached by then
            i = bisect.bisect_right(ends, t)
            step = run.train[i - 1][1] if i else 0
            estimated += 1
        points.append(CurvePoint("eval", t, int(step), mean, eval_episodes))
    points.sort(key=lambda p: p.wall_s)
    return points, estimated


def run_folder(curves_dir: Path, env: str, run: BenchRun) -> Path:
    return curves_dir / f"{safe_name(env)}-{run.name}-seed{run.seed}"


def write_bench_curves(runs: Sequence[BenchRun], curves_dir: str | Path, env: str, eval_episodes: int,
                       window: int) -> WrittenCurves:
    """One ``curves.csv`` per run (system = the run's name: ours-parallel, ours-serial, sb3, sbx, sbx-crossq)."""
    folders, estimated = [], 0
    for run in runs:
        points, n = run_points(run, eval_episodes)
        estimated += n
        meta = {"system": run.name, "env": env, "algo": run.algo, "seed": run.seed,
                "label": f"{LABELS.get(run.name, run.name)}, seed {run.seed}", "clock": CLOCK,
                "device": run.device, "train_window": window}
        folder = run_folder(Path(curves_dir), env, run)
        write_curves(folder, meta, points)
        folders.append(folder)
    return WrittenCurves(folders, estimated)


def default_png(curves_dir: str | Path, env: str) -> Path:
    return Path(curves_dir) / f"curves_{safe_name(env)}.png"


def plot_bench(run_dirs: Sequence[Path], png: str | Path, env: str, window: int) -> Path:
    """Draw the runs' curves (read back from their files, as any reader would) into one PNG."""
    from plot_runs import plot_runs  # tools/ is on sys.path: the benchmark puts it there

    runs = [read_curves(d) for d in run_dirs]
    systems = ", ".join(dict.fromkeys(LABELS.get(str(r.meta["system"]), str(r.meta["system"])) for r in runs))
    algos = "/".join(dict.fromkeys(ALGO_NAMES.get(a, a) for a in (str(r.meta.get("algo", "sac")) for r in runs)))
    # two lines: four systems' labels and the clock note do not fit one line of the figure's width
    title = f"{env}, {algos}: {systems}\n(bench_vs_sb3 wall clock: start-up counted; peers' evaluations not)"
    return plot_runs(runs, png, window=window, title=title)
