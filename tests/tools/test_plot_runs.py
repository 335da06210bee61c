"""tools/plot_runs.py draws a PNG from real run folders (two tiny serial runs) and a peer's curves.csv;
bad input is one error line and exit 2. The curves.csv the runs wrote holds train and eval rows."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spreeze_like.config import TrainConfig
from spreeze_like.curves import CurvePoint, read_curves, write_curves
from spreeze_like.training import TrainResult, train

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BLUE, ORANGE = (31, 119, 180), (255, 127, 14)  # matplotlib's C0 and C1: one colour per system


def _plot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "plot_runs.py"), *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[TrainResult]:
    """Two tiny serial SAC runs (seeds 1 and 2) on a 5-step env: a few seconds in all."""
    logdir = tmp_path_factory.mktemp("runs")
    base = dataclasses.replace(
        TrainConfig(), env="trainer.tiny_envs:TinyWalk-v0", logdir=str(logdir), serial=True, hidden_sizes=(16, 16),
        batch_size=16, learning_starts=50, total_steps=200, eval_every=50, eval_episodes=2, log_interval=0,
        tb_interval=0, checkpoint_every=0)
    return [train(dataclasses.replace(base, seed=seed), print_fn=lambda line: None) for seed in (1, 2)]


def test_a_run_folder_has_curves_with_train_and_eval_rows(two_runs):
    for result in two_runs:
        curves = read_curves(result.run_dir)
        assert curves.meta["system"] == "spreeze_like" and curves.meta["seed"] in (1, 2)
        assert len(curves.train) >= 2 and all(p.episodes >= 1 for p in curves.train)
        steps = [p.env_steps for p in curves.train]
        assert steps == sorted(steps) and steps[-1] == result.env_steps == 200
        # one eval row per evaluation, at its step, with its mean, and after the run's clock saw it end
        assert [(p.env_steps, p.episode_return) for p in curves.eval] == [
            (step, pytest.approx(ret)) for step, ret, _ in result.evals]
        for point, (_, _, wall) in zip(curves.eval, result.evals):
            assert wall - 1e-3 <= point.wall_s <= result.wall_s + 1e-3


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _pixels_near(path: Path, rgb: tuple[int, int, int], tolerance: int = 30) -> int:
    from PIL import Image

    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    return int((np.abs(pixels - np.array(rgb, dtype=np.int16)) <= tolerance).all(axis=-1).sum())


def test_renders_a_png_from_two_tiny_runs(two_runs, tmp_path):
    pytest.importorskip("matplotlib", reason="tools/plot_runs.py needs matplotlib (the [plot] or [test] extra)")
    out = tmp_path / "curves.png"
    done = _plot(*(str(r.run_dir) for r in two_runs), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out} (2 runs" in done.stdout
    assert out.stat().st_size > 10_000
    assert _png_size(out) == (1200, 800)
    assert _pixels_near(out, BLUE) > 500  # the runs' lines were drawn (ours: C0)


def test_ours_beside_a_peer(two_runs, tmp_path):
    pytest.importorskip("matplotlib", reason="tools/plot_runs.py needs matplotlib (the [plot] or [test] extra)")
    peer = tmp_path / "sb3-seed-1"
    write_curves(peer, {"system": "sb3", "env": "TinyWalk-v0", "algo": "sac", "seed": 1},
                 [CurvePoint("train", 0.1 * i, 5 * i, float(i)) for i in range(1, 41)]
                 + [CurvePoint("eval", 1.0 * i, 50 * i, float(i), 2) for i in range(1, 5)])
    out = tmp_path / "both.png"
    done = _plot(str(two_runs[0].run_dir), str(peer), "-o", str(out), "--title", "ours and a peer")
    assert done.returncode == 0, done.stderr
    assert _pixels_near(out, BLUE) > 500 and _pixels_near(out, ORANGE) > 500  # a colour per system


@pytest.mark.parametrize("case", ["missing", "no_curves", "garbage", "not_png"])
def test_bad_input_is_one_error_line(tmp_path, two_runs, case):
    """``not_png``: ``-o x.txt`` of a good run was Pillow's ValueError traceback, after drawing."""
    folder = tmp_path / "run"
    if case != "missing":
        folder.mkdir()
    if case == "garbage":
        (folder / "curves.csv").write_text("not,a,curves,file\n")
    out = tmp_path / ("x.txt" if case == "not_png" else "x.png")
    done = _plot(str(two_runs[0].run_dir if case == "not_png" else folder), "-o", str(out))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert case != "not_png" or "name a .png file" in done.stderr
    assert not out.exists()


def test_a_goal_envs_success_rate_gets_a_row_of_its_own(tmp_path):
    """Evaluations that say their success share (curves.csv's success column) add a third row of panels: the
    figure is 4 inches taller, and the run's colour is drawn there; a run without it keeps two rows (above)."""
    pytest.importorskip("matplotlib", reason="tools/plot_runs.py needs matplotlib (the [plot] or [test] extra)")
    run = tmp_path / "goal-run"
    write_curves(run, {"system": "spreeze_like", "env": "TinyGoal-v0", "algo": "sac", "seed": 1},
                 [CurvePoint("train", 0.1 * i, 5 * i, float(i), 1, 0.0) for i in range(1, 41)]
                 + [CurvePoint("eval", 1.0 * i, 50 * i, float(i), 10, min(1.0, 0.25 * i)) for i in range(1, 5)])
    out = tmp_path / "goal.png"
    done = _plot(str(run), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert _png_size(out) == (1200, 1200)
    from PIL import Image

    with Image.open(out) as image:  # the success row: the lowest third of the picture
        image.crop((0, 820, 1200, 1200)).save(tmp_path / "success_row.png")
    assert _pixels_near(tmp_path / "success_row.png", BLUE) > 200


def test_mean_draws_one_line_per_group_of_seeds_with_their_range_shaded(tmp_path):
    """--mean: ours over three seeds is one group (one colour, C0), a peer's one seed another (C1); the band
    is the seeds' range over the steps all of them reached."""
    pytest.importorskip("matplotlib", reason="tools/plot_runs.py needs matplotlib (the [plot] or [test] extra)")
    runs = []
    for seed, lift in ((1, 0.0), (2, 40.0), (3, 80.0)):
        run = tmp_path / f"ours-{seed}"
        write_curves(run, {"system": "spreeze_like", "mode": "serial", "env": "TinyWalk-v0", "algo": "sac",
                           "seed": seed},
                     [CurvePoint("train", 0.1 * i, 5 * i, float(i) + lift) for i in range(1, 41)]
                     + [CurvePoint("eval", 1.0 * i, 50 * i, float(i) + lift, 2) for i in range(1, 5)])
        runs.append(str(run))
    peer = tmp_path / "sb3-1"
    write_curves(peer, {"system": "sb3", "env": "TinyWalk-v0", "algo": "sac", "seed": 1},
                 [CurvePoint("eval", 1.0 * i, 50 * i, float(i), 2) for i in range(1, 5)])
    out = tmp_path / "mean.png"
    done = _plot(*runs, str(peer), "--mean", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert _pixels_near(out, BLUE) > 300 and _pixels_near(out, ORANGE) > 100
    shade = tuple(round(255 - 0.2 * (255 - c)) for c in BLUE)  # C0 at alpha 0.2 over white
    assert _pixels_near(out, shade, tolerance=12) > 2000  # the band between seed 1 and seed 3


def test_band_is_the_mean_and_range_over_the_shared_steps():
    sys.path.insert(0, str(ROOT / "tools"))
    from plot_runs import band

    x, mean, lo, hi = band([([0.0, 10.0], [0.0, 10.0]), ([0.0, 5.0, 20.0], [10.0, 10.0, 10.0])])
    assert (x[0], x[-1]) == (0.0, 10.0)  # the range both cover
    assert (mean[0], lo[0], hi[0]) == (5.0, 0.0, 10.0) and (mean[-1], lo[-1], hi[-1]) == (10.0, 10.0, 10.0)
    assert band([([0.0, 1.0], [0.0, 0.0]), ([2.0, 3.0], [0.0, 0.0])]) is None  # no shared range


def test_a_seeds_grids_runs_are_grouped_and_labelled_by_their_setting(tmp_path):
    """--mean over a --vary grid's runs: one group per setting (two colours for one system), named by the
    setting the seeds folder's record gives each cell folder."""
    pytest.importorskip("matplotlib", reason="tools/plot_runs.py needs matplotlib (the [plot] or [test] extra)")
    import json

    from spreeze_like.seeds_grid import setting_of_run

    folder = tmp_path / "seeds__x"
    folder.mkdir()
    (folder / "seeds.json").write_text(json.dumps({"cells": [{"label": "tau=0.005", "args": []},
                                                             {"label": "tau=0.02", "args": []}]}))
    runs = []
    for cell, lift in ((0, 0.0), (1, 60.0)):
        for seed in (1, 2):
            run = folder / f"cell{cell}_tau_x" / f"seed_{seed}" / f"TinyWalk-v0__sac__{seed}__1"
            write_curves(run, {"system": "spreeze_like", "mode": "serial", "env": "TinyWalk-v0", "algo": "sac",
                               "seed": seed},
                         [CurvePoint("eval", 1.0 * i, 50 * i, float(i) + lift + seed, 2) for i in range(1, 5)])
            runs.append(str(run))
    assert [setting_of_run(r) for r in runs] == ["tau=0.005", "tau=0.005", "tau=0.02", "tau=0.02"]
    assert setting_of_run(tmp_path / "seed_1" / "run") is None  # not in a grid
    out = tmp_path / "grid.png"
    done = _plot(*runs, "--mean", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert _pixels_near(out, BLUE) > 100 and _pixels_near(out, ORANGE) > 100  # two settings, two groups
