"""The seeds command with real runs: several processes at once, stops, kills and resumes.

Each test starts ``python -m spreeze_like.seeds`` as a process, as a person would, with runs small
enough to finish in seconds. Besides the autouse check that nothing of ours is left behind (which
sees only this process's descendants), every test whose seeds process dies first waits for the runs
it had started by their pids, since those are no longer this process's descendants.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spreeze_like.checkpoint import checkpoint_step, list_checkpoints
from spreeze_like.curves import read_curves
from spreeze_like.errors import SpreezeError

from parallel.helpers import cli_env, survivors

TINY = ["--hidden-sizes", "32", "32", "--batch-size", "64", "--learning-starts", "300", "--eval-episodes", "2",
        "--log-interval", "0", "--tb-interval", "0.5", "--buffer-size", "20000"]


def start(logdir: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    log = logdir.parent / f"{logdir.name}.log"
    out = open(log, "w")  # noqa: SIM115 - the child's; closed by its exit
    proc = subprocess.Popen([sys.executable, "-m", "spreeze_like.seeds", "--logdir", str(logdir),
                             "--progress-every", "0", *args], stdout=out, stderr=subprocess.STDOUT,
                            env=cli_env(), text=True)
    return proc, log


def finish(proc: subprocess.Popen, log: Path, timeout: float = 240) -> str:
    try:
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return log.read_text()


def folder_of(logdir: Path, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in logdir.glob("seeds__*") if (p / "seeds.json").is_file()] if logdir.is_dir() else []
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no seeds folder under {logdir}")


def record(folder: Path) -> dict:
    return json.loads((folder / "seeds.json").read_text())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s")


def evaluated(folder: Path, seeds: list[int]) -> bool:
    """Every seed's run has written an evaluation row (so it is mid-run, past its start)."""
    runs = {s["seed"]: s["run_dir"] for s in record(folder)["seeds"]}
    try:
        return all(runs.get(s) and read_curves(folder / runs[s]).eval for s in seeds)
    except SpreezeError:  # no curves.csv yet
        return False


def test_three_seeds_two_at_a_time_each_a_real_run_with_its_outcome(tmp_path):
    proc, log = start(tmp_path / "runs", "--seeds", "1-3", "--jobs", "2", "--serial", *TINY, "--total-steps", "800",
                      "--eval-every", "400")
    text = finish(proc, log)
    assert proc.returncode == 0, text
    folder = folder_of(tmp_path / "runs")
    rec = record(folder)
    assert [s["seed"] for s in rec["seeds"]] == [1, 2, 3]
    spans = []
    for s in rec["seeds"]:
        assert s["status"] == "done" and s["exit_status"] == 0, s
        run_dir = folder / s["run_dir"]
        assert run_dir.parent == folder / f"seed_{s['seed']}"
        assert json.loads((run_dir / "config.json").read_text())["seed"] == s["seed"]
        last = read_curves(run_dir).eval[-1]
        assert (s["final_return"], s["env_steps"]) == (last.episode_return, last.env_steps) and last.env_steps == 800
        assert f"seed {s['seed']}: {s['final_return']:.1f} after 800 env steps" in text
        spans += [(s["started"][0], +1), (s["ended"][0], -1)]
    running, most = 0, 0
    for _, change in sorted(spans):  # never more than --jobs runs at once
        running += change
        most = max(most, running)
    assert most == 2, spans
    assert "final evaluation over 3 seeds: mean " in text and f"seeds folder: {folder}" in text
    finals = [s["final_return"] for s in rec["seeds"]]
    summary = rec["summary"]
    assert summary["n"] == 3 and summary["mean"] == pytest.approx(sum(finals) / 3)
    assert summary["low"][1] == min(finals) and summary["high"][1] == max(finals)


def test_ctrl_c_stops_every_run_in_order_and_resume_finishes_each_from_its_checkpoint(tmp_path):
    # serial runs (one process each: the quicker test); the parallel mode's orderly stop is the next test's
    proc, log = start(tmp_path / "runs", "--seeds", "4", "5", "6", "--jobs", "2", "--serial", *TINY,
                      "--total-steps", "100000", "--eval-every", "500", "--checkpoint-every", "0")
    try:
        folder = folder_of(tmp_path / "runs")
        wait_for(lambda: evaluated(folder, [4, 5]), 180, "both first seeds evaluated")
    except BaseException:
        proc.send_signal(signal.SIGINT)
        finish(proc, log)
        raise
    proc.send_signal(signal.SIGINT)
    text = finish(proc, log)
    assert proc.returncode == 130, text
    rec = record(folder)
    assert [s["status"] for s in rec["seeds"]] == ["stopped", "stopped", "waiting"], text
    steps = []
    for s in rec["seeds"][:2]:
        checkpoints = list_checkpoints(folder / s["run_dir"])
        assert checkpoints, s
        steps.append(checkpoint_step(checkpoints[-1]))
    assert ("continue them (each from its newest checkpoint) with python -m spreeze_like.seeds --resume "
            f"{folder}") in text
    total = str(max(steps) + 300)  # the resume takes a smaller budget: a run typed flag overrides every seed's
    proc, log = start(tmp_path / "again", "--resume", str(folder), "--total-steps", total)
    text = finish(proc, log)
    assert proc.returncode == 0, text
    rec = record(folder)
    for s in rec["seeds"]:
        assert s["status"] == "done" and s["env_steps"] == int(total), s
        assert len(list((folder / f"seed_{s['seed']}").glob("*__sac__*"))) == 1  # continued, not started again
    assert text.count("continues from") == 2 and "seed 6 started" in text
    assert not (tmp_path / "again").exists()  # --logdir is for new folders only


def test_a_killed_seeds_process_stops_its_runs_in_order(tmp_path):
    proc, log = start(tmp_path / "runs", "--seeds", "1", "2", "--jobs", "2", *TINY, "--total-steps", "100000",
                      "--eval-every", "500")
    try:
        folder = folder_of(tmp_path / "runs")
        wait_for(lambda: evaluated(folder, [1, 2]), 180, "both seeds evaluated")
        pids = [s["pid"] for s in record(folder)["seeds"]]
    finally:
        proc.kill()
        finish(proc, log)
    assert all(pids) and survivors(pids, timeout=120) == []
    for seed in (1, 2):
        console = (folder / f"seed_{seed}" / "console.log").read_text()
        assert "interrupted at" in console and "checkpoint" in console, console[-2000:]


def test_a_seed_killed_alone_fails_the_others_finish_and_resume_starts_it_again(tmp_path):
    proc, log = start(tmp_path / "runs", "--seeds", "1", "2", "--jobs", "2", "--serial", *TINY,
                      "--total-steps", "100000", "--eval-every", "500", "--checkpoint-every", "0")
    try:
        folder = folder_of(tmp_path / "runs")
        wait_for(lambda: evaluated(folder, [1, 2]), 180, "both seeds evaluated")
        victim = record(folder)["seeds"][0]
        subprocess.run(["kill", "-9", str(victim["pid"])], check=True)
        wait_for(lambda: record(folder)["seeds"][0]["status"] == "failed", 60, "seed 1 recorded as failed")
        # seed 2 keeps running; stop it in order so that this test ends
        proc.send_signal(signal.SIGINT)
        text = finish(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rec = record(folder)
    assert rec["seeds"][0]["line"] == "killed by SIGKILL" and rec["seeds"][1]["status"] == "stopped", text
    assert "seed 1 failed (killed by SIGKILL)" in text
    old_run = folder / rec["seeds"][0]["run_dir"]
    assert not list_checkpoints(old_run)  # --checkpoint-every 0 and killed: nothing to continue from
    stopped_at = checkpoint_step(list_checkpoints(folder / rec["seeds"][1]["run_dir"])[-1])
    proc, log = start(tmp_path / "runs", "--resume", str(folder), "--total-steps", str(max(700, stopped_at + 300)))
    text = finish(proc, log)
    assert proc.returncode == 0, text
    rec = record(folder)
    assert [s["status"] for s in rec["seeds"]] == ["done", "done"]
    assert "has no checkpoint to continue from; starting the seed again in a new run folder" in text
    assert folder / rec["seeds"][0]["run_dir"] != old_run and old_run.is_dir()


def test_a_failure_of_the_seeds_process_itself_stops_the_running_seeds_in_order(tmp_path):
    from spreeze_like import seeds
    from spreeze_like.seeds_cli import parse_seeds_command

    command = parse_seeds_command(["--seeds", "1", "2", "--jobs", "2", "--serial", *TINY, "--total-steps", "100000",
                                   "--logdir", str(tmp_path), "--progress-every", "0"])
    folder = seeds._new_folder(command)
    (folder / "seed_2").write_text("a file where seed 2's folder goes")  # its start fails after seed 1's
    lines: list[str] = []
    runner = seeds.Seeds(folder, seeds._new_record(command), command, print_fn=lines.append)
    try:
        runner.run()
    except SpreezeError as exc:
        assert "cannot write to" in str(exc) and "seed_2" in str(exc)
    else:
        raise AssertionError("the start of seed 2 did not fail")
    first = record(folder)["seeds"][0]
    # 143: the run's orderly stop; -SIGTERM: it was still starting its interpreter (no handler yet, nothing written)
    assert first["status"] == "stopped" and first["exit_status"] in (143, -signal.SIGTERM), (first, lines)
    assert first["pid"] is None and not runner.running


LAUNCHER = """
import sys, time
from spreeze_like.run_launch import start_run
with open(sys.argv[1], "w") as log:
    proc = start_run(sys.argv[2:], log, module="spreeze_like.seeds", PYTHONWARNINGS="ignore")
print(proc.pid, flush=True)
time.sleep(600)
"""


def test_a_seeds_command_whose_launcher_is_killed_stops_its_runs_in_order(tmp_path):
    """A tool of ours (tools/bench_seeds.py) starts the seeds command through spreeze_like.run_launch, in a session of
    its own. When that tool dies, even by SIGKILL, the seeds command sends itself one SIGTERM and stops its runs in
    order, as a run does when its launcher dies; before 2026-12-03 only runs watched their launcher."""
    log = tmp_path / "seeds.log"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(log), "--logdir", str(tmp_path / "runs"),
                                 "--progress-every", "0", "--seeds", "1", *TINY, "--total-steps", "100000",
                                 "--eval-every", "500"], stdout=subprocess.PIPE, text=True, env=cli_env())
    seeds_pid = None
    try:
        seeds_pid = int(launcher.stdout.readline())
        folder = folder_of(tmp_path / "runs")
        wait_for(lambda: evaluated(folder, [1]), 180, "the seed evaluated")
        run_pid = record(folder)["seeds"][0]["pid"]
        launcher.kill()
        launcher.wait()
        assert survivors([seeds_pid, run_pid], timeout=120) == [], log.read_text()[-2000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if seeds_pid is not None and survivors([seeds_pid], timeout=0):
            subprocess.run(["kill", "-9", str(seeds_pid)], check=False)
    text = log.read_text()
    assert "[seeds] SIGTERM: no further seed starts" in text and "seed 1: stopped (resumable)" in text, text[-2000:]
    console = (folder / "seed_1" / "console.log").read_text()
    assert "interrupted at" in console and "checkpoint" in console, console[-2000:]
