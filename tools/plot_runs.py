"""Draw the learning curves of any runs, ours or a peer's, into one PNG.

    python tools/plot_runs.py RUN_DIR... -o curves.png [--window 10] [--title TEXT]
    python tools/plot_runs.py runs/seeds__*/seed_*/*__* --mean -o seeds.png   # mean of the seeds, range shaded
    python tools/plot_runs.py runs/seeds__*/cell*/seed_*/*__* --mean -o grid.png   # a --vary grid: one per setting

Each RUN_DIR holds a ``curves.csv`` (:mod:`spreeze_like.curves`: our monitor writes it live; the
benchmark writes the peers' in the same format). The figure has four panels: evaluation return
against wall time and against env steps, and the training return (moving mean over the last
``--window`` episodes) against wall time and against env steps; one line per run, labelled with
its system and seed (one colour per system, one line style per seed). Where a run's evaluations
say how many episodes reached their goal (goal envs: curves.csv's ``success`` column), a third row
of panels draws that evaluation success rate against wall time and env steps. Needs matplotlib
(``pip install -e ".[plot]"``); a missing matplotlib, a folder without ``curves.csv`` or an
unreadable one ends with one line ``error: ...`` and exit status 2.

From Python (a benchmark writing one PNG per env): ``plot_runs([read_curves(d) for d in dirs], out)``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spreeze_like.curves import Curves, read_curves
from spreeze_like.errors import ConfigError, SpreezeError
from spreeze_like.seeds_grid import setting_of_run

# 12 x 8 inches at 100 dpi: 1200 x 800 pixels, tens of KB for a handful of runs (4 inches more for the
# success-rate row of goal envs)
FIGSIZE = (12.0, 8.0)
SUCCESS_ROW_HEIGHT = 4.0
DPI = 100
_STYLES = ("-", "--", ":", "-.")


def _pyplot():  # -> matplotlib.pyplot
    try:
        import matplotlib
    except ImportError:
        raise ConfigError('matplotlib is not installed; install it with pip install -e ".[plot]"') from None
    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def _styles(runs: Sequence[Curves]) -> list[tuple[str, str]]:
    """(colour, line style) per run: a colour per system (with its mode), a line style per seed in it."""
    colours: dict[str, str] = {}
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        system = f"{run.meta.get('system')} {run.meta.get('mode') or ''}"
        colours.setdefault(system, f"C{len(colours) % 10}")
        k = seen.get(system, 0)
        seen[system] = k + 1
        out.append((colours[system], _STYLES[k % len(_STYLES)]))
    return out


def default_title(runs: Sequence[Curves]) -> str:
    envs = sorted({str(r.meta.get("env")) for r in runs if r.meta.get("env")})
    algos = sorted({str(r.meta.get("algo")) for r in runs if r.meta.get("algo")})
    return " / ".join(filter(None, [", ".join(envs), ", ".join(algos)])) or "learning curves"


Series = dict[str, tuple[list[float], list[float]]]  # panel -> (x, y)
BAND_POINTS = 200  # the common x grid a group of seeds is interpolated on


def run_series(run: Curves, window: int) -> Series:
    """What each panel draws of one run: eval and training return (and success) against wall time and steps."""
    out: Series = {}
    if run.eval:
        returns = [p.episode_return for p in run.eval]
        out["eval_wall"] = ([p.wall_s for p in run.eval], returns)
        out["eval_steps"] = ([float(p.env_steps) for p in run.eval], returns)
    said = [p for p in run.eval if p.success is not None]
    if said:
        out["success_wall"] = ([p.wall_s for p in said], [float(p.success) for p in said])
        out["success_steps"] = ([float(p.env_steps) for p in said], [float(p.success) for p in said])
    moving = run.train_moving_mean(window)
    if moving:
        out["train_wall"] = ([m[0] for m in moving], [m[2] for m in moving])
        out["train_steps"] = ([float(m[1]) for m in moving], [m[2] for m in moving])
    return out


def group_key(run: Curves) -> str:
    """A run's label without its seed: the runs of one experiment over seeds share it."""
    words = [str(run.meta.get("system", "?"))]
    if run.meta.get("mode"):
        words.append(str(run.meta["mode"]))
    if run.meta.get("env_kwargs"):
        words.append(json.dumps(run.meta["env_kwargs"], separators=(",", ":")))
    if run.meta.get("setting"):  # a seeds grid's setting: each is its own group
        words.append(str(run.meta["setting"]))
    return " ".join(words)


def band(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[np.ndarray, ...] | None:
    """(x, mean, min, max) of several curves over the x range all of them cover, each interpolated linearly
    between its points; None when they share no range (or a curve has a single point)."""
    lo = max(min(x) for x, _ in curves)
    hi = min(max(x) for x, _ in curves)
    if not hi > lo:
        return None
    grid = np.linspace(lo, hi, BAND_POINTS)
    ys = np.stack([np.interp(grid, np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in curves])
    return grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def plot_runs(runs: Sequence[Curves], out: str | Path, window: int = 10, title: str | None = None,
              dpi: int = DPI, aggregate: bool = False) -> Path:
    """Draw ``runs`` into the PNG ``out`` (see the module docstring); returns its path. ``aggregate``: one
    line per group of runs that differ only in their seed, the mean, with the range of the seeds shaded."""
    plt = _pyplot()
    with_success = any(p.success is not None for run in runs for p in run.eval)
    width, height = FIGSIZE
    fig, axes = plt.subplots(3 if with_success else 2, 2, figsize=(width, height + with_success * SUCCESS_ROW_HEIGHT),
                             dpi=dpi, sharey="row")
    (eval_wall, eval_steps), (train_wall, train_steps) = axes[:2]
    panels = {"eval_wall": eval_wall, "eval_steps": eval_steps, "train_wall": train_wall, "train_steps": train_steps}
    if with_success:
        panels.update(success_wall=axes[2][0], success_steps=axes[2][1])
    if aggregate:
        _draw_groups(runs, panels, window)
    else:
        for run, (colour, style) in zip(runs, _styles(runs)):
            kw = {"color": colour, "linestyle": style, "linewidth": 1.3}
            series = run_series(run, window)
            labelled = "eval_wall" if "eval_wall" in series else "train_wall"
            for name, (x, y) in series.items():
                marker = {} if name.startswith("train") else {"marker": ".", "markersize": 4}
                panels[name].plot(x, y, label=run.label if name == labelled else None, **marker, **kw)
    eval_wall.set_title("evaluation return (deterministic policy)")
    eval_steps.set_title("evaluation return")
    train_wall.set_title(f"training return (mean of the last {window} episodes)")
    train_steps.set_title("training return")
    for ax in (eval_wall, train_wall):
        ax.set_ylabel("episode return")
    if with_success:
        axes[2][0].set_title("evaluation success rate (goal reached)")
        axes[2][1].set_title("evaluation success rate")
        axes[2][0].set_ylabel("share of episodes")
        axes[2][0].set_ylim(-0.03, 1.03)
    for ax in axes[:, 0]:
        ax.set_xlabel("wall time (s)")
    for ax in axes[:, 1]:
        ax.set_xlabel("env steps")
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
        if not ax.lines:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
    handles = [h for ax in (eval_wall, train_wall) for h in ax.get_legend_handles_labels()[0]]
    labels = [lb for ax in (eval_wall, train_wall) for lb in ax.get_legend_handles_labels()[1]]
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(title or default_title(runs))
    rows = (len(labels) + 3) // 4
    fig.tight_layout(rect=(0.0, min(0.25, 0.035 * rows + 0.01), 1.0, 1.0))
    out = Path(out)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_small_png(buffer, out)
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def _draw_groups(runs: Sequence[Curves], panels: dict, window: int) -> None:
    """Per group of runs (:func:`group_key`): the mean of its seeds on each panel, their range shaded."""
    groups: dict[str, list[Curves]] = {}
    for run in runs:
        groups.setdefault(group_key(run), []).append(run)
    for i, (key, members) in enumerate(groups.items()):
        colour = f"C{i % 10}"
        label = f"{key}: mean of {len(members)} seed{'s' if len(members) > 1 else ''} (shaded: their range)"
        all_series = [run_series(run, window) for run in members]
        labelled = False
        for name in ("eval_wall", "eval_steps", "train_wall", "train_steps", "success_wall", "success_steps"):
            curves = [s[name] for s in all_series if name in s]
            if name not in panels or len(curves) < len(members) or not curves:
                continue  # a panel shows a group only where every seed has the curve
            drawn = band(curves) if len(curves) > 1 else (np.asarray(curves[0][0]), np.asarray(curves[0][1]),
                                                         None, None)
            if drawn is None:
                continue
            x, mean, lo, hi = drawn
            take_label = not labelled and name in ("eval_wall", "train_wall")
            panels[name].plot(x, mean, color=colour, linewidth=1.6, label=label if take_label else None)
            labelled = labelled or take_label
            if lo is not None:
                panels[name].fill_between(x, lo, hi, color=colour, alpha=0.2, linewidth=0)


def _write_small_png(rendered: io.BytesIO, out: Path) -> None:
    """A 256-colour palette PNG: a line chart has few colours, and the committed pictures stay a
    third of the size of matplotlib's RGBA file (Pillow comes with matplotlib)."""
    from PIL import Image

    rendered.seek(0)
    with Image.open(rendered) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw evaluation and training return against wall time and "
                                                 "env steps for run folders holding a curves.csv.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (ours or a peer's)")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write (its folder is made if missing)")
    parser.add_argument("--window", type=int, default=10, help="training episodes in the moving mean (default 10)")
    parser.add_argument("--title", default=None, help="figure title (default: the runs' envs and algorithms)")
    parser.add_argument("--mean", action="store_true",
                        help="one line per group of runs that differ only in their seed (a seeds folder's runs): "
                             "the mean, with the seeds' range shaded, over the steps or seconds every seed reached")
    args = parser.parse_args(argv)
    try:
        if args.window < 1:
            raise ConfigError(f"--window {args.window}: must be >= 1")
        if Path(args.output).suffix.lower() != ".png":  # Pillow picks the format by the suffix: .txt was a traceback
            raise ConfigError(f"-o {args.output}: name a .png file (the figure is a PNG)")
        runs = [read_curves(d) for d in args.run_dirs]
        for run_dir, run in zip(args.run_dirs, runs):  # a seeds grid's runs: labelled and grouped by their setting
            setting = setting_of_run(run_dir)
            if setting:
                run.meta["setting"] = setting
        out = plot_runs(runs, args.output, window=args.window, title=args.title, aggregate=args.mean)
    except SpreezeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    points = sum(len(r.train) + len(r.eval) for r in runs)
    print(f"wrote {out} ({len(runs)} run{'s' if len(runs) != 1 else ''}, {points} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
