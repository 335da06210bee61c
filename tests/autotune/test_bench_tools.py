"""tools/bench_sampler.py and tools/bench_autotune.py: their arithmetic, their flags, a tiny real sampler curve.

The benchmarks themselves (minutes, a 16-core machine) are run by hand; here: the sampler curve end
to end at its smallest size (two spawned processes), and the autotune benchmark's grid, merge and
acceptance arithmetic on hand-made results (timings are not checked).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- bench_sampler ---------------------------------------------------------------------------------------
def test_bench_sampler_writes_the_curve(tmp_path):
    out = tmp_path / "curve.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_sampler.py"), "--envs", "Pendulum-v1",
                           "--procs", "1", "2", "--ks", "1", "4", "--seconds", "0.2", "--hidden-sizes", "32", "32",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    data = json.loads(out.read_text())
    points = data["envs"]["Pendulum-v1"]["points"]
    assert {(p["processes"], p["envs_per_sampler"]) for p in points} == {(1, 1), (1, 4), (2, 1), (2, 4)}
    for p in points:
        assert p["steps_per_s"] > 0 and p["per_process"] == pytest.approx(p["steps_per_s"] / p["processes"])
        assert p["steps"] % p["envs_per_sampler"] == 0
    setup = data["envs"]["Pendulum-v1"]["autotuner_setup"]
    assert 1 <= setup["samplers"] <= setup["max_samplers"] and setup["envs_per_sampler"] in (1, 4)
    assert "best:" in proc.stdout and "K=4" in proc.stdout
    assert data["usable_cores"] >= 1 and len(data["load_before"]) == 3


def test_bench_sampler_runs_the_samplers_with_her_and_n_step(tmp_path):
    """--her-goals and --n-step reach the samplers' spec (a run's sampler code: relabelling, folding), and the curve
    file says so; a non-goal env with --her-goals is one line."""
    for flags in (["--envs", "trainer.goal_envs:TinyReach-v0", "--her-goals", "2"],
                  ["--envs", "Pendulum-v1", "--n-step", "3"]):
        out = tmp_path / "curve.json"
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_sampler.py"), *flags, "--procs", "1",
                               "--ks", "2", "--seconds", "0.2", "--hidden-sizes", "16", "--json", str(out)],
                              capture_output=True, text=True, timeout=300, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
        assert proc.returncode == 0, proc.stderr + proc.stdout
        data = json.loads(out.read_text())
        assert (data["her_goals"], data["n_step"]) == ((2, 1) if "--her-goals" in flags else (0, 3))
        (point,) = next(iter(data["envs"].values()))["points"]
        assert point["steps_per_s"] > 0


@pytest.mark.parametrize("args", [["--procs", "0"], ["--seconds", "0"], ["--envs", "NoSuchEnv-v0", "--procs", "1"],
                                  ["--n-step", "0"], ["--envs", "Pendulum-v1", "--procs", "1", "--her-goals", "4"]])
def test_bench_sampler_bad_input_is_one_line_and_exit_2(args):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_sampler.py"), *args, "--ks", "1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")


# --- bench_autotune ---------------------------------------------------------------------------------------
def test_grid_cells_and_their_flags():
    bench = _tool("bench_autotune")
    assert bench.parse_cell("13:8192:0.0156:4") == (13, 8192, 0.0156, 4)
    assert bench.parse_cell("2:256", utd=0.5, envs=8) == (2, 256, 0.5, 8)
    for bad in ("2", "0:256", "1:256:0", "1:2:3:4:5"):
        with pytest.raises(ValueError):
            bench.parse_cell(bad)
    cells = bench.grid_cells([1, 13], [256, 8192], [1.0, 0.0156], 4)
    assert len(cells) == 8 and (13, 8192, 0.0156, 4) in cells
    default = bench.default_cells(13, 1)
    ratios = {(s, b * u) for s, b, u, _ in default}
    assert (1, 256.0) in ratios and (1, 8192.0) in ratios  # SAC's defaults; the update-frames-only plan
    assert {(13, 256.0), (13, 128.0)} <= ratios  # large batches at R 256 and 128 with many samplers
    assert bench.cell_flags(13, 8192, 0.0156, 4) == ["--samplers", "13", "--envs-per-sampler", "4",
                                                     "--batch-size", "8192", "--utd", "0.0156"]


def test_bench_autotune_bad_cell_is_one_line_and_exit_2(capsys):
    bench = _tool("bench_autotune")
    assert bench.main(["--cells", "1:256:-1", "--out", "/nonexistent/never-made"]) == 2
    assert capsys.readouterr().err.startswith("error: cell")


def test_parts_split_the_configurations_once_each():
    bench = _tool("bench_autotune")
    names = [bench.cell_name(*c) for c in bench.default_cells(13, 1)] + ["autotuned", "defaults"]
    parts = [bench.part_of(names, k, 2) for k in (1, 2)]
    assert sorted(parts[0] + parts[1]) == sorted(names) and not set(parts[0]) & set(parts[1])
    assert [len(p) for p in parts] == [4, 4] and "autotuned" in parts[0] and "defaults" in parts[1]
    assert bench.part_of(names, 1, 1) == names
    assert bench.parse_part("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "1", "a/b", "1/0", "-1/2"):
        with pytest.raises(ValueError):
            bench.parse_part(bad)


def test_bench_autotune_bad_part_is_one_line_and_exit_2(capsys):
    bench = _tool("bench_autotune")
    assert bench.main(["--part", "3/2", "--out", "/nonexistent/never-made"]) == 2
    assert capsys.readouterr().err.startswith("error: --part '3/2'")


def test_the_return_at_the_wall_time_is_read_from_the_last_fifth():
    bench = _tool("bench_autotune")
    t0 = 1000.0
    events = {"charts/episodic_return": [(t0 + t, 0, float(t)) for t in range(0, 100, 5)] + [(t0 + 200, 0, 1e9)],
              "perf/update_frames_hz": [(t0 + 1, 0, 0.0), (t0 + 2, 0, 10.0), (t0 + 3, 0, 30.0)],
              "charts/SPS": [(t0 + 50, 123, 1.0), (t0 + 99, 456, 1.0)]}
    row = bench.summarise(events, t0, 100.0)
    assert row["return"] == pytest.approx((80 + 85 + 90 + 95) / 4)  # points after the deadline are not counted
    assert row["update_frames_hz"] == 20.0 and row["env_steps"] == 456


def _row(ret: float, **kw) -> dict:
    return {"return": ret, "update_frames_hz": 1.0, "env_steps": 10, "serial": False, "samplers": 1,
            "envs_per_sampler": 1, "batch_size": 256, "utd": 1.0, "replay_ratio": 256.0, **kw}


def _results(grid: dict, autotuned: dict | None, wall: float = 90.0) -> dict:
    return {"wall_s": wall, "cores": 16, "rounds": 1, "load_before": [0.0, 0, 0], "load_after": [0.0, 0, 0],
            "envs": {"HalfCheetah-v5": {"random_return": -300.0, "plan": "", "runs": {}, "grid": grid,
                                        "autotuned": autotuned, "defaults": None}}}


def test_the_autotuned_run_passes_at_90_percent_of_the_best_progress(capsys):
    bench = _tool("bench_autotune")
    grid = {"a": _row(1700.0), "b": _row(700.0), "c": {"flags": [], "error": "boom"}}
    ok = bench.compare(_results(grid, _row(1500.0))["envs"]["HalfCheetah-v5"])
    assert ok["best_cell"] == "a" and ok["autotuned_progress"] == pytest.approx(0.9) and ok["autotuned_pass"]
    assert ok["progress"]["b"] == pytest.approx(0.5) and math.isnan(ok["progress"]["c"])
    low = bench.compare(_results(grid, _row(1400.0))["envs"]["HalfCheetah-v5"])
    assert not low["autotuned_pass"]
    bench.report(_results(grid, _row(1400.0)))
    assert "FAIL >= 90%" in capsys.readouterr().out
    # no cell beat a random policy: nothing to compare, never a pass
    worse = bench.compare(_results({"a": _row(-400.0)}, _row(-350.0))["envs"]["HalfCheetah-v5"])
    assert not worse["autotuned_pass"] and math.isnan(worse["autotuned_progress"])


def test_parts_of_a_grid_merge_into_one_table(tmp_path, capsys):
    bench = _tool("bench_autotune")
    part1 = _results({"a": _row(1700.0)}, None)
    part2 = _results({"b": _row(700.0)}, _row(1600.0))
    merged = bench.merge([part1, part2])
    env = merged["envs"]["HalfCheetah-v5"]
    assert set(env["grid"]) == {"a", "b"} and env["autotuned"]["return"] == 1600.0
    with pytest.raises(ValueError, match="different wall times"):
        bench.merge([part1, _results({}, None, wall=60.0)])
    paths = []
    for i, part in enumerate((part1, part2)):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(part))
    assert bench.main(["--report", *map(str, paths)]) == 0
    assert "merged from 2 parts" in capsys.readouterr().out


def test_files_of_two_kinds_of_machine_do_not_merge(tmp_path, capsys):
    """A grid's parts from an H200 lease and a check call on an H100 lease would make one table of two cards:
    refused. A file older than the machine record merges, and the report says it could not check it."""
    bench = _tool("bench_autotune")
    h200 = {**_results({"a": _row(1700.0)}, None), "machine": "Xeon, 16 cores; GPUs: NVIDIA H200"}
    h100 = {**_results({"b": _row(700.0)}, _row(1600.0)), "machine": "Xeon, 16 cores; GPUs: NVIDIA H100 80GB HBM3"}
    with pytest.raises(ValueError, match="different machines"):
        bench.merge([h200, h100])
    paths = [tmp_path / "h200.json", tmp_path / "h100.json", tmp_path / "old.json"]
    for path, part in zip(paths, (h200, h100, _results({"c": _row(900.0)}, None)), strict=True):
        path.write_text(json.dumps(part))
    assert bench.main(["--report", str(paths[0]), str(paths[1])]) == 2
    assert capsys.readouterr().err.startswith("error: --report: the files ran on different machines")
    assert bench.main(["--report", str(paths[0]), str(paths[2])]) == 0
    printed = capsys.readouterr().out
    assert "machine: Xeon, 16 cores; GPUs: NVIDIA H200" in printed
    assert "1 of the files do not say which machine ran them" in printed


def test_the_machine_kind_names_no_host(monkeypatch):
    from spreeze_like.autotune import hardware

    monkeypatch.setattr(hardware, "driver_gpu_models", lambda: ["NVIDIA H200"])
    monkeypatch.setattr(hardware.socket, "gethostname", lambda: "vm-lease-4f2a91")  # a new name every lease
    kind = hardware.machine_kind()
    assert kind.endswith("; GPUs: NVIDIA H200") and f"{hardware.usable_cores()} cores" in kind
    assert "vm-lease-4f2a91" not in kind
    # a container that hides the driver's /proc files: the GPU subprocess names the cards
    monkeypatch.setattr(hardware, "driver_gpu_models", list)
    card = hardware.GpuInfo(0, "NVIDIA H100 80GB HBM3", 80 * 2**30, 79 * 2**30)
    monkeypatch.setattr(hardware, "probe_gpus", lambda: ([card], ""))
    assert hardware.machine_kind().endswith("; GPUs: NVIDIA H100 80GB HBM3")


def test_a_call_cut_short_keeps_the_runs_that_finished(tmp_path, monkeypatch, capsys):
    """The --json is rewritten after every run with ``partial`` set, so a call killed by a time limit (a lent
    machine's 600 s) still has a report of what finished; the finished file has no ``partial``."""
    bench = _tool("bench_autotune")
    monkeypatch.setattr(bench, "random_return", lambda env_id, env_kwargs=None: -300.0)
    calls = []

    def fake_run(env_id, flags, wall_s, logdir, xdg):
        calls.append(flags)
        if len(calls) == 3:
            raise KeyboardInterrupt  # stands for the kill: nothing after the second run is written
        return _row(1000.0 + 100 * len(calls), flags=flags, batch_size=int(flags[flags.index("--batch-size") + 1]))

    monkeypatch.setattr(bench, "run_cell", fake_run)
    out, path = tmp_path / "out", tmp_path / "part.json"
    cells = ["1:256:1", "2:1024:0.25", "2:2048:0.125"]
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--envs", "Pendulum-v1", "--cells", *cells, "--no-autotuned", "--no-defaults", "--wall", "5",
                    "--out", str(out), "--json", str(path)])
    cut = json.loads(path.read_text())
    assert cut["partial"] is True and json.loads((out / "results.json").read_text()) == cut
    grid = cut["envs"]["Pendulum-v1"]["grid"]
    assert len(grid) == 2 and sorted(r["return"] for r in grid.values()) == [1100.0, 1200.0]
    assert cut["envs"]["Pendulum-v1"]["comparison"]["best_return"] == 1200.0
    assert not list(tmp_path.rglob("*.tmp"))
    capsys.readouterr()
    assert bench.main(["--report", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "1 of the files cut short" in printed
    assert sum(line.startswith("  samplers=") for line in printed.splitlines()) == 2  # the table's rows
    # run to the end: the same file, whole, without the mark
    calls.clear()
    monkeypatch.setattr(bench, "run_cell", lambda *a: (calls.append(a[1]), _row(900.0, flags=a[1]))[1])
    assert bench.main(["--envs", "Pendulum-v1", "--cells", *cells, "--no-autotuned", "--no-defaults", "--wall", "5",
                       "--out", str(out), "--json", str(path)]) == 0
    whole = json.loads(path.read_text())
    assert "partial" not in whole and len(whole["envs"]["Pendulum-v1"]["grid"]) == 3 and len(calls) == 3


def test_env_kwargs_reach_every_run_and_the_random_policy(tmp_path, monkeypatch, capsys):
    """--env-kwargs: every run's command gets the CLI's flag, the random policy's env is made with them, the
    results keep them, a bad name is one line before anything runs, and files made with others do not merge."""
    bench = _tool("bench_autotune")
    kwargs = {"max_episode_steps": 50}
    flags = ["--env", "Pendulum-v1", "--env-kwargs", '{"max_episode_steps": 50}']
    assert bench.env_flags("Pendulum-v1", kwargs) == flags
    assert bench.env_flags("Pendulum-v1", {}) == ["--env", "Pendulum-v1"]
    commands = []
    monkeypatch.setattr(bench, "run_cell", lambda env, flags, *a: (commands.append(env), _row(-200.0, flags=flags))[1])
    out = tmp_path / "out"
    assert bench.main(["--envs", "Pendulum-v1", "--cells", "1:256:1", "--no-autotuned", "--no-defaults", "--wall", "5",
                       "--env-kwargs", json.dumps(kwargs), "--out", str(out)]) == 0
    assert commands == [["--env", "Pendulum-v1", "--env-kwargs", '{"max_episode_steps": 50}']]
    results = json.loads((out / "results.json").read_text())
    assert results["env_kwargs"] == kwargs
    # 50-step episodes of random actions: a quarter of Pendulum's 200-step returns (about -1,200 there)
    assert -500.0 < results["envs"]["Pendulum-v1"]["random_return"] < -100.0
    assert 'envs made with --env-kwargs {"max_episode_steps": 50}' in capsys.readouterr().out
    # a name the env does not take: one line, exit 2, no folder
    assert bench.main(["--envs", "Pendulum-v1", "--env-kwargs", '{"gg": 3}', "--out", str(tmp_path / "never")]) == 2
    assert capsys.readouterr().err.startswith("error: making env 'Pendulum-v1' with --env-kwargs {\"gg\": 3}")
    assert not (tmp_path / "never").exists()
    # files made with other kwargs (or none: an older file) are other envs: refused
    with pytest.raises(ValueError, match="different --env-kwargs"):
        bench.merge([results, _results({"b": _row(700.0)}, None, wall=5.0)])
