"""tools/bench_remote.py's rate arithmetic on made-up polls (no Ray, no runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
bench_remote = pytest.importorskip("bench_remote")


def polls(local: list[int], remote: list[int], cpu: list[float], written: list[int]) -> list:
    return [(float(t), {"sampler-0": {"env_steps": a}, "sampler-1": {"env_steps": b},
                        "ray-bridge": {"cpu_s": c, "rows_written": w}})
            for t, (a, b, c, w) in enumerate(zip(local, remote, cpu, written))]


def test_the_window_starts_when_every_row_steps_and_ends_before_any_is_done():
    # the remote row starts late (not placed for 2 s) and the local row finishes first
    local = [0, 100, 200, 300, 400, 500, 500, 500]
    remote = [0, 0, 0, 100, 200, 300, 400, 500]
    rows = polls(local, remote, [0.5, 0.6, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1], [0, 0, 0, 100, 200, 300, 400, 500])
    assert bench_remote.steady_window(rows) == (3, 4)  # both past 10 % and below 90 % of their finals
    assert bench_remote.window_rate(rows) == pytest.approx(200.0)  # 700 -> 900 steps in 1 s
    steady = bench_remote.bridge_core_per_10k(rows)
    assert steady["core_per_10k"] == pytest.approx(0.1 / 100 * 10_000)  # 0.1 CPU s for 100 rows


def test_no_steady_window_gives_no_figure():
    rows = polls([0, 500], [0, 500], [0.0, 1.0], [0, 500])
    assert bench_remote.steady_window(rows) is None
    assert bench_remote.window_rate(rows) is None and bench_remote.bridge_core_per_10k(rows) is None
