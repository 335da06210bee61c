"""The seeds command's flags, refusals and statistics: in this process, nothing trains.

Every refusal is one ``error:`` line with exit status 2 and leaves no folder behind (it is found before
anything is made); the runs themselves are tested in test_seeds_runs.py.
"""

from __future__ import annotations

import json

import pytest

from spreeze_like import seeds
from spreeze_like.seed_runs import SeedRecord
from spreeze_like.seeds_cli import parse_seed_list, parse_seeds_command
from spreeze_like.seeds_summary import exit_code, interquartile_mean, seed_stats, summary_lines

FAST = ["--serial", "--total-steps", "1000"]


@pytest.mark.parametrize(("tokens", "expected"), [
    (["1-3", "7"], [1, 2, 3, 7]),
    (["1,2", "2", "0"], [1, 2, 0]),
    (["5"], [5]),
    (["3-3"], [3]),
])
def test_seed_lists_and_ranges(tokens, expected):
    assert parse_seed_list(tokens) == expected


def one_error_line(capsys, argv, *fragments):
    code = seeds.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in err[0], err[0]


@pytest.mark.parametrize(("argv", "fragments"), [
    (["--seeds", "3-1"], ["--seeds 3-1", "range"]),
    (["--seeds", "x"], ["--seeds x"]),
    (["--seeds", "1", "--jobs", "0"], ["--jobs 0"]),
    (["--jobs", "2"], ["--seeds is required"]),
    (["--seeds", "1", "--seed", "3"], ["--seed is the seeds command's"]),
    (["--seeds", "1", "--plan-only"], ["--plan-only trains nothing"]),
    (["--seeds", "1", "--autotune", "--jobs", "2"], ["--autotune plans the whole machine"]),
    (["--seeds", "1", "--batch-size", "0"], ["batch"]),
    (["--seeds", "1", "--env", "NoSuchEnv-v0"], ["NoSuchEnv-v0"]),
    (["--seeds", "1", "--resume", "x"], ["drop --seeds"]),
    (["--seeds", "1", "--progress-every", "-1"], ["--progress-every"]),
])
def test_bad_input_is_one_line_and_makes_no_folder(capsys, tmp_path, argv, fragments):
    one_error_line(capsys, [*argv, *FAST, "--logdir", str(tmp_path / "runs")], *fragments)
    assert not (tmp_path / "runs").exists()


def test_an_unknown_flag_is_argparses_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        seeds.main(["--seeds", "1", "--totl-steps", "5", "--logdir", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean --total-steps" in err[0], err


def saved_folder(tmp_path, env="Pendulum-v1", statuses=("done", "waiting"), header_env=None) -> str:
    folder = tmp_path / "seeds__x"
    folder.mkdir()
    record = {"format": seeds.FORMAT, "run_args": ["--env", env, *FAST], "env": header_env or env, "algo": "sac",
              "jobs": 1,
              "created": 0.0, "seeds": [SeedRecord(i + 1, status=s, env_steps=1000 if s == "done" else None,
                                                   final_return=-5.0 if s == "done" else None).to_dict()
                                        for i, s in enumerate(statuses)]}
    (folder / seeds.RECORD_FILE).write_text(json.dumps(record))
    return str(folder)


@pytest.mark.parametrize(("make", "extra", "fragments"), [
    (lambda tmp: str(tmp / "nowhere"), [], ["no seeds.json there"]),
    (lambda tmp: saved_folder(tmp, env="trainer.tiny_envs:TinyWalk-v0"), [], ["type --env", "data"]),
    # a crafted record whose header names a plain env: the saved flags are what would run
    (lambda tmp: saved_folder(tmp, env="trainer.tiny_envs:TinyWalk-v0", header_env="Pendulum-v1"), [],
     ["type --env", "data"]),
    (lambda tmp: saved_folder(tmp), ["--env", "MountainCarContinuous-v0"], ["mix envs"]),
    (lambda tmp: saved_folder(tmp), ["--seed", "4"], ["--seed is the seeds command's"]),
    (lambda tmp: saved_folder(tmp), ["--total-steps", "0"], ["total"]),
])
def test_resume_refusals(capsys, tmp_path, make, extra, fragments):
    one_error_line(capsys, ["--resume", make(tmp_path), *extra], *fragments)


def test_a_foreign_or_corrupt_record_is_refused(capsys, tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / seeds.RECORD_FILE).write_text("{not json")
    one_error_line(capsys, ["--resume", str(folder)], "cannot read")
    (folder / seeds.RECORD_FILE).write_text(json.dumps({"format": "other/1", "seeds": []}))
    one_error_line(capsys, ["--resume", str(folder)], "not a seeds record")
    (folder / seeds.RECORD_FILE).write_text(json.dumps({"format": seeds.FORMAT, "run_args": [], "seeds": [
        {"seed": 1, "status": "exploded"}]}))
    one_error_line(capsys, ["--resume", str(folder)], "not a seeds record")


def test_a_folder_in_use_is_refused(capsys, tmp_path):
    from spreeze_like.rundir import RunFolderLock

    folder = saved_folder(tmp_path)
    lock = RunFolderLock.acquire(tmp_path / "seeds__x")
    try:
        one_error_line(capsys, ["--resume", folder], "in use by pid")
    finally:
        lock.release()


def test_a_larger_total_steps_on_resume_continues_finished_seeds(tmp_path):
    folder = saved_folder(tmp_path)
    command = parse_seeds_command(["--resume", folder, "--total-steps", "3000"])
    _, record = seeds._reopen(command)
    assert [s["status"] for s in record["seeds"]] == ["waiting", "waiting"]
    assert command.run_args[-2:] == ["--total-steps", "3000"] and command.override_args == ["--total-steps", "3000"]
    command = parse_seeds_command(["--resume", folder])
    _, record = seeds._reopen(command)
    assert [s["status"] for s in record["seeds"]] == ["done", "waiting"]


@pytest.mark.parametrize(("argv", "cores", "jobs"), [
    (["--serial"], 8, 3),            # one busy process per run; no more jobs than seeds
    ([], 8, 2),                      # parallel: 1 sampler + 2 learners
    (["--samplers", "3"], 16, 3),
    ([], 2, 1),                      # never below one
    (["--jobs", "5"], 2, 5),         # asked for
])
def test_jobs_auto_fills_the_cores_from_the_processes_a_run_keeps_busy(monkeypatch, argv, cores, jobs):
    monkeypatch.setattr("spreeze_like.seeds_cli.usable_cores", lambda: cores)
    assert parse_seeds_command(["--seeds", "1-3", *argv]).jobs == jobs


def test_interquartile_mean_cuts_a_quarter_from_each_end():
    assert interquartile_mean([1.0]) == 1.0
    assert interquartile_mean([1.0, 2.0, 3.0]) == 2.0  # n < 4: nothing cut
    assert interquartile_mean([100.0, 1.0, 2.0, -50.0]) == 1.5
    assert interquartile_mean(list(map(float, range(8)))) == 3.5  # 2 cut from each end: mean of 2..5


def test_statistics_and_exit_status_over_mixed_outcomes(tmp_path):
    records = [SeedRecord(1, "done", final_return=-100.0, env_steps=10), SeedRecord(2, "done", final_return=-300.0,
                                                                                    env_steps=10),
               SeedRecord(3, "failed", line="error: x"), SeedRecord(4, "stopped")]
    stats = seed_stats(records)
    assert (stats.n, stats.mean, stats.median, stats.low, stats.high) == (2, -200.0, -200.0, (2, -300.0),
                                                                          (1, -100.0))
    assert stats.std == pytest.approx(141.42, abs=0.01)
    lines = summary_lines(records, tmp_path, stopped=False)
    assert "seed 3: failed: error: x" in lines[2]
    assert lines[4].startswith("final evaluation over 2 seeds: mean -200.0 (std 141.4)")
    assert "seeds 3 4" in lines[5] and f"--resume {tmp_path}" in lines[5]
    assert exit_code(records, None) == 1
    assert exit_code(records, 2) == 130
    assert exit_code([SeedRecord(1, "refused", line="error: y")], None) == 2
    assert exit_code(records[:2], None) == 0
    assert seed_stats([SeedRecord(1, "failed")]) is None


def test_a_seed_whose_run_reached_its_last_step_unseen_is_done_without_a_run(capsys, tmp_path):
    """Its seeds process was killed as the run ended: resuming it would be refused by the run ("already at")."""
    from spreeze_like.curves import CurvePoint, write_curves

    folder = saved_folder(tmp_path, statuses=("running",))
    run_dir = tmp_path / "seeds__x" / "seed_1" / "Pendulum-v1__sac__1__1"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt_0000001000.pt").write_bytes(b"")
    write_curves(run_dir, {"system": "spreeze_like"}, [CurvePoint("eval", 9.5, 1000, -123.25, 2)])
    rec = json.loads((tmp_path / "seeds__x" / seeds.RECORD_FILE).read_text())
    rec["seeds"][0]["run_dir"] = "seed_1/Pendulum-v1__sac__1__1"
    (tmp_path / "seeds__x" / seeds.RECORD_FILE).write_text(json.dumps(rec))
    assert seeds.main(["--resume", folder, "--progress-every", "0"]) == 0
    out = capsys.readouterr().out
    assert "seed 1 done: final evaluation -123.2 after 1,000 env steps, 10 s" in out and "started" not in out
    saved = json.loads((tmp_path / "seeds__x" / seeds.RECORD_FILE).read_text())["seeds"][0]
    assert (saved["status"], saved["final_return"], saved["wall_s"]) == ("done", -123.25, 9.5)


def test_jobs_auto_also_fits_the_runs_replays_into_free_memory(monkeypatch, capsys):
    """Eight cores for eight serial seeds, but room for the replays of three (each 1,000,000 Pendulum rows)."""
    from spreeze_like.autotune.plan import replay_row_bytes

    monkeypatch.setattr("spreeze_like.seeds_cli.usable_cores", lambda: 8)
    replay = 1_000_000 * replay_row_bytes(3, 1, False)
    monkeypatch.setattr("spreeze_like.seeds_cli.memory_free", lambda serial: (3.9 * replay, "available memory"))
    command = parse_seeds_command(["--seeds", "1-8", "--serial", "--buffer-size", "1000000"])
    assert command.jobs == 3 and "leaves room for 3 in available memory" in command.jobs_reason
    monkeypatch.setattr("spreeze_like.seeds_cli.memory_free", lambda serial: (0.1 * replay, "/dev/shm"))
    assert parse_seeds_command(["--seeds", "1-8", "--buffer-size", "1000000"]).jobs == 1  # never fewer than one
