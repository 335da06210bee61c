"""Odd envs through the real CLI (audit findings 10, 11, 17): one ``error:`` line, exit status 2, no traceback.

Findings 10 and 17 are caught by the CLI's env check before a run folder exists, so serial and parallel runs
fail the same way there (one run each is enough). Finding 11 is caught where observations enter: in serial mode
in the CLI's own process, in parallel mode inside a sampler process, whose one-line error must end the whole
run (exit 2) instead of a crash loop of restarts, leaving no process or segment behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import TINY_ARGS, assert_nothing_left, cli_env, only_run_dir, read_status

pytestmark = pytest.mark.multiproc

TESTS_DIR = str(Path(__file__).resolve().parents[1])
TINY = "trainer.tiny_envs:"


def run_cli(*args: str, path: tuple[str, ...] = (), timeout: float = 240) -> subprocess.CompletedProcess:
    """The CLI with tests/ (and ``path``) on PYTHONPATH, so that ``trainer.tiny_envs`` imports in every process."""
    pythonpath = os.pathsep.join([*path, TESTS_DIR, os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "spreeze_like.run", *TINY_ARGS, *args], check=False,
                          capture_output=True, text=True, timeout=timeout, env={**cli_env(), "PYTHONPATH": pythonpath})


def the_error_line(proc: subprocess.CompletedProcess) -> str:
    """Exit status 2 and exactly one ``error:`` line, no traceback anywhere; returns that line."""
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    "env_id, fragment",
    [
        ("TinyIntAction-v0", "int64 action Box"),
        ("TinyFixedDim-v0", "low == high in dimension(s) [1]"),
        ("TinyMaxBounds-v0", "bounds up to 3e+38 in magnitude"),
    ],
)
def test_finding10_odd_action_boxes_end_the_cli_with_one_line(tmp_path, env_id, fragment):
    line = the_error_line(run_cli("--env", TINY + env_id, "--serial", "--logdir", str(tmp_path / "runs")))
    assert fragment in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before a run folder


def test_finding11_wrong_step_observation_ends_a_serial_run_with_one_line(tmp_path):
    proc = run_cli("--env", TINY + "TinyObsShape-v0", "--serial", "--total-steps", "400",
                   "--logdir", str(tmp_path / "runs"))
    line = the_error_line(proc)
    assert "observation of shape (1,) and dtype float32 from step()" in line and "(2,)" in line


def test_finding11_wrong_step_observation_in_a_sampler_process_ends_the_parallel_run_with_one_line(tmp_path):
    """The sampler process reports the env's bad observation as a user error: no restart, the run ends (exit 2).

    Before the fix, numpy broadcast the (1,) observation into the (2,)-wide replay row and the run finished."""
    proc = run_cli("--env", TINY + "TinyObsShape-v0", "--total-steps", "2000", "--max-restarts", "5",
                   "--logdir", str(tmp_path / "runs"))
    line = the_error_line(proc)
    assert "observation of shape (1,) and dtype float32 from step()" in line
    assert "restarting it" not in proc.stdout
    run_dir = only_run_dir(tmp_path / "runs")
    status = read_status(run_dir)
    assert status["state"] == "failed"
    assert all(role["restarts"] == 0 for role in status["roles"].values()), status["roles"]
    assert_nothing_left(run_dir)


def test_finding17_env_module_with_a_syntax_error_ends_the_cli_with_one_line(tmp_path):
    (tmp_path / "spz_broken_envs.py").write_text("import gymnasium\n\ndef broken(:\n    pass\n")
    line = the_error_line(run_cli("--env", "spz_broken_envs:Broken-v0", "--logdir", str(tmp_path / "runs"),
                                  path=(str(tmp_path),)))
    assert "importing module 'spz_broken_envs'" in line and "SyntaxError" in line and "line 3" in line


def test_finding17_env_constructor_raising_ends_the_cli_with_one_line(tmp_path):
    line = the_error_line(run_cli("--env", TINY + "TinyCtorRaises-v0", "--logdir", str(tmp_path / "runs")))
    assert "making env 'trainer.tiny_envs:TinyCtorRaises-v0' raised RuntimeError at tiny_envs.py:" in line
    assert line.endswith("simulator licence not found; fix the env or pick another")


def test_the_supervisor_takes_a_childs_error_line_once(tmp_path):
    """The error-file protocol (procs/control.py): a dead child's one line is read and removed; with no file
    (it could not write one: a full disk) the supervisor says where the message is instead."""
    from spreeze_like.procs.control import error_file, take_error_line

    error_file(tmp_path, "evaluator").write_text("env 'X-v0' raised ValueError on reset; fix the env\n")
    assert take_error_line(tmp_path, "evaluator") == "env 'X-v0' raised ValueError on reset; fix the env"
    assert not error_file(tmp_path, "evaluator").exists()
    assert take_error_line(tmp_path, "evaluator") == "evaluator failed (its message is above)"


def test_an_env_raising_in_step_ends_a_serial_run_with_its_traceback_then_one_line(tmp_path):
    """A serial run has no sampler process to restart: the env's traceback (where it raised), then one ``error:``
    line naming the step, the exception and the last good checkpoint, exit status 1; the run then resumes from
    that checkpoint. Before: the traceback alone, exit status 1, nothing said of what there was to resume."""
    pythonpath = os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])
    # 251 steps of this process: the CLI's first-step check (envs.check_first_step) is one, the run's are 250
    crash = {**cli_env(), "PYTHONPATH": pythonpath, "SPZ_TEST_RAISE_ROLE": "MainProcess", "SPZ_TEST_RAISE_AFTER": "251"}
    args = [sys.executable, "-m", "spreeze_like.run", *TINY_ARGS, "--env", TINY + "TinyFlaky-v0", "--serial",
            "--total-steps", "400", "--checkpoint-every", "100", "--logdir", str(tmp_path / "runs")]
    proc = subprocess.run(args, check=False, capture_output=True, text=True, timeout=240, env=crash)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" in proc.stderr and "tiny_envs.py" in proc.stderr  # the env's frames, above the line
    assert lines[-1].startswith("error: the run stopped at 250 env steps on RuntimeError at tiny_envs.py:"), lines[-1]
    assert "simulated simulator crash (every time)" in lines[-1] and "(the traceback is above)" in lines[-1]
    run_dir = only_run_dir(tmp_path / "runs")
    assert f"the last good checkpoint is {run_dir / 'checkpoints' / 'ckpt_0000000200.pt'}" in lines[-1]
    assert sum(line.startswith("error: ") for line in lines) == 1
    resumed = subprocess.run([sys.executable, "-m", "spreeze_like.run", "--resume", str(run_dir), "--env",
                              TINY + "TinyFlaky-v0"], check=False, capture_output=True, text=True, timeout=240,
                             env={**cli_env(), "PYTHONPATH": pythonpath})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "after 400 env steps" in resumed.stdout
    # its closing line names the env again: evaluate imports a checkpoint's module only if named (finding 4)
    assert f"its policy: python -m spreeze_like.evaluate {run_dir} --env {TINY}TinyFlaky-v0 " in resumed.stdout


@pytest.mark.parametrize(
    "mode, fragments",
    [
        ("raise", ["made with --env-kwargs {\"mode\": \"raise\"} raised TypeError at tiny_envs.py:",
                   "on its first step()", "check the names and values against the env's constructor"]),
        ("old_api", ["its step() returns old gym's 4-tuple", "port the env to the gymnasium API"]),
        ("no_reward", ["returned the reward None", "a reward must be one real number"]),
        ("two_rewards", ["(2 value(s) of dtype float64)", "a reward must be one real number"]),
    ],
)
def test_an_env_whose_every_step_fails_ends_a_parallel_run_with_one_line_before_anything_starts(tmp_path, mode,
                                                                                                  fragments):
    """Until 2026-11-29 these passed every check made before the samplers started; then each sampler died on
    its first step, was restarted ten times with back-off (about 3 minutes of a crash loop), and the run failed
    with exit status 1. Now the planning process resets the env and steps it once: one line, exit status 2, no
    run folder, no process started. Run as a user's shell runs it (warnings shown): gymnasium's checker warns
    of a None reward before that step returns, and that warning must not stand above the line either."""
    pythonpath = os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])
    env = {k: v for k, v in cli_env().items() if k != "PYTHONWARNINGS"}
    proc = subprocess.run([sys.executable, "-m", "spreeze_like.run", *TINY_ARGS, "--env", TINY + "TinyOddStep-v0",
                           "--env-kwargs", f'{{"mode": "{mode}"}}', "--total-steps", "2000",
                           "--logdir", str(tmp_path / "runs")],
                          check=False, capture_output=True, text=True, timeout=120, env={**env, "PYTHONPATH": pythonpath})
    line = the_error_line(proc)
    assert proc.stderr.strip() == line, proc.stderr[-3000:]  # nothing else on stderr: no warning, no traceback
    for fragment in fragments:
        assert fragment in line, line
    assert "restart" not in proc.stdout, proc.stdout[-3000:]  # no sampler ever started
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_env_whose_step_works_passes_the_first_step_check_and_trains(tmp_path):
    """The check's control: the same env with its default mode runs to the end in parallel mode."""
    proc = run_cli("--env", TINY + "TinyOddStep-v0", "--env-kwargs", '{"mode": "ok"}', "--total-steps", "600",
                   "--logdir", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "runs")
    assert read_status(run_dir)["env_steps"] == 600
    assert_nothing_left(run_dir)
