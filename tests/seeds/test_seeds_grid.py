"""``--vary``: the grid of settings a seeds experiment compares (spreeze_like/seeds_grid.py).

The flags and refusals run in this process; one test runs a real grid (2 settings x 2 seeds, serial runs
small enough to finish in seconds), resumes it further, and checks every run trained its own setting.
"""

from __future__ import annotations

import json

import pytest

from seeds.test_seeds_cli import FAST, one_error_line
from seeds.test_seeds_runs import TINY, finish, folder_of, record, start
from spreeze_like import seeds
from spreeze_like.curves import read_curves
from spreeze_like.seed_runs import SeedRecord
from spreeze_like.seeds_cli import parse_seeds_command
from spreeze_like.seeds_grid import Cell, parse_vary
from spreeze_like.seeds_summary import grid_lines, outcome, reach_line, reach_stats, summary_record


def test_the_grid_is_the_product_of_the_settings_first_slowest():
    cells = parse_vary(["tau=0.005,0.02", "batch-size=64,128", "prioritized=on,off"], [])
    assert [c.label for c in cells][:3] == ["tau=0.005 batch-size=64 prioritized=on",
                                            "tau=0.005 batch-size=64 prioritized=off",
                                            "tau=0.005 batch-size=128 prioritized=on"]
    assert len(cells) == 8
    assert cells[1].args == ("--tau", "0.005", "--batch-size", "64", "--no-prioritized")
    # a field name works as well as the flag, and layers take x or spaces
    (wide, narrow) = parse_vary(["hidden_sizes=256x256,64 64"], [])
    assert wide.args == ("--hidden-sizes", "256", "256") and narrow.label == "hidden-sizes=64x64"
    assert wide.folder(3) == "cell3_hidden-sizes_256x256"
    assert Cell.from_dict(wide.to_dict()) == wide
    assert parse_vary([], []) == []


def test_every_cell_gets_its_own_settings_over_the_commands():
    command = parse_seeds_command(["--seeds", "1", "2", "--vary", "tau=0.005,0.02", "--batch-size", "64", *FAST])
    assert [c.label for c in command.cells] == ["tau=0.005", "tau=0.02"]
    record = seeds._new_record(command)
    assert record["cells"] == [c.to_dict() for c in command.cells]
    # seed-major: a stop leaves each setting with about as many seeds as the others
    assert [(s["seed"], s["cell"]) for s in record["seeds"]] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert "cells" not in seeds._new_record(parse_seeds_command(["--seeds", "1", *FAST]))


@pytest.mark.parametrize(("argv", "fragments"), [
    (["--vary", "tau"], ["--vary tau", "two or more values"]),
    (["--vary", "tau=0.01"], ["two or more values"]),
    (["--vary", "tau=0.01,0.01"], ["given twice"]),
    (["--vary", "tua=0.01,0.02"], ["--tua is not a run setting"]),
    (["--vary", "env=Pendulum-v1,MountainCarContinuous-v0"], ["--env cannot vary", "one env per experiment"]),
    (["--vary", "total-steps=1000,2000"], ["--total-steps cannot vary"]),
    (["--vary", "seed=1,2"], ["--seed cannot vary", "--seeds"]),
    (["--vary", "tau=0.01,0.02", "--tau", "0.03"], ["--tau is also typed"]),
    (["--vary", "tau=0.01,0.02", "--vary", "tau=0.03,0.04"], ["varied twice"]),
    (["--vary", "prioritized=maybe,on"], ["--prioritized is a switch", "on or off"]),
    (["--vary", "tau=0.01,-1"], ["--vary tau=-1:", "tau"]),
    (["--vary", "tau=" + ",".join(str(i / 100) for i in range(1, 9)), "--vary",
      "batch-size=" + ",".join(str(32 * i) for i in range(1, 10))], ["72 settings", "more than 64"]),
])
def test_bad_grids_are_one_line_and_make_no_folder(capsys, tmp_path, argv, fragments):
    one_error_line(capsys, ["--seeds", "1", *argv, *FAST, "--logdir", str(tmp_path / "runs")], *fragments)
    assert not (tmp_path / "runs").exists()


def test_a_resumed_folder_keeps_its_grid(capsys, tmp_path):
    one_error_line(capsys, ["--resume", str(tmp_path), "--vary", "tau=0.01,0.02"], "drop --vary")
    folder = tmp_path / "seeds__x"
    folder.mkdir()
    record = {"format": seeds.FORMAT, "run_args": FAST, "env": "Pendulum-v1", "algo": "sac", "jobs": 1, "created": 0,
              "cells": [Cell("tau=0.01", ("--tau", "0.01")).to_dict()],
              "seeds": [SeedRecord(1, cell=1).to_dict()]}  # names a setting the folder does not have
    (folder / seeds.RECORD_FILE).write_text(json.dumps(record))
    one_error_line(capsys, ["--resume", str(folder)], "not a seeds record", "setting 1 of 1")
    # a folder is data: a cell whose flags would make another env (a module to import) is not run
    record["cells"].append(Cell("tau=0.02", ("--env", "trainer.tiny_envs:TinyWalk-v0")).to_dict())
    (folder / seeds.RECORD_FILE).write_text(json.dumps(record))
    one_error_line(capsys, ["--resume", str(folder)], "would change the env")


def test_a_resume_refuses_a_flag_its_grid_varies(capsys, tmp_path):
    """Flags typed with --resume reach every run: one the grid varies would give every setting its value."""
    command = parse_seeds_command(["--seeds", "1", "--vary", "prioritized=on,off", "--vary", "tau=0.01,0.02",
                                   *FAST, "--logdir", str(tmp_path)])
    folder = seeds._new_folder(command)
    (folder / seeds.RECORD_FILE).write_text(json.dumps(seeds._new_record(command)))
    one_error_line(capsys, ["--resume", str(folder), "--tau", "0.03"], "its grid varies --tau")
    one_error_line(capsys, ["--resume", str(folder), "--no-prioritized"], "its grid varies --prioritized")
    assert seeds._reopen(parse_seeds_command(["--resume", str(folder), "--total-steps", "2000"]))[1]


def test_a_grid_over_algorithms_names_them_all(tmp_path):
    command = parse_seeds_command(["--seeds", "1", "--vary", "algo=sac,td3", *FAST, "--logdir", str(tmp_path)])
    assert command.algo == "sac/td3" and seeds._new_record(command)["algo"] == "sac/td3"
    assert seeds._new_folder(command).name.startswith("seeds__Pendulum-v1__sac_td3__")
    assert parse_seeds_command(["--seeds", "1", *FAST]).algo == "sac"


def test_each_setting_is_summarised_and_ranked_and_overlaps_are_said():
    cells = [Cell("tau=0.005", ()), Cell("tau=0.02", ())]
    runs = [SeedRecord(seed, status="done", cell=cell, final_return=ret, env_steps=10)
            for seed, cell, ret in [(1, 0, -300.0), (2, 0, -200.0), (1, 1, -150.0), (2, 1, -250.0)]]
    lines = grid_lines(runs, cells)
    assert lines[0].startswith("setting 0 (tau=0.005): final evaluation over 2 seeds: mean -250.0")
    assert lines[2].startswith("settings by IQM, with each one's range over its seeds: 1 (tau=0.02) IQM -200.0 "
                               "[-250.0, -150.0]; 0 (tau=0.005) IQM -250.0")
    assert "do not separate them" in lines[3]
    runs[3].final_return = -180.0  # setting 1 now above every seed of setting 0
    assert not any("do not separate" in line for line in grid_lines(runs, cells))
    summary = summary_record(runs, cells)
    assert [c["label"] for c in summary["cells"]] == ["tau=0.005", "tau=0.02"]
    assert summary["cells"][1]["stats"]["n"] == 2 and summary["cells"][1]["stats"]["iqm"] == pytest.approx(-165.0)


def test_a_grid_of_real_runs_each_with_its_setting_then_resumed_further(tmp_path):
    proc, log = start(tmp_path / "runs", "--seeds", "1", "2", "--vary", "tau=0.005,0.02", "--jobs", "2", "--serial",
                      *TINY, "--total-steps", "600", "--eval-every", "300", "--reach", "-100000")
    text = finish(proc, log)
    assert proc.returncode == 0, text
    folder = folder_of(tmp_path / "runs")
    rec = record(folder)
    assert [c["label"] for c in rec["cells"]] == ["tau=0.005", "tau=0.02"]
    for s in rec["seeds"]:
        assert s["status"] == "done" and s["env_steps"] == 600, s
        run_dir = folder / s["run_dir"]
        assert run_dir.parent == folder / f"cell{s['cell']}_tau_{rec['cells'][s['cell']]['label'][4:]}" / \
            f"seed_{s['seed']}"
        config = json.loads((run_dir / "config.json").read_text())
        assert (config["seed"], config["tau"]) == (s["seed"], [0.005, 0.02][s["cell"]])
        assert f"seed {s['seed']} of setting {s['cell']} ({rec['cells'][s['cell']]['label']}): " in text
    assert "2 settings x 2 seeds (1 2) = 4 runs" in text and "settings by IQM" in text
    assert [c["stats"]["n"] for c in rec["summary"]["cells"]] == [2, 2]
    for s in rec["seeds"]:  # every evaluation is above -100000: each run reached it at its first one
        first = read_curves(folder / s["run_dir"]).eval[0]
        assert (s["reached_steps"], s["reached_s"]) == (first.env_steps, pytest.approx(first.wall_s)), s
    assert [c["reach"]["reached"] for c in rec["summary"]["cells"]] == [2, 2] and rec["reach"] == -100000
    assert "evaluation -100000 reached by 2 of 2 finished seeds: env steps median 300 (300-300)" in text

    proc, log = start(tmp_path / "again", "--resume", str(folder), "--total-steps", "900")
    text = finish(proc, log)
    assert proc.returncode == 0, text
    rec = record(folder)
    assert all(s["status"] == "done" and s["env_steps"] == 900 for s in rec["seeds"]), rec["seeds"]
    assert text.count("continues from") == 4
    for s in rec["seeds"]:  # continued in the same run folder, with its own setting
        assert len(list((folder / s["run_dir"]).parent.glob("*__sac__*"))) == 1
        assert json.loads((folder / s["run_dir"] / "config.json").read_text())["tau"] == [0.005, 0.02][s["cell"]]


def test_reach_says_how_soon_each_setting_got_there_and_how_many_did():
    runs = [SeedRecord(1, status="done", final_return=-150.0, env_steps=5000, reached_steps=3000, reached_s=4.0),
            SeedRecord(2, status="done", final_return=-140.0, env_steps=5000, reached_steps=3800, reached_s=6.5),
            SeedRecord(3, status="done", final_return=-900.0, env_steps=5000),  # never reached it
            SeedRecord(4, status="failed", line="exit status 1")]
    stats = reach_stats(runs, -250.0)
    assert (stats.reached, stats.runs, stats.steps_median, stats.steps_range) == (2, 3, 3400, (3000, 3800))
    assert stats.seconds_median == pytest.approx(5.25) and stats.seconds_range == (4.0, 6.5)
    assert reach_line(stats).startswith("evaluation -250 reached by 2 of 3 finished seeds: env steps median 3,400 "
                                        "(3,000-3,800), wall seconds median 5.2")
    assert outcome(runs[0], -250.0).endswith("evaluation -250 reached at 3,000 env steps, 4.0 s")
    assert outcome(runs[2], -250.0).endswith("evaluation -250 not reached")
    assert reach_line(reach_stats(runs[2:], -250.0)) == "evaluation -250 reached by 0 of 1 finished seeds"
    summary = summary_record(runs, (), -250.0)
    assert summary["n"] == 3 and summary["reach"]["reached"] == 2


def test_reach_is_checked_and_a_resume_keeps_or_replaces_it(capsys, tmp_path):
    one_error_line(capsys, ["--seeds", "1", "--reach", "nan", *FAST, "--logdir", str(tmp_path / "runs")], "--reach")
    command = parse_seeds_command(["--seeds", "1", "--reach", "-250", *FAST, "--logdir", str(tmp_path)])
    folder = seeds._new_folder(command)
    (folder / seeds.RECORD_FILE).write_text(json.dumps(seeds._new_record(command)))
    assert seeds._reopen(parse_seeds_command(["--resume", str(folder)]))[1]["reach"] == -250
    assert seeds._reopen(parse_seeds_command(["--resume", str(folder), "--reach", "-200"]))[1]["reach"] == -200
    record = json.loads((folder / seeds.RECORD_FILE).read_text())
    record["reach"] = "soon"
    (folder / seeds.RECORD_FILE).write_text(json.dumps(record))
    one_error_line(capsys, ["--resume", str(folder)], "not a seeds record", "reach")


def test_a_grid_with_reach_ranks_the_settings_by_how_soon_they_got_there():
    cells = [Cell("tau=0.005", ()), Cell("tau=0.02", ()), Cell("tau=0.1", ())]
    rows = [(0, 4000), (0, 3500), (1, 2500), (1, 3000), (2, None), (2, None)]
    runs = [SeedRecord(seed, status="done", cell=cell, final_return=-150.0, env_steps=5000, reached_steps=steps,
                       reached_s=None if steps is None else steps / 500)
            for seed, (cell, steps) in enumerate(rows)]
    lines = grid_lines(runs, cells, -200.0)
    ranking = next(line for line in lines if line.startswith("settings by env steps"))
    assert ranking.endswith("1 (tau=0.02) 2,750 [2,500-3,000], 2 of 2; 0 (tau=0.005) 3,750 [3,500-4,000], 2 of 2")
    assert "every seed of setting 1 got there sooner than every seed of setting 0" in lines
    runs[3].reached_steps = 3600  # now a seed of setting 1 is later than one of setting 0
    assert any("do not separate them" in line and "env steps" in line for line in grid_lines(runs, cells, -200.0))
